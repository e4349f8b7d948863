"""_02_norm.py: 02_norm.qr as PyTorch, written by `quire export --target pytorch` (docs/export.md).

Each function is quire's elaborated Core, one statement per operation (its site and type
in the comment), computing in float64 what `quire run --precision f64` computes. A module's
functions are its class's static methods; θ is a dict of tensors keyed by parameter path.
"""
import torch
import torch.nn.functional as F

import quire_runtime as qr


class RMSNorm:
    """module RMSNorm: θ holds its parameters."""

    @staticmethod
    def apply(θ, x, eps=1e-06):
        """fn RMSNorm.apply{D}(θ : params RMSNorm{D}, x : ℝ[..., model: D], eps : f64) -> ℝ[..., model: D]"""
        t4 = torch.pow(x, 2.0)  # %4 : ℝ[..., model: D]
        ms = torch.mean(t4, dim=(-1,))  # %5 : ℝ[...]
        t6 = qr.real(eps)  # %6 : ℝ[]
        t7 = ms + t6  # %7 : ℝ[...]
        t8 = torch.sqrt(t7)  # %8 : ℝ[...]
        t9 = x / qr.align(t8, 0, [-1])  # %9 : ℝ[..., model: D]
        γ = θ["γ"]  # %10 : ℝ[D]
        t11 = t9 * γ  # %11 : ℝ[..., model: D]
        return t11
