"""Helpers of the modules `quire export --target pytorch` writes.

Each one is an operation of quire's Core that is not a single PyTorch call,
with the semantics of quire's reference interpreter in float64. A tensor's
explicit axes (the named or positional axes its quire type lists) are its last
ones, after any leading `...` axes, so dims are counted from the right.
"""
import math

import torch

F64 = torch.float64


class DrawError(RuntimeError):
    """A random draw PyTorch cannot reproduce."""


def real(v):
    """A real scalar, ℝ[]: a 0-dim float64 tensor."""
    return torch.tensor(v, dtype=F64)


def subtree(tree, prefix):
    """θ.prefix: the parameters under `prefix.`, their paths relative to it."""
    start = prefix + "."
    return {path[len(start):]: t for path, t in tree.items() if path.startswith(start)}


def copy_of(stacked, i):
    """Copy i of a stacked parameter tree (stack{L}(M)): each leaf's slice i of its leading axis."""
    return {path: t[i] for path, t in stacked.items()}


def all_dims(x):
    return tuple(range(x.dim()))


def align(x, explicit, axes):
    """x laid out as an element-wise result: axes[j] is x's explicit axis at the result's
    explicit axis j, or -1 where x is broadcast; x's `...` lines up from the right."""
    lead = x.dim() - explicit
    mapped = [a for a in axes if a >= 0]
    unmapped = [a for a in range(explicit) if a not in mapped]  # axes of size 1 that stretch
    y = x.permute(list(range(lead)) + [lead + a for a in mapped + unmapped])
    shape = list(y.shape[:lead])
    at = lead
    for a in axes:
        if a >= 0:
            shape.append(y.shape[at])
            at += 1
        else:
            shape.append(1)
    return y.reshape(shape)


def transpose(x, explicit, perm):
    """The result's explicit axis i is x's explicit axis perm[i]."""
    lead = x.dim() - explicit
    return x.permute(list(range(lead)) + [lead + a for a in perm])


def split_axis(x, dim, sizes):
    """The axis at dim (< 0) split into axes of `sizes`, row-major."""
    d = x.dim() + dim
    return x.reshape(tuple(x.shape[:d]) + tuple(sizes) + tuple(x.shape[d + 1:]))


def merge_axes(x, explicit, axes):
    """The explicit axes listed, gathered in that order at the first of them, then merged into one."""
    lead = x.dim() - explicit
    first = min(axes)
    perm = list(range(lead))
    for i in range(explicit):
        if i == first:
            perm += [lead + a for a in axes]
        if i not in axes:
            perm.append(lead + i)
    y = x.permute(perm)
    at = lead + first
    merged = math.prod(y.shape[at:at + len(axes)])
    return y.reshape(tuple(y.shape[:at]) + (merged,) + tuple(y.shape[at + len(axes):]))


def slice_axis(x, dim, start, stop, step):
    """Positions start, start + step, … below stop of the axis at dim (< 0), as Python slices;
    a stop beyond the axis is an error, as in quire (the type fixed the length)."""
    size = x.shape[dim]
    if stop > size:
        raise IndexError(f"slice [{start}, {stop}) is out of range: the axis has size {size}")
    index = [slice(None)] * x.dim()
    index[x.dim() + dim] = slice(start, stop, step)
    return x[tuple(index)]


def gather(table, axis, ids):
    """r[p, i, q] = table[p, ids[i], q]: shape table[:axis] + ids + table[axis + 1:]."""
    rows = torch.index_select(table, axis, ids.reshape(-1).long())
    return rows.reshape(tuple(table.shape[:axis]) + tuple(ids.shape) + tuple(table.shape[axis + 1:]))


def pick(x, dim, ids):
    """r[p, q] = x[p, ids[p, q], q] along the axis at dim (< 0): take-along-axis, that axis dropped."""
    d = x.dim() + dim
    return torch.gather(x, d, ids.long().unsqueeze(d)).squeeze(d)


def scan(a, x, t, n, m):
    """h[t, n] = x[t, n] + sum over m of a[t, n, m] * h[t - 1, m], h[0] = x[0]: x's step
    axis at dim t, its state axis at dim n, a's summed axis at dim m (all < 0); each
    state's terms added one at a time in the order of m, as quire's kernel adds them."""
    td, nd, md = x.dim() + t, x.dim() + n, a.dim() + m
    at, an = (td if td < md else td + 1), (nd if nd < md else nd + 1)
    xs = x.movedim((td, nd), (-2, -1))
    aa = a.movedim((at, an, md), (-3, -2, -1))
    if xs.shape[-2] == 0:
        return x.clone()
    states = []
    for i in range(xs.shape[-2]):
        s = xs[..., i, :]
        if states:
            h = states[-1]
            for j in range(aa.shape[-1]):
                s = s + aa[..., i, :, j] * h[..., j:j + 1]
        states.append(s)
    return torch.stack(states, dim=-2).movedim((-2, -1), (td, nd))


def one_hot(ids, n):
    """1.0 at [i, ids[i]], +0.0 elsewhere: shape ids + [n], float64."""
    return torch.nn.functional.one_hot(ids.long(), n).to(F64)


def iota(n):
    """0, 1, …, n − 1 as int32."""
    return torch.arange(n, dtype=torch.int32)


# Keys. quire's draws come from Philox counters that PyTorch's generators do not
# reproduce, so a key is carried unchanged (pass anything, None will do) and a
# draw is exported only where its outcome is certain: a bernoulli of
# probability 1 or 0 (dropout at p = 0 keeps every element exactly). Any other
# draw raises DrawError.

def split_key(k):
    return (k, k)


def copy_key(k, i):
    return k


def bernoulli(k, p, shape):
    p = float(p)
    if p == 1.0:
        return torch.ones(shape, dtype=torch.bool)
    if p == 0.0:
        return torch.zeros(shape, dtype=torch.bool)
    raise DrawError(f"bernoulli with probability {p}: quire's draws are Philox-based and PyTorch cannot "
                    "reproduce them; the export evaluates draws of probability 0 or 1 only (dropout p = 0)")


def uniform(k, low, high, shape):
    raise DrawError("uniform: quire's draws are Philox-based and PyTorch cannot reproduce them")


def normal(k, mean, std, shape):
    raise DrawError("normal: quire's draws are Philox-based and PyTorch cannot reproduce them")
