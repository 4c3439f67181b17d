#!/usr/bin/env python3
"""Compile kernels-gen's sample and builtin kernels with NVRTC and check their results.

Usage (on a machine with a CUDA GPU, CuPy and cuda-python):
    cargo run -p kernels-gen --example dump_kernels -- DIR   # on any machine
    python3 kernels-gen/tools/nvrtc_check.py DIR

Each source is compiled by NVRTC alone (no include paths, no extra headers), loaded with CuPy
and run on small and odd sizes; results are compared with NumPy references written from the
documented semantics (kernels-gen's ReduceKind docs). Every fused kernel is also launched with a
single block, which exercises the grid-stride loops and must give bit-identical results.
Prints one line per check and a closing 'N passed, M failed' line.
"""
import math
import os
import sys
import tempfile

import cupy as cp
import numpy as np

RESULTS = {"passed": 0, "failed": 0}


def report(ok, what, detail=""):
    RESULTS["passed" if ok else "failed"] += 1
    print(("PASS " if ok else "FAIL ") + what + (("  " + detail) if detail else ""), flush=True)


# ---------------------------------------------------------------------------------------------
# Compilation


def nvrtc_compile(source, name, arch, extra=()):
    """Compile with NVRTC only; returns (cubin bytes, log)."""
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        from cuda import nvrtc  # older cuda-python

    ok = nvrtc.nvrtcResult.NVRTC_SUCCESS
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), (name + ".cu").encode(), 0, [], [])
    assert err == ok, err
    opts = [("--gpu-architecture=sm_%s" % arch).encode()] + [o.encode() for o in extra]
    (cerr,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, log)
    log = log.decode(errors="replace").strip("\x00 \n")
    if cerr != ok:
        return None, log
    err, size = nvrtc.nvrtcGetCUBINSize(prog)
    cubin = b" " * size
    nvrtc.nvrtcGetCUBIN(prog, cubin)
    return cubin, log


def load_all(folder):
    arch = cp.cuda.Device().compute_capability
    funcs, launch = {}, {}
    tmp = tempfile.mkdtemp()
    with open(os.path.join(folder, "manifest.tsv")) as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    for label, name, file, shape in rows:
        source = open(os.path.join(folder, file)).read()
        for extra in ((), ("--fmad=false",)):
            cubin, log = nvrtc_compile(source, name, arch, extra)
            tag = "nvrtc %s %s" % (label, " ".join(extra) or "(default options)")
            report(cubin is not None and "warning" not in log.lower(), tag, log[:2000])
        if cubin is None:
            continue
        path = os.path.join(tmp, name + ".cubin")
        with open(path, "wb") as out:
            out.write(cubin)
        funcs[label] = cp.RawModule(path=path).get_function(name)
        launch[label] = shape
    return funcs, launch


# ---------------------------------------------------------------------------------------------
# Launch geometry, as LaunchShape::grid_block and builtins' helpers compute it


def blocks_for(work, per_block):
    return int(min(max(-(-work // per_block), 1), 65535))


def column_group_width(cols):
    for width in (32, 16, 8, 4):
        if -(-cols // width) >= 256:
            return width
    return 1 if cols <= 1 else (2 if cols == 2 else 4)


def fused_dims(shape, rows, cols):
    """(grid, block, dynamic shared bytes)."""
    if shape.startswith("Linear"):
        return (blocks_for(rows * cols, 256), 1, 1), (256, 1, 1), 0
    if shape.startswith("WarpPerRow"):
        return (blocks_for(rows, 8), 1, 1), (256, 1, 1), 0
    if shape.startswith("ColumnGroups"):
        elem = 8 if "elem_bytes: 8" in shape else 4
        w = column_group_width(cols)
        return (blocks_for(cols, w), 1, 1), (w, 1024 // w, 1), 1024 * elem
    raise ValueError(shape)


def linear_dims(n):
    return (blocks_for(n, 256), 1, 1), (256, 1, 1)


# ---------------------------------------------------------------------------------------------
# Helpers


DT = {"f32": np.float32, "f64": np.float64}
TOL = {"f32": 2e-5, "f64": 1e-12}
rng = np.random.default_rng(1234)


def i64(v):
    return np.int64(v)


def close(got, want, dt, exact=False):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return False, "shape %s vs %s" % (got.shape, want.shape)
    nan_ok = np.array_equal(np.isnan(got), np.isnan(want))
    fin = ~np.isnan(want)
    inf_ok = np.array_equal(got[np.isinf(want)], want[np.isinf(want)])
    g, w = got[fin & ~np.isinf(want)], want[fin & ~np.isinf(want)]
    err = float(np.max(np.abs(g - w) / np.maximum(1.0, np.abs(w)))) if g.size else 0.0
    ok = nan_ok and inf_ok and (err == 0.0 if exact else err <= TOL[dt])
    return ok, "max rel err %.3g nan_ok %s inf_ok %s" % (err, nan_ok, inf_ok)


def run_fused(funcs, launch, label, rows, cols, args, outs):
    """Launches twice (full grid, one block); returns outputs of the first, checks equality."""
    results = []
    for single in (False, True):
        for o in outs:
            if o.dtype.kind == "f":
                o.fill(np.nan)
            else:
                o.fill(0xDEADBEEF)
        grid, block, shared = fused_dims(launch[label], rows, cols)
        if single:
            grid = (1, 1, 1)
        funcs[label](grid, block, (i64(rows), i64(cols)) + tuple(args) + tuple(outs),
                     shared_mem=shared)
        cp.cuda.Device().synchronize()
        results.append([cp.asnumpy(o) for o in outs])
    same = all(
        np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in zip(results[0], results[1])
    )
    report(same, "%s %dx%d one-block launch is bit-identical" % (label, rows, cols))
    return results[0]


def seq_argmin(row):
    best, at = math.inf, 0
    for j, v in enumerate(row):
        if v < best:
            best, at = v, j
    return at


def seq_min(row):
    best = math.inf
    for v in row:
        if v < best:
            best = v
    return best


def seq_max(row):
    best = -math.inf
    for v in row:
        if v > best:
            best = v
    return best


# ---------------------------------------------------------------------------------------------
# Fused kernels


def check_map_affine(funcs, launch, dt):
    label = "map_affine_" + dt
    T = DT[dt]
    for rows, cols in [(1, 1), (37, 45), (1000, 333)]:
        ldx, ldy = cols + 3, rows + 2
        X = rng.standard_normal((rows, ldx)).astype(T)
        Y = rng.standard_normal((cols, ldy)).astype(T)
        b = rng.standard_normal(cols).astype(T)
        c = rng.standard_normal(rows).astype(T)
        s = T(1.75)
        g = rng.standard_normal(1).astype(T)
        outs = [cp.empty((rows, cols), dtype=T) for _ in range(3)]
        args = [cp.asarray(X), i64(ldx), cp.asarray(b), cp.asarray(c), s,
                cp.asarray(Y), i64(ldy), cp.asarray(g)]
        got = run_fused(funcs, launch, label, rows, cols, args, outs)
        Xv = X[:, :cols].astype(np.float64)
        want = [
            Xv * float(s) + b[None, :],
            np.exp(-np.abs(Xv - c[:, None])),
            Y[:, :rows].T.astype(np.float64) + float(g[0]),
        ]
        for k in range(3):
            ok, d = close(got[k], want[k], dt)
            report(ok, "%s %dx%d out%d" % (label, rows, cols, k), d)


def check_map_all_ops(funcs, launch, dt):
    label = "map_all_ops_" + dt
    T = DT[dt]
    rows, cols = 29, 67
    X = rng.uniform(0.1, 2.0, (rows, cols)).astype(T)
    X[::3, ::5] = T(0.5)
    outs = [cp.empty((rows, cols), dtype=T) for _ in range(6)]
    got = run_fused(funcs, launch, label, rows, cols, [cp.asarray(X), i64(cols)], outs)
    x = X.astype(np.float64)
    h = 0.5
    want = [
        np.sqrt(x) + np.log(x) + np.tanh(x) + x ** 2.5,
        np.maximum(x, h) - np.minimum(x, h),
        np.where(x < h, x, -x),
        (x <= h) * 1.0 + (x > h) * 2.0 + (x >= h) * 4.0 + (x == h) * 8.0 + (x != h) * 16.0,
        x / 3.0,
        x + x,
    ]
    for k in range(6):
        ok, d = close(got[k], want[k], dt, exact=(k in (2, 3, 5)))
        report(ok, "%s out%d" % (label, k), d)


def check_rows_kmeans(funcs, launch, dt):
    label = "rows_kmeans_" + dt
    T = DT[dt]
    for rows, cols in [(1, 1), (5, 31), (77, 37), (1000, 100), (3, 1000)]:
        ld = cols + 1
        K = rng.integers(0, 3, (rows, ld)).astype(T)
        d = rng.integers(0, 3, rows).astype(T)
        r = rng.integers(0, 3, cols).astype(T)
        if rows >= 3:
            d[0] = np.inf  # a row of +inf: argmin 0
            d[1] = np.nan  # a row of NaN: argmin 0, min +inf, max -inf
            K[2, cols // 2] = np.nan  # one NaN entry is skipped
        idx = rng.integers(0, cols + 3, rows).astype(np.uint32)  # some out of range
        outs = [cp.empty((rows, cols), dtype=T)] + [cp.empty(rows, dtype=T) for _ in range(3)]
        outs += [cp.empty(rows, dtype=np.uint32), cp.empty(rows, dtype=T)]
        args = [cp.asarray(K), i64(ld), cp.asarray(d), cp.asarray(r), cp.asarray(idx)]
        with np.errstate(invalid="ignore"):
            got = run_fused(funcs, launch, label, rows, cols, args, outs)
            dist = d[:, None].astype(np.float64) - 2.0 * K[:, :cols] + r[None, :]
            pick = np.array([dist[i, idx[i]] if idx[i] < cols else np.nan for i in range(rows)])
            want = [
                dist,
                dist.sum(axis=1),
                np.array([seq_min(x) for x in dist]),
                np.array([seq_max(x) for x in dist]),
                np.array([seq_argmin(x) for x in dist]),
                pick,
            ]
        names = ["store", "sum", "min", "max", "argmin", "pick"]
        for k in range(6):
            if names[k] == "argmin":
                ok = np.array_equal(got[k], want[k])
                bad = np.nonzero(got[k] != want[k])[0][:5]
                report(ok, "%s %dx%d argmin" % (label, rows, cols), "first bad rows %s" % bad)
            else:
                ok, det = close(got[k], want[k], dt, exact=True)
                report(ok, "%s %dx%d %s" % (label, rows, cols, names[k]), det)


def check_rows_reduce_only(funcs, launch, dt):
    label = "rows_reduce_only_" + dt
    T = DT[dt]
    for rows, cols in [(1, 1), (9, 33), (300, 1025)]:
        X = rng.standard_normal((rows, cols)).astype(T)
        idx = rng.integers(0, cols, rows).astype(np.uint32)
        outs = [cp.empty(rows, dtype=T), cp.empty(rows, dtype=np.uint32), cp.empty(rows, dtype=T)]
        args = [cp.asarray(X), i64(cols), cp.asarray(idx)]
        got = run_fused(funcs, launch, label, rows, cols, args, outs)
        ok, det = close(got[0], X.astype(np.float64).sum(axis=1), dt)
        report(ok, "%s %dx%d sum" % (label, rows, cols), det)
        report(np.array_equal(got[1], X.argmin(axis=1)), "%s %dx%d argmin" % (label, rows, cols))
        ok, det = close(got[2], X[np.arange(rows), idx], dt, exact=True)
        report(ok, "%s %dx%d pick" % (label, rows, cols), det)


def check_cols_stats(funcs, launch, dt):
    label = "cols_stats_" + dt
    T = DT[dt]
    for rows, cols in [(1, 1), (7, 2), (5, 33), (1001, 70), (20000, 3), (50, 2048), (3, 9000)]:
        ld = cols + 2
        X = rng.standard_normal((rows, ld)).astype(T)
        b = rng.standard_normal(cols).astype(T)
        outs = [cp.empty(cols, dtype=T) for _ in range(3)]
        args = [cp.asarray(X), i64(ld), cp.asarray(b)]
        got = run_fused(funcs, launch, label, rows, cols, args, outs)
        x = X[:, :cols].astype(np.float64)
        v = x * x - b[None, :]
        # Min/max compare T values computed on the GPU: allow rounding of x*x - b.
        for k, want in enumerate([v.sum(axis=0), v.min(axis=0), v.max(axis=0)]):
            ok, det = close(got[k], want, dt)
            report(ok, "%s %dx%d out%d" % (label, rows, cols, k), det)


# ---------------------------------------------------------------------------------------------
# Builtins


def check_builtins(funcs, dt):
    T = DT[dt]
    # diag
    n, lda = 70, 75
    A = rng.standard_normal((n, lda)).astype(T)
    out = cp.full(n, np.nan, dtype=T)
    g, b = linear_dims(n)
    funcs["pk_diag_" + dt](g, b, (i64(n), cp.asarray(A), i64(lda), out))
    report(np.array_equal(cp.asnumpy(out), A[np.arange(n), np.arange(n)]), "diag_" + dt)
    # fill
    out = cp.zeros(1001, dtype=T)
    g, b = linear_dims(1000)
    funcs["pk_fill_" + dt](g, b, (i64(1000), T(np.nan), out))
    h = cp.asnumpy(out)
    report(bool(np.isnan(h[:1000]).all() and h[1000] == 0), "fill_" + dt)
    # symmetrize
    for n in [1, 31, 33, 70, 100]:
        lda = n + 5
        A = rng.standard_normal((n, lda)).astype(T)
        dev = cp.asarray(A)
        g, b = (blocks_for(n, 32), blocks_for(n, 32), 1), (32, 8, 1)
        funcs["pk_symmetrize_lower_to_upper_" + dt](g, b, (i64(n), dev, i64(lda)))
        got = cp.asnumpy(dev)
        low = np.tril(A[:, :n])
        want = A.copy()
        want[:, :n] = low + np.tril(A[:, :n], -1).T
        report(np.array_equal(got, want), "symmetrize_%s n=%d" % (dt, n))
    # selection
    for n, k, chunk in [(1, 1, None), (1000, 37, None), (5000, 37, 100), (100000, 1000, None),
                        (70001, 3000, 1056), (4096, 5, 33)]:
        check_selection(funcs, dt, n, k, chunk)


def selection_layout(n, k):
    cap = 1 << 24
    max_chunks = max(cap // max(k, 1), 1)
    chunk = max(-(-n // max_chunks), 1024)
    chunk = -(-chunk // 32) * 32
    return chunk, -(-n // chunk)


def check_selection(funcs, dt, n, k, chunk_override):
    T = DT[dt]
    used = rng.choice(k, size=max(1, (2 * k) // 3), replace=False)  # some clusters stay empty
    labels = used[rng.integers(0, used.size, n)].astype(np.uint32)
    labels[:: 97] = k + 1  # out-of-range labels are skipped
    labels_d = cp.asarray(labels)
    counts = cp.full(k, 12345, dtype=np.uint32)  # pk_fill_u32 must zero it
    g, b = linear_dims(k)
    funcs["pk_fill_u32"](g, b, (i64(k), np.uint32(0), counts))
    g, b = linear_dims(n)
    funcs["pk_histogram"](g, b, (i64(n), labels_d, i64(k), counts))
    want_counts = np.bincount(labels[labels < k], minlength=k)
    report(np.array_equal(cp.asnumpy(counts), want_counts), "histogram n=%d k=%d" % (n, k))

    chunk, chunks = selection_layout(n, k)
    if chunk_override:
        chunk, chunks = chunk_override, -(-n // chunk_override)
    row_ptr = cp.full(k + 1, -1, dtype=np.int32)
    workspace = cp.full(max(chunks * k, 1), -7, dtype=np.int32)
    col_idx = cp.full(n, -1, dtype=np.int32)
    values = cp.full(n, np.nan, dtype=T)
    funcs["pk_selection_scan"]((1, 1, 1), (1024, 1, 1), (i64(k), counts, row_ptr))
    cg = (blocks_for(chunks, 8), 1, 1), (256, 1, 1)
    funcs["pk_selection_chunk_counts"](cg[0], cg[1], (i64(n), i64(k), i64(chunk), labels_d,
                                                     workspace))
    g, b = linear_dims(k)
    funcs["pk_selection_chunk_offsets"](g, b, (i64(k), i64(chunks), row_ptr, workspace))
    funcs["pk_selection_scatter_" + dt](cg[0], cg[1], (i64(n), i64(k), i64(chunk), labels_d,
                                                      counts, workspace, col_idx, values))
    cp.cuda.Device().synchronize()
    want_ptr = np.concatenate([[0], np.cumsum(want_counts)]).astype(np.int32)
    nnz = int(want_ptr[-1])
    order = np.argsort(labels, kind="stable")
    order = order[labels[order] < k]
    want_vals = (T(1) / want_counts[labels[order]].astype(T)).astype(T)
    got_ptr, got_idx, got_vals = cp.asnumpy(row_ptr), cp.asnumpy(col_idx), cp.asnumpy(values)
    tag = "selection_%s n=%d k=%d chunk=%d" % (dt, n, k, chunk)
    report(np.array_equal(got_ptr, want_ptr), tag + " row_ptr")
    report(np.array_equal(got_idx[:nnz], order) and (got_idx[nnz:] == -1).all(), tag + " col_idx")
    report(np.array_equal(got_vals[:nnz], want_vals), tag + " values")


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "kernels"
    print("device:", cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), flush=True)
    funcs, launch = load_all(folder)
    for dt in ("f32", "f64"):
        for check in (check_map_affine, check_map_all_ops, check_rows_kmeans,
                      check_rows_reduce_only, check_cols_stats):
            try:
                check(funcs, launch, dt)
            except Exception as e:  # report and go on with the other checks
                report(False, "%s %s raised %r" % (check.__name__, dt, e))
        try:
            check_builtins(funcs, dt)
        except Exception as e:
            report(False, "builtins %s raised %r" % (dt, e))
    print("%d passed, %d failed" % (RESULTS["passed"], RESULTS["failed"]))
    sys.exit(1 if RESULTS["failed"] else 0)


if __name__ == "__main__":
    main()
