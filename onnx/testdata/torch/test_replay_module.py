"""Self-test of replay_module.py on fake dumps (fake_dump.py): every small model replays within
tolerance under SGD with momentum and under Adam, and a perturbed final value, a perturbed loss or a
different micro-batch size makes it exit 1. Also the first-loss-only mode on ResNet-50 (--big).

usage: /usr/bin/python3 onnx/testdata/torch/test_replay_module.py [--big]    (about 30 s; 60 s with --big)
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable


def run(script, *args):
    p = subprocess.run([PY, os.path.join(HERE, script)] + [str(a) for a in args],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout


def main():
    bad = 0
    sgd = ["--optimizer", "sgd", "--lr", 0.05, "--momentum", 0.9]
    adam = ["--optimizer", "adam", "--lr", 0.001]
    cases = []  # (model, optimizer flags, fake_dump extra flags, replay micro-batch, steps, batch, want rc)
    for m in ("two_tower", "inception_block", "wide_deep", "residual_mlp"):
        cases += [(m, sgd, [], 3, 3, 8, 0), (m, adam, [], 3, 3, 8, 0)]
    cases += [
        ("two_tower", sgd, ["--perturb", "head.weight"], 4, 2, 8, 1),
        ("two_tower", adam, ["--perturb", "attn.out_proj.bias"], 4, 2, 8, 1),
        ("inception_block", adam, ["--perturb", "b3.bn.running_var"], 4, 2, 8, 1),
        ("wide_deep", adam, ["--perturb-loss", 1], 4, 3, 8, 1),
        ("residual_mlp", sgd, ["--perturb", "blocks.1.norm.bias"], 4, 2, 8, 1),
        ("two_tower", sgd, [], 2, 2, 8, 1),  # the dump used micro-batches of 3 (see below)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for i, (m, opt, extra, mb, steps, batch, want) in enumerate(cases):
            d = os.path.join(tmp, "%d" % i)
            dump_mb = 3 if want == 1 and not extra else mb
            rc, out = run("fake_dump.py", m, d, *opt, "--micro-batch", dump_mb, "--steps", steps, "--batch", batch, *extra)
            if rc != 0:
                print("FAIL fake_dump %s: %s" % (m, out))
                bad += 1
                continue
            rc, out = run("replay_module.py", m, d, *opt, "--micro-batch", mb)
            ok = rc == want
            bad += not ok
            print("%s %-16s %-4s %-36s micro-batch %d: exit %d (want %d)" % (
                "ok  " if ok else "FAIL", m, opt[1], " ".join(map(str, extra)) or "-", mb, rc, want))
            if not ok:
                print(out)
        if "--big" in sys.argv:
            for extra, want in (([], 0), (["--perturb-loss", 0], 1)):
                d = os.path.join(tmp, "big%d" % want)
                run("fake_dump.py", "resnet50", d, *sgd, "--micro-batch", 2, "--steps", 1, "--batch", 4, *extra)
                rc, out = run("replay_module.py", "resnet50", d, *sgd, "--micro-batch", 2, "--first-loss-only")
                ok = rc == want
                bad += not ok
                print("%s resnet50 --first-loss-only %s: exit %d (want %d)" % ("ok  " if ok else "FAIL", " ".join(map(str, extra)) or "-", rc, want))
    print("%d failures" % bad)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
