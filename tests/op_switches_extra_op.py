#!/usr/bin/env python3
"""A new row of core/ops.def must fail the build until every pass handles it.

Compiles one pass's translation unit with the build's own command (from
compile_commands.json), -fsyntax-only, twice:
  - as built: it must compile (the control);
  - with -DQUIRE_TEST_EXTRA_OP, which adds the row TestExtraOp at the end of
    ops.def: it must fail, with a -Wswitch error naming TestExtraOp at every
    switch over core::Op in the file (scripts/check-op-switches finds them).

Usage: op_switches_extra_op.py --compile-commands build/compile_commands.json
                               --source src/quire/interp/core_geometry.cpp
"""
import argparse
import importlib.machinery
import importlib.util
import json
import pathlib
import re
import shlex
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent


def load_checker():
    path = REPO / "scripts" / "check-op-switches"
    loader = importlib.machinery.SourceFileLoader("check_op_switches", str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def syntax_only_command(entry, source):
    """The entry's compile command with its output and dependency flags
    dropped and -fsyntax-only added."""
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD") or pathlib.Path(a).name == source.name:
            continue
        out.append(a)
    return out + ["-fsyntax-only", str(source)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile-commands", required=True, type=pathlib.Path)
    ap.add_argument("--source", required=True, type=pathlib.Path)
    opts = ap.parse_args()
    source = opts.source.resolve()
    entries = json.loads(opts.compile_commands.read_text())
    entry = next((e for e in entries if pathlib.Path(e["directory"], e["file"]).resolve() == source), None)
    if entry is None:
        print(f"{source} is not in {opts.compile_commands}", file=sys.stderr)
        return 1
    command = syntax_only_command(entry, source)

    control = subprocess.run(command, cwd=entry["directory"], capture_output=True, text=True)
    if control.returncode != 0:
        print("control: the unit does not compile as built:\n" + " ".join(command) + "\n" + control.stderr)
        return 1

    extra = command[:1] + ["-DQUIRE_TEST_EXTRA_OP"] + command[1:]
    failed = subprocess.run(extra, cwd=entry["directory"], capture_output=True, text=True)
    if failed.returncode == 0:
        print("with QUIRE_TEST_EXTRA_OP the unit compiled: a switch over core::Op hides the new row")
        return 1
    # GCC: "error: enumeration value 'TestExtraOp' not handled in switch [-Werror=switch]"
    # Clang: "error: enumeration value 'TestExtraOp' not handled in switch [-Werror,-Wswitch]"
    pattern = re.compile(r"^[^:\n]*" + re.escape(source.name) + r":(\d+):\d+: error: enumeration value "
                         r"['‘]TestExtraOp['’] not handled in switch \[-Werror[=,]-?W?switch\]", re.M)
    reported = {int(m.group(1)) for m in pattern.finditer(failed.stderr)}
    if not reported:
        print("with QUIRE_TEST_EXTRA_OP the unit failed, but not with -Wswitch naming TestExtraOp:\n" + failed.stderr)
        return 1
    checker = load_checker()
    code = checker.blank_comments_and_strings(source.read_text())
    switches = [code.count("\n", 0, start) + 1 for start, body in checker.switch_bodies(code)
                if checker.OP_CASE.search(body)]
    unreported = [line for line in switches if line not in reported]
    if unreported:
        print(f"switches over core::Op that -Wswitch did not report: {unreported} (reported: {sorted(reported)})")
        return 1
    print(f"{source.name}: compiles as built; with QUIRE_TEST_EXTRA_OP, -Wswitch fails each of its "
          f"{len(switches)} switches over core::Op (lines {', '.join(map(str, switches))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
