#!/usr/bin/env python3
"""GEMM throughput of graphpipe's CUDA backend against torch.matmul on the same GPU.

Usage, on a machine with an NVIDIA GPU and PyTorch:
    graphpipe profile --device cuda --json > profile.json
    python3 bench/gpu/compare.py profile.json

It times torch.matmul at every size graphpipe measured, FP32 (TF32 off, as
cuBLAS SGEMM computes) and BF16, the same way graphpipe times (the fastest of
5 runs of 10 calls, after one warm-up run, synchronised), and prints each
size's TFLOP/s and the ratio graphpipe / torch. The issue's bar: at least 0.7.
"""
import json
import sys
import time

import torch


def timed(f, reps=5, calls=10):
    f()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(calls):
            f()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return best / calls


def main():
    prof = json.load(open(sys.argv[1]))
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"GPU: {torch.cuda.get_device_name(0)}; graphpipe profile: {prof['device']['name']}")
    print(f"{'n':>6} {'ours fp32':>10} {'torch fp32':>10} {'ratio':>6} {'ours bf16':>10} {'torch bf16':>10} {'ratio':>6}")
    worst = float("inf")
    for i, n in enumerate(prof["gemm_sizes"]):
        w = 2.0 * n ** 3
        row = [n]
        for dtype, key in ((torch.float32, "gemm_fp32_s"), (torch.bfloat16, "gemm_bf16_s")):
            a = torch.zeros(n, n, device="cuda", dtype=dtype)
            c = torch.empty(n, n, device="cuda", dtype=dtype)
            t = timed(lambda: torch.matmul(a, a, out=c))
            ours = w / prof[key][i] / 1e12
            theirs = w / t / 1e12
            row += [ours, theirs, ours / theirs]
            if n == max(prof["gemm_sizes"]):
                worst = min(worst, ours / theirs)
        print(f"{row[0]:>6} {row[1]:>10.4g} {row[2]:>10.4g} {row[3]:>6.3f} {row[4]:>10.4g} {row[5]:>10.4g} {row[6]:>6.3f}")
    print(f"at the largest size, the lower ratio of the two: {worst:.3f}")


if __name__ == "__main__":
    main()
