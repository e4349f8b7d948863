"""Training over MPI (`mpirun -n N quire train`) gives the bits of
`quire train --shards N` in one process, ends cleanly when a rank is killed,
and resumes to the bits of a run never stopped (docs/distributed.md).

On one machine, ranks oversubscribed (--oversubscribe; --allow-run-as-root
where the test runs as root):

  0. the tutorial (examples/tutorial/07_train.qr, f32, 40 steps) on 1 rank:
     the bits of one process;
  1. the tutorial (f32, 40 steps), the tutorial's run on an .npy of its
     inputs alone (its targets computed; each rank reads only its rows of an
     .npy, docs/distributed.md) and the GPT
     example (examples/gpt/gpt.qr, f32, 3 steps: dropout keys per shard, a
     held-out evaluation on rank 0) on 2 and 3 ranks: the final parameters
     equal those of --shards N in one process, byte for byte, and those of a
     second MPI run; so do the metrics' losses and held-out losses;
  2. a run on 2 ranks whose rank 1 is killed (SIGKILL) mid-run (checkpoints
     every 10 steps, the kill once step 55 is logged): every rank
     ends within seconds, with an error naming rank 1;
  3. that run resumed (--resume, 2 ranks) ends with the bits of the same run
     never stopped.

Without mpirun the test is skipped (exit status 77), except where the CI
variable is set: CI installs Open MPI (scripts/setup), so a missing mpirun
there is a failure, not a skip.

Usage: mpi_train.py --quire build/quire [--only tutorial|gpt|kill]
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIP = 77


def mpirun_command(ranks):
    cmd = ["mpirun", "--oversubscribe", "-n", str(ranks)]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd


def rank_environment():
    """The ranks' environment. Under the sanitizers' build (make test-sanitize)
    leak detection is off in the ranks: Open MPI unloads its plugins at
    MPI_Finalize, and LeakSanitizer reports what they keep as leaks of
    "<unknown module>", which no suppression can name. Every other check of
    ASan and UBSan stays on, and the trainer's distributed path runs with
    leak detection in the unit tests (TrainerShards.*: ranks as threads)."""
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS"), "detect_leaks=0"]))
    return env


def run(cmd, cwd, timeout=600):
    began = time.monotonic()
    env = rank_environment() if cmd[0] == "mpirun" else None
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    if r.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)} ended with status {r.returncode}:\n{r.stdout}{r.stderr}")
    return r.stdout, time.monotonic() - began


def losses(path):
    """Each step's loss and held-out loss (None where the step has none)."""
    with open(path) as f:
        return [(r["loss"], r.get("held_out_loss")) for r in (json.loads(line) for line in f if line.endswith("\n"))]


def read(path):
    with open(path, "rb") as f:
        return f.read()


def compare(case, program, cwd, quire, ranks, steps, extra):
    """--shards N in one process, then two runs of N ranks: the same bits."""
    common = [program, "--precision", "f32", "--max-steps", str(steps), *extra]
    outs = {}
    local, a, b = f"local-{ranks}", f"mpi-{ranks}-a", f"mpi-{ranks}-b"
    _, outs[local] = run([quire, "train", *common, "--shards", str(ranks), "--run-dir", local,
                          "--params-out", f"{local}.safetensors"], cwd)
    for name in (a, b):
        out, seconds = run(mpirun_command(ranks) + [quire, "train", *common, "--run-dir", name,
                                                    "--params-out", f"{name}.safetensors"], cwd)
        outs[name] = seconds
        if f"{ranks} shards of" not in out or f"on {ranks} ranks" not in out:
            sys.exit(f"FAILED: {case}: the run on {ranks} ranks did not say so:\n{out}")
    failures = []
    params = read(os.path.join(cwd, f"{local}.safetensors"))
    for name in (a, b):
        if read(os.path.join(cwd, f"{name}.safetensors")) != params:
            failures.append(f"{name}'s final parameters differ from --shards {ranks}'s")
        if losses(os.path.join(cwd, name, "metrics.jsonl")) != losses(os.path.join(cwd, local, "metrics.jsonl")):
            failures.append(f"{name}'s losses differ from --shards {ranks}'s")
    if failures:
        sys.exit(f"FAILED: {case} on {ranks} ranks: " + "; ".join(failures))
    print(f"{case}, {ranks} ranks, {steps} steps: the bits of --shards {ranks} twice "
          f"({len(params)} bytes of parameters; {outs[local]:.1f} s in one process, "
          f"{outs[a]:.1f} s and {outs[b]:.1f} s under mpirun)")


# The tutorial's run on an .npy, which each rank reads by rows (an .npz is
# read whole): the inputs of data/pairs.npz, the targets computed as 2·x + 1.
NPY_TUTORIAL = """-- The tutorial's run on an .npy of its inputs alone: y = 2·x + 1 computed.
import "06_tower.qr" as t
dim B

fn loss(θ : params t.Tower, x : ℝ[batch: B, model: 4]) -> ℝ[] =
  mean((t.Tower.apply(θ, x) - (2.0 * x + 1.0))^2)

optimizer adamw {
  lr       : f64 = 0.1
  schedule : cosine(warmup = 20)
}

training run {
  model     = t.Tower
  objective = loss
  optimizer = adamw
  data      = stream "data/x.npy" |> shuffle(seed = 3) |> batch(B = 8)
  epochs    : nat = 10
}
"""


def write_npy_tutorial(tut):
    """07_train_npy.qr and data/x.npy (an .npz's entry is an .npy file as it is)."""
    with zipfile.ZipFile(os.path.join(tut, "data", "pairs.npz")) as z:
        x = z.read("0.npy")
    if not x.startswith(b"\x93NUMPY") or b"'fortran_order': False" not in x[:128]:
        sys.exit("FAILED: the tutorial's inputs are not a C-ordered .npy entry")
    with open(os.path.join(tut, "data", "x.npy"), "wb") as f:
        f.write(x)
    with open(os.path.join(tut, "07_train_npy.qr"), "w", encoding="utf-8") as f:
        f.write(NPY_TUTORIAL)


def one_rank(tut, quire):
    """mpirun -n 1 is the run of one process, to the bit."""
    common = [quire, "train", "07_train.qr", "--precision", "f32", "--max-steps", "40"]
    run(common + ["--run-dir", "plain", "--params-out", "plain.safetensors"], tut)
    run(mpirun_command(1) + common + ["--run-dir", "mpi-1", "--params-out", "mpi-1.safetensors"], tut)
    if read(os.path.join(tut, "plain.safetensors")) != read(os.path.join(tut, "mpi-1.safetensors")):
        sys.exit("FAILED: mpirun -n 1 gave other bits than one process")
    print("the tutorial, 1 rank, 40 steps: the bits of one process")


def rank_pid(program, rank):
    """The pid of the quire process of `rank` training `program` (from /proc)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().split(b"\0")
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        if program.encode() in cmdline and b"train" in cmdline and \
                f"OMPI_COMM_WORLD_RANK={rank}".encode() in environ:
            return int(entry)
    return None


def metrics_steps(path):
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def kill_and_resume(tut, quire):
    program = os.path.join(tut, "07_train.qr")
    with open(program, encoding="utf-8") as f:
        source = f.read()
    source, n = re.subn(r"checkpoint every \d+ steps", "checkpoint every 10 steps", source)
    if n != 1:
        sys.exit("FAILED: the tutorial has no `checkpoint every N steps` line to change")
    with open(program, "w", encoding="utf-8") as f:
        f.write(source)
    steps = "400"
    common = [quire, "train", program, "--precision", "f32", "--max-steps", steps]
    run(mpirun_command(2) + common + ["--run-dir", "whole", "--params-out", "whole.safetensors"], tut)

    metrics = os.path.join(tut, "killed", "metrics.jsonl")
    proc = subprocess.Popen(mpirun_command(2) + common + ["--run-dir", "killed"], cwd=tut, env=rank_environment(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while proc.poll() is None and metrics_steps(metrics) < 55 and time.monotonic() < deadline:
        time.sleep(0.002)
    pid = rank_pid(program, 1)
    if proc.poll() is not None or pid is None:
        proc.kill()
        sys.exit(f"FAILED: the run ended (or rank 1 was not found) before the kill:\n{proc.communicate()[0]}")
    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    try:
        output, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        sys.exit(f"FAILED: 30 s after rank 1 was killed the run still goes on:\n{proc.communicate()[0]}")
    ended = time.monotonic() - killed_at
    at = metrics_steps(metrics)
    failures = []
    if proc.returncode == 0:
        failures.append("mpirun ended with status 0 after a rank was killed")
    if ended > 10:
        failures.append(f"the run took {ended:.1f} s to end after the kill")
    named = [line for line in output.splitlines() if "rank 1" in line and ("ended" in line or "signal 9" in line)]
    if not named:
        failures.append("no error names rank 1")
    if failures:
        sys.exit("FAILED: kill: " + "; ".join(failures) + f"\n{output}")
    print(f"rank 1 (pid {pid}) killed at step {at}: every rank ended within {ended:.2f} s, saying:\n  "
          + "\n  ".join(named))

    out, _ = run(mpirun_command(2) + common + ["--run-dir", "killed", "--resume",
                                               "--params-out", "killed.safetensors"], tut)
    resumed = [line for line in out.splitlines() if line.startswith(("resumed from", "no valid"))]
    if read(os.path.join(tut, "whole.safetensors")) != read(os.path.join(tut, "killed.safetensors")):
        sys.exit(f"FAILED: resumed after the kill ({'; '.join(resumed)}), the final parameters differ from "
                 "the run never stopped")
    if losses(os.path.join(tut, "whole", "metrics.jsonl")) != losses(metrics):
        sys.exit("FAILED: resumed after the kill, the losses differ from the run never stopped")
    print(f"resumed ({'; '.join(resumed)}): the bits of the run never stopped, {steps} steps")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quire", required=True)
    ap.add_argument("--only", choices=["tutorial", "gpt", "kill"])
    args = ap.parse_args()
    quire = os.path.abspath(args.quire)
    if shutil.which("mpirun") is None:
        if os.environ.get("CI"):
            print("FAILED: mpirun is not installed, and CI must run this test (scripts/setup installs Open MPI)")
            return 1
        print("skipped: mpirun is not installed (scripts/setup installs Open MPI)")
        return SKIP

    with tempfile.TemporaryDirectory() as tmp:
        tut = os.path.join(tmp, "tutorial")
        shutil.copytree(os.path.join(ROOT, "examples", "tutorial"), tut,
                        ignore=shutil.ignore_patterns("runs", "__pycache__"))
        gpt = os.path.join(tmp, "gpt")
        shutil.copytree(os.path.join(ROOT, "examples", "gpt"), gpt,
                        ignore=shutil.ignore_patterns("runs", "__pycache__"))
        if args.only in (None, "tutorial"):
            one_rank(tut, quire)
            for ranks in (2, 3):
                compare("the tutorial", "07_train.qr", tut, quire, ranks, 40, [])
            write_npy_tutorial(tut)
            for ranks in (2, 3):
                compare("the tutorial on an .npy", "07_train_npy.qr", tut, quire, ranks, 40, [])
        if args.only in (None, "gpt"):
            for ranks in (2, 3):
                compare("the GPT example", "gpt.qr", gpt, quire, ranks, 3, ["--threads", "1"])
        if args.only in (None, "kill"):
            kill_and_resume(tut, quire)
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
