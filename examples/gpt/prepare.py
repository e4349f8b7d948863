"""Turns examples/gpt/corpus.txt into the GPT example's data.

The corpus is the text of the GNU General Public License, version 3, as
Debian's base-files package ships it (/usr/share/common-licenses/GPL-3); the
licence's own terms allow anyone to copy and distribute verbatim copies of it.

Writes, beside this script:
  data/vocab.json   the alphabet: the corpus's distinct characters, sorted by
                    code point; id i is the i-th (`quire sample` reads it)
  data/train.npz    windows of the first 90% of the text: "0" the ids
  data/val.npz      i32[N, T], "1" the next character of each, i32[N, T]
                    (the held-out windows come from the last 10%)
Windows start every T characters. The same corpus always gives the same
bytes (numpy's npz writer, fixed dtypes and order).

    python3 examples/gpt/prepare.py [--context 32]
"""
import argparse
import json
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def windows(ids, context):
    starts = range(0, len(ids) - context - 1, context)
    x = np.array([ids[s:s + context] for s in starts], dtype=np.int32)
    y = np.array([ids[s + 1:s + context + 1] for s in starts], dtype=np.int32)
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", type=int, default=32)
    context = ap.parse_args().context
    with open(os.path.join(HERE, "corpus.txt"), encoding="utf-8") as f:
        text = f.read()
    alphabet = sorted(set(text))
    index = {c: i for i, c in enumerate(alphabet)}
    ids = [index[c] for c in text]
    cut = len(ids) * 9 // 10
    os.makedirs(os.path.join(HERE, "data"), exist_ok=True)
    with open(os.path.join(HERE, "data", "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({"alphabet": alphabet}, f, ensure_ascii=False)
        f.write("\n")
    for name, part in (("train", ids[:cut]), ("val", ids[cut:])):
        x, y = windows(part, context)
        np.savez(os.path.join(HERE, "data", name + ".npz"), **{"0": x, "1": y})
        print(f"data/{name}.npz: {len(x)} windows of {context} characters")
    print(f"data/vocab.json: {len(alphabet)} characters")


if __name__ == "__main__":
    main()
