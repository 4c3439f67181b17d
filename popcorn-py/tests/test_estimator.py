"""The estimator's behaviour: predictions at convergence, the inputs scikit-learn accepts,
inits, the precomputed kernel, pickling, the GIL and Ctrl-C."""

import _thread
import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score
from sklearn.metrics.pairwise import rbf_kernel

from helpers import blobs, digits, uniform
from popcorn import KernelKMeans

KERNELS = ["linear", "poly", "rbf", "sigmoid"]


@pytest.mark.parametrize("kernel", KERNELS)
def test_predict_on_the_training_points_at_convergence_is_labels(kernel, device):
    X = uniform(1, 300, 3)
    km = KernelKMeans(6, kernel=kernel, tol=0.0, dtype="float64", device=device).fit(X)
    assert km.converged_
    np.testing.assert_array_equal(km.predict(X), km.labels_)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_separated_blobs_are_found_in_either_dtype(dtype, device):
    X, truth = blobs(2)
    km = KernelKMeans(3, init="k-means++", random_state=0, tol=0.0, dtype=dtype, device=device)
    labels = km.fit_predict(X)
    assert adjusted_rand_score(truth, labels) == 1.0
    np.testing.assert_array_equal(km.predict(X), labels)
    assert labels.dtype == np.int32
    np.testing.assert_array_equal(km.cluster_sizes_, [40, 40, 40])


def test_fitted_attributes():
    X, _ = blobs(3)
    km = KernelKMeans(3, kernel="rbf", tol=0.0, device="cpu").fit(X)
    assert km.n_features_in_ == 2
    assert len(km.objective_history_) == km.n_iter_
    # The rbf kernel is positive definite: the objective never increases.
    assert np.all(np.diff(km.objective_history_) <= 1e-6 * km.objective_history_[0])
    assert km.inertia_ <= km.objective_history_[0]
    assert set(km.timings_) == {
        "upload", "kernel_matrix", "init", "iterations", "per_iteration", "total"
    }
    assert len(km.timings_["per_iteration"]) == km.n_iter_
    assert km.device_.startswith("cpu")
    assert km.algorithm_ in ("stored", "recompute")


def test_inputs_scikit_learn_accepts_give_the_same_fit():
    X = digits()[0][:300]
    want = KernelKMeans(10, dtype="float64", device="cpu").fit(X).labels_
    for same in (X.tolist(), np.asfortranarray(X), X.astype(np.float32)):
        got = KernelKMeans(10, dtype="float64", device="cpu").fit(same).labels_
        np.testing.assert_array_equal(got, want)


def test_pandas_frames():
    pd = pytest.importorskip("pandas")
    X, _ = blobs(4)
    frame = pd.DataFrame(X, columns=["x", "y"])
    km = KernelKMeans(3, device="cpu").fit(frame)
    np.testing.assert_array_equal(km.feature_names_in_, ["x", "y"])
    np.testing.assert_array_equal(km.predict(frame), KernelKMeans(3, device="cpu").fit(X).labels_)


def test_inits():
    X = uniform(5, 200, 2)
    given = np.arange(200) % 4
    a = KernelKMeans(4, init=given, tol=0.0, device="cpu").fit(X)
    b = KernelKMeans(4, init="mod", tol=0.0, device="cpu").fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)  # "mod" is i mod k
    for init in ("random", "k-means++"):
        c = KernelKMeans(4, init=init, random_state=7, device="cpu").fit(X)
        d = KernelKMeans(4, init=init, random_state=7, device="cpu").fit(X)
        np.testing.assert_array_equal(c.labels_, d.labels_)
        best = KernelKMeans(4, init=init, n_init=5, random_state=7, device="cpu").fit(X)
        assert best.inertia_ <= c.inertia_ + 1e-6 * abs(c.inertia_)


def test_precomputed_kernel_matches_the_kernel_on_points():
    X = uniform(6, 120, 3)
    Y = uniform(7, 15, 3)
    on_points = KernelKMeans(4, kernel="rbf", gamma=0.7, tol=0.0, dtype="float64", device="cpu")
    on_points.fit(X)
    pre = KernelKMeans(4, kernel="precomputed", tol=0.0, dtype="float64", device="cpu")
    pre.fit(rbf_kernel(X, gamma=0.7))
    np.testing.assert_array_equal(pre.labels_, on_points.labels_)
    assert pre.inertia_ == pytest.approx(on_points.inertia_, rel=1e-9)
    np.testing.assert_array_equal(
        pre.predict(rbf_kernel(Y, X, gamma=0.7)), on_points.predict(Y)
    )


def test_zscore_ignores_the_scale_of_features():
    X, _ = blobs(8)
    a = KernelKMeans(3, zscore=True, dtype="float64", device="cpu").fit(X)
    b = KernelKMeans(3, zscore=True, dtype="float64", device="cpu").fit(X * [100.0, 0.01] + 5)
    np.testing.assert_array_equal(a.labels_, b.labels_)


@pytest.mark.parametrize("kernel", ["rbf", "precomputed"])
def test_pickle_keeps_the_model(kernel):
    X = uniform(9, 100, 2)
    if kernel == "precomputed":
        X = rbf_kernel(X)
    km = KernelKMeans(5, kernel=kernel, zscore=kernel == "rbf", device="cpu").fit(X)
    again = pickle.loads(pickle.dumps(km))
    np.testing.assert_array_equal(again.labels_, km.labels_)
    np.testing.assert_array_equal(again.predict(X[:30]), km.predict(X[:30]))
    assert again.get_params() == km.get_params()


def long_fit():
    """A fit that takes many seconds: 1000 random restarts."""
    X = uniform(10, 1500, 2)
    return KernelKMeans(50, init="random", n_init=1000, random_state=0, device="cpu"), X


def test_the_gil_is_released_during_a_fit():
    km, X = long_fit()
    km.set_params(n_init=20)
    ticks = []
    done = threading.Event()

    def count():
        while not done.is_set():
            ticks.append(1)
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    start = time.perf_counter()
    try:
        km.fit(X)
    finally:
        done.set()
        t.join()
    elapsed = time.perf_counter() - start
    # With the GIL held the counter would stall for the whole fit.
    assert len(ticks) > 0.2 * elapsed / 0.001, (len(ticks), elapsed)


@pytest.fixture
def ctrl_c_raises():
    """Python's own Ctrl-C handler for the test's duration. A process started in the background
    by a non-interactive shell (a CI runner, `nohup ... &`) inherits SIGINT ignored, and Python
    then installs no handler at all: there would be nothing for the fit to run."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_interrupts_a_fit_between_iterations(ctrl_c_raises):
    km, X = long_fit()
    timer = threading.Timer(0.5, _thread.interrupt_main)
    start = time.perf_counter()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        km.fit(X)
    elapsed = time.perf_counter() - start
    timer.cancel()
    assert elapsed < 5.0, f"the fit went on for {elapsed:.1f} s after Ctrl-C"
    assert not hasattr(km, "labels_")


def test_sigint_stops_a_fit_in_another_process():
    # A real Ctrl-C: SIGINT to a Python process in the middle of a long fit. The child sets
    # Python's handler itself (see `ctrl_c_raises`: it may inherit SIGINT ignored).
    script = (
        "import signal, sys, numpy as np, popcorn\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "X = np.random.default_rng(0).uniform(size=(1500, 2))\n"
        "km = popcorn.KernelKMeans(50, init='random', n_init=1000, device='cpu')\n"
        "print('fitting', flush=True)\n"
        "try:\n"
        "    km.fit(X)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "fitting"
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert out.strip() == "interrupted", err


@pytest.mark.parametrize("storage", ["bfloat16", "float16"])
def test_a_kernel_matrix_held_in_16_bits_finds_the_blobs(storage, device):
    X, truth = blobs(2)
    km = KernelKMeans(3, kernel="rbf", tol=0.0, kernel_storage=storage, device=device).fit(X)
    assert adjusted_rand_score(truth, km.labels_) == 1.0
    assert km.algorithm_ == "stored"
    assert km.get_params()["kernel_storage"] == storage


def test_16_bit_kernel_storage_refuses_float64_overflow_and_unknown_names():
    X, _ = blobs(2)
    with pytest.raises(ValueError, match="computed in f32"):
        KernelKMeans(3, kernel_storage="bfloat16", dtype="float64", device="cpu").fit(X)
    with pytest.raises(ValueError, match="65504"):
        KernelKMeans(
            3, kernel="poly", degree=-1, kernel_storage="float16", device="cpu"
        ).fit(X)
    with pytest.raises(ValueError, match="kernel_storage"):
        KernelKMeans(3, kernel_storage="int8", device="cpu").fit(X)


@pytest.mark.parametrize("precision", ["tf32", "bfloat16", "float16", "3xtf32"])
@pytest.mark.parametrize("algorithm", ["stored", "recompute"])
def test_reduced_precision_products_find_the_blobs(precision, algorithm, device):
    X, truth = blobs(2)
    km = KernelKMeans(
        3, kernel="rbf", tol=0.0, precision=precision, algorithm=algorithm, device=device
    ).fit(X)
    assert adjusted_rand_score(truth, km.labels_) == 1.0
    assert km.algorithm_ == algorithm
    assert km.get_params()["precision"] == precision


def test_fp16_products_refuse_points_beyond_its_range_and_unknown_names():
    X, _ = blobs(2)
    with pytest.raises(ValueError, match="65504"):
        KernelKMeans(3, precision="float16", device="cpu").fit(X * 1e5)
    # bfloat16 keeps float32's range; z-scoring brings the points within fp16's.
    KernelKMeans(3, precision="bfloat16", device="cpu").fit(X * 1e5)
    KernelKMeans(3, precision="float16", zscore=True, device="cpu").fit(X * 1e5)
    with pytest.raises(ValueError, match="precision"):
        KernelKMeans(3, precision="int8", device="cpu").fit(X)


def test_processes_of_one_rank_each_fit_as_one_process(tmp_path):
    # Two Python processes started as a launcher would (rank, size, a rendezvous file): each
    # runs its rank of the same fit, and both end with one process's labels and objective.
    script = (
        "import json, sys, numpy as np\n"
        "from popcorn import KernelKMeans\n"
        "X = np.random.default_rng(3).uniform(-1, 1, size=(257, 3))\n"
        "km = KernelKMeans(5, kernel='rbf', gamma=0.7, init='k-means++', random_state=1,\n"
        "                  dtype='float64', device='cpu').fit(X)\n"
        "json.dump({'labels': km.labels_.tolist(), 'inertia': km.inertia_},\n"
        "          open(sys.argv[1], 'w'))\n"
    )

    def run(env, out):
        return subprocess.Popen([sys.executable, "-c", script, str(out)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    base = {k: v for k, v in os.environ.items() if not k.startswith("POPCORN_")}
    one = run(base, tmp_path / "one.json")
    assert one.wait(timeout=120) == 0, one.stderr.read()
    rendezvous = tmp_path / "rendezvous.addr"
    ranks = [
        run({**base, "POPCORN_RANK": str(r), "POPCORN_WORLD_SIZE": "2",
             "POPCORN_RENDEZVOUS": str(rendezvous), "POPCORN_RANK_TIMEOUT": "60"},
            tmp_path / f"rank{r}.json")
        for r in range(2)
    ]
    for r, p in enumerate(ranks):
        assert p.wait(timeout=120) == 0, f"rank {r}: {p.stderr.read()}"
    want = json.load(open(tmp_path / "one.json"))
    for r in range(2):
        got = json.load(open(tmp_path / f"rank{r}.json"))
        assert got["labels"] == want["labels"], f"rank {r}"
        assert got["inertia"] == want["inertia"], f"rank {r}"


def test_the_features_algorithm_gives_the_stored_fit_and_refuses_other_kernels(device):
    # A polynomial kernel of degree 2 through its explicit features: the stored kernel
    # matrix's labels, inertia and predictions (float64).
    X = uniform(3, 200, 4)
    fits = {
        algorithm: KernelKMeans(
            5, kernel="poly", degree=2, tol=0.0, dtype="float64", device=device,
            algorithm=algorithm,
        ).fit(X)
        for algorithm in ["stored", "features"]
    }
    assert fits["features"].algorithm_ == "features"
    assert fits["features"].get_params()["algorithm"] == "features"
    np.testing.assert_array_equal(fits["features"].labels_, fits["stored"].labels_)
    assert fits["features"].inertia_ == pytest.approx(fits["stored"].inertia_, rel=1e-9)
    Y = uniform(4, 30, 4)
    np.testing.assert_array_equal(fits["features"].predict(Y), fits["stored"].predict(Y))
    # Under a memory limit that leaves no room for them whole, the features are built in
    # blocks of rows every iteration: the same fit.
    blocks = KernelKMeans(
        5, kernel="poly", degree=2, tol=0.0, dtype="float64", device=device,
        algorithm="features", memory_limit=50_000,
    ).fit(X)
    assert 0 < blocks.feature_block_rows_ < 200
    assert fits["features"].feature_block_rows_ == 0
    np.testing.assert_array_equal(blocks.labels_, fits["stored"].labels_)
    assert blocks.inertia_ == pytest.approx(fits["stored"].inertia_, rel=1e-9)
    np.testing.assert_array_equal(blocks.predict(Y), fits["stored"].predict(Y))
    for bad in [0, -5, True, "lots", 2.5]:
        with pytest.raises(ValueError, match="memory_limit"):
            KernelKMeans(3, memory_limit=bad, device="cpu").fit(X)
    with pytest.raises(ValueError, match="rbf|gaussian"):
        KernelKMeans(3, kernel="rbf", algorithm="features", device="cpu").fit(X)
    with pytest.raises(ValueError, match="algorithm"):
        KernelKMeans(3, algorithm="fastest", device="cpu").fit(X)
