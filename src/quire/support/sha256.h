#pragma once
// SHA-256 (FIPS 180-4) of a byte string, through OpenSSL's EVP interface: a
// checkpoint records the digest of each tensor file so that resume can refuse
// a file that was truncated or altered after it was written (train/checkpoint.h),
// the native backend names a cached object by the digest of its source and
// compiler (native/c_compiler.h), and a solved run's label carries one.

#include <string>
#include <string_view>

namespace quire::support {

/// The SHA-256 of `bytes` as 64 lowercase hexadecimal digits, e.g. for "abc"
/// "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad".
/// Throws std::runtime_error if OpenSSL reports a failure (out of memory).
std::string sha256_hex(std::string_view bytes);

}  // namespace quire::support
