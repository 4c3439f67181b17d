"""A plain numpy f64 Kernel K-means, the CPU peer of popcorn's example CLI, timed in one run.

The baseline is what a numpy user writes: K = exp(-gamma * (n_i + n_j - 2 X X^T)) from
`X @ X.T`, then every iteration E = K @ V^T with V the dense normalised selection matrix
(k x n), the centroid norms from E, distances and argmin, until no label changes. Both start
from labels i mod k on the same data (uniform [0, 1), seeded, saved as .npy for popcorn) and
run in float64 on the CPU; popcorn runs exactly as many iterations as numpy needed (`-c 0
-m ITERS`: its own stopping test, which also stops on a small change of the objective, would
stop earlier), so both do the same work, and their labels are compared. Prints a table and
JSON.

    python3 numpy_kkmeans.py --popcorn target/release/examples/kernel_kmeans \
        [--n 10500] [--d 16] [--k 26] [--max-iter 300] [--json F]
"""
import argparse
import json
import os
import subprocess
import tempfile
import time

import numpy as np


def numpy_kkmeans(x, k, gamma, max_iter):
    t0 = time.perf_counter()
    norms = np.einsum("ij,ij->i", x, x)
    kmat = x @ x.T
    kmat *= -2.0
    kmat += norms[:, None]
    kmat += norms[None, :]
    kmat *= -gamma
    np.exp(kmat, out=kmat)
    t_k = time.perf_counter() - t0
    n = x.shape[0]
    labels = np.arange(n) % k
    diag = np.diag(kmat).copy()
    iters = 0
    for _ in range(max_iter):
        iters += 1
        sizes = np.bincount(labels, minlength=k).astype(np.float64)
        v = np.zeros((k, n))
        v[labels, np.arange(n)] = 1.0 / np.maximum(sizes[labels], 1.0)
        e = kmat @ v.T                                     # n x k
        cn = np.einsum("cn,nc->c", v, e)                   # centroid norms V K V^T
        cn[sizes == 0] = np.inf
        dist = diag[:, None] - 2.0 * e + cn[None, :]
        new = np.argmin(dist, axis=1)
        changed = np.count_nonzero(new != labels)
        labels = new
        if changed == 0:
            break
    total = time.perf_counter() - t0
    objective = float(np.sum(dist[np.arange(n), labels]))
    return labels, iters, objective, t_k, total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--popcorn", required=True, help="the example CLI binary (release build)")
    ap.add_argument("--n", type=int, default=10500)
    ap.add_argument("--d", type=int, default=16)
    ap.add_argument("--k", type=int, default=26)
    ap.add_argument("--max-iter", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    x = rng.random((a.n, a.d))
    gamma = 1.0 / a.d
    labels, iters, obj, t_k, total = numpy_kkmeans(x, a.k, gamma, a.max_iter)
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "x.npy")
        out = os.path.join(tmp, "fit.json")
        lab = os.path.join(tmp, "labels.txt")
        np.save(data, x)
        t0 = time.perf_counter()
        subprocess.run(
            [a.popcorn, "-i", data, "-k", str(a.k), "-f", "gaussian", "--gamma", repr(gamma),
             "-m", str(iters), "-c", "0", "--init", "mod", "--device", "cpu",
             "--dtype", "f64", "--algorithm", "stored", "--json", out, "--labels-out", lab],
            check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        fit = json.load(open(out))
        p_labels = np.loadtxt(lab, dtype=np.int64)
    t = fit["timings"]
    rows = [
        ("numpy f64", t_k, total, iters, obj),
        ("popcorn f64", t["kernel_matrix_s"], t["total_s"], fit["iterations"], fit["objective"]),
    ]
    print(f"Kernel K-means, gaussian (gamma 1/d), {a.n} x {a.d}, k = {a.k}, f64, CPU, to convergence")
    print(f"{'':12} {'K s':>8} {'total s':>9} {'iters':>6} {'objective':>16}")
    for name, tk, tt, it, ob in rows:
        print(f"{name:12} {tk:8.3f} {tt:9.3f} {it:6d} {ob:16.9e}")
    same = float(np.mean(p_labels == labels))
    print(f"popcorn / numpy end to end: {total / t['total_s']:.2f}x faster (process wall "
          f"{wall:.3f} s); labels equal: {100 * same:.2f}%")
    if a.json:
        json.dump({"n": a.n, "d": a.d, "k": a.k, "numpy": {"k_s": t_k, "total_s": total,
                   "iterations": iters, "objective": obj},
                   "popcorn": {"k_s": t["kernel_matrix_s"], "total_s": t["total_s"],
                               "iterations": fit["iterations"], "objective": fit["objective"],
                               "wall_s": wall},
                   "speedup": total / t["total_s"], "labels_equal": same},
                  open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
