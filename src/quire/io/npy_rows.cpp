#include "quire/io/npy_rows.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace quire::io {

using npy_format::Where;

namespace {

/// pread reads at most this much at once on Linux (0x7ffff000); asking for
/// less keeps every call a whole request.
constexpr uint64_t kLargestRead = uint64_t{1} << 30;

}  // namespace

NpyRows NpyRows::open(const std::string& path) {
  NpyRows rows;
  rows.path_ = path;
  rows.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (rows.fd_ < 0) throw IoError(path, fmt::format("cannot open: {}", std::strerror(errno)));
  struct stat st {};
  if (::fstat(rows.fd_, &st) != 0) throw IoError(path, fmt::format("cannot stat: {}", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw IoError(path, "is not a regular file, so its rows cannot be read where they lie");
  rows.file_size_ = static_cast<uint64_t>(st.st_size);

  // The same checks, in the same order and words, as decode_npy on the whole
  // file: the preamble from the first bytes, the header against the file's
  // size, then the data's size against the header's shape.
  const Where where{rows.path_, ""};
  std::string first(static_cast<size_t>(std::min<uint64_t>(rows.file_size_, npy_format::kNpyPreambleSize)), '\0');
  rows.read_exactly(0, first.data(), first.size());
  const npy_format::NpyPreamble preamble = npy_format::parse_npy_preamble(first, where);
  npy_format::require(rows.file_size_, preamble.header_start, preamble.header_length, "the header", where);
  // The header's bytes: those of `first` it spans, the rest read once.
  const uint64_t header_end = preamble.header_start + preamble.header_length;
  const uint64_t have = std::min<uint64_t>(first.size(), header_end);
  rows.header_bytes_.resize(static_cast<size_t>(header_end));
  std::copy_n(first.begin(), have, rows.header_bytes_.begin());
  rows.read_exactly(have, rows.header_bytes_.data() + have, header_end - have);
  const npy_format::NpyHeader header = npy_format::parse_npy_header(
      std::string_view(rows.header_bytes_).substr(preamble.header_start), preamble, rows.file_size_, where);

  rows.dtype_ = header.dtype;
  rows.shape_ = header.shape;
  rows.kind_ = npy_format::elem_kind(header.dtype);
  rows.data_offset_ = header.data_offset;
  rows.rows_readable_ = !header.shape.empty() && (!header.fortran_order || header.shape.size() == 1);
  // The product of the other axes divides count, which parse_npy_header found
  // allocatable; with no rows it may not be (a [0, 2^40, 2^40] array), and
  // such a file has no row to read, so its row size is never used.
  if (!header.shape.empty() && header.shape[0] > 0) {
    rows.row_elements_ = header.count / header.shape[0];
    rows.row_bytes_ = static_cast<uint64_t>(rows.row_elements_) * header.dtype.size;
  }
  return rows;
}

NpyRows::NpyRows(NpyRows&& other) noexcept { *this = std::move(other); }

NpyRows& NpyRows::operator=(NpyRows&& other) noexcept {
  if (this == &other) return *this;
  if (fd_ >= 0) ::close(fd_);
  path_ = std::move(other.path_);
  fd_ = std::exchange(other.fd_, -1);
  file_size_ = other.file_size_;
  header_bytes_ = std::move(other.header_bytes_);
  dtype_ = other.dtype_;
  shape_ = std::move(other.shape_);
  kind_ = other.kind_;
  rows_readable_ = other.rows_readable_;
  data_offset_ = other.data_offset_;
  row_elements_ = other.row_elements_;
  row_bytes_ = other.row_bytes_;
  bytes_read_ = other.bytes_read_;
  return *this;
}

NpyRows::~NpyRows() {
  if (fd_ >= 0) ::close(fd_);
}

void NpyRows::read_exactly(uint64_t offset, char* out, uint64_t length) const {
  uint64_t done = 0;
  while (done < length) {
    const ssize_t n = ::pread(fd_, out + done, static_cast<size_t>(std::min(length - done, kLargestRead)),
                              static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError(path_, fmt::format("cannot read bytes {}..{}: {}", offset, offset + length, std::strerror(errno)));
    }
    if (n == 0)
      throw IoError(path_, fmt::format("truncated: bytes {}..{} are past the end of the file (byte {}); it was {} "
                                       "bytes when opened, so it changed while read",
                                       offset, offset + length, offset + done, file_size_));
    done += static_cast<uint64_t>(n);
    bytes_read_ += static_cast<uint64_t>(n);
  }
}

void NpyRows::check_rows(int64_t first, int64_t count) const {
  if (!rows_readable_)
    throw std::logic_error(fmt::format("internal: {}: rows of a {} array cannot be read alone", path_,
                                       shape_.empty() ? "rank-0" : "Fortran-ordered"));
  if (first < 0 || count < 0 || first > rows() || count > rows() - first)
    throw std::out_of_range(
        fmt::format("{}: rows {}..{} are out of range (it holds {})", path_, first, first + count, rows()));
}

std::string NpyRows::read_raw(int64_t first, int64_t count) const {
  check_rows(first, count);
  // Within the data, whose size open() checked: no overflow, no read past it.
  std::string bytes(static_cast<size_t>(static_cast<uint64_t>(count) * row_bytes_), '\0');
  read_exactly(data_offset_ + static_cast<uint64_t>(first) * row_bytes_, bytes.data(), bytes.size());
  return bytes;
}

runtime::Tensor NpyRows::read(const std::vector<int64_t>& indices) const {
  for (int64_t index : indices) check_rows(index, 1);
  runtime::Shape shape = shape_;
  if (!shape.empty()) shape[0] = static_cast<int64_t>(indices.size());
  runtime::Tensor out = kind_ == runtime::ElemKind::Real ? runtime::Tensor::real_for_overwrite(shape)
                                                         : runtime::Tensor::integer(kind_, shape);
  const Where where{path_, ""};
  // Runs of consecutive indices (an unshuffled stream's whole batch) are one
  // read each; each run is converted by decode_npy's own element decoder.
  size_t k = 0;
  while (k < indices.size()) {
    size_t end = k + 1;
    while (end < indices.size() && indices[end] == indices[end - 1] + 1) ++end;
    const auto count = static_cast<int64_t>(end - k);
    const std::string bytes = read_raw(indices[k], count);
    runtime::Shape run_shape = shape_;
    run_shape[0] = count;
    const runtime::Tensor run = npy_format::decode_elements(bytes, dtype_, std::move(run_shape), count * row_elements_,
                                                            where, indices[k] * row_elements_);
    const auto at = static_cast<std::ptrdiff_t>(k) * row_elements_;
    if (out.is_real())
      std::copy(run.reals.begin(), run.reals.end(), out.reals.begin() + at);
    else
      std::copy(run.ints.begin(), run.ints.end(), out.ints.begin() + at);
    k = end;
  }
  return out;
}

}  // namespace quire::io
