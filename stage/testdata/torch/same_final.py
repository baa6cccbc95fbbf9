"""Compares two dumps' final parameters: python3 same_final.py DIR_A DIR_B [--tol T] [--differ].

Prints the largest relative difference over the tensors, max|a-b| / max|b|, and exits 1 if it exceeds
--tol (default 1e-5); with --differ, exits 1 unless it exceeds it (two runs that must not agree, as 2bw's
and synchronous training's).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gptorch  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--differ", action="store_true")
    args = ap.parse_args()
    a = gptorch.read_safetensors(os.path.join(args.a, "final.safetensors"))
    b = gptorch.read_safetensors(os.path.join(args.b, "final.safetensors"))
    if sorted(a) != sorted(b):
        print("the dumps hold other parameters")
        sys.exit(1)
    worst = 0.0
    for name, want in b.items():
        worst = max(worst, float(abs(a[name] - want).max() / max(abs(want).max(), 1e-12)))
    agree = worst <= args.tol
    print("%s vs %s: largest relative difference %.3e (%s %.1e)" % (args.a, args.b, worst, "over" if args.differ else "tolerance", args.tol))
    sys.exit(0 if agree != args.differ else 1)


if __name__ == "__main__":
    main()
