#!/usr/bin/env python3
"""`quire explain` end to end (docs/explain.md):

- the tutorial's document, written again, is docs/explain/ byte for byte
  (`make explain` rewrites that copy), and a second run gives the same bytes;
- every command of its appendix, run again by the shell with DOC set, prints
  its listing file again;
- SHA256SUMS holds the digest of every file written;
- the HTML renders in headless Chromium without a console error, showing every
  section (a screenshot is kept beside the test's work as its artifact);
- `--step` on the tutorial and the GPT example (with token ids from its data)
  are explained too.

Usage: explain.py --quire BUILD/quire --source SRC --work DIR [--python VENV_PYTHON]
Exit 77 (skipped) where Chromium is missing, except under CI, where it fails.
"""

import argparse
import filecmp
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys

EXPLAIN_ARGS = ["07_train.qr", "--entry", "loss", "--dim", "B=4", "--budget", "1e-3"]


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def run(cmd, cwd, env=None):
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"`{' '.join(cmd)}` exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p.stdout


def files_under(root):
    out = []
    for base, _, names in os.walk(root):
        for n in names:
            out.append(os.path.relpath(os.path.join(base, n), root))
    return sorted(out)


def same_tree(a, b, what):
    fa, fb = files_under(a), files_under(b)
    if fa != fb:
        fail(f"{what}: the files differ: only in {a}: {sorted(set(fa) - set(fb))}; only in {b}: {sorted(set(fb) - set(fa))}")
    for f in fa:
        if not filecmp.cmp(os.path.join(a, f), os.path.join(b, f), shallow=False):
            diff = subprocess.run(["diff", "-u", os.path.join(b, f), os.path.join(a, f)], capture_output=True, text=True)
            fail(f"{what}: {f} differs:\n{diff.stdout[:4000]}")


def check_checksums(doc):
    lines = open(os.path.join(doc, "SHA256SUMS")).read().splitlines()
    listed = {}
    for line in lines:
        digest, path = line[:64], line[66:]
        listed[path] = digest
    files = [f for f in files_under(doc) if f != "SHA256SUMS"]
    if sorted(listed) != files:
        fail(f"SHA256SUMS lists {sorted(listed)}, the folder holds {files}")
    for path, digest in listed.items():
        actual = hashlib.sha256(open(os.path.join(doc, path), "rb").read()).hexdigest()
        if actual != digest:
            fail(f"SHA256SUMS: {path} has {actual}, listed {digest}")


def check_appendix(quire, doc, cwd):
    md = open(os.path.join(doc, "explain.md")).read()
    appendix = md[md.index("## Appendix: the commands"):]
    rows = re.findall(r"^\| \[[^]]*\]\(#[a-z0-9-]+\) \| `(quire [^`]*)` \| `listings/([^`]*)` \|$", appendix, re.M)
    if len(rows) < 15:
        fail(f"the appendix lists {len(rows)} commands with listings; expected every stage's")
    env = dict(os.environ, DOC=doc)
    for line, listing in rows:
        args = shlex.split(line, posix=True)
        # The shell would expand $DOC; so does this (the line is run as the reader would).
        args = [a.replace("$DOC", doc) for a in args]
        # The document writes its folder as $DOC wherever a printout names it.
        out = run([quire] + args[1:], cwd, env).replace(doc, "$DOC")
        expected = open(os.path.join(doc, "listings", listing)).read()
        if out != expected:
            fail(f"`{line}` printed other than listings/{listing}")
    print(f"appendix: {len(rows)} commands reprint their listings")


def check_browser(doc, work):
    browser = shutil.which("chromium-headless-shell") or shutil.which("chromium")
    if not browser:
        if os.environ.get("CI"):
            fail("no chromium-headless-shell: scripts/setup installs it")
        print("SKIP: no chromium-headless-shell (scripts/setup installs it)")
        return False
    html = "file://" + os.path.join(doc, "explain.html")
    shot = os.path.join(work, "explain.png")
    common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
              "--window-size=1200,2400"]
    p = subprocess.run(common + ["--dump-dom", html], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        fail(f"chromium exited {p.returncode}: {p.stderr[-2000:]}")
    console = [l for l in p.stderr.splitlines() if "CONSOLE" in l]
    if console:
        fail("console messages while rendering explain.html:\n" + "\n".join(console))
    for section in ["parameters", "summary", "source", "elaboration", "core", "differentiation", "egraph",
                    "envelope", "sensitivities", "realization", "bound", "fusion", "layout", "kernels", "targets",
                    "measured", "sites", "memory", "appendix"]:
        if f'<section id="{section}">' not in p.stdout:
            fail(f"the rendered DOM has no section `{section}`")
    if p.stdout.count("<svg") < 2:
        fail("the rendered DOM holds fewer than two SVG charts")
    if '<a href="#site-1">' not in p.stdout:
        fail("no site links to §12 in the rendered DOM")
    p = subprocess.run(common + [f"--screenshot={shot}", html], capture_output=True, text=True, timeout=120)
    if p.returncode != 0 or not os.path.exists(shot) or os.path.getsize(shot) < 10000:
        fail(f"no screenshot of explain.html: {p.stderr[-2000:]}")
    print(f"chromium rendered explain.html without console messages; screenshot {shot}")
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quire", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--sanitized", action="store_true",
                    help="the sanitizers' build: leave out the GPT example (minutes of exact evaluation there)")
    a = ap.parse_args()
    quire = os.path.abspath(a.quire)
    work = os.path.abspath(a.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    tutorial = os.path.join(a.source, "examples", "tutorial")

    first = os.path.join(work, "first")
    run([quire, "explain"] + EXPLAIN_ARGS + ["-o", first], tutorial)
    same_tree(first, os.path.join(a.source, "docs", "explain"),
              "docs/explain is stale: run `make explain` and review the diff")
    second = os.path.join(work, "second")
    run([quire, "explain"] + EXPLAIN_ARGS + ["-o", second], tutorial)
    same_tree(first, second, "two runs of the same command")
    print("the tutorial's document is docs/explain's, and the same bytes twice")
    check_checksums(first)
    check_appendix(quire, first, tutorial)

    step = os.path.join(work, "step")
    run([quire, "explain", "07_train.qr", "--step", "-o", step], tutorial)
    md = open(os.path.join(step, "explain.md")).read()
    if "loss.vjp" not in md or "--grad" not in md:
        fail("--step: the document shows no reverse sweep or no gradient's kernels")
    check_checksums(step)
    print("--step on the tutorial explained")

    # --measure adds §11's timed calls; --site puts a site first in §12, saying why.
    measured = os.path.join(work, "measured")
    run([quire, "explain"] + EXPLAIN_ARGS + ["--measure", "--site", "loss/%8", "--sites", "1", "-o", measured],
        tutorial)
    md = open(os.path.join(measured, "explain.md")).read()
    section = md[md.index("## §11 Measured"):md.index("## §12")]
    if "Not measured" in section or not os.path.exists(os.path.join(measured, "listings", "run.txt")):
        fail("--measure: §11 holds no timed run")
    rows = re.findall(r"^\| <a id=\"site-\d+\"></a>`([^`]*)` \| ([^|]*) \|", md, re.M)
    if [r[0] for r in rows][:1] != ["loss/%8"] or rows[0][1] != "--site" or len(rows) != 2:
        fail(f"--site loss/%8 --sites 1: §12 follows {rows}")
    print("--measure and --site explained")

    if not a.sanitized:
        check_gpt(quire, a.source, work, a.python)
    if not check_browser(first, work):
        sys.exit(77)


def check_gpt(quire, source, work, python):
    """The GPT example: its objective reads token ids, given from its own data."""
    gpt = os.path.join(source, "examples", "gpt")
    inputs = os.path.join(work, "gpt_inputs.npz")
    subprocess.run([python, "-c",
                    "import numpy as np, sys; d = np.load(sys.argv[1]);"
                    "np.savez(sys.argv[2], **{'batch.0': d['0'][:1], 'batch.1': d['1'][:1]})",
                    os.path.join(gpt, "data", "train.npz"), inputs], check=True)
    gdoc = os.path.join(work, "gpt")
    run([quire, "explain", "gpt.qr", "--entry", "loss", "--dim", "B=1", "--inputs", inputs, "--bits", "64",
         "-o", gdoc], gpt)
    # Each evaluating stage ran (the symbolic memory may refuse: the GPT's
    # peak moves between sites as B grows, which it reports instead of a formula).
    for listing in ["envelope", "sensitivity", "precision", "bound", "fusion", "plan", "kernels", "memory",
                    "memory-step", "pytorch"]:
        if not os.path.exists(os.path.join(gdoc, "listings", listing + ".txt")):
            fail(f"the GPT example's document lacks listings/{listing}.txt")
    check_checksums(gdoc)
    print("the GPT example's loss explained")


if __name__ == "__main__":
    main()
