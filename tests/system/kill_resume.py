"""A training run killed with SIGKILL at random steps and resumed ends with the
bits of a run never stopped.

Trains a copy of the tutorial (examples/tutorial/07_train.qr, f32) once without
interruption, then again while killing the process at several random steps
(each a plain SIGKILL: no handler runs, files may be half written), resuming
with --resume after each kill. The final parameters must be byte-identical,
and every step's loss in the metrics file must equal the uninterrupted run's.

With --checkpoint-every 1 the copy checkpoints after every step: writing a
checkpoint (three files, each fsynced, then the folder renamed) then takes most
of a step's time, so most kills land inside a checkpoint write, which the run
must survive as well (a half-written checkpoint is never taken for a whole one).

Usage: kill_resume.py --quire build/quire [--seed N] [--kills K] [--checkpoint-every S]
The kill points come from --seed (default: fresh, printed so a failure can be
replayed).
"""
import re
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TUTORIAL = os.path.join(ROOT, "examples", "tutorial")


def metrics_steps(path):
    """The complete lines of a metrics file (a torn last line is not counted)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return 0
    return data.count(b"\n")


def losses(path):
    with open(path) as f:
        return [json.loads(line)["loss"] for line in f if line.endswith("\n")]


def train(quire, program, run_dir, *extra):
    cmd = [quire, "train", program, "--precision", "f32", "--run-dir", run_dir, *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quire", required=True)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--kills", type=int, default=4)
    ap.add_argument("--checkpoint-every", type=int, default=None)
    args = ap.parse_args()
    quire = os.path.abspath(args.quire)
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    print(f"kill points from --seed {seed}")

    with tempfile.TemporaryDirectory() as tmp:
        tut = os.path.join(tmp, "tutorial")
        shutil.copytree(TUTORIAL, tut, ignore=shutil.ignore_patterns("runs", "__pycache__"))
        program = os.path.join(tut, "07_train.qr")
        if args.checkpoint_every:
            with open(program, encoding="utf-8") as f:
                source = f.read()
            source, n = re.subn(r"checkpoint every \d+ steps", f"checkpoint every {args.checkpoint_every} steps", source)
            if n != 1:
                sys.exit("the tutorial has no `checkpoint every N steps` line to change")
            with open(program, "w", encoding="utf-8") as f:
                f.write(source)

        whole_out = os.path.join(tmp, "whole.safetensors")
        train(quire, program, os.path.join(tmp, "whole"), "--params-out", whole_out)
        total = metrics_steps(os.path.join(tmp, "whole", "metrics.jsonl"))

        run_dir = os.path.join(tmp, "killed")
        metrics = os.path.join(run_dir, "metrics.jsonl")
        killed_at = []
        for k in range(args.kills):
            # A kill somewhere after the steps already logged, well before the
            # end (a busy machine may let the run go on a while before the kill lands).
            done = metrics_steps(metrics) if k else 0
            if done >= total - total // 10:
                break
            target = rng.randint(done + 1, total - total // 10)
            cmd = [quire, "train", program, "--precision", "f32", "--run-dir", run_dir]
            if k:
                cmd.append("--resume")
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            while proc.poll() is None and metrics_steps(metrics) < target:
                time.sleep(0.0005)
            if proc.poll() is not None:
                if proc.returncode != 0:
                    sys.exit(f"the run failed before step {target}: {proc.stderr.read().decode()}")
                print(f"the run finished before the kill at step {target} landed")
                break
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            killed_at.append(metrics_steps(metrics))
        out = train(quire, program, run_dir, "--resume", "--params-out", os.path.join(tmp, "killed.safetensors"))
        resumed = [line for line in out.splitlines() if line.startswith(("resumed from", "refused", "no valid"))]
        print(f"killed at steps {killed_at} (of {total}); the last run: {'; '.join(resumed)}")

        with open(whole_out, "rb") as f:
            whole = f.read()
        with open(os.path.join(tmp, "killed.safetensors"), "rb") as f:
            killed = f.read()
        a = losses(os.path.join(tmp, "whole", "metrics.jsonl"))
        b = losses(metrics)
        failures = []
        if whole != killed:
            failures.append("the final parameters differ from the uninterrupted run's")
        if len(a) != len(b):
            failures.append(f"the metrics hold {len(b)} steps, the uninterrupted run's {len(a)}")
        else:
            diff = [i + 1 for i, (x, y) in enumerate(zip(a, b)) if x != y]
            if diff:
                failures.append(f"the losses of steps {diff[:10]} differ")
        if failures:
            print("FAILED: " + "; ".join(failures))
            return 1
        print(f"same bits: {len(whole)} bytes of parameters, {len(a)} losses")
        return 0


if __name__ == "__main__":
    sys.exit(main())
