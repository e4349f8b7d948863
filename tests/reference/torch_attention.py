"""The prelude's layers and attention against PyTorch in f64, value and gradient.

Each group is one entry of a program this script writes, returning the value
and the gradient (`grad`) of sum(f(…) · w) for a random cotangent w:

  embedding               F.embedding(ids, table); gradient in the table (ids repeat)
  linear                  F.linear(x, w.T, b): quire's weight is [in, out]
  attention               F.scaled_dot_product_attention(q, k, v), T ≠ S, Ev ≠ D
  causal_attention        the same with is_causal=True
  self_attention          a fused qkv in GPT-2's c_attn layout: split(E) → view
  causal_self_attention     [B, T, H, E/H] → transpose → SDPA → transpose → reshape;
                          the causal one also without leading axes, at p = 0, and with
                          dropout p = 0.25 on the attention weights against the same
                          lines written out on quire's mask (bernoulli of the same key)
  dropout                 semantics: where quire's output is 0 is the mask; it must be
                          bernoulli(k, 1 - p) of the same key, PyTorch's x * mask / (1 - p)
                          must equal quire's output bit for bit (and the gradient too),
                          the kept fraction of 2^16 draws must be near 1 - p, and p = 0
                          must give x exactly.
  dropout_add_layer_norm  s = x + y * mask / (1 - p), F.layer_norm(s, (D,), γ, β) on quire's
                          mask (bernoulli(k, 1 - p) over y's shape), value and the
                          gradients in y, x, γ and β of sum(s · w) + sum(n · u)
  argmax, accuracy        torch.argmax / argmin along a named axis (ties: the first; a NaN
                          counts as largest) and (logits.argmax(-1) == targets).mean(),
                          exactly.

Values and gradients must agree within 1e-12 relative (max |quire − torch| /
max |torch| per tensor); the figures are printed. Axis names differ from the
prelude's own, so each entry's declared type also checks that results come back
with the caller's names. Every entry runs on the native kernels (compared with
PyTorch) and in the reference interpreter, which must give the same bits. quire's side runs first; PyTorch is required
(require_torch.py).
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

from require_torch import import_torch

TOLERANCE = 1e-12

V, DM = 11, 6                     # embedding: vocabulary, width
B, T, S, D, E, H = 2, 5, 7, 4, 6, 3  # attention: batch, queries, keys, q/k width, v width, heads
TT, EC, HC = 6, 12, 3             # fused self-attention: time, width E (qkv holds 3·E), heads
DB, DT, DD, P = 4, 64, 256, 0.25  # dropout: a [4, 64, 256] tensor (2^16 draws), p
RB, RT, RD = 3, 7, 16             # dropout_add_layer_norm: batch, time, width

Q = f"ℝ[batch: {B}, head: {H}, query: {T}, d: {D}]"
K = f"ℝ[batch: {B}, head: {H}, pos: {S}, d: {D}]"
VV = f"ℝ[batch: {B}, head: {H}, pos: {S}, e: {E}]"
O = f"ℝ[batch: {B}, head: {H}, query: {T}, e: {E}]"
QKV = f"ℝ[batch: {B}, time: {TT}, c: {3 * EC}]"
Y = f"ℝ[batch: {B}, time: {TT}, model: {EC}]"
QKV1 = f"ℝ[time: {TT}, c: {3 * EC}]"
Y1 = f"ℝ[time: {TT}, model: {EC}]"
X = f"ℝ[batch: {DB}, time: {DT}, model: {DD}]"
MASK = f"bool[batch: {DB}, time: {DT}, model: {DD}]"
R = f"ℝ[batch: {RB}, time: {RT}, model: {RD}]"
RMASK = f"bool[batch: {RB}, time: {RT}, model: {RD}]"
RV = f"ℝ[model: {RD}]"
WMASK = f"bool[batch: {B}, h: {HC}, t: {TT}, s: {TT}]"  # the attention weights' dropout mask

PROGRAM = f"""\
fn emb_obj(table : ℝ[vocab: {V}, model: {DM}], ids : i32[batch: 2, time: 5], w : ℝ[batch: 2, time: 5, model: {DM}]) -> ℝ[] =
  sum(embedding(table, ids) * w)
fn emb(table : ℝ[vocab: {V}, model: {DM}], ids : i32[batch: 2, time: 5], w : ℝ[batch: 2, time: 5, model: {DM}]) ->
    (ℝ[batch: 2, time: 5, model: {DM}], ℝ[vocab: {V}, model: {DM}]) =
  (embedding(table, ids), grad(emb_obj)(table, ids, w))

fn lin_obj(a : (ℝ[batch: 2, time: 3, model: 5], ℝ[model: 5, hidden: 4], ℝ[hidden: 4]), w : ℝ[batch: 2, time: 3, hidden: 4]) -> ℝ[] =
  sum(linear(a.0, a.1, a.2) * w)
fn lin(a : (ℝ[batch: 2, time: 3, model: 5], ℝ[model: 5, hidden: 4], ℝ[hidden: 4]), w : ℝ[batch: 2, time: 3, hidden: 4]) ->
    (ℝ[batch: 2, time: 3, hidden: 4], (ℝ[batch: 2, time: 3, model: 5], ℝ[model: 5, hidden: 4], ℝ[hidden: 4])) =
  (linear(a.0, a.1, a.2), grad(lin_obj)(a, w))

fn att_obj(a : ({Q}, {K}, {VV}), w : {O}) -> ℝ[] = sum(attention(a.0, a.1, a.2) * w)
fn causal_obj(a : ({Q}, {K}, {VV}), w : {O}) -> ℝ[] = sum(causal_attention(a.0, a.1, a.2) * w)
fn att(a : ({Q}, {K}, {VV}), w : {O}) -> ({O}, ({Q}, {K}, {VV}), {O}, ({Q}, {K}, {VV})) =
  (attention(a.0, a.1, a.2), grad(att_obj)(a, w), causal_attention(a.0, a.1, a.2), grad(causal_obj)(a, w))

fn self_obj(qkv : {QKV}, w : {Y}) -> ℝ[] = sum(self_attention(qkv, iota(h: {HC})) * w)
fn causal_self_obj(qkv : {QKV}, w : {Y}, k : key) -> ℝ[] = sum(causal_self_attention(qkv, iota(h: {HC}), 0.0, k) * w)
fn causal_self_obj1(qkv : {QKV1}, w : {Y1}, k : key) -> ℝ[] = sum(causal_self_attention(qkv, iota(h: {HC}), 0.0, k) * w)
fn fused(k : key, qkv : {QKV}, w : {Y}, qkv1 : {QKV1}, w1 : {Y1}) -> ({Y}, {QKV}, {Y}, {QKV}, {Y1}, {QKV1}) =
  (self_attention(qkv, iota(h: {HC})), grad(self_obj)(qkv, w),
   causal_self_attention(qkv, iota(h: {HC}), 0.0, k), grad(causal_self_obj)(qkv, w, k),
   causal_self_attention(qkv1, iota(h: {HC}), 0.0, k), grad(causal_self_obj1)(qkv1, w1, k))

fn attn_drop_obj(qkv : {QKV}, w : {Y}, k : key) -> ℝ[] = sum(causal_self_attention(qkv, iota(h: {HC}), {P}, k) * w)
fn attn_drop(k : key, qkv : {QKV}, w : {Y}) -> ({Y}, {WMASK}, {QKV}) =
  (causal_self_attention(qkv, iota(h: {HC}), {P}, k), bernoulli(k, 1.0 - {P}, batch: {B}, h: {HC}, t: {TT}, s: {TT}),
   grad(attn_drop_obj)(qkv, w, k))

fn drop_obj(x : {X}, k : key, w : {X}) -> ℝ[] = sum(dropout(k, x, {P}) * w)
fn drop(k : key, x : {X}, w : {X}) -> ({X}, {MASK}, {X}, {X}) =
  (dropout(k, x, {P}), bernoulli(k, 1.0 - {P}, batch: {DB}, time: {DT}, model: {DD}), dropout(k, x, 0.0),
   grad(drop_obj)(x, k, w))

fn res_obj(k : key, y : {R}, x : {R}, g : {RV}, b : {RV}, w : {R}, u : {R}) -> ℝ[] =
  let (s, n) = dropout_add_layer_norm(k, y, {P}, x, g, b)
  sum(s * w) + sum(n * u)
fn res(k : key, y : {R}, x : {R}, g : {RV}, b : {RV}, w : {R}, u : {R}) ->
    ({R}, {R}, {RMASK}, {R}, {R}, {RV}, {RV}) =
  let (s, n) = dropout_add_layer_norm(k, y, {P}, x, g, b)
  (s, n, bernoulli(k, 1.0 - {P}, batch: {RB}, time: {RT}, model: {RD}), grad(res_obj, wrt = y)(k, y, x, g, b, w, u),
   grad(res_obj, wrt = x)(k, y, x, g, b, w, u), grad(res_obj, wrt = g)(k, y, x, g, b, w, u),
   grad(res_obj, wrt = b)(k, y, x, g, b, w, u))

fn picks(x : ℝ[batch: 4, class: 6], t : i32[batch: 4], ints : i32[batch: 4, class: 6]) ->
    (i32[batch: 4], i32[class: 6], i32[batch: 4], ℝ[]) =
  (argmax(axis class, x), argmin(axis batch, x), argmax(axis class, ints), accuracy(x, t))
"""


def run_quire(quire, tmp, entry, inputs, backend):
    npz = os.path.join(tmp, entry + "_in.npz")
    np.savez(npz, **inputs)
    out = os.path.join(tmp, f"{entry}_{backend}_out.npz")
    r = subprocess.run([quire, "run", os.path.join(tmp, "layers.qr"), "--entry", entry, "--inputs", npz, "--out", out,
                        "--seed", "3", "--backend", backend], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL quire run --entry {entry} --backend {backend} ({r.returncode}):\n{r.stdout}{r.stderr}")
    with np.load(out) as f:
        return {name: f[name] for name in f.files}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quire", required=True)
    quire = os.path.abspath(ap.parse_args().quire)
    rng = np.random.default_rng(11)
    n = rng.normal
    ins = {
        "emb": {"table": n(size=(V, DM)), "ids": np.array([[3, 0, 10, 3, 7], [7, 7, 1, 0, 3]], dtype=np.int32),
                "w": n(size=(2, 5, DM))},
        "lin": {"a.0": n(size=(2, 3, 5)), "a.1": n(size=(5, 4)), "a.2": n(size=(4,)), "w": n(size=(2, 3, 4))},
        "att": {"a.0": n(size=(B, H, T, D)) * 2, "a.1": n(size=(B, H, S, D)) * 2, "a.2": n(size=(B, H, S, E)),
                "w": n(size=(B, H, T, E))},
        "fused": {"qkv": n(size=(B, TT, 3 * EC)) * 2, "w": n(size=(B, TT, EC)),
                  "qkv1": n(size=(TT, 3 * EC)) * 2, "w1": n(size=(TT, EC))},
        "drop": {"x": n(size=(DB, DT, DD)), "w": n(size=(DB, DT, DD))},
        "res": {name: n(size=(RB, RT, RD)) for name in ("y", "x", "w", "u")} |
               {"g": n(size=RD), "b": n(size=RD)},
        "attn_drop": {"qkv": n(size=(B, TT, 3 * EC)) * 2, "w": n(size=(B, TT, EC))},
        # Ties (row 1: two 3.0), a NaN (row 2), integers whose casts tie (row 3).
        "picks": {"x": np.array([[0.5, -1.0, 2.0, 0.25, 1.0, -3.0],
                                 [3.0, 1.0, 3.0, -2.0, 0.0, 2.5],
                                 [1.0, np.nan, 7.0, np.nan, 0.0, -1.0],
                                 [-0.5, -0.25, -0.75, 1.75, 1.5, 1.25]]),
                  "t": np.array([2, 2, 1, 3], dtype=np.int32),
                  "ints": np.array([[0, -1, 2, 0, 1, -3], [3, 1, 3, -2, 0, 2], [1, 9, 7, 9, 0, -1],
                                  [-5, -2, -7, 1, 1, 1]], dtype=np.int32)},
    }
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "layers.qr"), "w") as f:
            f.write(PROGRAM)
        got = {entry: run_quire(quire, tmp, entry, inputs, "native") for entry, inputs in ins.items()}
        reference = {entry: run_quire(quire, tmp, entry, inputs, "interp") for entry, inputs in ins.items()}

    # The fused kernels compute the reference interpreter's bits.
    failures = [f"{entry} {name}: the native kernels differ from the reference interpreter"
                for entry in got for name in got[entry]
                if not np.array_equal(got[entry][name], reference[entry][name])]
    # quire's own side of dropout first: the zeros are the mask, which is the draw.
    x = ins["drop"]["x"]
    dropped, drawn, kept_all, drop_grad = (got["drop"][f"result.{i}"] for i in range(4))
    mask = dropped != 0
    if np.any(x == 0):
        failures.append("dropout: an input is exactly 0, so the zeros of the output do not show the mask")
    if not np.array_equal(mask, drawn):
        failures.append("dropout: the zeros of the output are not where bernoulli(k, 1 - p) of the same key is false")
    fraction = mask.mean()
    sigma = math.sqrt(P * (1 - P) / mask.size)
    print(f"dropout: kept {fraction:.5f} of {mask.size} elements (1 - p = {1 - P}, σ = {sigma:.5f})")
    if abs(fraction - (1 - P)) > 5 * sigma:
        failures.append(f"dropout: kept fraction {fraction} is more than 5σ from {1 - P}")
    if not np.array_equal(kept_all, x):
        failures.append("dropout: p = 0 does not give x exactly")
    if failures:
        sys.exit("FAIL " + "\nFAIL ".join(failures))

    torch = import_torch()
    F = torch.nn.functional

    def leaf(a):
        return torch.tensor(a, dtype=torch.float64, requires_grad=True)

    def compare(name, quire_value, torch_value):
        want = torch_value.detach().numpy()
        if quire_value.shape != want.shape or quire_value.dtype != np.float64:
            failures.append(f"{name}: quire gave {quire_value.dtype}{list(quire_value.shape)}, "
                            f"not float64{list(want.shape)}")
            return
        rel = np.max(np.abs(quire_value - want)) / np.max(np.abs(want))
        print(f"{name}: max relative difference to PyTorch {rel:.3e}")
        if not rel <= TOLERANCE:
            failures.append(f"{name}: {rel:.3e} from PyTorch, above {TOLERANCE}")

    # embedding
    e = ins["emb"]
    table = leaf(e["table"])
    y = F.embedding(torch.tensor(e["ids"], dtype=torch.int64), table)
    (y * torch.tensor(e["w"])).sum().backward()
    compare("embedding", got["emb"]["result.0"], y)
    compare("embedding gradient (table)", got["emb"]["result.1"], table.grad)

    # linear: quire's w is [in, out], PyTorch's weight [out, in]
    li = ins["lin"]
    xs, w, b = leaf(li["a.0"]), leaf(li["a.1"]), leaf(li["a.2"])
    y = F.linear(xs, w.T, b)
    (y * torch.tensor(li["w"])).sum().backward()
    compare("linear", got["lin"]["result.0"], y)
    for i, (part, t) in enumerate((("x", xs), ("w", w), ("b", b))):
        compare(f"linear gradient ({part})", got["lin"][f"result.1.{i}"], t.grad)

    # attention and causal_attention
    a = ins["att"]
    for offset, causal in ((0, False), (2, True)):
        name = "causal_attention" if causal else "attention"
        q, k, v = leaf(a["a.0"]), leaf(a["a.1"]), leaf(a["a.2"])
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        (y * torch.tensor(a["w"])).sum().backward()
        compare(name, got["att"][f"result.{offset}"], y)
        for i, (part, t) in enumerate((("q", q), ("k", k), ("v", v))):
            compare(f"{name} gradient ({part})", got["att"][f"result.{offset + 1}.{i}"], t.grad)

    # the fused self-attentions, in GPT-2's c_attn layout; with a mask, the
    # attention weights' dropout written out (SDPA's dropout_p draws its own)
    def gpt2_attention(qkv, causal, mask=None):
        lead = qkv.shape[:-2]
        q, k, v = qkv.split(EC, dim=-1)
        heads = [t.reshape(*lead, TT, HC, EC // HC).transpose(-3, -2) for t in (q, k, v)]
        if mask is None:
            y = F.scaled_dot_product_attention(*heads, is_causal=causal)
        else:
            q, k, v = heads
            scores = q @ k.transpose(-2, -1) / math.sqrt(EC // HC)
            scores = scores.masked_fill(torch.ones(TT, TT, dtype=torch.bool).triu(1), float("-inf"))
            weights = torch.softmax(scores, dim=-1) * torch.tensor(mask, dtype=torch.float64) / (1 - P)
            y = weights @ v
        return y.transpose(-3, -2).reshape(*lead, TT, EC)

    fu = ins["fused"]
    for offset, causal, qkv_name, w_name, label in (
            (0, False, "qkv", "w", "self_attention"), (2, True, "qkv", "w", "causal_self_attention"),
            (4, True, "qkv1", "w1", "causal_self_attention without leading axes")):
        qkv = leaf(fu[qkv_name])
        y = gpt2_attention(qkv, causal)
        (y * torch.tensor(fu[w_name])).sum().backward()
        compare(label, got["fused"][f"result.{offset}"], y)
        compare(f"{label} gradient (qkv)", got["fused"][f"result.{offset + 1}"], qkv.grad)

    # dropout_add_layer_norm on quire's mask
    r = ins["res"]
    rmask = got["res"]["result.2"]
    if rmask.all() or not rmask.any():
        failures.append("dropout_add_layer_norm: the mask keeps all elements or none")
    ry, rx, rg, rb = (leaf(r[name]) for name in ("y", "x", "g", "b"))
    s = rx + ry * torch.tensor(rmask, dtype=torch.float64) / (1 - P)
    norm = F.layer_norm(s, (RD,), rg, rb, 1e-5)
    ((s * torch.tensor(r["w"])).sum() + (norm * torch.tensor(r["u"])).sum()).backward()
    compare("dropout_add_layer_norm (the sum)", got["res"]["result.0"], s)
    compare("dropout_add_layer_norm (the norm)", got["res"]["result.1"], norm)
    for i, (part, t) in enumerate((("y", ry), ("x", rx), ("γ", rg), ("β", rb))):
        compare(f"dropout_add_layer_norm gradient ({part})", got["res"][f"result.{3 + i}"], t.grad)

    # causal_self_attention with dropout on the weights: quire's mask is
    # bernoulli(k, 1 - p) of the same key over [batch, h, t, s]; PyTorch's
    # softmax(masked scores) * mask / (1 - p) @ v on it
    ad = ins["attn_drop"]
    weights_mask = got["attn_drop"]["result.1"]
    kept = weights_mask.mean()
    print(f"attention-weight dropout: kept {kept:.4f} of {weights_mask.size} weights (1 - p = {1 - P})")
    if weights_mask.all() or not weights_mask.any():
        failures.append("attention-weight dropout: the mask keeps all weights or none")
    qkv = leaf(ad["qkv"])
    y = gpt2_attention(qkv, True, weights_mask)
    (y * torch.tensor(ad["w"])).sum().backward()
    compare("causal_self_attention with dropout p = 0.25", got["attn_drop"]["result.0"], y)
    compare("causal_self_attention with dropout gradient (qkv)", got["attn_drop"]["result.2"], qkv.grad)
    # p = 0 is the undropped attention: the same bits as without dropout
    if not np.array_equal(got["fused"]["result.2"], reference["fused"]["result.2"]):
        failures.append("causal_self_attention at p = 0: the backends differ")

    # argmax, argmin and accuracy, exactly
    px, pt = torch.tensor(ins["picks"]["x"]), torch.tensor(ins["picks"]["t"], dtype=torch.int64)
    for i, (name, want) in enumerate((("argmax", px.argmax(-1)), ("argmin (axis batch)", px.argmin(0)),
                                      ("argmax of i32", torch.tensor(ins["picks"]["ints"]).argmax(-1)))):
        quire_value = got["picks"][f"result.{i}"]
        print(f"{name}: quire {quire_value.tolist()}, PyTorch {want.tolist()}")
        if quire_value.dtype != np.int32 or quire_value.tolist() != want.tolist():
            failures.append(f"{name}: quire gave {quire_value.dtype} {quire_value.tolist()}, PyTorch {want.tolist()}")
    accuracy = (px.argmax(-1) == pt).double().mean().item()
    print(f"accuracy: quire {float(got['picks']['result.3'])}, PyTorch {accuracy}")
    if float(got["picks"]["result.3"]) != accuracy:
        failures.append(f"accuracy: quire {float(got['picks']['result.3'])}, PyTorch {accuracy}")

    # dropout: PyTorch's semantics on quire's mask, bit for bit
    xt = leaf(x)
    y = xt * torch.tensor(mask, dtype=torch.float64) / (1 - P)
    (y * torch.tensor(ins["drop"]["w"])).sum().backward()
    for name, quire_value, want in (("dropout", dropped, y), ("dropout gradient (x)", drop_grad, xt.grad)):
        differ = np.count_nonzero(quire_value != want.detach().numpy())
        print(f"{name}: {differ} of {quire_value.size} elements differ from PyTorch's x * mask / (1 - p)")
        if differ:
            failures.append(f"{name}: {differ} elements differ from PyTorch's x * mask / (1 - p)")
    ref = F.dropout(torch.tensor(x), p=0.0, training=True).numpy()
    if not np.array_equal(kept_all, ref):
        failures.append("dropout: p = 0 differs from F.dropout(x, p=0)")
    if failures:
        sys.exit("FAIL " + "\nFAIL ".join(failures))
    print("PASS embedding, linear, attention (causal, fused qkv), dropout and dropout_add_layer_norm match PyTorch, "
          "value and gradient")


if __name__ == "__main__":
    main()
