"""Kernel K-means through Python against the exact float64 reference results in the
repository's tests/data (scikit-learn's digits / 16, k = 10, start i mod k), on every device;
float32 against float64."""

import json

import numpy as np
import pytest

from helpers import DATA, digits
from popcorn import KernelKMeans

#: The fixtures' kernels as the estimator's parameters.
KERNELS = {
    "linear": dict(kernel="linear"),
    "polynomial": dict(kernel="poly", gamma=1.0, coef0=1.0, degree=2),
    "gaussian": dict(kernel="rbf"),  # gamma = 1 / d
    "sigmoid": dict(kernel="sigmoid", coef0=0.0),  # gamma = 1 / d
}


def fixture(kernel):
    return json.loads((DATA / f"digits_scaled-{kernel}-k10.json").read_text())


def fit(kernel, dtype, device, X=None):
    X = digits()[0] if X is None else X
    return KernelKMeans(10, tol=0.0, dtype=dtype, device=device, **KERNELS[kernel]).fit(X)


@pytest.mark.parametrize("kernel", KERNELS)
def test_float64_reproduces_the_reference_exactly(kernel, device):
    want = fixture(kernel)
    km = fit(kernel, "float64", device)
    np.testing.assert_array_equal(km.labels_, want["labels"])
    assert km.n_iter_ == want["iterations"]
    assert km.converged_
    np.testing.assert_allclose(km.objective_history_, want["objective_history"], rtol=1e-9)
    assert km.inertia_ == pytest.approx(want["objective"], rel=1e-9)
    np.testing.assert_array_equal(
        km.cluster_sizes_, np.bincount(want["labels"], minlength=10)
    )


@pytest.mark.parametrize("kernel", KERNELS)
def test_float32_agrees_with_float64(kernel, device):
    want = fixture(kernel)
    km = fit(kernel, "float32", device)
    agree = np.mean(km.labels_ == np.asarray(want["labels"]))
    assert agree >= 0.99, f"only {100 * agree:.2f}% of the labels agree"
    assert km.inertia_ == pytest.approx(want["objective"], rel=1e-5)


def test_float32_input_is_the_same_data():
    # digits / 16 are exact in float32: the same points, the same fit.
    X = digits()[0]
    a = fit("gaussian", "float64", "cpu", X)
    b = fit("gaussian", "float64", "cpu", X.astype(np.float32))
    np.testing.assert_array_equal(a.labels_, b.labels_)
    assert a.inertia_ == b.inertia_
