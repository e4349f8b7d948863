"""_06_tower.py: 06_tower.qr as PyTorch, written by `quire export --target pytorch` (docs/export.md).

Each function is quire's elaborated Core, one statement per operation (its site and type
in the comment), computing in float64 what `quire run --precision f64` computes. A module's
functions are its class's static methods; θ is a dict of tensors keyed by parameter path.
"""
import torch
import torch.nn.functional as F

import quire_runtime as qr
import _01_linear
import _02_norm


class Block:
    """module Block: θ holds its parameters."""

    @staticmethod
    def apply(θ, x):
        """fn Block.apply(θ : params Block, x : ℝ[..., model: 4]) -> ℝ[..., model: 4]"""
        norm = qr.subtree(θ, "norm")  # %3 : params RMSNorm{4}
        t4 = 1e-06  # %4 : f64
        t5 = _02_norm.RMSNorm.apply(norm, x, t4)  # %5 : ℝ[..., model: 4]
        t6 = F.gelu(t5)  # %6 : ℝ[..., model: 4]
        proj = qr.subtree(θ, "proj")  # %7 : params Linear{4, 4}
        t8 = _01_linear.Linear.apply(proj, t6)  # %8 : ℝ[..., 4]
        t9 = x + t8  # %9 : ℝ[..., model: 4]
        return t9


class Tower:
    """module Tower: θ holds its parameters."""

    @staticmethod
    def apply(θ, x):
        """fn Tower.apply(θ : params Tower, x : ℝ[..., model: 4]) -> ℝ[..., model: 4]"""
        blocks = qr.subtree(θ, "blocks")  # %3 : params stack{3}(Block)
        t4 = x  # %4 : ℝ[..., model: 4]
        for _i in range(3):
            t4 = Block.apply(qr.copy_of(blocks, _i), t4)
        head = qr.subtree(θ, "head")  # %5 : params Linear{4, 4}
        t6 = _01_linear.Linear.apply(head, t4)  # %6 : ℝ[..., 4]
        return t6
