"""Point weights: ``fit(X, sample_weight=...)`` and ``fit_predict`` follow scikit-learn's
rules (``None`` is all ones, a number weighs every point alike, one weight per point,
negative weights rejected) and the weighted Kernel K-means definition: integer weights act as
repeating each point that many times, a zero-weight point moves no centroid."""

import pickle

import numpy as np
import pytest

from helpers import blobs, uniform
from popcorn import KernelKMeans

KERNELS = ["linear", "poly", "rbf", "sigmoid"]


def weighted_linear_inertia(X, labels, w):
    """sum_i w_i ||x_i - c_{label_i}||^2 with weighted means c, in float64 (by hand)."""
    total = 0.0
    for c in np.unique(labels):
        members = labels == c
        if w[members].sum() == 0:
            continue
        center = np.average(X[members], axis=0, weights=w[members])
        total += float((w[members] * ((X[members] - center) ** 2).sum(axis=1)).sum())
    return total


@pytest.mark.parametrize("kernel", KERNELS)
def test_integer_weights_equal_repeated_points(kernel, device):
    X = uniform(3, 40, 2)
    rng = np.random.default_rng(5)
    times = rng.integers(1, 4, size=len(X))
    start = rng.integers(0, 3, size=len(X))
    params = dict(kernel=kernel, tol=0.0, dtype="float64", device=device, max_iter=50)
    weighted = KernelKMeans(3, init=start, **params).fit(X, sample_weight=times)
    repeated = KernelKMeans(3, init=np.repeat(start, times), **params).fit(np.repeat(X, times, axis=0))
    first = np.concatenate([[0], np.cumsum(times)[:-1]])
    np.testing.assert_array_equal(weighted.labels_, repeated.labels_[first])
    assert weighted.inertia_ == pytest.approx(repeated.inertia_, rel=1e-9, abs=1e-12)
    assert weighted.n_iter_ == repeated.n_iter_


def test_weighted_inertia_is_the_weighted_definition(device):
    X, _ = blobs(4)
    w = np.random.default_rng(1).uniform(0.5, 2.0, size=len(X))
    km = KernelKMeans(3, kernel="linear", init="k-means++", random_state=0, tol=0.0,
                      dtype="float64", device=device).fit(X, sample_weight=w)
    assert km.inertia_ == pytest.approx(weighted_linear_inertia(X, km.labels_, w), rel=1e-9)


def test_none_and_a_number_follow_scikit_learn(device):
    X = uniform(7, 60, 3)
    params = dict(kernel="rbf", init="random", random_state=2, dtype="float64", device=device)
    plain = KernelKMeans(4, **params).fit(X)
    with_none = KernelKMeans(4, **params).fit(X, sample_weight=None)
    np.testing.assert_array_equal(plain.labels_, with_none.labels_)
    assert plain.inertia_ == with_none.inertia_
    scaled = KernelKMeans(4, **params).fit(X, sample_weight=2.5)
    np.testing.assert_array_equal(plain.labels_, scaled.labels_)
    assert scaled.inertia_ == pytest.approx(2.5 * plain.inertia_, rel=1e-12)
    # A list works as an array does.
    listed = KernelKMeans(4, **params).fit(X, sample_weight=[2.5] * len(X))
    np.testing.assert_array_equal(listed.labels_, scaled.labels_)


def test_zero_weights_leave_points_out(device):
    X, _ = blobs(6)
    n = len(X)
    zero = np.zeros(n, dtype=bool)
    zero[[3, 17, 50, 99]] = True
    start = np.arange(n) % 3
    params = dict(kernel="rbf", gamma=0.5, tol=0.0, dtype="float64", device=device)
    weighted = KernelKMeans(3, init=start, **params).fit(X, sample_weight=(~zero).astype(float))
    without = KernelKMeans(3, init=start[~zero], **params).fit(X[~zero])
    np.testing.assert_array_equal(weighted.labels_[~zero], without.labels_)
    assert weighted.inertia_ == pytest.approx(without.inertia_, rel=1e-10)


def test_fit_predict_takes_weights(device):
    X, _ = blobs(8)
    w = np.random.default_rng(3).integers(1, 3, size=len(X)).astype(float)
    km = KernelKMeans(3, init="k-means++", random_state=1, tol=0.0, device=device)
    labels = km.fit_predict(X, sample_weight=w)
    np.testing.assert_array_equal(labels, km.labels_)
    again = KernelKMeans(3, init="k-means++", random_state=1, tol=0.0, device=device)
    np.testing.assert_array_equal(again.fit(X, sample_weight=w).labels_, labels)


def test_a_pickled_weighted_model_predicts_the_same(device):
    X, _ = blobs(9)
    w = np.linspace(0.0, 2.0, len(X))
    km = KernelKMeans(3, kernel="rbf", tol=0.0, device=device).fit(X, sample_weight=w)
    back = pickle.loads(pickle.dumps(km))
    Y = uniform(2, 25, X.shape[1]) * 5
    np.testing.assert_array_equal(back.predict(Y), km.predict(Y))
    np.testing.assert_array_equal(km.predict(X[w > 0]), km.labels_[w > 0])


@pytest.mark.parametrize(
    "weights, message",
    [
        (lambda n: -np.ones(n), "Negative values"),
        (lambda n: np.ones(n - 1), r"sample_weight.shape == \(\d+,\), expected \(\d+,\)"),
        (lambda n: np.ones((n, 2)), "Sample weights must be 1D"),
        (lambda n: np.r_[np.ones(n - 1), np.nan], "NaN"),
        (lambda n: np.zeros(n), "zero"),
    ],
)
def test_invalid_weights_are_value_errors(weights, message):
    X = uniform(1, 30, 2)
    with pytest.raises(ValueError, match=message):
        KernelKMeans(2, device="cpu").fit(X, sample_weight=weights(len(X)))


def test_the_native_fit_checks_weights_itself():
    # Past the estimator's checks (a direct caller of the native function): the library's
    # messages, naming the first bad weight.
    from popcorn import _native

    X = uniform(1, 5, 2)
    options = dict(n_clusters=2, kernel="linear", gamma=None, coef0=1.0, degree=2.0,
                   init="mod", seed=0, n_init=1, max_iter=10, tol=0.0, zscore=False,
                   device="cpu", dtype="float64")
    with pytest.raises(ValueError, match="sample weight 3 is -1"):
        _native.fit(X, options, np.array([1.0, 1.0, 1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match=r"sample_weight has shape \[4\]; expected \(5,\)"):
        _native.fit(X, options, np.ones(4))
    result, _ = _native.fit(X, options, np.ones(5))
    assert result["weighted"]
