// Cross-checks with NumPy, the reference for .npy/.npz, and with a
// safetensors file written byte by byte in Python: files NumPy writes are read
// by quire and compared bit for bit with the values NumPy had, and files quire
// writes are read back by NumPy. Needs the project venv (scripts/setup); the
// tests skip, saying why, where it is missing.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "quire/io/atomic_file.h"
#include "quire/io/npy.h"
#include "quire/io/safetensors.h"
#include "quire/support/testing.h"

#ifndef QUIRE_SOURCE_DIR
#error "QUIRE_SOURCE_DIR must name the source tree (the CMake build defines it)"
#endif

namespace quire::io {

using runtime::ElemKind;
using runtime::Shape;
using runtime::Tensor;

namespace {

namespace fs = std::filesystem;

struct ScratchDir : quire::testing::ScratchDir {
  ScratchDir() : quire::testing::ScratchDir("numpy") {}
};

/// The venv's Python if it exists and imports numpy, else "" and `why`.
std::string find_python(std::string& why) {
  const fs::path python = fs::path(QUIRE_SOURCE_DIR) / ".venv" / "bin" / "python";
  if (!fs::exists(python)) {
    why = python.string() + " does not exist (run scripts/setup)";
    return "";
  }
  if (std::system((python.string() + " -c 'import numpy' >/dev/null 2>&1").c_str()) != 0) {
    why = python.string() + " cannot import numpy (run scripts/setup)";
    return "";
  }
  return python.string();
}

/// Runs `script` with the scratch directory as its argument; returns its
/// exit status and, through `output`, what it printed.
int run_python(const std::string& python, const ScratchDir& dir, const std::string& script, std::string& output) {
  const std::string script_path = dir.file("script.py");
  std::ofstream(script_path) << script;
  const std::string log = dir.file("script.log");
  const int status = std::system((python + " " + script_path + " " + dir.path.string() + " >" + log + " 2>&1").c_str());
  output = read_file(log);
  return status;
}

// NumPy writes: every dtype quire reads, C and Fortran order, big-endian,
// scalars and empty arrays; an .npz by np.savez and one by
// np.savez_compressed; and a safetensors file assembled with struct + json.
// For each array it saves the values as raw <f8 (floats) or <i8 (ints and
// bools) next to a manifest, which the C++ side compares bit for bit.
constexpr const char* kNumpyWrites = R"PY(
import json, os, struct, sys
import numpy as np
d = sys.argv[1]
manifest = []
def expect(name, arr, file, entry=None):
    a = np.array(arr, order='C')  # (np.ascontiguousarray would make a scalar 1-d)
    if a.dtype.kind == 'f':
        kind, raw = 'real', a.astype('<f8')
    elif a.dtype.kind == 'b':
        kind, raw = 'bool', a.astype('<i8')
    else:
        kind, raw = ('i64' if a.dtype.itemsize == 8 else 'i32'), a.astype('<i8')
    open(os.path.join(d, name + '.expected'), 'wb').write(raw.tobytes())
    manifest.append({'name': name, 'file': file, 'entry': entry, 'kind': kind, 'shape': list(a.shape)})

rng = np.random.default_rng(7)
special = [np.nan, np.inf, -np.inf, -0.0, 5e-324, 1e308]
f8 = rng.standard_normal((3, 4)); f8.flat[:6] = special
f4 = rng.standard_normal(5).astype(np.float32); f4[0] = np.float32(1e-45); f4[1] = np.inf
f2 = np.array([[1.0, -2.5, 6.0e-8], [65504.0, np.inf, np.nan]], dtype=np.float16)
i4 = np.array([0, -1, -2**31, 2**31 - 1], dtype=np.int32)
i8 = np.array([[0, -1], [-2**63, 2**63 - 1]], dtype=np.int64)
b1 = np.array([[True, False], [False, True], [True, True]])
u1 = np.array([0, 1, 254, 255], dtype=np.uint8)
arrays = {
    'f8': f8, 'f4': f4, 'f2': f2, 'i4': i4, 'i8': i8, 'b1': b1, 'u1': u1,
    'scalar': np.array(2.5), 'scalar_i8': np.array(-7, dtype=np.int64),
    'empty': np.zeros((0, 3)), 'empty_i4': np.zeros((2, 0), dtype=np.int32),
    'fortran': np.asfortranarray(rng.standard_normal((3, 4, 2))),
    'fortran_i4': np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4)),
    'be_f8': f8.astype('>f8'), 'be_f4': f4.astype('>f4'), 'be_i4': i4.astype('>i4'), 'be_i8': i8.astype('>i8'),
}
for name, a in arrays.items():
    np.save(os.path.join(d, name + '.npy'), a)
    expect(name, a, name + '.npy')
bundle = {'batch.1': f8, 'w': arrays['fortran'], 'half': f2, 'ints': i4, 'mask': b1, 'scalar': arrays['scalar']}
np.savez(os.path.join(d, 'bundle.npz'), **bundle)
for name, a in bundle.items():
    expect('bundle.' + name, a, 'bundle.npz', name)
np.savez_compressed(os.path.join(d, 'compressed.npz'), w=f8)

def bf16(a):
    return (np.asarray(a, dtype='<f4').view('<u4') >> 16).astype('<u2')
st = [('f64', 'F64', f8.astype('<f8')), ('f32', 'F32', f4.astype('<f4')), ('f16', 'F16', f2.astype('<f2')),
      ('bf16', 'BF16', bf16(rng.standard_normal((2, 2)))), ('i32', 'I32', i4.astype('<i4')),
      ('i64', 'I64', i8.astype('<i8')), ('bool', 'BOOL', b1), ('u8', 'U8', u1), ('scalar', 'F64', np.array(1.25))]
header, buf = {'__metadata__': {'format': 'np'}}, b''
for name, dtype, a in st:
    raw = a.tobytes()
    header[name] = {'dtype': dtype, 'shape': list(a.shape), 'data_offsets': [len(buf), len(buf) + len(raw)]}
    buf += raw
    value = (a.astype('<u4') << 16).view('<f4') if dtype == 'BF16' else a
    expect('st.' + name, value, 'hand.safetensors', name)
h = json.dumps(header).encode()
h += b' ' * (-len(h) % 8)
open(os.path.join(d, 'hand.safetensors'), 'wb').write(struct.pack('<Q', len(h)) + h + buf)
json.dump(manifest, open(os.path.join(d, 'manifest.json'), 'w'))
)PY";

// NumPy reads what quire wrote: each file against the manifest's dtype, shape
// and raw expected values (bit for bit), and quire's safetensors by hand.
constexpr const char* kNumpyReads = R"PY(
import json, os, struct, sys
import numpy as np
d = sys.argv[1]
failures = []
def check(label, a, want):
    raw = np.fromfile(os.path.join(d, want['expected']), dtype='<f8' if want['dtype'][1] == 'f' else '<i8')
    raw = raw.reshape(want['shape'])
    if a.dtype.str != want['dtype'] or list(a.shape) != want['shape']:
        failures.append(f"{label}: got {a.dtype.str} {a.shape}, want {want['dtype']} {want['shape']}")
        return
    wide = a.astype('<f8' if want['dtype'][1] == 'f' else '<i8')
    if wide.tobytes() != raw.tobytes():
        failures.append(f"{label}: values differ: {a!r} vs {raw!r}")
manifest = json.load(open(os.path.join(d, 'manifest.json')))
for want in manifest:
    path = os.path.join(d, want['file'])
    if want['file'].endswith('.npy'):
        check(want['file'], np.load(path), want)
    elif want['file'].endswith('.npz'):
        with np.load(path) as z:
            check(want['file'] + ':' + want['entry'], z[want['entry']], want)
    else:
        blob = open(path, 'rb').read()
        (n,) = struct.unpack('<Q', blob[:8])
        header = json.loads(blob[8:8 + n])
        info = header[want['entry']]
        begin, end = info['data_offsets']
        kinds = {'F64': '<f8', 'F32': '<f4', 'I32': '<i4', 'I64': '<i8', 'BOOL': '|b1'}
        a = np.frombuffer(blob[8 + n + begin:8 + n + end], dtype=kinds[info['dtype']]).reshape(info['shape'])
        check(want['file'] + ':' + want['entry'], a, want)
        if header.get('__metadata__') != {'writer': 'quire'}:
            failures.append('metadata: ' + repr(header.get('__metadata__')))
if failures:
    print('\n'.join(failures))
    sys.exit(1)
print(f"checked {len(manifest)} arrays")
)PY";

/// The expected values NumPy saved beside an array, as a tensor of `kind`.
Tensor expected_tensor(const std::string& bytes, const std::string& kind, Shape shape) {
  if (kind == "real") {
    Tensor t = Tensor::real(std::move(shape));
    EXPECT_EQ(bytes.size(), t.reals.size() * 8);
    for (size_t i = 0; i < t.reals.size() && 8 * i + 8 <= bytes.size(); ++i) {
      uint64_t bits = 0;
      for (int b = 7; b >= 0; --b) bits = (bits << 8) | static_cast<uint8_t>(bytes[8 * i + static_cast<size_t>(b)]);
      t.reals[i] = std::bit_cast<double>(bits);
    }
    return t;
  }
  const ElemKind k = kind == "bool" ? ElemKind::Bool : kind == "i64" ? ElemKind::I64 : ElemKind::I32;
  Tensor t = Tensor::integer(k, std::move(shape));
  EXPECT_EQ(bytes.size(), t.ints.size() * 8);
  for (size_t i = 0; i < t.ints.size() && 8 * i + 8 <= bytes.size(); ++i) {
    uint64_t bits = 0;
    for (int b = 7; b >= 0; --b) bits = (bits << 8) | static_cast<uint8_t>(bytes[8 * i + static_cast<size_t>(b)]);
    t.ints[i] = std::bit_cast<int64_t>(bits);
  }
  return t;
}

void expect_same(const Tensor& got, const Tensor& want, const std::string& label) {
  ASSERT_EQ(got.kind, want.kind) << label;
  ASSERT_EQ(got.shape, want.shape) << label;
  ASSERT_EQ(got.reals.size(), want.reals.size()) << label;
  for (size_t i = 0; i < got.reals.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint64_t>(got.reals[i]), std::bit_cast<uint64_t>(want.reals[i]))
        << label << " element " << i << ": " << got.reals[i] << " vs " << want.reals[i];
  }
  EXPECT_EQ(got.ints, want.ints) << label;
}

const Tensor* find(const NamedTensors& tensors, const std::string& name) {
  for (const auto& [n, t] : tensors) {
    if (n == name) return &t;
  }
  return nullptr;
}

}  // namespace

TEST(NumpyInterop, QuireReadsWhatNumpyWrites) {
  std::string why;
  const std::string python = find_python(why);
  if (python.empty()) GTEST_SKIP() << why;
  ScratchDir dir;
  std::string output;
  ASSERT_EQ(run_python(python, dir, kNumpyWrites, output), 0) << output;

  const auto manifest = nlohmann::json::parse(read_file(dir.file("manifest.json")));
  std::map<std::string, NamedTensors> archives;
  for (const auto& want : manifest) {
    const std::string name = want["name"], file = want["file"], kind = want["kind"];
    const Tensor expected = expected_tensor(read_file(dir.file(name + ".expected")), kind, want["shape"].get<Shape>());
    if (file.ends_with(".npy")) {
      expect_same(read_npy(dir.file(file)), expected, file);
      continue;
    }
    if (!archives.contains(file)) {
      archives[file] = file.ends_with(".npz") ? read_npz(dir.file(file)) : read_safetensors(dir.file(file));
    }
    const std::string entry = want["entry"];
    const Tensor* got = find(archives[file], entry);
    ASSERT_NE(got, nullptr) << file << " has no `" << entry << "`";
    expect_same(*got, expected, file + ":" + entry);
  }
  EXPECT_EQ(archives["bundle.npz"].size(), 6u);
  std::map<std::string, std::string> metadata;
  EXPECT_EQ(read_safetensors(dir.file("hand.safetensors"), &metadata).size(), 9u);
  EXPECT_EQ(metadata, (std::map<std::string, std::string>{{"format", "np"}}));

  try {
    read_npz(dir.file("compressed.npz"));
    ADD_FAILURE() << "a compressed .npz was accepted";
  } catch (const IoError& e) {
    EXPECT_EQ(e.reason,
              "entry `w.npy`: compressed .npz entries (np.savez_compressed) are not supported; save with np.savez");
  }
}

TEST(NumpyInterop, NumpyReadsWhatQuireWrites) {
  std::string why;
  const std::string python = find_python(why);
  if (python.empty()) GTEST_SKIP() << why;
  ScratchDir dir;

  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  auto reals = [](Shape shape, std::vector<double> values) {
    Tensor t = Tensor::real(std::move(shape));
    t.reals = std::move(values);
    return t;
  };
  auto ints = [](ElemKind kind, Shape shape, std::vector<int64_t> values) {
    Tensor t = Tensor::integer(kind, std::move(shape));
    t.ints = std::move(values);
    return t;
  };
  struct Case {
    std::string name;
    Tensor tensor;
    StoreType type = StoreType::F64;
  };
  const std::vector<Case> cases{
      {"f8", reals({2, 3}, {nan, inf, -0.0, 5e-324, 1.0 / 3.0, -1e300})},
      {"f4", reals({2, 2}, {0.5, -0.25, std::ldexp(1.0, -149), inf}), StoreType::F32},  // all exact in f32
      {"i4", ints(ElemKind::I32, {4}, {0, -1, INT32_MIN, INT32_MAX})},
      {"i8", ints(ElemKind::I64, {2, 1}, {INT64_MIN, INT64_MAX})},
      {"b1", ints(ElemKind::Bool, {3}, {1, 0, 1})},
      {"scalar", reals({}, {2.5})},
      {"empty", reals({0, 4}, {})},
      {"empty3", ints(ElemKind::I64, {2, 0, 3}, {})},
  };
  auto dtype_of = [](const Case& c) -> std::string {
    switch (c.tensor.kind) {
      case ElemKind::Real: return c.type == StoreType::F32 ? "<f4" : "<f8";
      case ElemKind::I32: return "<i4";
      case ElemKind::I64: return "<i8";
      case ElemKind::Bool: return "|b1";
    }
    return "?";
  };
  auto expected_bytes = [](const Tensor& t) {
    std::string out;
    for (size_t i = 0; i < static_cast<size_t>(t.size()); ++i) {
      const uint64_t bits = t.is_real() ? std::bit_cast<uint64_t>(t.reals[i]) : static_cast<uint64_t>(t.ints[i]);
      for (int b = 0; b < 8; ++b) out.push_back(static_cast<char>(bits >> (8 * b)));
    }
    return out;
  };

  nlohmann::json manifest = nlohmann::json::array();
  auto record = [&](const Case& c, const std::string& file, const std::string& entry) {
    nlohmann::json want{
        {"expected", c.name + ".expected"}, {"dtype", dtype_of(c)}, {"shape", c.tensor.shape}, {"file", file}};
    if (!entry.empty()) want["entry"] = entry;
    manifest.push_back(want);
  };
  NamedTensors bundle, model;
  for (const Case& c : cases) {
    write_npy(dir.file(c.name + ".npy"), c.tensor, c.type);
    write_file_atomically(dir.file(c.name + ".expected"), expected_bytes(c.tensor));
    record(c, c.name + ".npy", "");
    if (c.type == StoreType::F64) {
      bundle.emplace_back("batch." + c.name, c.tensor);
      record(c, "bundle.npz", "batch." + c.name);
      model.emplace_back(c.name, c.tensor);
      record(c, "model.safetensors", c.name);
    }
  }
  write_npz(dir.file("bundle.npz"), bundle);
  write_safetensors(dir.file("model.safetensors"), model, {{"writer", "quire"}});
  write_file_atomically(dir.file("manifest.json"), manifest.dump());

  std::string output;
  EXPECT_EQ(run_python(python, dir, kNumpyReads, output), 0) << output;
}

}  // namespace quire::io
