"""_01_linear.py: 01_linear.qr as PyTorch, written by `quire export --target pytorch` (docs/export.md).

Each function is quire's elaborated Core, one statement per operation (its site and type
in the comment), computing in float64 what `quire run --precision f64` computes. A module's
functions are its class's static methods; θ is a dict of tensors keyed by parameter path.
"""
import torch
import torch.nn.functional as F

import quire_runtime as qr


class Linear:
    """module Linear: θ holds its parameters."""

    @staticmethod
    def apply(θ, x):
        """fn Linear.apply{In Out}(θ : params Linear{In, Out}, x : ℝ[..., In]) -> ℝ[..., Out]"""
        w = θ["w"]  # %3 : ℝ[In, Out]
        t4 = torch.tensordot(x, w, dims=1)  # %4 : ℝ[..., Out]
        b = θ["b"]  # %5 : ℝ[Out]
        t6 = t4 + b  # %6 : ℝ[..., Out]
        return t6
