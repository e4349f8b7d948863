"""A training run on a disk that fills up, and on a run folder that turns
read-only, fails by name and loses nothing: resumed once the fault is gone, it
ends with the bits of a run never stopped.

Trains a copy of the tutorial (examples/tutorial/07_train.qr, f32) for
--max-steps 300 without a fault, then:
  - full disk: in a small tmpfs nearly filled by another file, the run must stop
    with status 1 and a message naming a file of the run folder and "No space
    left on device" (no crash, no signal); every checkpoint left must be whole,
    and no temporary file may be left beside them. With the filler removed,
    `--resume` must end with the uninterrupted run's parameters, byte for byte,
    and its losses;
  - read-only: the same tmpfs remounted read-only under a run with a
    checkpoint, `--resume` must stop with status 1 naming the run folder's lock
    or a file in it (the lock is taken first), and remounted writable, resume to
    the same bits.

A tmpfs needs the right to mount (root, as in CI). Where mounting is refused the
test says so and exits 77, which CTest reports as skipped.

Usage: disk_faults.py --quire build/quire
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TUTORIAL = os.path.join(ROOT, "examples", "tutorial")
STEPS = "300"  # three checkpoints (every 100 steps), about a second of training


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def train(quire, program, run_dir, *extra):
    return run([quire, "train", program, "--precision", "f32", "--max-steps", STEPS, "--run-dir", run_dir, *extra])


def read(path):
    with open(path, "rb") as f:
        return f.read()


def losses(path):
    with open(path) as f:
        return [json.loads(line)["loss"] for line in f if line.endswith("\n")]


def mount_tmpfs(where, size):
    os.makedirs(where, exist_ok=True)
    return run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", where]).returncode == 0


def remount(where, mode):
    r = run(["mount", "-o", f"remount,{mode}", where])
    if r.returncode != 0:
        sys.exit(f"cannot remount {where} {mode}: {r.stderr}")


def leftovers(run_dir):
    """Files a writer left half-made: anything but the run's own names."""
    odd = []
    for folder, _, files in os.walk(run_dir):
        for f in files:
            if f.startswith(".") or "tmp" in f:
                odd.append(os.path.join(folder, f))
    return odd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quire", required=True)
    quire = os.path.abspath(ap.parse_args().quire)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        tut = os.path.join(tmp, "tutorial")
        shutil.copytree(TUTORIAL, tut, ignore=shutil.ignore_patterns("runs", "__pycache__"))
        program = os.path.join(tut, "07_train.qr")
        whole_out = os.path.join(tmp, "whole.safetensors")
        r = train(quire, program, os.path.join(tmp, "whole"), "--params-out", whole_out)
        if r.returncode != 0:
            sys.exit(f"the uninterrupted run failed: {r.stderr}")
        whole, whole_losses = read(whole_out), losses(os.path.join(tmp, "whole", "metrics.jsonl"))

        disk = os.path.join(tmp, "disk")
        if not mount_tmpfs(disk, "256k"):
            print("cannot mount a tmpfs here (mounting needs root): skipped")
            return 77
        try:
            # ---- a disk that fills up during the run
            filler = os.path.join(disk, "filler")
            with open(filler, "wb") as f:
                f.write(b"\0" * 200 * 1024)  # about 56 KB left: the first checkpoint fits, the run does not
            run_dir = os.path.join(disk, "run")
            r = train(quire, program, run_dir)
            said = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
            print(f"full disk: status {r.returncode}: {said}")
            if r.returncode != 1:
                failures.append(f"full disk: status {r.returncode}, expected 1")
            if not (said.startswith(f"quire: error: {run_dir}/") and said.endswith("No space left on device")):
                failures.append(f"full disk: the message does not name a file of the run and the cause: {said!r}")
            if leftovers(run_dir):
                failures.append(f"full disk: temporary files left: {leftovers(run_dir)}")
            os.remove(filler)
            out = os.path.join(tmp, "after_full.safetensors")
            r = train(quire, program, run_dir, "--resume", "--params-out", out)
            if r.returncode != 0:
                failures.append(f"full disk: the resume failed: {r.stderr}")
            else:
                print("full disk, resumed: " + next((l for l in r.stdout.splitlines() if l.startswith("resumed")), "?"))
                if read(out) != whole:
                    failures.append("full disk: the resumed run's parameters differ from the uninterrupted run's")
                if losses(os.path.join(run_dir, "metrics.jsonl")) != whole_losses:
                    failures.append("full disk: the resumed run's losses differ from the uninterrupted run's")

            # ---- a run folder that turns read-only
            shutil.rmtree(run_dir)
            r = run([quire, "train", program, "--precision", "f32", "--max-steps", "150", "--run-dir", run_dir])
            if r.returncode != 0:
                sys.exit(f"read-only: the first part failed: {r.stderr}")
            remount(disk, "ro")
            try:
                r = train(quire, program, run_dir, "--resume")
            finally:
                remount(disk, "rw")
            said = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
            print(f"read-only: status {r.returncode}: {said}")
            if r.returncode != 1 or not said.startswith(f"quire: error: {run_dir}"):
                failures.append(f"read-only: status {r.returncode} and {said!r}, expected 1 and an error naming the run folder")
            out = os.path.join(tmp, "after_ro.safetensors")
            r = train(quire, program, run_dir, "--resume", "--params-out", out)
            if r.returncode != 0:
                failures.append(f"read-only: the resume failed: {r.stderr}")
            elif read(out) != whole:
                failures.append("read-only: the resumed run's parameters differ from the uninterrupted run's")
        finally:
            run(["umount", disk])
    for f in failures:
        print("FAIL", f)
    if failures:
        return 1
    print(f"same bits after a full disk and a read-only folder: {len(whole)} bytes of parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
