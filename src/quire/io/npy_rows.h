#pragma once
// Chosen rows of an .npy file, read where they lie instead of reading the
// whole file: what lets each rank of a training run read only the rows of
// its shards (train/data.h).
//
// An .npy file is a header, then the elements at fixed offsets (npy.h). In C
// order, row r of an array of shape [N, d1, …] (its elements at index r of
// the first axis, d1·… of them) is one run of bytes at
//   data_offset + r · row_bytes,   row_bytes = d1 · … · dtype size.
// A Fortran-ordered array of rank 2 or more scatters a row across the whole
// file: it is read whole (read_npy), as is an .npz, whose entries' CRC-32
// can only be checked over a whole entry.
//
// VALIDATION. open() checks the header with decode_npy's rules and words
// (npy_format.h) and the file's size against the header's shape, so that no
// later read can run past the data; read() converts the bytes exactly as
// decode_npy does (a bool byte other than 0 or 1 is an IoError naming its
// element as decode_npy names it). A file that shrinks after open() is an
// IoError on the read that misses its bytes, never a short row.

#include <cstdint>
#include <string>
#include <vector>

#include "quire/io/io_error.h"
#include "quire/io/npy_format.h"
#include "quire/runtime/tensor.h"

namespace quire::io {

/// An .npy file opened to read some of its rows. Reads with pread (no file
/// position), from one thread at a time (bytes_read() is a plain counter).
class NpyRows {
 public:
  /// Opens `path` and checks its header and size: IoError "PATH: reason"
  /// wherever decode_npy would refuse the file, or when it cannot be opened
  /// or is not a regular file (a pipe cannot be read at an offset).
  static NpyRows open(const std::string& path);

  NpyRows(NpyRows&& other) noexcept;
  NpyRows& operator=(NpyRows&& other) noexcept;
  NpyRows(const NpyRows&) = delete;
  NpyRows& operator=(const NpyRows&) = delete;
  ~NpyRows();

  const std::string& path() const { return path_; }
  /// The whole array's shape, as the header says it.
  const runtime::Shape& shape() const { return shape_; }
  /// The kind decode_npy gives the elements: Real for f8/f4/f2, I32 for i4
  /// and u1, I64 for i8, Bool for b1.
  runtime::ElemKind kind() const { return kind_; }
  /// Whether rows can be read alone: an array of rank 1 or more whose rows
  /// are contiguous (C order, or Fortran order at rank 1, the same bytes).
  bool rows_readable() const { return rows_readable_; }
  /// The size of the first axis (0 for a rank-0 array, which has no rows).
  int64_t rows() const { return shape_.empty() ? 0 : shape_[0]; }
  /// The bytes of one row as stored.
  uint64_t row_bytes() const { return row_bytes_; }
  /// The file's bytes from the magic string to the first element: the
  /// dtype, order and shape as the file spells them.
  const std::string& header_bytes() const { return header_bytes_; }
  /// The file's size, checked at open() against the header.
  uint64_t file_size() const { return file_size_; }

  /// The rows `indices` (each in [0, rows()), repeats allowed) stacked in
  /// order: shape [indices.size()] + shape()[1:], the values decode_npy gives
  /// those rows. Consecutive indices are read with one pread.
  /// std::out_of_range for an index out of range; std::logic_error when
  /// !rows_readable(); IoError for a bad bool byte or a file that shrank.
  runtime::Tensor read(const std::vector<int64_t>& indices) const;
  /// Rows [first, first + count) as stored, unconverted.
  std::string read_raw(int64_t first, int64_t count) const;

  /// Every byte read from the file since open(), the header's included.
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  NpyRows() = default;
  void read_exactly(uint64_t offset, char* out, uint64_t length) const;
  void check_rows(int64_t first, int64_t count) const;

  std::string path_;
  int fd_ = -1;
  uint64_t file_size_ = 0;
  std::string header_bytes_;
  npy_format::NpyDtype dtype_{};
  runtime::Shape shape_;
  runtime::ElemKind kind_ = runtime::ElemKind::Real;
  bool rows_readable_ = false;
  uint64_t data_offset_ = 0;
  int64_t row_elements_ = 0;
  uint64_t row_bytes_ = 0;
  mutable uint64_t bytes_read_ = 0;
};

}  // namespace quire::io
