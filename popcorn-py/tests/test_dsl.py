"""The DSL from Python: parse, plan, read the plan, run on numpy arrays."""

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse

from popcorn import Context, Plan, Program

PROGRAMS = Path(__file__).resolve().parents[2] / "examples" / "programs"

NEAREST = """
fn nearest(X: Dense[n, d], C: Dense[k, d]) -> (labels: Index[n], D: Dense[n, k], total: Scalar) {
    D = -2 * X * C^T + rownorms(X) + rownorms(C)^T;
    labels = argmin_rows(D);
    total = sum(D);
}
"""


def numpy_nearest(X, C):
    D = ((X[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)
    return D.argmin(axis=1), D


def test_a_program_reads_back_its_signature():
    p = Program(NEAREST)
    assert p.name == "nearest"
    assert p.inputs == [("X", "Dense[n, d]"), ("C", "Dense[k, d]")]
    assert p.outputs == [("labels", "Index[n]"), ("D", "Dense[n, k]"), ("total", "Scalar")]
    assert p.dims == ["d", "k", "n"]
    assert p.free_dims == []
    assert repr(p) == f"Program({p.signature})"
    assert p.signature.startswith("fn nearest(X: Dense[n, d], C: Dense[k, d])")


def test_a_file_of_programs():
    source = (PROGRAMS / "kernel_kmeans.pop").read_text()
    names = [p.name for p in Program.parse_all(source)]
    assert "kkmeans_iteration" in names and "kernel_gaussian" in names
    assert Program(source, name="kkmeans_iteration").free_dims == ["k"]


def test_plans_print_draw_and_show_their_kernels():
    source = (PROGRAMS / "kernel_kmeans.pop").read_text()
    p = Program(source, name="kernel_polynomial")
    plan = p.plan(n=60000, d=784)
    assert isinstance(plan, Plan)
    text = str(plan)
    assert text.startswith("plan for fn kernel_polynomial(")
    assert "syrk" in text and "H100" in text  # the reference GPU
    assert plan.steps == 2 and plan.program == "kernel_polynomial"
    assert plan.dot().startswith("digraph")
    kernels = plan.kernels()
    assert len(kernels) == 1 and kernels[0][0].startswith("pk_")
    assert plan.cuda().startswith(f"// ---- {kernels[0][0]}.cu ----")
    assert "__global__" in plan.cuda()
    assert json.loads(plan.json())["program"] == "kernel_polynomial"
    assert plan.flops > 2.8e12 and plan.bytes > 0 and plan.estimated_seconds > 0
    on_cpu = p.plan(target="cpu", dtype="float64", n=1000, d=10)
    assert "cpu" in str(on_cpu) and "f64" in str(on_cpu)


def test_run_matches_numpy(device):
    rng = np.random.default_rng(0)
    X, C = rng.normal(size=(200, 5)), rng.normal(size=(7, 5))
    want_labels, want_D = numpy_nearest(X, C)
    out = Context(device, "float64").run(Program(NEAREST), X=X, C=C)
    assert set(out) == {"labels", "D", "total"}
    np.testing.assert_array_equal(out["labels"], want_labels)
    assert out["labels"].dtype == np.int64
    np.testing.assert_allclose(out["D"], want_D, rtol=1e-10, atol=1e-10)
    assert isinstance(out["total"], float)
    assert out["total"] == pytest.approx(want_D.sum(), rel=1e-10)
    single = Context(device, "float32").run(Program(NEAREST), X=X, C=C)
    assert single["D"].dtype == np.float32
    np.testing.assert_allclose(single["D"], want_D, rtol=1e-4, atol=1e-4)


def test_vectors_sparse_matrices_labels_and_free_dimensions(device):
    ctx = Context(device, "float64")
    pagerank = Program((PROGRAMS / "pagerank.pop").read_text())
    A = scipy.sparse.random(50, 50, density=0.1, random_state=1, format="coo")
    r = np.full(50, 1 / 50)
    out = ctx.run(pagerank, A=A, r=r, a=0.85)["r_next"]
    assert out.shape == (50,)
    np.testing.assert_allclose(out, 0.85 * (A @ r) + 0.15 / 50, rtol=1e-12)
    # The same from a column vector given as a 2-D array.
    np.testing.assert_array_equal(ctx.run(pagerank, A=A, r=r[:, None], a=0.85)["r_next"], out)

    sizes = Program("fn sizes(labels: Index[n]) -> (c: Col[k]) { c = counts(labels, k); }")
    labels = np.array([0, 2, 2, 1, 2])
    np.testing.assert_array_equal(ctx.run(sizes, labels=labels, k=4)["c"], [1, 1, 3, 0])


def test_a_context_plans_for_its_own_device():
    ctx = Context("cpu", "float64")
    assert ctx.dtype == "float64" and not ctx.is_gpu and ctx.device.startswith("cpu")
    plan = ctx.plan(Program(NEAREST), n=100, d=3, k=4)
    assert "cpu" in str(plan).splitlines()[2]
