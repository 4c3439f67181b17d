"""Helpers of the Python tests: the repository's fixtures, test data, and whether a GPU is
there. GPU tests skip without one unless ``POPCORN_REQUIRE_GPU=1``, which makes them fail (as
in the Rust suite)."""

import os
from pathlib import Path

import numpy as np
import pytest

import popcorn

#: The repository's test data (``tests/data``: scikit-learn's digits and the exact f64
#: reference results of Kernel K-means on them).
DATA = Path(__file__).resolve().parents[2] / "tests" / "data"

_INFO = popcorn.device_info()


def gpu_or_skip():
    """Skips the calling test without a usable GPU (fails it under POPCORN_REQUIRE_GPU=1)."""
    if _INFO["cuda_available"]:
        return
    why = f"no usable GPU: {_INFO['reason']}"
    if os.environ.get("POPCORN_REQUIRE_GPU") == "1":
        pytest.fail(f"POPCORN_REQUIRE_GPU=1 but {why}")
    pytest.skip(why)


def digits():
    """scikit-learn's digits (1797 x 64) divided by 16, as the fixtures used them, and the
    true digit of each."""
    table = np.loadtxt(DATA / "digits.csv", delimiter=",", skiprows=1)
    return table[:, 1:] / 16.0, table[:, 0].astype(int)


def uniform(seed, n, d):
    """``n x d`` points uniform in [-1, 1)."""
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=(n, d))


def blobs(seed, per=40, spread=0.5):
    """Three well separated blobs in the plane, ``per`` points each, and their true labels."""
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])
    truth = np.repeat(np.arange(3), per)
    X = centers[truth] + rng.uniform(-spread, spread, size=(3 * per, 2))
    order = rng.permutation(3 * per)
    return X[order], truth[order]
