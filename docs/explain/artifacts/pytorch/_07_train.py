"""_07_train.py: 07_train.qr as PyTorch, written by `quire export --target pytorch` (docs/export.md).

Each function is quire's elaborated Core, one statement per operation (its site and type
in the comment), computing in float64 what `quire run --precision f64` computes. A module's
functions are its class's static methods; θ is a dict of tensors keyed by parameter path.
"""
import torch
import torch.nn.functional as F

import quire_runtime as qr
import _06_tower


def loss(θ, batch):
    """fn loss(θ : params Tower, batch : (ℝ[batch: B, model: 4], ℝ[batch: B, model: 4])) -> ℝ[]"""
    x = batch[0]  # %3 : ℝ[batch: B, model: 4]
    y = batch[1]  # %4 : ℝ[batch: B, model: 4]
    t5 = _06_tower.Tower.apply(θ, x)  # %5 : ℝ[batch: B, model: 4]
    t6 = t5 - y  # %6 : ℝ[batch: B, model: 4]
    t7 = torch.pow(t6, 2.0)  # %7 : ℝ[batch: B, model: 4]
    t8 = torch.mean(t7)  # %8 : ℝ[]
    return t8
