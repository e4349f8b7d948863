#include "quire/io/npy_format.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <optional>
#include <set>
#include <utility>

#include "quire/io/byte_codec.h"

namespace quire::io::npy_format {

using runtime::ElemKind;
using runtime::Shape;
using runtime::Tensor;

namespace {

using bytes::half_to_double;
using bytes::load;

/// The dtypes both readers accept, and nothing else.
constexpr std::array<NpyDtype, 12> kNpyDtypes{{
    {"<f8", 'f', 8, false},
    {"<f4", 'f', 4, false},
    {"<f2", 'f', 2, false},
    {"<i4", 'i', 4, false},
    {"<i8", 'i', 8, false},
    {"|b1", 'b', 1, false},
    {"|u1", 'u', 1, false},
    {">f8", 'f', 8, true},
    {">f4", 'f', 4, true},
    {">f2", 'f', 2, true},
    {">i4", 'i', 4, true},
    {">i8", 'i', 8, true},
}};

/// What the header dict says.
struct NpyDict {
  NpyDtype dtype{};
  bool fortran_order = false;
  Shape shape;
};

/// A parser of the one Python literal NumPy writes as a header:
/// {'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }
/// It accepts either quote, any spacing, trailing commas and Python 2's
/// `3L`; it rejects everything else (structured dtypes, unknown keys).
class NpyHeaderParser {
 public:
  NpyHeaderParser(std::string_view text, const Where& where) : text_(text), where_(where) {}

  NpyDict parse() {
    NpyDict header;
    std::set<std::string> seen;
    expect('{');
    while (!consume('}')) {
      const std::string key = string_literal();
      if (!seen.insert(key).second) fail(fmt::format("key '{}' appears twice", key));
      expect(':');
      if (key == "descr") {
        skip_space();
        if (pos_ < text_.size() && (text_[pos_] == '[' || text_[pos_] == '{')) {
          fail("structured dtypes are not supported");
        }
        header.dtype = dtype(string_literal());
      } else if (key == "fortran_order") {
        header.fortran_order = boolean();
      } else if (key == "shape") {
        header.shape = shape_tuple();
      } else {
        fail(fmt::format("unexpected key '{}'", key));
      }
      if (!consume(',')) {
        expect('}');
        break;
      }
    }
    skip_space();
    if (pos_ != text_.size()) fail("text after the closing '}'");
    for (const char* key : {"descr", "fortran_order", "shape"}) {
      if (!seen.contains(key)) fail(fmt::format("missing key '{}'", key));
    }
    return header;
  }

 private:
  [[noreturn]] void fail(std::string_view what) const {
    // The header is short (NumPy's are under 200 bytes); a long one is cut.
    std::string shown(text_.substr(0, 120));
    while (!shown.empty() && (shown.back() == ' ' || shown.back() == '\n')) shown.pop_back();
    throw where_.error(fmt::format("malformed header: {} (at character {} of \"{}\")", what, pos_, shown));
  }

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n')) ++pos_;
  }

  bool consume(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  void expect(char c) {
    if (!consume(c)) fail(fmt::format("expected '{}'", c));
  }

  std::string string_literal() {
    skip_space();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) fail("expected a string");
    const char quote = text_[pos_++];
    const size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string s(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  }

  bool boolean() {
    skip_space();
    for (auto [word, value] :
         {std::pair{std::string_view("True"), true}, std::pair{std::string_view("False"), false}}) {
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    }
    fail("expected True or False");
  }

  int64_t dimension() {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == '-') fail("negative dimension");
    int64_t value = 0;
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      if (__builtin_mul_overflow(value, int64_t{10}, &value) ||
          __builtin_add_overflow(value, int64_t{text_[pos_] - '0'}, &value)) {
        fail("dimension too large");
      }
      ++pos_;
    }
    if (pos_ == start) fail("expected a dimension");
    if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;
    return value;
  }

  Shape shape_tuple() {
    expect('(');
    Shape shape;
    while (!consume(')')) {
      shape.push_back(dimension());
      if (!consume(',')) {
        expect(')');
        break;
      }
    }
    return shape;
  }

  NpyDtype dtype(const std::string& descr) {
    for (const NpyDtype& d : kNpyDtypes) {
      if (d.descr == descr) return d;
    }
    throw where_.error(fmt::format("dtype '{}' is not supported (supported: f8 f4 f2 i4 i8 b1 u1)", descr));
  }

  std::string_view text_;
  const Where& where_;
  size_t pos_ = 0;
};

/// Row-major copy of a column-major (Fortran) array of `shape`: walks the
/// source in order, advancing a Fortran multi-index (axis 0 fastest) and its

}  // namespace

ElemKind elem_kind(const NpyDtype& dtype) {
  if (dtype.kind == 'f') return ElemKind::Real;
  return dtype.kind == 'b' ? ElemKind::Bool : dtype.size == 8 ? ElemKind::I64 : ElemKind::I32;
}

void require(uint64_t size, uint64_t offset, uint64_t length, std::string_view what, const Where& where) {
  if (offset > size || length > size - offset) {
    throw where.error(
        fmt::format("truncated: {} needs bytes {}..{}, the file has {}", what, offset, offset + length, size));
  }
}

NpyPreamble parse_npy_preamble(std::string_view first, const Where& where) {
  require(first.size(), 0, 8, "the magic string and version", where);
  if (first.substr(0, 6) != kNpyMagic) throw where.error("bad magic: not an .npy file");
  const int major = static_cast<uint8_t>(first[6]);
  const int minor = static_cast<uint8_t>(first[7]);
  if (!((major == 1 || major == 2 || major == 3) && minor == 0)) {
    throw where.error(fmt::format("unsupported .npy version {}.{} (supported: 1.0 2.0 3.0)", major, minor));
  }
  // Version 1.0 has a 2-byte header length, 2.0 and 3.0 (UTF-8 header) 4.
  const size_t length_size = major == 1 ? 2 : 4;
  require(first.size(), 8, length_size, "the header length", where);
  NpyPreamble preamble;
  preamble.major = major;
  preamble.header_length = major == 1 ? load<uint16_t>(first, 8) : load<uint32_t>(first, 8);
  preamble.header_start = 8 + length_size;
  return preamble;
}

NpyHeader parse_npy_header(std::string_view text, const NpyPreamble& preamble, uint64_t file_size, const Where& where) {
  const NpyDict dict = NpyHeaderParser(text, where).parse();
  NpyHeader header;
  header.dtype = dict.dtype;
  header.fortran_order = dict.fortran_order;
  header.shape = dict.shape;
  header.data_offset = preamble.header_start + preamble.header_length;
  const std::string dtype_name(header.dtype.descr);
  const std::optional<int64_t> count = runtime::allocatable_count(header.shape);
  if (!count || __builtin_mul_overflow(static_cast<uint64_t>(*count), header.dtype.size, &header.data_size)) {
    throw where.error(fmt::format("shape {} is too large", runtime::shape_string(header.shape)));
  }
  header.count = *count;
  const uint64_t available = file_size - std::min(file_size, header.data_offset);
  if (available != header.data_size) {
    throw where.error(fmt::format("data size mismatch: shape {} of '{}' needs {} bytes, the file has {}",
                                  runtime::shape_string(header.shape), dtype_name, header.data_size, available));
  }
  return header;
}

runtime::Tensor decode_elements(std::string_view data, const NpyDtype& dtype, runtime::Shape shape, int64_t count,
                                const Where& where, int64_t first_element) {
  const auto n = static_cast<size_t>(count);
  const bool be = dtype.big_endian;
  if (dtype.kind == 'f') {
    Tensor t = Tensor::real(std::move(shape));
    for (size_t i = 0; i < n; ++i) {
      const size_t at = i * dtype.size;
      if (dtype.size == 8) t.reals[i] = std::bit_cast<double>(load<uint64_t>(data, at, be));
      if (dtype.size == 4) t.reals[i] = std::bit_cast<float>(load<uint32_t>(data, at, be));
      if (dtype.size == 2) t.reals[i] = half_to_double(load<uint16_t>(data, at, be));
    }
    return t;
  }
  Tensor t = Tensor::integer(elem_kind(dtype), std::move(shape));
  for (size_t i = 0; i < n; ++i) {
    const size_t at = i * dtype.size;
    switch (dtype.kind) {
      case 'i':
        t.ints[i] = dtype.size == 8 ? std::bit_cast<int64_t>(load<uint64_t>(data, at, be))
                                    : std::bit_cast<int32_t>(load<uint32_t>(data, at, be));
        break;
      case 'u':
        t.ints[i] = static_cast<uint8_t>(data[at]);
        break;
      case 'b': {
        const auto byte = static_cast<uint8_t>(data[at]);
        if (byte > 1)
          throw where.error(fmt::format("bool element {} is the byte {} (not 0 or 1)",
                                        first_element + static_cast<int64_t>(i), byte));
        t.ints[i] = byte;
        break;
      }
    }
  }
  return t;
}

}  // namespace quire::io::npy_format
