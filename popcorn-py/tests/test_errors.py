"""Errors are Python exceptions with popcorn's messages: ValueError for bad input,
MemoryError for memory, RuntimeError for the device, DslError (a SyntaxError) for programs;
never a crash."""

import numpy as np
import pytest

import popcorn
from helpers import uniform
from popcorn import Context, DslError, KernelKMeans, Program, _native


def fit(X, **params):
    return KernelKMeans(**{"device": "cpu", **params}).fit(X)


@pytest.mark.parametrize(
    "params, message",
    [
        (dict(n_clusters=0), "n_clusters = 0; it must be at least 1"),
        (dict(n_clusters=-3), "n_clusters = -3; it must be at least 1"),
        (dict(max_iter=0), "max_iter = 0; it must be at least 1"),
        (dict(n_init=0), "n_init = 0; it must be at least 1"),
        (dict(tol=-1.0), "tol = -1 must be a finite non-negative number"),
        (dict(kernel="cosine"), 'kernel = "cosine"; use "linear", "poly", "rbf"'),
        (dict(kernel="rbf", gamma=float("nan")), "gamma = NaN must be finite"),
        (dict(init="furthest"), 'init = "furthest"; use "mod", "random", "k-means++"'),
        (dict(init=np.arange(5)), "5 initial labels given for 20 points"),
        (dict(init=np.full(20, 7)), "initial label 7 of point 0 is not below k = 3"),
        (dict(init=np.full(20, -1)), "init: entry 0 is -1"),
        (dict(init=np.full(20, 0.5)), "init must be integers"),
        (dict(dtype="int32"), 'dtype = "int32"; use "float32" or "float64"'),
        (dict(dtype="no such type"), "is not a numpy dtype"),
        (dict(device="tpu"), "unknown device `tpu`"),
    ],
)
def test_bad_parameters_are_value_errors(params, message):
    with pytest.raises(ValueError) as e:
        fit(uniform(0, 20, 2), **{"n_clusters": 3, **params})
    assert message in str(e.value)


def test_bad_data_is_a_value_error():
    X = uniform(0, 10, 2)
    with pytest.raises(ValueError, match="n_samples=10 should be >= n_clusters=11"):
        fit(X, n_clusters=11)
    X[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        fit(X, n_clusters=2)
    with pytest.raises(ValueError):
        fit([["a", "b"], ["c", "d"]], n_clusters=1)
    with pytest.raises(ValueError, match="square"):
        fit(uniform(0, 10, 3), kernel="precomputed", n_clusters=2)
    km = fit(uniform(0, 10, 2), n_clusters=2)
    with pytest.raises(ValueError, match="X has 3 features, but KernelKMeans is expecting 2"):
        km.predict(uniform(0, 4, 3))


def test_the_library_checks_data_itself():
    # Below scikit-learn's checks, the Rust library's own messages.
    X = uniform(0, 10, 2)
    X[3, 1] = np.inf
    options = dict(
        n_clusters=2, kernel="rbf", gamma=None, coef0=1.0, degree=2, init="mod", seed=0,
        n_init=1, max_iter=10, tol=0.0, zscore=False, device="cpu", dtype="float64",
    )
    with pytest.raises(ValueError, match="point 3, feature 1 is inf"):
        _native.fit(X, options)
    with pytest.raises(ValueError, match="k = 20 is larger than the number of points n = 10"):
        _native.fit(uniform(0, 10, 2), dict(options, n_clusters=20))
    with pytest.raises(ValueError, match="expected a 2-D array"):
        _native.fit(np.zeros(10), options)


def test_a_gpu_that_is_not_there_is_a_runtime_error():
    with pytest.raises(RuntimeError, match="cuda:99 was requested"):
        fit(uniform(0, 10, 2), n_clusters=2, device="cuda:99")
    with pytest.raises(RuntimeError, match="cuda:99 was requested"):
        Context("cuda:99")


def test_memory_that_is_not_there_is_a_memory_error():
    outer = Program("fn outer(x: Col[n], y: Col[m]) -> (Z: Dense[n, m]) { Z = x + y^T; }")
    x = np.zeros(3_000_000)
    with pytest.raises(MemoryError, match="not enough host memory"):
        Context("cpu", "float64").run(outer, x=x, y=x)


def test_program_errors_are_syntax_errors_with_their_position():
    source = "fn f(x: Col[n]) -> (y: Col[n]) {\n    y = x * z;\n}"
    with pytest.raises(DslError) as e:
        Program(source)
    assert isinstance(e.value, SyntaxError)
    assert e.value.lineno == 2 and e.value.offset == 13
    assert e.value.text == "    y = x * z;"
    assert "unknown name `z`" in e.value.msg
    with pytest.raises(DslError, match="dimension mismatch"):
        Program("fn f(A: Dense[n, k], B: Dense[n, k]) -> (C: Dense[n, n]) { C = A * B; }")
    two = "fn a(x: Col[n]) -> (y: Col[n]) { y = x; }\nfn b(x: Col[n]) -> (y: Col[n]) { y = x; }"
    with pytest.raises(ValueError, match=r"2 programs \(a, b\)"):
        Program(two)
    with pytest.raises(ValueError, match="no program `c`; it has a, b"):
        Program(two, name="c")


def test_run_and_plan_errors_are_value_errors():
    p = Program("fn f(A: Dense[n, d], x: Col[d], labels: Index[n]) -> (y: Col[n]) { y = A * x; }")
    ctx = Context("cpu")
    A, x, labels = np.ones((4, 3)), np.ones(3), np.zeros(4, dtype=int)
    with pytest.raises(ValueError, match="dimension `d` is 3 .* but 2"):
        ctx.run(p, A=A, x=np.ones(2), labels=labels)
    with pytest.raises(ValueError, match="missing argument `labels: Index\\[n\\]`"):
        ctx.run(p, A=A, x=x)
    with pytest.raises(ValueError, match="has no parameter or dimension `B`"):
        ctx.run(p, A=A, x=x, labels=labels, B=A)
    with pytest.raises(ValueError, match="pass a 2-D array"):
        ctx.run(p, A=np.ones(4), x=x, labels=labels)
    with pytest.raises(ValueError, match="entry 1 is -1"):
        ctx.run(p, A=A, x=x, labels=[0, -1, 0, 0])
    with pytest.raises(ValueError, match="must be integers"):
        ctx.run(p, A=A, x=x, labels=np.zeros(4))
    with pytest.raises(ValueError, match="needs the size of d, n"):
        p.plan()
    with pytest.raises(ValueError, match="has no dimension `q`"):
        p.plan(n=1, d=1, q=3)
    with pytest.raises(ValueError, match="sizes are at least 1"):
        p.plan(n=0, d=1)
    sizes = Program("fn sizes(labels: Index[n]) -> (c: Col[k]) { c = counts(labels, k); }")
    with pytest.raises(ValueError, match="dimension `k` = -2; sizes are at least 1"):
        ctx.run(sizes, labels=[0, 1], k=-2)
    with pytest.raises(ValueError, match='target = "tpu"'):
        p.plan(n=1, d=1, target="tpu")
    spmv = Program("fn s(A: Csr[m, n], x: Col[n]) -> (y: Col[m]) { y = A * x; }")
    with pytest.raises(ValueError, match="pass a scipy.sparse matrix"):
        ctx.run(spmv, A=np.ones((2, 2)), x=np.ones(2))


def test_device_info_says_what_was_found():
    info = popcorn.device_info()
    assert info["cpu_threads"] >= 1
    if info["cuda_available"]:
        assert info["reason"] is None and info["devices"]
        assert info["devices"][0]["device"] == "cuda:0"
        assert info["devices"][0]["total_memory"] > 0
    else:
        assert info["reason"] and info["devices"] == [] and info["default_device"] == "cpu"
