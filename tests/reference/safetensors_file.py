"""Reads a safetensors file for the reference scripts, independently of
quire's own reader: the 8-byte little-endian header length, the JSON header,
then each tensor's bytes. BF16 is widened exactly through its bits."""
import json
import struct

import numpy as np

_NUMPY = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I32": "<i4", "I64": "<i8"}


def read(path):
    """name -> (dtype, array); float tensors as float64 arrays."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        dtype = info["dtype"]
        if dtype == "BF16":
            bits = np.frombuffer(data[b:e], dtype="<u2").astype(np.uint32) << 16
            values = bits.view(np.float32).astype(np.float64)
        else:
            values = np.frombuffer(data[b:e], dtype=_NUMPY[dtype])
            if dtype.startswith("F"):
                values = values.astype(np.float64)
        out[name] = (dtype, values.reshape(info["shape"]))
    return out
