#pragma once
// Hugging Face's safetensors format: an 8-byte little-endian header length N,
// N bytes of a JSON object
//   {"NAME": {"dtype": "F64", "shape": [2, 3], "data_offsets": [BEGIN, END]},
//    ..., "__metadata__": {"KEY": "VALUE", ...}}
// (padded with spaces), then the byte buffer: each tensor's little-endian,
// row-major elements at [BEGIN, END) of the buffer (offsets are relative to
// the buffer, not the file).
//
// Read: dtypes F64, F32, F16, BF16 (as Real; each value is an f64 exactly),
// I32 and U8 (as I32), I64, BOOL (a byte other than 0 or 1 is an error). The
// reader trusts nothing: the header length must fit the file and be at most
// 100 MiB (the reference implementation's limit); the header must be a JSON
// object; every tensor needs a supported dtype, a shape of non-negative
// integers and offsets with BEGIN ≤ END ≤ buffer size and END − BEGIN =
// elements · dtype size; no two tensors' bytes may overlap. Gaps between
// tensors are accepted (the reference writer leaves none). Tensors are
// returned in the header's order; writers usually sort names, so callers
// should look tensors up by name.
// Written: tensors in the given order, packed, header padded with spaces so
// the buffer starts 8-byte aligned; Real as F64, or F32, BF16 or F16 as the
// StoreTypes say, I32 as I32, I64 as I64, Bool as BOOL.

#include <map>
#include <string>
#include <string_view>

#include "quire/io/io_error.h"

namespace quire::io {

/// Reads the safetensors file `path`. If `metadata` is given, it receives the
/// "__metadata__" strings (empty when the file has none).
NamedTensors read_safetensors(const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

/// Writes `tensors` (distinct names, none "__metadata__") and `metadata` as
/// the safetensors file `path`, atomically (atomic_file.h).
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {},
                       const StoreTypes& types = StoreType::F64);

/// Parses the bytes of a safetensors file; `origin` names them in errors.
NamedTensors decode_safetensors(std::string_view bytes, const std::string& origin,
                                std::map<std::string, std::string>* metadata = nullptr);

/// The bytes of a safetensors file; `origin` names it in errors.
std::string encode_safetensors(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata,
                               const StoreTypes& types, const std::string& origin);

}  // namespace quire::io
