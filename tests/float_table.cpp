// The float storage types as a filter, for tests/reference/float_types_reference.py
// to compare against NumPy and ml_dtypes:
//
//   float_table decode TYPE   every pattern 0 … 2^bits − 1 of TYPE, decoded: f64s on stdout
//   float_table encode TYPE   f64s on stdin, each encoded to TYPE: patterns as uint64s on stdout
//
// All numbers are raw little-endian 8-byte words (this host's order, as NumPy reads them).

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include "quire/runtime/float_types.h"

using namespace quire::runtime;

int main(int argc, char** argv) {
  std::optional<FloatType> type = argc == 3 ? parse_float_type(argv[2]) : std::nullopt;
  bool decode = argc == 3 && std::strcmp(argv[1], "decode") == 0;
  bool encode = argc == 3 && std::strcmp(argv[1], "encode") == 0;
  if (!type || (!decode && !encode) || float_type_info(*type).storage_bits > 16) {
    std::fprintf(stderr, "usage: float_table decode|encode bf16|f16|fp8e4m3|fp8e5m2\n");
    return 2;
  }
  if (decode) {
    std::vector<double> out(uint64_t{1} << float_type_info(*type).storage_bits);
    for (uint64_t p = 0; p < out.size(); ++p) out[p] = decode_bits(*type, p);
    return std::fwrite(out.data(), sizeof(double), out.size(), stdout) == out.size() ? 0 : 1;
  }
  double in[4096];
  uint64_t out[4096];
  size_t n;
  while ((n = std::fread(in, sizeof(double), 4096, stdin)) > 0) {
    for (size_t i = 0; i < n; ++i) out[i] = encode_bits(*type, in[i]);
    if (std::fwrite(out, sizeof(uint64_t), n, stdout) != n) return 1;
  }
  return 0;
}
