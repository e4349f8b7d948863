#include "quire/io/safetensors.h"

#include "quire/io/byte_codec.h"
#include "quire/io/held_values.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "quire/io/atomic_file.h"
#include "quire/runtime/float_types.h"

namespace quire::io {

using runtime::ElemKind;
using runtime::Shape;
using runtime::Tensor;

namespace {

using bytes::append_le;
using bytes::half_to_double;
using bytes::load;

// The JSON header keeps its keys in file order (ordered_json), so tensors are
// returned and written in the order of the header.
using Json = nlohmann::ordered_json;

constexpr std::string_view kMetadataKey = "__metadata__";
/// The reference implementation refuses headers over 100 MiB: a larger one is
/// a corrupt length field, and reading it would allocate that much.
constexpr uint64_t kMaxHeaderSize = 100 << 20;

/// An element type this reader understands.
struct Dtype {
  std::string_view name;
  size_t size;
};

constexpr std::array<Dtype, 8> kDtypes{{
    {"F64", 8},
    {"F32", 4},
    {"F16", 2},
    {"BF16", 2},
    {"I32", 4},
    {"I64", 8},
    {"BOOL", 1},
    {"U8", 1},
}};


/// A header entry after validation: where its bytes are and what they mean.
struct TensorRecord {
  std::string name;
  Dtype dtype;
  Shape shape;
  int64_t count = 0;
  uint64_t begin = 0;
  uint64_t end = 0;
};

/// A non-negative JSON integer, or nullopt.
std::optional<uint64_t> json_unsigned(const Json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0) return static_cast<uint64_t>(value.get<int64_t>());
  return std::nullopt;
}

TensorRecord validate_entry(const std::string& name, const Json& info, uint64_t buffer_size, const std::string& path) {
  auto error = [&](std::string_view reason) { return IoError(path, fmt::format("tensor `{}`: {}", name, reason)); };
  if (!info.is_object()) throw error("its header entry is not a JSON object");
  TensorRecord record{name, {}, {}, 0, 0, 0};

  const auto dtype = info.find("dtype");
  if (dtype == info.end() || !dtype->is_string()) throw error("missing \"dtype\" string");
  const std::string dtype_name = dtype->get<std::string>();
  const auto known = std::find_if(kDtypes.begin(), kDtypes.end(), [&](const Dtype& d) { return d.name == dtype_name; });
  if (known == kDtypes.end()) {
    throw error(fmt::format("dtype '{}' is not supported (supported: F64 F32 F16 BF16 I32 I64 BOOL U8)", dtype_name));
  }
  record.dtype = *known;

  const auto shape = info.find("shape");
  if (shape == info.end() || !shape->is_array()) throw error("missing \"shape\" array");
  for (const Json& d : *shape) {
    const std::optional<uint64_t> dim = json_unsigned(d);
    if (!dim) throw error(fmt::format("shape {} has a dimension that is not a non-negative integer", shape->dump()));
    if (*dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw error(fmt::format("shape {} is too large", shape->dump()));
    record.shape.push_back(static_cast<int64_t>(*dim));
  }
  const std::optional<int64_t> count = runtime::allocatable_count(record.shape);
  if (!count) throw error(fmt::format("shape {} is too large", shape->dump()));
  record.count = *count;

  const auto offsets = info.find("data_offsets");
  if (offsets == info.end() || !offsets->is_array() || offsets->size() != 2 || !json_unsigned((*offsets)[0]) ||
      !json_unsigned((*offsets)[1])) {
    throw error("missing \"data_offsets\" [begin, end] of non-negative integers");
  }
  record.begin = *json_unsigned((*offsets)[0]);
  record.end = *json_unsigned((*offsets)[1]);
  if (record.begin > record.end || record.end > buffer_size) {
    throw error(fmt::format("data_offsets [{}, {}] lie outside the {}-byte data buffer", record.begin, record.end,
                            buffer_size));
  }
  uint64_t needed = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(record.count), record.dtype.size, &needed) ||
      record.end - record.begin != needed) {
    throw error(fmt::format("data_offsets [{}, {}] hold {} bytes, but shape {} of {} needs {}", record.begin,
                            record.end, record.end - record.begin, runtime::shape_string(record.shape), dtype_name,
                            needed));
  }
  return record;
}

Tensor decode_record(std::string_view buffer, const TensorRecord& r, const std::string& path) {
  const std::string_view data = buffer.substr(r.begin, r.end - r.begin);
  const auto n = static_cast<size_t>(r.count);
  const std::string_view dtype = r.dtype.name;
  // One loop per dtype, the dtype tested once: checkpoints hold 10^8 elements.
  auto reals = [&](auto element) {
    Tensor t = Tensor::real(r.shape);
    for (size_t i = 0; i < n; ++i) t.reals[i] = element(i);
    return t;
  };
  auto ints = [&](ElemKind kind, auto element) {
    Tensor t = Tensor::integer(kind, r.shape);
    for (size_t i = 0; i < n; ++i) t.ints[i] = element(i);
    return t;
  };
  if (dtype == "F64") return reals([&](size_t i) { return std::bit_cast<double>(load<uint64_t>(data, 8 * i)); });
  if (dtype == "F32") return reals([&](size_t i) { return std::bit_cast<float>(load<uint32_t>(data, 4 * i)); });
  if (dtype == "F16") return reals([&](size_t i) { return half_to_double(load<uint16_t>(data, 2 * i)); });
  if (dtype == "BF16") {
    // bfloat16 is the top half of a binary32.
    return reals([&](size_t i) { return std::bit_cast<float>(uint32_t{load<uint16_t>(data, 2 * i)} << 16); });
  }
  if (dtype == "I32") {
    return ints(ElemKind::I32, [&](size_t i) { return std::bit_cast<int32_t>(load<uint32_t>(data, 4 * i)); });
  }
  if (dtype == "I64") {
    return ints(ElemKind::I64, [&](size_t i) { return std::bit_cast<int64_t>(load<uint64_t>(data, 8 * i)); });
  }
  if (dtype == "U8") return ints(ElemKind::I32, [&](size_t i) { return static_cast<uint8_t>(data[i]); });
  // BOOL: the only dtype left, since validate_entry admits those of kDtypes only.
  return ints(ElemKind::Bool, [&](size_t i) {
    const auto byte = static_cast<uint8_t>(data[i]);
    if (byte > 1) {
      throw IoError(path, fmt::format("tensor `{}`: bool element {} is the byte {} (not 0 or 1)", r.name, i, byte));
    }
    return byte;
  });
}

/// Parses the header, rejecting duplicate names: JSON parsers keep only one
/// of two equal keys, which would silently drop a tensor.
Json parse_header(std::string_view text, const std::string& path) {
  std::set<std::string> top_level_keys;
  std::optional<std::string> duplicate;
  const Json::parser_callback_t note_duplicates = [&](int depth, nlohmann::json::parse_event_t event, Json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 && !duplicate) {
      const auto key = parsed.get<std::string>();
      if (!top_level_keys.insert(key).second) duplicate = key;
    }
    return true;
  };
  Json header;
  try {
    header = Json::parse(text.begin(), text.end(), note_duplicates);
  } catch (const nlohmann::json::exception& e) {
    throw IoError(path, fmt::format("the header is not valid JSON: {}", e.what()));
  }
  if (!header.is_object()) throw IoError(path, "the header is not a JSON object");
  if (duplicate) throw IoError(path, fmt::format("the header names `{}` twice", *duplicate));
  return header;
}

}  // namespace

NamedTensors decode_safetensors(std::string_view bytes, const std::string& path,
                                std::map<std::string, std::string>* metadata) {
  if (bytes.size() < 8) {
    throw IoError(path, fmt::format("truncated: {} bytes, too short for the 8-byte header length", bytes.size()));
  }
  const uint64_t header_size = load<uint64_t>(bytes, 0);
  if (header_size > bytes.size() - 8) {
    throw IoError(path, fmt::format("truncated: the header length is {} but only {} bytes follow it", header_size,
                                    bytes.size() - 8));
  }
  if (header_size > kMaxHeaderSize) {
    throw IoError(path, fmt::format("the header length {} exceeds the 100 MiB limit", header_size));
  }
  // The format pads a header with spaces, which JSON reads as whitespace; a
  // NUL is no part of JSON or of the format (PyTorch's writer never emits one).
  if (const size_t nul = bytes.substr(8, header_size).find('\0'); nul != std::string_view::npos)
    throw IoError(path, fmt::format("the header holds a NUL byte at offset {} (a header is padded with spaces)", 8 + nul));
  const Json header = parse_header(bytes.substr(8, header_size), path);
  const std::string_view buffer = bytes.substr(8 + header_size);

  if (metadata) metadata->clear();
  std::vector<TensorRecord> records;
  for (const auto& [name, info] : header.items()) {
    if (name == kMetadataKey) {
      if (!info.is_object()) throw IoError(path, "__metadata__ is not a JSON object");
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) throw IoError(path, fmt::format("__metadata__ value of `{}` is not a string", key));
        if (metadata) (*metadata)[key] = value.get<std::string>();
      }
      continue;
    }
    records.push_back(validate_entry(name, info, buffer.size(), path));
  }

  // No two tensors may share bytes: sorted by start, each non-empty range
  // must begin at or after the end of the previous one.
  std::vector<const TensorRecord*> by_offset;
  for (const TensorRecord& r : records) {
    if (r.end > r.begin) by_offset.push_back(&r);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorRecord& a = *by_offset[i - 1];
    const TensorRecord& b = *by_offset[i];
    if (b.begin < a.end) {
      throw IoError(path, fmt::format("tensor `{}`: data_offsets [{}, {}] overlap those of `{}` [{}, {}]", b.name,
                                      b.begin, b.end, a.name, a.begin, a.end));
    }
  }

  // Bytes past the last tensor belong to nothing: a file cut from a longer
  // one, or two files joined. The reference reader refuses them too.
  uint64_t used = 0;
  for (const TensorRecord& r : records) used = std::max<uint64_t>(used, r.end);
  if (used != buffer.size())
    throw IoError(path, fmt::format("{} after the last tensor's data (the header accounts for {} of {} bytes)",
                                    buffer.size() - used == 1 ? "1 byte follows" : fmt::format("{} bytes follow", buffer.size() - used),
                                    used, buffer.size()));

  NamedTensors result;
  result.reserve(records.size());
  for (const TensorRecord& r : records) result.emplace_back(r.name, decode_record(buffer, r, path));
  return result;
}

std::string encode_safetensors(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata,
                               const StoreTypes& types, const std::string& path) {
  Json header = Json::object();
  // The reference writer puts the metadata first; readers do not care.
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  std::string buffer;
  for (const auto& entry : tensors) {
    // Not a structured binding: clang before 16 cannot capture one in a lambda.
    const std::string& name = entry.first;
    const Tensor& tensor = entry.second;
    auto error = [&](std::string_view reason) { return IoError(path, fmt::format("tensor `{}`: {}", name, reason)); };
    if (name == kMetadataKey) throw error("the name is reserved for metadata");
    if (header.contains(name)) throw error("appears twice");
    const size_t held = tensor.is_real() ? tensor.reals.size() : tensor.ints.size();
    int64_t count = 1;
    for (int64_t d : tensor.shape) {
      if (d < 0 || __builtin_mul_overflow(count, d, &count)) count = -1;
      if (count < 0) break;
    }
    if (count < 0 || static_cast<uint64_t>(count) != held) {
      throw error(fmt::format("shape {} does not match its {} values", runtime::shape_string(tensor.shape), held));
    }
    const uint64_t begin = buffer.size();
    std::string_view dtype;
    switch (tensor.kind) {
      case ElemKind::Real: {
        const StoreType type = types.of(name);
        dtype = type == StoreType::F64 ? "F64" : type == StoreType::F32 ? "F32" : type == StoreType::BF16 ? "BF16" : "F16";
        for_each_held_value(tensor.reals, [&](double v) {
          switch (type) {
            case StoreType::F64: append_le(buffer, std::bit_cast<uint64_t>(v)); break;
            case StoreType::F32: append_le(buffer, std::bit_cast<uint32_t>(static_cast<float>(v))); break;
            case StoreType::BF16: append_le(buffer, runtime::encode_bf16(v)); break;
            case StoreType::F16: append_le(buffer, runtime::encode_f16(v)); break;
          }
        });
        break;
      }
      case ElemKind::I32:
        dtype = "I32";
        for (size_t i = 0; i < held; ++i) {
          const int64_t v = tensor.ints[i];
          if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
            throw error(fmt::format("i32 element {} is {}, outside the i32 range", i, v));
          }
          append_le(buffer, static_cast<uint32_t>(static_cast<int32_t>(v)));
        }
        break;
      case ElemKind::I64:
        dtype = "I64";
        for (int64_t v : tensor.ints) append_le(buffer, static_cast<uint64_t>(v));
        break;
      case ElemKind::Bool:
        dtype = "BOOL";
        for (int64_t v : tensor.ints) buffer.push_back(v != 0 ? '\1' : '\0');
        break;
    }
    header[name] = {{"dtype", dtype}, {"shape", tensor.shape}, {"data_offsets", {begin, uint64_t{buffer.size()}}}};
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw IoError(path, fmt::format("tensor names and metadata must be valid UTF-8: {}", e.what()));
  }
  // Spaces after the JSON make the buffer start at a multiple of 8 bytes, so
  // a reader that maps the file sees every f64 aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + text.size() + buffer.size());
  append_le(out, static_cast<uint64_t>(text.size()));
  out += text;
  out += buffer;
  return out;
}

NamedTensors read_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  return decode_safetensors(read_file(path), path, metadata);
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata, const StoreTypes& types) {
  write_file_atomically(path, encode_safetensors(tensors, metadata, types, path));
}

}  // namespace quire::io
