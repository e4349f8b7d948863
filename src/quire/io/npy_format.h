#pragma once
// The pieces of NumPy's .npy format (NEP 1) that both of quire's readers
// share: npy.cpp, which decodes a whole file (or an .npz entry) from memory,
// and npy_rows.cpp, which reads chosen rows of a file with pread. Written
// once so that both accept the same files, convert the same bits and refuse
// the same ones with the same words.
//
// The layout: magic "\x93NUMPY", major and minor version bytes, the header's
// length (2 bytes little-endian in 1.0, 4 in 2.0 and 3.0), the header (a
// Python dict literal), then the elements, count · size bytes, nothing after.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "quire/io/io_error.h"
#include "quire/runtime/tensor.h"

namespace quire::io::npy_format {

/// Where an error is: the file, and for an .npz entry, "entry `NAME`: ".
struct Where {
  const std::string& path;
  std::string prefix;

  [[nodiscard]] IoError error(std::string_view reason) const { return IoError(path, prefix + std::string(reason)); }
};

/// Throws "truncated: …" unless bytes [offset, offset + length) lie within
/// the first `size` bytes of the file; `what` names the part. Every read of a
/// file's bytes is preceded by one, which keeps a truncated or lying file
/// from being read past its end.
void require(uint64_t size, uint64_t offset, uint64_t length, std::string_view what, const Where& where);

/// An element type these readers understand, as NumPy spells it in 'descr'.
struct NpyDtype {
  std::string_view descr;
  char kind;  ///< 'f' float, 'i' signed, 'b' bool, 'u' unsigned
  size_t size;
  bool big_endian;
};

/// The kind an element of `dtype` becomes: Real for f8, f4 and f2 (exactly:
/// every such value is an f64), I32 for i4 and u1, I64 for i8, Bool for b1.
runtime::ElemKind elem_kind(const NpyDtype& dtype);

/// Every .npy file's first six bytes.
constexpr std::string_view kNpyMagic{"\x93NUMPY", 6};

/// The bytes before the header text: magic, version, and the header's
/// length in its widest form (2.0 and 3.0).
constexpr size_t kNpyPreambleSize = 12;

/// Where the header text is, from the file's first bytes.
struct NpyPreamble {
  int major = 1;
  uint64_t header_start = 0;   ///< 10 in version 1.0, 12 in 2.0 and 3.0
  uint64_t header_length = 0;  ///< as the file says: checked by the caller against the file's size
};

/// Parses the magic string, the version and the header length from `first`,
/// the file's first min(its size, kNpyPreambleSize) bytes (or all of them).
NpyPreamble parse_npy_preamble(std::string_view first, const Where& where);

/// What the header says, and where the elements are.
struct NpyHeader {
  NpyDtype dtype{};
  bool fortran_order = false;
  runtime::Shape shape;
  int64_t count = 0;         ///< elements: the product of the shape, allocatable
  uint64_t data_offset = 0;  ///< where the elements start: header_start + header_length
  uint64_t data_size = 0;    ///< count · dtype.size bytes
};

/// Parses the header text `text` (the bytes the preamble points at) of a
/// file of `file_size` bytes, and checks that the elements fill the rest of
/// the file exactly: "shape … is too large", "data size mismatch: …".
NpyHeader parse_npy_header(std::string_view text, const NpyPreamble& preamble, uint64_t file_size, const Where& where);

/// The tensor of `shape` from `count` elements of `dtype` held in `data`
/// (count · dtype.size bytes, the caller has checked), in the file's element
/// order, of elem_kind(dtype).
/// `first_element` is the file's index of the first of them, for messages:
/// "bool element 12 is the byte 2 (not 0 or 1)".
runtime::Tensor decode_elements(std::string_view data, const NpyDtype& dtype, runtime::Shape shape, int64_t count,
                                const Where& where, int64_t first_element = 0);

}  // namespace quire::io::npy_format
