#!/usr/bin/env python3
"""Writes the synthetic seeds of fuzz_numpy and fuzz_safetensors into OUT/<target>/:
each dtype, byte order and layout the readers accept, small enough to mutate
quickly. The safetensors files are written by hand (the format is a length, a
JSON header and the bytes), so the seeds do not depend on the safetensors
package. usage: make_corpus.py OUT  (e.g. fuzz/corpus)"""
import json, struct, numpy as np, os, sys
out = sys.argv[1]
npd = os.path.join(out, "fuzz_numpy"); std = os.path.join(out, "fuzz_safetensors")
os.makedirs(npd, exist_ok=True); os.makedirs(std, exist_ok=True)
a = np.arange(6, dtype=np.float64).reshape(2, 3) / 7
np.save(f"{npd}/f4-fortran.npy", np.asfortranarray(a.astype(np.float32)))
np.save(f"{npd}/f8-big-endian.npy", a.astype(">f8"))
np.save(f"{npd}/i8-scalar.npy", np.array(-3, dtype=np.int64))
np.save(f"{npd}/f2-empty.npy", np.zeros((0, 2), dtype=np.float16))
np.savez(f"{npd}/mixed.npz", x=a, mask=np.array([True, False, True]), ids=np.array([1, 2, 250], dtype=np.uint8),
         n=np.array([7, -8], dtype="<i4"))
def st(path, tensors, meta=None):
    header, buf = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(buf), len(buf) + len(raw)]}
        buf += raw
    if meta: header["__metadata__"] = meta
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + buf)
st(f"{std}/every-dtype.safetensors", {
    "f64": ("F64", [2, 3], a.astype("<f8").tobytes()),
    "f32": ("F32", [3], np.array([1.5, -0.0, 3e38], "<f4").tobytes()),
    "f16": ("F16", [2], np.array([1.0, 65504], "<f2").tobytes()),
    "bf16": ("BF16", [2], (np.array([1.0, -2.5], "<f4").view("<u4") >> 16).astype("<u2").tobytes()),
    "i32": ("I32", [2], np.array([-1, 2], "<i4").tobytes()),
    "u8": ("U8", [3], bytes([0, 7, 255])),
    "i64": ("I64", [1], np.array([2**40], "<i8").tobytes()),
    "bool": ("BOOL", [2, 1], bytes([1, 0])),
    "empty": ("F32", [0, 4], b""),
}, {"format": "pt", "note": "seed"})
st(f"{std}/scalar.safetensors", {"s": ("F64", [], np.array([0.25]).tobytes())})
