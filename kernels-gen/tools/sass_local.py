#!/usr/bin/env python3
"""Compile generated kernels to machine code on a machine without a GPU, and summarise it.

NVRTC, cuobjdump and nvdisasm run on any x86-64 Linux machine; NVIDIA publishes them as wheels
on PyPI. Fetch them once (CUDA 13.0's NVRTC, the one the GPU machines load):

    pip download --no-deps -d /tmp/cuda-tools "nvidia-cuda-nvrtc==13.0.*" \\
        nvidia-cuda-nvdisasm nvidia-cuda-cuobjdump
    for w in /tmp/cuda-tools/*.whl; do unzip -q -o "$w" -d /tmp/cuda-tools; done

Then, with the sources from the plan example (`--cuda --cuda-variants` prints every kernel of
a plan and the variants a GPU may launch of its TF32 contractions) or from POPCORN_DUMP_DIR:

    cargo run --release --example plan -- examples/programs/kernel_kmeans.pop \\
        --dim n=78823 --dim k=100 --dim d=50 --tf32 --cuda --cuda-variants > plan.txt
    python3 kernels-gen/tools/sass_local.py plan.txt --kernel pk_e54ccc337ed418cf_r3_ws

It compiles each selected kernel with popcorn's NVRTC options for the architecture (sm_90a by
default, as popcorn compiles for compute capability 9.0) and prints, per kernel, its registers,
stack (spills), the static instruction count and the commonest opcodes, and ptxas's remarks
(such as C7520, products serialised). `--sass DIR` writes each kernel's disassembly there.
This answers "does this change spill, serialise the products, or grow the code" before any
device time is spent; how fast the code runs still needs the GPU.
"""
import argparse
import collections
import ctypes
import os
import re
import subprocess
import sys

TOOLS = os.environ.get("POPCORN_CUDA_TOOLS", "/tmp/cuda-tools")


def tool(*parts):
    path = os.path.join(TOOLS, "nvidia", "cu13", *parts)
    if not os.path.exists(path):
        sys.exit(f"{path} is missing: fetch the wheels as this script's help says "
                 f"(or set POPCORN_CUDA_TOOLS to where they are unpacked)")
    return path


def sources(path):
    """(name, source) of every kernel in a file: a plan printout's '// ---- NAME.cu ----'
    sections, or one kernel file named after its entry point."""
    text = open(path).read()
    parts = re.split(r"^// ---- (\w+)\.cu ----\n", text, flags=re.M)
    if len(parts) == 1:
        return [(os.path.splitext(os.path.basename(path))[0], text)]
    # A section runs to the next kernel, or to the next plan's printout.
    return [(parts[i], parts[i + 1].split("\nplan for fn ")[0]) for i in range(1, len(parts), 2)]


def compile_cubin(nvrtc, source, name, arch):
    prog = ctypes.c_void_p()
    if nvrtc.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), f"{name}.cu".encode(), 0, None, None):
        raise RuntimeError("nvrtcCreateProgram failed")
    opts = [f"--gpu-architecture={arch}".encode(), b"--std=c++17"]
    rc = nvrtc.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    log = log.value.decode(errors="replace")
    if rc:
        return None, log
    nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    cubin = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetCUBIN(prog, cubin)
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    return cubin.raw, log


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file", help="a plan printout (--cuda) or one kernel's .cu")
    ap.add_argument("--kernel", action="append", default=[],
                    help="only these kernels (entry names; repeatable)")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--sass", metavar="DIR", help="write each kernel's disassembly here")
    a = ap.parse_args()
    lib_dir = os.path.dirname(tool("lib", "libnvrtc.so.13"))
    # NVRTC finds its builtins library next to itself only through the loader's path.
    ctypes.CDLL(os.path.join(lib_dir, "libnvrtc-builtins.so.13.0"), mode=ctypes.RTLD_GLOBAL)
    nvrtc = ctypes.CDLL(os.path.join(lib_dir, "libnvrtc.so.13"))
    chosen = {}
    for n, s in sources(a.file):  # a kernel planned in several programs is compiled once
        if (not a.kernel or n in a.kernel) and n not in chosen:
            chosen[n] = s
    chosen = list(chosen.items())
    if not chosen:
        sys.exit("no kernel of that name in the file")
    failed = 0
    for name, source in chosen:
        cubin, log = compile_cubin(nvrtc, source, name, a.arch)
        remarks = [l.strip() for l in log.splitlines() if "ptxas" in l or "error" in l]
        if cubin is None:
            failed += 1
            print(f"{name}: COMPILE FAILED\n{log[:3000]}")
            continue
        cubin_path = f"/tmp/{name}.cubin"
        open(cubin_path, "wb").write(cubin)
        usage = subprocess.run([tool("bin", "cuobjdump"), "-res-usage", cubin_path],
                               capture_output=True, text=True).stdout
        regs = re.search(r"REG:(\d+) STACK:(\d+)", usage)
        sass = subprocess.run([tool("bin", "nvdisasm"), "-c", cubin_path],
                              capture_output=True, text=True).stdout
        ops = collections.Counter()
        for line in sass.splitlines():
            m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", line)
            if m:
                ops[m.group(1)] += 1
        spills = sum(n for op, n in ops.items() if op in ("LDL", "STL"))
        print(f"{name}: registers {regs.group(1) if regs else '?'}, stack {regs.group(2) if regs else '?'} bytes, "
              f"{sum(ops.values())} instructions ({spills} local loads and stores), "
              + ", ".join(f"{op} {n}" for op, n in ops.most_common(8)))
        for r in remarks:
            print("  " + r)
        if a.sass:
            os.makedirs(a.sass, exist_ok=True)
            open(os.path.join(a.sass, f"{name}.sass"), "w").write(sass)
    print(f"{len(chosen) - failed} compiled, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
