"""scikit-learn's estimator checks on the CPU, for the default estimator and for other
kernels, inits, dtypes and options.

Checks that cannot pass, and why (``EXPECTED_FAILURES``): with ``kernel="precomputed"``,
``check_clustering`` fits the raw 50 x 2 points whatever the estimator's ``pairwise`` tag says,
and a precomputed kernel matrix is square; and for every estimator
``check_sample_weight_equivalence_on_dense_data`` (and ``..._on_sparse_data`` for the
estimators that take sparse points) compares fits of differently sized data from starts that
do not correspond (``COMMON_EXPECTED_FAILURES``). The estimators that take sparse points
(``input_tags.sparse``) are checked on them. (``check_array_api_input`` skips itself unless
``SCIPY_ARRAY_API=1``; popcorn takes numpy input only.) Before scikit-learn 1.6 the weight
check was ``check_sample_weights_invariance(kind="zeros")``, marked the same way
(``OLD_COMMON_EXPECTED_FAILURES``)."""

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


#: Before scikit-learn 1.6 the sample-weight equivalence check was
#: ``check_sample_weights_invariance(kind="zeros")`` (zero weights against the points removed),
#: which fails for the same reason; its ``kind="ones"`` form compares fits of the same points
#: and passes.
OLD_COMMON_EXPECTED_FAILURES = {
    "check_sample_weights_invariance(kind=zeros)": _WEIGHT_EQUIVALENCE,
}


def _check_id(check):
    """A check's name as scikit-learn >= 1.6 writes it: the function's name, with its keyword
    arguments in parentheses (``check_clustering(readonly_memmap=True)``)."""
    func = getattr(check, "func", check)
    keywords = getattr(check, "keywords", None) or {}
    args = ",".join(f"{k}={v}" for k, v in keywords.items())
    return f"{func.__name__}({args})" if args else func.__name__


def _old_checks():
    """scikit-learn < 1.6: no ``expected_failed_checks``, so the checks are listed here (as
    ``parametrize_with_checks`` did) and the expected failures marked ``xfail`` with their
    reason. The estimators with kernel-specific failures are left out, as before."""
    import pytest
    from sklearn.utils.estimator_checks import check_estimator

    params = []
    for estimator in ESTIMATORS:
        if EXPECTED_FAILURES.get(estimator.kernel):
            continue
        for est, check in check_estimator(estimator, generate_only=True):
            name = _check_id(check)
            reason = {**OLD_COMMON_EXPECTED_FAILURES, **COMMON_EXPECTED_FAILURES}.get(name)
            marks = [pytest.mark.xfail(reason=reason)] if reason else []
            params.append(pytest.param(est, check, marks=marks, id=f"{est!r}-{name}"))
    return pytest.mark.parametrize("estimator, check", params)


if "expected_failed_checks" in inspect.signature(parametrize_with_checks).parameters:
    _checks = parametrize_with_checks(ESTIMATORS, expected_failed_checks=expected_failures)
else:
    _checks = _old_checks()


@_checks
def test_scikit_learn_estimator_checks(estimator, check):
    check(estimator)


def test_old_check_names_match_the_expected_failures():
    # How scikit-learn < 1.6 hands checks over: a partial of a partial (flattened), the
    # estimator's name first; the zero-weight form is marked, the ones form is not.
    from functools import partial

    def check_sample_weights_invariance(name, estimator, kind="ones"):
        pass

    zeros = partial(partial(check_sample_weights_invariance, kind="zeros"), "KernelKMeans")
    ones = partial(partial(check_sample_weights_invariance, kind="ones"), "KernelKMeans")
    assert _check_id(zeros) in OLD_COMMON_EXPECTED_FAILURES
    assert _check_id(ones) not in OLD_COMMON_EXPECTED_FAILURES
