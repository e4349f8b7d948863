#!/usr/bin/env python3
"""The products' bits on aarch64 against x86-64's (runtime/gemm.h).

tests/gemm_digest.cpp is built here for x86-64 (by CMake: --host-digest) and
for aarch64 by Debian's cross compiler from the product's own sources,
statically, and run under qemu-user. Every run checks its own products
against the references, on 1 and 2 threads, and prints a digest of their
bits; every digest must be the same:

  x86-64  the widest path here, QUIRE_ISA=avx2, QUIRE_ISA=baseline (portable)
  aarch64 the NEON paths (which the run must report), QUIRE_ISA=baseline (portable)

Then the products' unit tests (src/quire/runtime/gemm_test.cpp, GoogleTest
built from Debian's sources in /usr/src/googletest) run under qemu-user too:
every path the aarch64 build has against the references on their edge
shapes (tiles, k blocks, super-blocks of rows, special values, the
underflow edge) and thread counts.

qemu-user gives aarch64's arithmetic (FMLA, FPCR's flush-to-zero and its
tininess before rounding, FPSR's flags) but not its speed: nothing is timed.

A missing cross compiler or qemu-aarch64 fails the test under CI (CI set in
the environment: scripts/setup installs both) and skips it elsewhere (exit
77), saying which is missing.
"""

import argparse
import os
import pathlib
import shutil
import subprocess
import sys

CROSS_COMPILER = "aarch64-linux-gnu-g++"
QEMU = "qemu-aarch64"
SKIP = 77

# The product's sources: nothing else of quire, and no other library.
SOURCES = [
    "tests/gemm_digest.cpp",
    "src/quire/runtime/gemm.cpp",
    "src/quire/runtime/gemm_neon.cpp",
    "src/quire/runtime/isa.cpp",
    "src/quire/runtime/workers.cpp",
]
HEADERS = [
    "src/quire/runtime/gemm.h",
    "src/quire/runtime/gemm_testing.h",
    "src/quire/runtime/isa.h",
    "src/quire/runtime/runtime_error.h",
    "src/quire/runtime/workers.h",
]
# GoogleTest's sources (libgtest-dev), built with the unit tests.
GTEST = pathlib.Path("/usr/src/googletest/googletest")
# The project's own warnings and floating-point flags (CMakeLists.txt).
FLAGS = ["-std=c++20", "-O2", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off", "-pthread", "-static"]


def build_aarch64(binary: pathlib.Path, command: list[str], inputs: list[pathlib.Path]) -> pathlib.Path:
    """`binary` by `command`, unless it is newer than every input."""
    if binary.exists() and all(f.stat().st_mtime <= binary.stat().st_mtime for f in inputs):
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    built = subprocess.run([*command, "-o", str(binary)], capture_output=True, text=True)
    if built.returncode != 0:
        sys.exit(f"gemm_aarch64_qemu: the cross build failed:\n{' '.join(command)}\n{built.stderr}")
    return binary


def build_digest(source: pathlib.Path, work: pathlib.Path) -> pathlib.Path:
    command = [CROSS_COMPILER, *FLAGS, f"-I{source / 'src'}", *(str(source / f) for f in SOURCES)]
    return build_aarch64(work / "gemm_digest_aarch64", command, [source / f for f in SOURCES + HEADERS])


def build_unit_tests(source: pathlib.Path, work: pathlib.Path) -> pathlib.Path:
    # GoogleTest itself once (its own warnings are not the project's).
    gtest_sources = [GTEST / "src" / "gtest-all.cc", GTEST / "src" / "gtest_main.cc"]
    gtest = build_aarch64(
        work / "gtest_aarch64.o",
        [CROSS_COMPILER, "-std=c++20", "-O1", "-r", "-nostdlib", f"-I{GTEST / 'include'}", f"-I{GTEST}",
         *map(str, gtest_sources)],
        gtest_sources)
    product = [f for f in SOURCES if f.startswith("src/")]
    command = [CROSS_COMPILER, *FLAGS, f"-I{source / 'src'}", f"-I{GTEST / 'include'}",
               str(source / "src/quire/runtime/gemm_test.cpp"), *(str(source / f) for f in product), str(gtest)]
    inputs = [source / f for f in product + HEADERS + ["src/quire/runtime/gemm_test.cpp"]] + [gtest]
    return build_aarch64(work / "gemm_unit_tests_aarch64", command, inputs)


def run(command: list[str], isa: str | None) -> dict[str, str]:
    """One run's report ({"sgemm": path, "bf16gemm": path, "digest": hex})."""
    env = dict(os.environ)
    env.pop("QUIRE_ISA", None)
    if isa is not None:
        env["QUIRE_ISA"] = isa
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    label = f"{' '.join(command)} (QUIRE_ISA={isa or ''})"
    if done.returncode != 0:
        sys.exit(f"gemm_aarch64_qemu: {label} failed:\n{done.stdout}{done.stderr}")
    report = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    if set(report) != {"sgemm", "bf16gemm", "digest"}:
        sys.exit(f"gemm_aarch64_qemu: {label} printed no report:\n{done.stdout}")
    print(f"{label}: sgemm {report['sgemm']}, bf16gemm {report['bf16gemm']}, digest {report['digest']}")
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host-digest", required=True, type=pathlib.Path, help="gemm_digest built for this host")
    parser.add_argument("--source", required=True, type=pathlib.Path, help="the repository's root")
    parser.add_argument("--work", required=True, type=pathlib.Path, help="where the aarch64 program is built")
    args = parser.parse_args()

    missing = [tool for tool in (CROSS_COMPILER, QEMU) if shutil.which(tool) is None]
    if not GTEST.is_dir():
        missing.append(str(GTEST))
    if missing:
        message = f"gemm_aarch64_qemu: {' and '.join(missing)} not found (scripts/setup installs them)"
        if os.environ.get("CI"):
            print(message + "; under CI that is a failure", file=sys.stderr)
            return 1
        print(message + "; skipped")
        return SKIP

    aarch64 = build_digest(args.source.resolve(), args.work.resolve())
    reports = [
        run([str(args.host_digest)], None),
        run([str(args.host_digest)], "avx2"),
        run([str(args.host_digest)], "baseline"),
        run([QEMU, str(aarch64)], None),
        run([QEMU, str(aarch64)], "baseline"),
    ]
    # The runs must have taken the paths they stand for.
    if (reports[3]["sgemm"], reports[3]["bf16gemm"]) != ("neon", "neon-fma-bf16"):
        sys.exit("gemm_aarch64_qemu: the aarch64 run did not choose the NEON paths")
    for report in (reports[2], reports[4]):
        if (report["sgemm"], report["bf16gemm"]) != ("portable", "portable"):
            sys.exit("gemm_aarch64_qemu: QUIRE_ISA=baseline did not choose the portable paths")
    digests = {report["digest"] for report in reports}
    if len(digests) != 1:
        sys.exit(f"gemm_aarch64_qemu: the digests differ: {sorted(digests)}")
    print(f"gemm_aarch64_qemu: {len(reports)} runs, one digest")

    unit_tests = build_unit_tests(args.source.resolve(), args.work.resolve())
    env = {k: v for k, v in os.environ.items() if k != "QUIRE_ISA"}
    done = subprocess.run([QEMU, str(unit_tests), "--gtest_filter=Gemm*", "--gtest_brief=1"], capture_output=True,
                          text=True, env=env, timeout=900)
    print(done.stdout + done.stderr)
    if done.returncode != 0:
        sys.exit("gemm_aarch64_qemu: the products' unit tests failed on aarch64")
    return 0


if __name__ == "__main__":
    sys.exit(main())
