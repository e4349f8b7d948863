"""Makes the tutorial's data: pairs (x, y) with y = 2·x + 1, x uniform in [-1, 1).

data/pairs.npz holds the tuple a sample is, one array per element: `0` is x and
`1` is y, each of shape [N, 4] (samples along the first axis).
Usage: python make_data.py [N]   (default N = 1024; seed 0, so the file is reproducible)
"""
import os
import sys

import numpy as np


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    rng = np.random.default_rng(0)
    x = rng.uniform(-1.0, 1.0, size=(n, 4))
    y = 2.0 * x + 1.0
    here = os.path.dirname(os.path.abspath(__file__))
    os.makedirs(os.path.join(here, "data"), exist_ok=True)
    np.savez(os.path.join(here, "data", "pairs.npz"), **{"0": x, "1": y})


if __name__ == "__main__":
    main()
