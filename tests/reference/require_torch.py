"""PyTorch for the reference tests, which must not skip.

A comparison that skips where PyTorch is missing checks nothing in CI, so a
missing PyTorch is a failure that says how to install it (scripts/setup puts it
in the project's .venv). quire's side of each test runs before this is called,
so its own checks still report first.
"""
import sys


def import_torch():
    try:
        import torch
    except ImportError as e:
        sys.exit(f"FAIL PyTorch cannot be imported ({e}); run scripts/setup, which installs it in .venv")
    return torch
