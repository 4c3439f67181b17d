#!/usr/bin/env python3
"""Normalized cut on a stochastic block model: popcorn's CLI (`kernel_kmeans --graph`, weighted
Kernel K-means with the degrees as weights) against scikit-learn's
SpectralClustering(affinity="precomputed") on the same graph. Quality is the ARI against the
planted blocks (and each result's normalized cut, computed here from the adjacency); time is
each method's clustering time (popcorn's fit without reading the file, as its JSON reports;
sklearn's fit_predict), the median of --repeat runs.

    python popcorn-bench/scripts/ncut_peer.py target/release/examples/kernel_kmeans \
        --n 4000 --blocks 4 --p-in 0.05 --p-out 0.005 --device cpu --json out.json

Needs numpy, scipy and scikit-learn.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import scipy.io
import scipy.sparse as sp
from sklearn.cluster import SpectralClustering
from sklearn.metrics import adjusted_rand_score


def sbm(n, blocks, p_in, p_out, seed):
    """A symmetric 0/1 adjacency (no self-loops) and the planted blocks (node i in i mod blocks)."""
    rng = np.random.default_rng(seed)
    truth = np.arange(n) % blocks
    rows, cols = [], []
    for i in range(n - 1):
        j = np.arange(i + 1, n)
        p = np.where(truth[j] == truth[i], p_in, p_out)
        hit = j[rng.random(j.size) < p]
        rows.append(np.full(hit.size, i))
        cols.append(hit)
    r = np.concatenate(rows)
    c = np.concatenate(cols)
    upper = sp.coo_matrix((np.ones(r.size), (r, c)), shape=(n, n))
    a = (upper + upper.T).tocsr()
    return a, truth


def ncut(a, labels):
    """sum_c cut(c, V - c) / vol(c) over the clusters with volume."""
    d = np.asarray(a.sum(axis=1)).ravel()
    total = 0.0
    for c in np.unique(labels):
        m = labels == c
        vol = d[m].sum()
        if vol > 0:
            total += (vol - a[m][:, m].sum()) / vol
    return float(total)


def run_popcorn(cli, mtx, k, args, workdir):
    labels_path = os.path.join(workdir, "labels.txt")
    json_path = os.path.join(workdir, "popcorn.json")
    cmd = [cli, "--graph", mtx, "-k", str(k), "-r", str(args.runs), "-s", str(args.seed),
           "--labels-out", labels_path, "--json", json_path, "--dtype", args.dtype]
    if args.device:
        cmd += ["--device", args.device]
    wall = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - wall
    if done.returncode != 0:
        sys.exit(f"popcorn failed ({done.returncode}): {done.stderr.strip()}")
    labels = np.loadtxt(labels_path, dtype=np.int64)
    with open(json_path) as f:
        report = json.load(f)
    return labels, report, wall, done.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cli", help="the kernel_kmeans example binary (cargo build --release --example kernel_kmeans)")
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--p-in", type=float, default=0.05)
    ap.add_argument("--p-out", type=float, default=0.005)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=4, help="popcorn's -r (random starts; the lowest cut wins)")
    ap.add_argument("--repeat", type=int, default=3, help="timed repetitions of each method")
    ap.add_argument("--device", default=None, help="popcorn's --device (cpu, cuda)")
    ap.add_argument("--dtype", default="f32")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()

    a, truth = sbm(args.n, args.blocks, args.p_in, args.p_out, args.seed)
    with tempfile.TemporaryDirectory() as work:
        mtx = os.path.join(work, "sbm.mtx")
        # The lower triangle: scipy writes that triangle of a symmetric matrix.
        scipy.io.mmwrite(mtx, sp.tril(a).tocoo(), symmetry="symmetric")

        sk_times, sk_labels = [], None
        for _ in range(args.repeat):
            model = SpectralClustering(n_clusters=args.blocks, affinity="precomputed",
                                       random_state=args.seed)
            t = time.perf_counter()
            sk_labels = model.fit_predict(a)
            sk_times.append(time.perf_counter() - t)

        pc_times, pc_walls, pc_labels, report, stdout = [], [], None, None, ""
        for _ in range(args.repeat):
            pc_labels, report, wall, stdout = run_popcorn(args.cli, mtx, args.blocks, args, work)
            pc_times.append(report["result"]["timings"]["total_s"])
            pc_walls.append(wall)

    r = report["result"]
    rows = {
        "popcorn ncut (weighted Kernel K-means)": {
            "ari": adjusted_rand_score(truth, pc_labels),
            "ncut": ncut(a, pc_labels),
            "time_s": statistics.median(pc_times),
            "process_wall_s": statistics.median(pc_walls),
            "iterations": r["iterations"],
            "rejected_steps": r["rejected_steps"],
            "sigma": r["sigma"],
            "device": r["device"],
            "dtype": r["dtype"],
            "runs": args.runs,
        },
        "sklearn SpectralClustering(affinity=precomputed)": {
            "ari": adjusted_rand_score(truth, sk_labels),
            "ncut": ncut(a, sk_labels),
            "time_s": statistics.median(sk_times),
        },
    }
    planted = ncut(a, truth)
    print(f"stochastic block model: n = {args.n}, {args.blocks} blocks, p_in {args.p_in}, "
          f"p_out {args.p_out}, {a.nnz} stored entries (mean degree {a.nnz / args.n:.1f}), "
          f"seed {args.seed}; planted ncut {planted:.4f}")
    print(f"{'method':<50} {'ARI':>7} {'ncut':>8} {'time (s)':>10}")
    for name, v in rows.items():
        print(f"{name:<50} {v['ari']:>7.4f} {v['ncut']:>8.4f} {v['time_s']:>10.4f}")
    print(f"(popcorn: {r['iterations']} iterations, {r['rejected_steps']} steps taken back, "
          f"sigma {r['sigma']}, {r['device']}, {r['dtype']}, {args.runs} runs; process wall "
          f"{rows['popcorn ncut (weighted Kernel K-means)']['process_wall_s']:.3f} s; medians of "
          f"{args.repeat})")
    if args.json:
        out = {"graph": {"n": args.n, "blocks": args.blocks, "p_in": args.p_in, "p_out": args.p_out,
                         "seed": args.seed, "nnz": int(a.nnz), "planted_ncut": planted},
               "results": rows}
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
