"""scikit-learn's estimator checks on the CPU, for the default estimator and for other
kernels, inits, dtypes and options.

Checks that cannot pass, and why (``EXPECTED_FAILURES``): with ``kernel="precomputed"``,
``check_clustering`` fits the raw 50 x 2 points whatever the estimator's ``pairwise`` tag says,
and a precomputed kernel matrix is square; and for every estimator
``check_sample_weight_equivalence_on_dense_data`` (and ``..._on_sparse_data`` for the
estimators that take sparse points) compares fits of differently sized data from starts that
do not correspond (``COMMON_EXPECTED_FAILURES``). The estimators that take sparse points
(``input_tags.sparse``) are checked on them. (``check_array_api_input`` skips itself unless
``SCIPY_ARRAY_API=1``; popcorn takes numpy input only.)"""

import inspect

from sklearn.utils.estimator_checks import parametrize_with_checks

from popcorn import KernelKMeans

ESTIMATORS = [
    KernelKMeans(device="cpu"),
    KernelKMeans(device="cpu", kernel="poly", dtype="float64", zscore=True),
    KernelKMeans(device="cpu", kernel="linear", init="k-means++", n_init=3),
    KernelKMeans(device="cpu", kernel="sigmoid", init="random", tol=0.0),
    KernelKMeans(device="cpu", kernel="precomputed"),
]

_PRECOMPUTED = (
    "the check fits the raw points (50 x 2) whatever the pairwise tag says; "
    "a precomputed kernel matrix is square"
)

_WEIGHT_EQUIVALENCE = (
    "the initial labels follow the points given (mod: i mod k; random and k-means++ by "
    "position), so data with points repeated or removed starts from other labels; from "
    "corresponding starts (given labels) the equivalence holds (test_weights.py)"
)

#: The checks every estimator cannot pass, with the reason (scikit-learn's KMeans marks the
#: same check for its random starts).
COMMON_EXPECTED_FAILURES = {
    "check_sample_weight_equivalence_on_dense_data": _WEIGHT_EQUIVALENCE,
    # The same check on sparse points (run where the sparse tag is set).
    "check_sample_weight_equivalence_on_sparse_data": _WEIGHT_EQUIVALENCE,
}

#: The checks each kernel's estimators cannot pass besides, with the reason.
EXPECTED_FAILURES = {
    "precomputed": {
        "check_clustering": _PRECOMPUTED,
        "check_clustering(readonly_memmap=True)": _PRECOMPUTED,
    }
}


def expected_failures(estimator):
    return {**COMMON_EXPECTED_FAILURES, **EXPECTED_FAILURES.get(estimator.kernel, {})}


if "expected_failed_checks" in inspect.signature(parametrize_with_checks).parameters:
    _checks = parametrize_with_checks(ESTIMATORS, expected_failed_checks=expected_failures)
else:  # scikit-learn < 1.6 cannot mark them: only the estimators without expected failures
    _checks = parametrize_with_checks(
        [e for e in ESTIMATORS if not EXPECTED_FAILURES.get(e.kernel)]
    )


@_checks
def test_scikit_learn_estimator_checks(estimator, check):
    check(estimator)
