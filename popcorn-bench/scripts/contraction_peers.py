"""Peers of bench_contractions, measured on the same device in the same session.

- flash-kmeans 0.3.1 (Triton; its tl.dot on fp32 inputs uses TF32): one Lloyd iteration
  (assignment, centroid update, the centre shift read back as its loop does) per shape;
- PyTorch kernel smoothing with K computed in row blocks and multiplied (TF32 allowed and not);
- cuBLAS through PyTorch: X @ C^T in fp32 and TF32 at the Lloyd shapes (the ceilings).

Timings are medians of CUDA-event times after warm-up. Prints a table and JSON.

    python3 contraction_peers.py [--lloyd 100000x128x1024,...] [--smooth 200000x16] [--json F]
"""
import argparse
import json

import torch


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def timed(f, reps=10, warm=3):
    for _ in range(warm):
        f()
    torch.cuda.synchronize()
    ms = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        f()
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    return median(ms)


def lloyd(n, d, k):
    from flash_kmeans import kmeans_triton_impl as fk

    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.rand((1, n, d), device="cuda", generator=g)
    x_sq = (x * x).sum(-1)
    c = x[:, :k, :].clone()
    it = getattr(fk, "_euclid_iter_compiled", fk._euclid_iter)

    def step():
        new, shift, ids = it(x, x_sq, c, True)
        _ = float(shift)  # the loop's convergence test reads it back

    row = {"n": n, "d": d, "k": k, "flash_kmeans_iteration_ms": timed(step)}
    xs, cs = x[0], c[0]
    torch.backends.cuda.matmul.allow_tf32 = False
    row["torch_sgemm_ms"] = timed(lambda: xs @ cs.T)
    torch.backends.cuda.matmul.allow_tf32 = True
    row["torch_tf32_gemm_ms"] = timed(lambda: xs @ cs.T)
    torch.backends.cuda.matmul.allow_tf32 = False
    return row


def smoothing(n, d, block=4096):
    g = torch.Generator(device="cuda").manual_seed(2)
    x = torch.rand((n, d), device="cuda", generator=g)
    y = torch.rand((n, d), device="cuda", generator=g)
    t = torch.rand((n, 1), device="cuda", generator=g)
    xn, yn = (x * x).sum(1, keepdim=True), (y * y).sum(1, keepdim=True).T
    out = torch.empty((n, 1), device="cuda")

    def run():
        for i in range(0, n, block):
            k = torch.exp(-0.5 * torch.clamp(xn[i:i + block] + yn - 2 * x[i:i + block] @ y.T, min=0))
            out[i:i + block] = (k @ t) / k.sum(1, keepdim=True)

    row = {"n": n, "d": d, "block_rows": block}
    torch.backends.cuda.matmul.allow_tf32 = False
    row["torch_blocked_fp32_ms"] = timed(run, reps=3, warm=1)
    torch.backends.cuda.matmul.allow_tf32 = True
    row["torch_blocked_tf32_ms"] = timed(run, reps=3, warm=1)
    torch.backends.cuda.matmul.allow_tf32 = False
    return row


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lloyd", default="100000x128x1024,1048576x128x1024,1048576x32x100")
    p.add_argument("--smooth", default="200000x16")
    p.add_argument("--json")
    a = p.parse_args()
    report = {"device": torch.cuda.get_device_name(), "lloyd": [], "smoothing": None}
    for s in filter(None, a.lloyd.split(",")):
        n, d, k = map(int, s.split("x"))
        r = lloyd(n, d, k)
        print(r, flush=True)
        report["lloyd"].append(r)
    if a.smooth:
        n, d = map(int, a.smooth.split("x"))
        report["smoothing"] = smoothing(n, d)
        print(report["smoothing"], flush=True)
    text = json.dumps(report, indent=2)
    print(text)
    if a.json:
        open(a.json, "w").write(text)


if __name__ == "__main__":
    main()
