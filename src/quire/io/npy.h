#pragma once
// NumPy's files: .npy (one array) and .npz (a zip of NAME.npy entries, what
// np.savez writes). The format is NumPy's NEP 1 ("A simple file format for
// NumPy arrays"): magic "\x93NUMPY", version, a little-endian header length,
// a Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...)}
// padded to 64 bytes, then the raw elements.
//
// Read: versions 1.0, 2.0 and 3.0; dtypes <f8 <f4 <f2 <i4 <i8 |b1 |u1 and
// the big-endian >f8 >f4 >f2 >i4 >i8; Fortran-ordered arrays are transposed
// to row-major. f8/f4/f2 become Real (exactly: every f4 and f2 value is an
// f64 value), i4 and u1 become I32, i8 I64, b1 Bool (a byte other than 0 or 1
// is an error).
// Written: version 1.0 (2.0 only if the header would pass 65535 bytes), C
// order; Real as <f8, or <f4 (StoreType::F32 and BF16) or <f2 (F16), I32 as
// <i4, I64 as <i8, Bool as |b1.
// .npz: stored (uncompressed) entries only, found through the central
// directory, ZIP64 records and extra fields understood, every CRC-32 checked.
// Written archives are plain zip (no ZIP64: an entry or archive of 4 GiB or
// more is an IoError) with a fixed 1980-01-01 timestamp, so equal tensors
// give byte-identical files.
//
// Chosen rows of a C-ordered .npy, without reading the rest: npy_rows.h
// (the header's parsing and the elements' decoding are npy_format.h's,
// shared by both).
//
// Every malformed input is an IoError "PATH: reason" (for an .npz entry,
// "PATH: entry `NAME.npy`: reason"); no input is read out of bounds.

#include <cstdint>
#include <string>
#include <string_view>

#include "quire/io/io_error.h"
#include "quire/runtime/tensor.h"

namespace quire::io {

/// Reads the .npy file `path`.
runtime::Tensor read_npy(const std::string& path);
/// Writes `tensor` to the .npy file `path`, atomically (atomic_file.h).
void write_npy(const std::string& path, const runtime::Tensor& tensor, StoreType type = StoreType::F64);

/// Reads the .npz archive `path`: its entries in central-directory order, each
/// named without its ".npy" suffix.
NamedTensors read_npz(const std::string& path);
/// Writes `entries` as the .npz archive `path` (entry NAME.npy for each NAME),
/// atomically. Names must be distinct and non-empty.
void write_npz(const std::string& path, const NamedTensors& entries, const StoreTypes& types = StoreType::F64);

/// Parses the bytes of an .npy file; `origin` names them in errors.
runtime::Tensor decode_npy(std::string_view bytes, const std::string& origin);
/// The bytes of an .npy file holding `tensor`; `origin` names it in errors.
std::string encode_npy(const runtime::Tensor& tensor, StoreType type, const std::string& origin);
/// Parses the bytes of an .npz archive; `origin` names them in errors.
NamedTensors decode_npz(std::string_view bytes, const std::string& origin);
/// The bytes of an .npz archive holding `entries`; `origin` names it in errors.
std::string encode_npz(const NamedTensors& entries, const StoreTypes& types, const std::string& origin);

/// CRC-32 (ISO-HDLC, the zip and PNG checksum) of `bytes`.
uint32_t crc32(std::string_view bytes);

}  // namespace quire::io
