#include "quire/io/npy.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <optional>
#include <set>

#include "quire/io/atomic_file.h"
#include "quire/io/byte_codec.h"
#include "quire/io/held_values.h"
#include "quire/io/npy_format.h"
#include "quire/runtime/float_types.h"

namespace quire::io {

using runtime::ElemKind;
using runtime::Shape;
using runtime::Tensor;

namespace {

using bytes::append_le;
using bytes::load;

using npy_format::NpyHeader;
using npy_format::Where;

/// Throws unless bytes[offset, offset + length) exists; `what` names the part.
/// Every read of an archive's bytes goes through it (npy_format.h).
void require(std::string_view bytes, uint64_t offset, uint64_t length, std::string_view what, const Where& where) {
  npy_format::require(bytes.size(), offset, length, what, where);
}

// ---------------------------------------------------------------------------
// .npy

/// Headers are padded so the data starts on a 64-byte boundary (NumPy's
/// ARRAY_ALIGN), which lets readers map the data aligned.
constexpr size_t kNpyAlign = 64;

/// Row-major copy of a column-major (Fortran) array of `shape`: walks the
/// source in order, advancing a Fortran multi-index (axis 0 fastest) and its
/// row-major destination offset together.
template <typename V>
std::vector<V> fortran_to_row_major(const std::vector<V>& source, const Shape& shape) {
  std::vector<V> result(source.size());
  const std::vector<int64_t> strides = runtime::contiguous_strides(shape);
  std::vector<int64_t> index(shape.size(), 0);
  int64_t destination = 0;
  for (const V& value : source) {
    result[static_cast<size_t>(destination)] = value;
    for (size_t axis = 0; axis < shape.size(); ++axis) {
      if (++index[axis] < shape[axis]) {
        destination += strides[axis];
        break;
      }
      destination -= strides[axis] * (shape[axis] - 1);
      index[axis] = 0;
    }
  }
  return result;
}

Tensor decode_npy_at(std::string_view bytes, const Where& where) {
  const npy_format::NpyPreamble preamble = npy_format::parse_npy_preamble(bytes, where);
  require(bytes, preamble.header_start, preamble.header_length, "the header", where);
  const NpyHeader header = npy_format::parse_npy_header(bytes.substr(preamble.header_start, preamble.header_length),
                                                        preamble, bytes.size(), where);
  Tensor t =
      npy_format::decode_elements(bytes.substr(header.data_offset), header.dtype, header.shape, header.count, where);
  if (header.fortran_order && t.rank() > 1) {
    if (t.is_real())
      t.reals = fortran_to_row_major(t.reals.to_vector(), t.shape);
    else t.ints = fortran_to_row_major(t.ints, t.shape);
  }
  return t;
}

/// Checks the tensor invariant before writing: a malformed Tensor must not
/// become a malformed file.
void check_tensor(const Tensor& tensor, const Where& where) {
  const std::optional<int64_t> count = runtime::allocatable_count(tensor.shape);
  const size_t held = tensor.is_real() ? tensor.reals.size() : tensor.ints.size();
  if (!count || static_cast<uint64_t>(*count) != held) {
    throw where.error(fmt::format("tensor of shape {} holds {} values", runtime::shape_string(tensor.shape), held));
  }
}

/// "()", "(3,)" or "(2, 3)": Python's spelling of a tuple.
std::string python_tuple(const Shape& shape) {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  return fmt::format("({})", fmt::join(shape, ", "));
}

std::string encode_npy_at(const Tensor& tensor, StoreType type, const Where& where) {
  check_tensor(tensor, where);
  std::string_view descr;
  switch (tensor.kind) {
    case ElemKind::Real:
      descr = type == StoreType::F64 ? "<f8" : type == StoreType::F16 ? "<f2" : "<f4";
      break;
    case ElemKind::I32: descr = "<i4"; break;
    case ElemKind::I64: descr = "<i8"; break;
    case ElemKind::Bool: descr = "|b1"; break;
  }
  std::string dict =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, python_tuple(tensor.shape));
  // Pad with spaces and end with '\n' so that magic + version + length +
  // header is a multiple of 64; a rank in the thousands needs version 2.0.
  const bool version2 = dict.size() + 1 + 10 > 0xffff;
  const size_t prefix = version2 ? 12 : 10;
  dict.append((kNpyAlign - (prefix + dict.size() + 1) % kNpyAlign) % kNpyAlign, ' ');
  dict.push_back('\n');

  std::string out(npy_format::kNpyMagic);
  out.push_back(static_cast<char>(version2 ? 2 : 1));
  out.push_back('\0');
  if (version2) append_le(out, static_cast<uint32_t>(dict.size()));
  else append_le(out, static_cast<uint16_t>(dict.size()));
  out += dict;
  if (tensor.is_real()) {
    for_each_held_value(tensor.reals, [&](double v) {
      switch (type) {
        case StoreType::F64: append_le(out, std::bit_cast<uint64_t>(v)); break;
        case StoreType::F16: append_le(out, runtime::encode_f16(v)); break;
        // bf16 as <f4: round to bf16, then widen exactly.
        case StoreType::BF16: append_le(out, runtime::encode_f32(runtime::round_to(runtime::FloatType::BF16, v))); break;
        case StoreType::F32: append_le(out, std::bit_cast<uint32_t>(static_cast<float>(v))); break;
      }
    });
    return out;
  }
  for (size_t i = 0; i < tensor.ints.size(); ++i) {
    const int64_t v = tensor.ints[i];
    switch (tensor.kind) {
      case ElemKind::I32:
        if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
          throw where.error(fmt::format("i32 element {} is {}, outside the i32 range", i, v));
        }
        append_le(out, static_cast<uint32_t>(static_cast<int32_t>(v)));
        break;
      case ElemKind::I64: append_le(out, static_cast<uint64_t>(v)); break;
      default: out.push_back(v != 0 ? '\1' : '\0'); break;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// .npz: a zip archive (PKWARE APPNOTE.TXT) of stored NAME.npy entries.

constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr uint32_t kCentralHeaderSignature = 0x02014b50;
constexpr uint32_t kEndRecordSignature = 0x06054b50;
constexpr uint32_t kZip64EndRecordSignature = 0x06064b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr size_t kLocalHeaderSize = 30;
constexpr size_t kCentralHeaderSize = 46;
constexpr size_t kEndRecordSize = 22;
constexpr size_t kZip64EndRecordSize = 56;
constexpr size_t kZip64LocatorSize = 20;
/// Values of 32- and 16-bit fields meaning "see the ZIP64 record".
constexpr uint32_t kZip64Marker32 = 0xffffffff;
constexpr uint16_t kZip64Marker16 = 0xffff;
/// 1980-01-01 00:00:00 in MS-DOS date form: fixed, so output is reproducible.
constexpr uint16_t kDosDate = (0 << 9) | (1 << 5) | 1;

/// What the central directory says about one entry.
struct ZipEntry {
  std::string name;
  uint16_t flags = 0;
  uint16_t method = 0;
  uint32_t crc = 0;
  uint64_t compressed_size = 0;
  uint64_t uncompressed_size = 0;
  uint64_t local_header_offset = 0;
};

/// Where the central directory is and how many entries it has.
struct CentralDirectory {
  uint64_t entries = 0;
  uint64_t size = 0;
  uint64_t offset = 0;
};

CentralDirectory find_central_directory(std::string_view bytes, const Where& where) {
  // The end record is the last 22 bytes plus a comment of up to 65535 bytes;
  // search backwards for a signature whose comment ends exactly at the end.
  if (bytes.size() < kEndRecordSize) {
    throw where.error(fmt::format("not a zip archive: {} bytes is too short for an end record", bytes.size()));
  }
  std::optional<size_t> end;
  const size_t lowest = bytes.size() - kEndRecordSize > 0xffff ? bytes.size() - kEndRecordSize - 0xffff : 0;
  for (size_t pos = bytes.size() - kEndRecordSize + 1; pos-- > lowest;) {
    if (load<uint32_t>(bytes, pos) == kEndRecordSignature &&
        pos + kEndRecordSize + load<uint16_t>(bytes, pos + 20) == bytes.size()) {
      end = pos;
      break;
    }
  }
  if (!end) throw where.error("not a zip archive: no end of central directory record");
  CentralDirectory cd{load<uint16_t>(bytes, *end + 10), load<uint32_t>(bytes, *end + 12),
                      load<uint32_t>(bytes, *end + 16)};
  if (load<uint16_t>(bytes, *end + 4) != 0 && load<uint16_t>(bytes, *end + 4) != kZip64Marker16) {
    throw where.error("multi-disk zip archives are not supported");
  }
  // A ZIP64 locator right before the end record points at the ZIP64 end
  // record, whose 64-bit fields replace the 16/32-bit ones (Python's zipfile
  // writes it when an archive passes 65535 entries or 4 GiB).
  if (*end >= kZip64LocatorSize && load<uint32_t>(bytes, *end - kZip64LocatorSize) == kZip64LocatorSignature) {
    const uint64_t record = load<uint64_t>(bytes, *end - kZip64LocatorSize + 8);
    require(bytes, record, kZip64EndRecordSize, "the ZIP64 end of central directory record", where);
    if (load<uint32_t>(bytes, record) != kZip64EndRecordSignature) {
      throw where.error(fmt::format("bad ZIP64 end of central directory record at byte {}", record));
    }
    cd = {load<uint64_t>(bytes, record + 32), load<uint64_t>(bytes, record + 40), load<uint64_t>(bytes, record + 48)};
  } else if (cd.entries == kZip64Marker16 || cd.size == kZip64Marker32 || cd.offset == kZip64Marker32) {
    throw where.error("the end record refers to a ZIP64 record that is missing");
  }
  require(bytes, cd.offset, cd.size, "the central directory", where);
  if (cd.entries > cd.size / kCentralHeaderSize) {
    throw where.error(fmt::format("the central directory claims {} entries in {} bytes", cd.entries, cd.size));
  }
  return cd;
}

/// Replaces an entry's 32-bit marker fields by the values of its ZIP64 extra
/// field, which holds, in this order, only the fields that are markers.
void apply_zip64_extra(std::string_view extra, ZipEntry& entry, uint32_t raw_uncompressed, uint32_t raw_compressed,
                       uint32_t raw_offset, const Where& where) {
  size_t pos = 0;
  while (pos + 4 <= extra.size()) {
    const uint16_t id = load<uint16_t>(extra, pos);
    const uint16_t length = load<uint16_t>(extra, pos + 2);
    if (length > extra.size() - pos - 4) throw where.error("extra field runs past its header");
    if (id == kZip64ExtraId) {
      const std::string_view field = extra.substr(pos + 4, length);
      size_t at = 0;
      auto next = [&](uint64_t& value) {
        if (at + 8 > field.size()) throw where.error("ZIP64 extra field is too short");
        value = load<uint64_t>(field, at);
        at += 8;
      };
      if (raw_uncompressed == kZip64Marker32) next(entry.uncompressed_size);
      if (raw_compressed == kZip64Marker32) next(entry.compressed_size);
      if (raw_offset == kZip64Marker32) next(entry.local_header_offset);
      return;
    }
    pos += 4 + length;
  }
  if (raw_uncompressed == kZip64Marker32 || raw_compressed == kZip64Marker32 || raw_offset == kZip64Marker32) {
    throw where.error("sizes refer to a ZIP64 extra field that is missing");
  }
}

std::vector<ZipEntry> read_central_directory(std::string_view bytes, const Where& where) {
  const CentralDirectory cd = find_central_directory(bytes, where);
  const std::string_view dir = bytes.substr(cd.offset, cd.size);
  std::vector<ZipEntry> entries;
  size_t pos = 0;
  for (uint64_t i = 0; i < cd.entries; ++i) {
    require(dir, pos, kCentralHeaderSize, fmt::format("central directory entry {}", i), where);
    if (load<uint32_t>(dir, pos) != kCentralHeaderSignature) {
      throw where.error(fmt::format("central directory entry {} has a bad signature", i));
    }
    const uint16_t name_length = load<uint16_t>(dir, pos + 28);
    const uint16_t extra_length = load<uint16_t>(dir, pos + 30);
    const uint16_t comment_length = load<uint16_t>(dir, pos + 32);
    require(dir, pos + kCentralHeaderSize, uint64_t{name_length} + extra_length + comment_length,
            fmt::format("central directory entry {}", i), where);
    ZipEntry e;
    e.name = std::string(dir.substr(pos + kCentralHeaderSize, name_length));
    e.flags = load<uint16_t>(dir, pos + 8);
    e.method = load<uint16_t>(dir, pos + 10);
    e.crc = load<uint32_t>(dir, pos + 16);
    const uint32_t compressed = load<uint32_t>(dir, pos + 20);
    const uint32_t uncompressed = load<uint32_t>(dir, pos + 24);
    const uint32_t offset = load<uint32_t>(dir, pos + 42);
    e.compressed_size = compressed;
    e.uncompressed_size = uncompressed;
    e.local_header_offset = offset;
    apply_zip64_extra(dir.substr(pos + kCentralHeaderSize + name_length, extra_length), e, uncompressed, compressed,
                      offset, Where{where.path, fmt::format("{}entry `{}`: ", where.prefix, e.name)});
    entries.push_back(std::move(e));
    pos += kCentralHeaderSize + name_length + extra_length + comment_length;
  }
  return entries;
}

/// The stored bytes of `entry`, CRC-checked.
std::string_view entry_data(std::string_view bytes, const ZipEntry& entry, const Where& where) {
  if (entry.flags & 0x1) throw where.error("encrypted entries are not supported");
  if (entry.method == 8) {
    throw where.error("compressed .npz entries (np.savez_compressed) are not supported; save with np.savez");
  }
  if (entry.method != 0) throw where.error(fmt::format("compression method {} is not supported", entry.method));
  if (entry.compressed_size != entry.uncompressed_size) {
    throw where.error(
        fmt::format("stored entry has compressed size {} but size {}", entry.compressed_size, entry.uncompressed_size));
  }
  const uint64_t local = entry.local_header_offset;
  require(bytes, local, kLocalHeaderSize, "the local header", where);
  if (load<uint32_t>(bytes, local) != kLocalHeaderSignature) {
    throw where.error(fmt::format("bad local header signature at byte {}", local));
  }
  const uint16_t name_length = load<uint16_t>(bytes, local + 26);
  const uint16_t extra_length = load<uint16_t>(bytes, local + 28);
  require(bytes, local + kLocalHeaderSize, name_length, "the local header's name", where);
  if (bytes.substr(local + kLocalHeaderSize, name_length) != entry.name) {
    throw where.error("the local header names a different file than the central directory");
  }
  const uint64_t start = local + kLocalHeaderSize + name_length + extra_length;
  require(bytes, start, entry.compressed_size, "the entry's data", where);
  const std::string_view data = bytes.substr(start, entry.compressed_size);
  const uint32_t crc = crc32(data);
  if (crc != entry.crc) {
    throw where.error(
        fmt::format("CRC-32 mismatch (recorded {:08x}, computed {:08x}): the data is corrupt", entry.crc, crc));
  }
  return data;
}

}  // namespace

uint32_t crc32(std::string_view bytes) {
  // Slicing by 8 (eight tables, eight bytes a step): the archives a training
  // run streams are hundreds of MB, whose byte-at-a-time check took a tenth
  // of a short run. Written here because zlib, which has a faster one, is
  // not among the project's dependencies for this alone. Table k maps a byte
  // to its remainder k bytes further on; table 0 is the reflected
  // polynomial 0xEDB88320's byte table.
  static constexpr std::array<std::array<uint32_t, 256>, 8> tables = [] {
    std::array<std::array<uint32_t, 256>, 8> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[0][n] = c;
    }
    for (size_t k = 1; k < 8; ++k)
      for (uint32_t n = 0; n < 256; ++n) t[k][n] = (t[k - 1][n] >> 8) ^ t[0][t[k - 1][n] & 0xff];
    return t;
  }();
  auto byte_at = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])); };
  auto word_at = [&](size_t i) {  // little-endian, whatever the host's order
    return byte_at(i) | byte_at(i + 1) << 8 | byte_at(i + 2) << 16 | byte_at(i + 3) << 24;
  };
  uint32_t c = 0xffffffffu;
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    const uint32_t one = word_at(i) ^ c, two = word_at(i + 4);
    c = tables[7][one & 0xff] ^ tables[6][(one >> 8) & 0xff] ^ tables[5][(one >> 16) & 0xff] ^ tables[4][one >> 24] ^
        tables[3][two & 0xff] ^ tables[2][(two >> 8) & 0xff] ^ tables[1][(two >> 16) & 0xff] ^ tables[0][two >> 24];
  }
  for (; i < bytes.size(); ++i) c = tables[0][(c ^ byte_at(i)) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

Tensor decode_npy(std::string_view bytes, const std::string& origin) { return decode_npy_at(bytes, Where{origin, ""}); }

std::string encode_npy(const Tensor& tensor, StoreType type, const std::string& origin) {
  return encode_npy_at(tensor, type, Where{origin, ""});
}

NamedTensors decode_npz(std::string_view bytes, const std::string& origin) {
  const Where archive{origin, ""};
  NamedTensors result;
  std::set<std::string> names;
  for (const ZipEntry& entry : read_central_directory(bytes, archive)) {
    const Where where{origin, fmt::format("entry `{}`: ", entry.name)};
    if (entry.name.size() <= 4 || !entry.name.ends_with(".npy")) throw where.error("not a .npy entry");
    std::string name = entry.name.substr(0, entry.name.size() - 4);
    if (!names.insert(name).second) throw where.error("appears twice in the archive");
    result.emplace_back(std::move(name), decode_npy_at(entry_data(bytes, entry, where), where));
  }
  return result;
}

std::string encode_npz(const NamedTensors& entries, const StoreTypes& types, const std::string& origin) {
  const Where archive{origin, ""};
  // Without ZIP64 a plain archive holds fewer than 65535 entries of under
  // 4 GiB each, all starting below 4 GiB: far beyond quire's checkpoints, and
  // simpler for every zip reader.
  if (entries.size() >= kZip64Marker16) throw archive.error("too many entries for an .npz without ZIP64");
  std::string out, central;
  std::set<std::string> names;
  for (const auto& [name, tensor] : entries) {
    const std::string file = name + ".npy";
    const Where where{origin, fmt::format("entry `{}`: ", file)};
    if (name.empty()) throw archive.error("an entry has an empty name");
    if (!names.insert(name).second) throw where.error("appears twice in the archive");
    if (file.size() > 0xffff) throw where.error("name is too long for a zip entry");
    const std::string data = encode_npy_at(tensor, types.of(name), where);
    const uint64_t offset = out.size();
    if (data.size() >= kZip64Marker32 || offset >= kZip64Marker32) {
      throw where.error("4 GiB or more: too large for an .npz without ZIP64 (use safetensors)");
    }
    const uint32_t crc = crc32(data);
    // Bit 11: the name is UTF-8 (else readers decode it as code page 437).
    const bool ascii = std::all_of(file.begin(), file.end(), [](char c) { return static_cast<uint8_t>(c) < 0x80; });
    const uint16_t flags = ascii ? 0 : 0x0800;
    auto common_fields = [&](std::string& header) {
      append_le(header, uint16_t{20});  // version needed: 2.0 (stored, no ZIP64)
      append_le(header, flags);
      append_le(header, uint16_t{0});  // method: stored
      append_le(header, uint16_t{0});  // time 00:00:00
      append_le(header, kDosDate);
      append_le(header, crc);
      append_le(header, static_cast<uint32_t>(data.size()));  // compressed
      append_le(header, static_cast<uint32_t>(data.size()));  // uncompressed
      append_le(header, static_cast<uint16_t>(file.size()));
      append_le(header, uint16_t{0});  // extra field length
    };
    append_le(out, kLocalHeaderSignature);
    common_fields(out);
    out += file;
    out += data;

    append_le(central, kCentralHeaderSignature);
    append_le(central, uint16_t{(3 << 8) | 20});  // made by: Unix, zip 2.0
    common_fields(central);
    append_le(central, uint16_t{0});              // comment length
    append_le(central, uint16_t{0});              // disk
    append_le(central, uint16_t{0});              // internal attributes
    append_le(central, uint32_t{0100644} << 16);  // external: a regular rw-r--r-- file
    append_le(central, static_cast<uint32_t>(offset));
    central += file;
  }
  const uint64_t central_offset = out.size();
  if (central_offset + central.size() >= kZip64Marker32) {
    throw archive.error("4 GiB or more: too large for an .npz without ZIP64 (use safetensors)");
  }
  out += central;
  append_le(out, kEndRecordSignature);
  append_le(out, uint16_t{0});  // this disk
  append_le(out, uint16_t{0});  // disk of the central directory
  append_le(out, static_cast<uint16_t>(entries.size()));
  append_le(out, static_cast<uint16_t>(entries.size()));
  append_le(out, static_cast<uint32_t>(central.size()));
  append_le(out, static_cast<uint32_t>(central_offset));
  append_le(out, uint16_t{0});  // comment length
  return out;
}

Tensor read_npy(const std::string& path) { return decode_npy(read_file(path), path); }

void write_npy(const std::string& path, const Tensor& tensor, StoreType type) {
  write_file_atomically(path, encode_npy(tensor, type, path));
}

NamedTensors read_npz(const std::string& path) { return decode_npz(read_file(path), path); }

void write_npz(const std::string& path, const NamedTensors& entries, const StoreTypes& types) {
  write_file_atomically(path, encode_npz(entries, types, path));
}

}  // namespace quire::io
