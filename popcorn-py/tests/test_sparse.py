"""scipy sparse input: CSR used as is, other formats converted, unsorted indices and
duplicates handled on a copy; a fit and its predictions on sparse points equal those on the
same points dense (float64); options that need dense points are clear errors."""

import pickle

import numpy as np
import pytest
import scipy.sparse as sp

from popcorn import KernelKMeans, _native

KERNELS = ["linear", "poly", "rbf", "sigmoid"]


def topics(seed, n=180, d=60, per_point=5):
    """``n`` sparse points (``per_point`` entries each) drawn mostly from one of three blocks
    of ``d / 3`` features, as CSR."""
    rng = np.random.default_rng(seed)
    block = d // 3
    rows, cols, vals = [], [], []
    for i in range(n):
        topic = i % 3
        features = rng.choice(block, size=per_point, replace=False) + topic * block
        features[0] = rng.integers(d)  # one feature from anywhere
        for c in np.unique(features):
            rows.append(i)
            cols.append(c)
            vals.append(rng.uniform(0.5, 2.0))
    return sp.csr_matrix((vals, (rows, cols)), shape=(n, d))


def assert_same_fit(a, b):
    np.testing.assert_array_equal(a.labels_, b.labels_)
    assert a.n_iter_ == b.n_iter_
    np.testing.assert_allclose(a.inertia_, b.inertia_, rtol=1e-10)
    np.testing.assert_allclose(a.objective_history_, b.objective_history_, rtol=1e-10)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("weighted", [False, True])
def test_sparse_equals_dense_in_float64(kernel, weighted, device):
    X = topics(1)
    new = topics(2, n=40)
    w = np.random.default_rng(3).uniform(0.5, 2.0, X.shape[0]) if weighted else None
    params = dict(n_clusters=3, kernel=kernel, dtype="float64", tol=0.0, device=device)
    sparse = KernelKMeans(**params).fit(X, sample_weight=w)
    dense = KernelKMeans(**params).fit(X.toarray(), sample_weight=w)
    assert_same_fit(sparse, dense)
    assert sparse.algorithm_ == "stored"
    want = dense.predict(new.toarray())
    np.testing.assert_array_equal(sparse.predict(new), want)
    # Crossed: dense points on the sparse model, sparse points on the dense model.
    np.testing.assert_array_equal(sparse.predict(new.toarray()), want)
    np.testing.assert_array_equal(dense.predict(new), want)
    np.testing.assert_array_equal(
        KernelKMeans(**params).fit_predict(X, sample_weight=w), dense.labels_
    )


@pytest.mark.parametrize("fmt", ["csc", "coo", "lil", "dok", "bsr"])
def test_other_formats_are_converted(fmt):
    X = topics(4)
    want = KernelKMeans(3, dtype="float64", device="cpu").fit(X)
    km = KernelKMeans(3, dtype="float64", device="cpu").fit(X.asformat(fmt))
    assert_same_fit(km, want)
    np.testing.assert_array_equal(km.predict(X.asformat(fmt)), want.labels_)


def test_sparse_arrays_int64_indices_and_float32_values():
    X = topics(5)
    want = KernelKMeans(3, dtype="float64", device="cpu").fit(X)
    A = sp.csr_array(X.astype(np.float32))
    A.indices = A.indices.astype(np.int64)
    A.indptr = A.indptr.astype(np.int64)
    km = KernelKMeans(3, dtype="float64", device="cpu").fit(A)
    # The float32 values, converted to float64, as the dense fit of the same values.
    dense = KernelKMeans(3, dtype="float64", device="cpu").fit(A.toarray())
    assert_same_fit(km, dense)
    np.testing.assert_array_equal(km.labels_, want.labels_)


def test_unsorted_indices_and_duplicates_on_a_copy():
    X = topics(6)
    # Every row's entries reversed, and its first entry split into two duplicates.
    indptr, indices, data = [0], [], []
    for r in range(X.shape[0]):
        cols = X.indices[X.indptr[r] : X.indptr[r + 1]][::-1]
        vals = X.data[X.indptr[r] : X.indptr[r + 1]][::-1]
        indices += [cols[0], *cols]
        data += [vals[0] / 2, vals[0] / 2, *vals[1:]]
        indptr.append(len(indices))
    messy = sp.csr_matrix((data, indices, indptr), shape=X.shape)
    assert not messy.has_canonical_format
    before = (messy.indices.copy(), messy.data.copy())
    km = KernelKMeans(3, kernel="rbf", dtype="float64", device="cpu").fit(messy)
    want = KernelKMeans(3, kernel="rbf", dtype="float64", device="cpu").fit(X)
    assert_same_fit(km, want)
    np.testing.assert_array_equal(km.predict(messy), want.labels_)
    # The caller's matrix is left as it was.
    np.testing.assert_array_equal(messy.indices, before[0])
    np.testing.assert_array_equal(messy.data, before[1])


def test_a_sparse_model_pickles():
    X = topics(7)
    km = KernelKMeans(3, kernel="poly", dtype="float64", device="cpu").fit(X)
    again = pickle.loads(pickle.dumps(km))
    np.testing.assert_array_equal(again.predict(X), km.labels_)


def test_a_sparse_model_pickles_its_points_sparse():
    X = topics(17)
    w = np.random.default_rng(5).uniform(0.5, 2.0, X.shape[0])
    km = KernelKMeans(3, kernel="rbf", dtype="float64", device="cpu").fit(X, sample_weight=w)
    parts = km.__getstate__()["_model"]
    # The CSR arrays as fitted; nothing made dense.
    assert parts["x"].size == 0
    np.testing.assert_array_equal(parts["indptr"], X.indptr)
    np.testing.assert_array_equal(parts["indices"], X.indices)
    np.testing.assert_array_equal(parts["data"], X.data)
    again = pickle.loads(pickle.dumps(km))
    Y = topics(18, n=30)
    expected = KernelKMeans(3, kernel="rbf", dtype="float64", device="cpu").fit(
        X.toarray(), sample_weight=w
    ).predict(Y.toarray())
    np.testing.assert_array_equal(again.predict(Y), expected)
    np.testing.assert_array_equal(again.predict(Y.toarray()), expected)
    # Parts whose sparse points disagree with the labels are refused.
    bad = dict(parts, indptr=parts["indptr"][:-1])
    with pytest.raises(ValueError, match="row offsets"):
        _native.NativeModel.from_parts(bad, "cpu")
    # A dense model's parts have no CSR arrays.
    dense = KernelKMeans(3, dtype="float64", device="cpu").fit(X.toarray())
    assert dense.__getstate__()["_model"]["indptr"] is None


def test_options_that_need_dense_points_are_named():
    X = topics(8)
    with pytest.raises(ValueError, match=r"zscore=True would make sparse points dense"):
        KernelKMeans(3, zscore=True, device="cpu").fit(X)
    with pytest.raises(ValueError, match=r'kernel="precomputed".*not a scipy.sparse matrix'):
        KernelKMeans(3, kernel="precomputed", device="cpu").fit(sp.csr_matrix(np.eye(10)))
    dense_kernel = KernelKMeans(2, kernel="precomputed", device="cpu").fit(np.eye(10))
    with pytest.raises(ValueError, match=r"precomputed.*sparse"):
        dense_kernel.predict(sp.csr_matrix(np.eye(10)))


def test_bad_sparse_input_is_a_value_error():
    X = topics(9)
    km = KernelKMeans(3, device="cpu").fit(X)
    with pytest.raises(ValueError, match="features"):
        km.predict(sp.csr_matrix((2, X.shape[1] + 1)))
    bad = X.copy()
    bad.data[3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        KernelKMeans(3, device="cpu").fit(bad)


def test_the_native_binding_checks_the_arrays():
    opts = {
        "n_clusters": 2, "kernel": "linear", "gamma": None, "coef0": 1.0, "degree": 2.0,
        "init": "mod", "seed": 0, "n_init": 1, "max_iter": 10, "tol": 0.0, "zscore": False,
        "device": "cpu", "dtype": "float64",
    }
    indptr, data = np.array([0, 1, 2]), np.array([1.0, 2.0])
    with pytest.raises(ValueError, match=r"indices\[1\] is -1"):
        _native.fit_sparse(indptr, np.array([0, -1]), data, (2, 3), opts)
    with pytest.raises(ValueError, match="column index 3 is not below"):
        _native.fit_sparse(indptr, np.array([0, 3]), data, (2, 3), opts)
    with pytest.raises(ValueError, match="repeats the previous index"):
        _native.fit_sparse(np.array([0, 2, 2]), np.array([1, 1]), data, (2, 3), opts)
    with pytest.raises(ValueError, match=r"shape 18446744073709551615 x 3 has too many rows"):
        _native.fit_sparse(indptr, np.array([0, 2]), data, (2**64 - 1, 3), opts)
    result, _ = _native.fit_sparse(indptr, np.array([0, 2]), data, (2, 3), opts)
    assert sorted(result["labels"].tolist()) == [0, 1]


def test_sparse_tags_are_truthful():
    get_tags = pytest.importorskip("sklearn.utils").__dict__.get("get_tags")
    if get_tags is None:
        pytest.skip("scikit-learn < 1.6 has no input_tags")
    assert get_tags(KernelKMeans()).input_tags.sparse
    assert not get_tags(KernelKMeans(zscore=True)).input_tags.sparse
    assert not get_tags(KernelKMeans(kernel="precomputed")).input_tags.sparse


def test_sparse_points_are_never_passed_dense(monkeypatch):
    def dense_fit(*args, **kwargs):
        raise AssertionError("sparse points reached the dense fit")

    monkeypatch.setattr(_native, "fit", dense_fit)
    km = KernelKMeans(3, device="cpu").fit(topics(10))
    assert km.labels_.shape == (180,)


def test_sparse_points_predict_on_a_zscored_dense_model():
    X = topics(19).toarray()
    Y = topics(20, n=40)
    km = KernelKMeans(3, kernel="rbf", zscore=True, dtype="float64", device="cpu").fit(X)
    # Made dense and z-scored as the training points: the dense points' predictions.
    np.testing.assert_array_equal(km.predict(Y), km.predict(Y.toarray()))
    # By hand: the training mean and scale, the nearest weighted centroid in feature space.
    mean, std = X.mean(axis=0), X.std(axis=0)
    std[std == 0] = 1.0
    Z, W = (X - mean) / std, (Y.toarray() - mean) / std
    gamma = 1.0 / X.shape[1]
    sq = lambda A, B: ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)
    Kc, K = np.exp(-gamma * sq(W, Z)), np.exp(-gamma * sq(Z, Z))
    dist = []
    for c in range(3):
        m = km.labels_ == c
        dist.append(-2 * Kc[:, m].mean(axis=1) + K[np.ix_(m, m)].mean())
    np.testing.assert_array_equal(km.predict(Y), np.argmin(np.array(dist), axis=0))
    # fit still refuses sparse points with zscore=True.
    with pytest.raises(ValueError, match="zscore=True would make sparse points dense"):
        KernelKMeans(3, zscore=True, device="cpu").fit(Y)
