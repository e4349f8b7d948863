// Feeds arbitrary bytes to NumPy's readers, .npy, .npz and the row reader
// (an archive's entries are .npy files, so each reader's mutations reach the
// others): every input is either tensors or an io::IoError, never a crash, a
// hang, an out-of-bounds read or another exception. What is accepted must
// survive being written and read back, and the row reader must agree with
// decode_npy: the same rows' bits, or the same error.

#include <sys/mman.h>
#include <unistd.h>

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "quire/io/npy.h"
#include "quire/io/npy_rows.h"

namespace {

/// The input as a file NpyRows can open: an in-memory file, rewritten per input.
std::string as_file(std::string_view bytes) {
  static const int fd = ::memfd_create("fuzz.npy", MFD_CLOEXEC);
  if (fd < 0 || ::ftruncate(fd, 0) != 0) std::abort();
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (n <= 0) std::abort();
    done += static_cast<size_t>(n);
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

bool same_bits(const quire::runtime::Tensor& a, const quire::runtime::Tensor& b) {
  if (a.kind != b.kind || a.shape != b.shape || a.reals.size() != b.reals.size() || a.ints != b.ints) return false;
  for (size_t i = 0; i < a.reals.size(); ++i)
    if (std::bit_cast<uint64_t>(a.reals[i]) != std::bit_cast<uint64_t>(b.reals[i])) return false;
  return true;
}

/// Every row through NpyRows (in order, then reversed: one run, then single
/// rows) must give decode_npy's tensor, or its error's reason.
void check_rows(std::string_view bytes, const std::optional<quire::runtime::Tensor>& whole,
                const std::string& whole_error) {
  const std::string path = as_file(bytes);
  std::string error;
  try {
    const quire::io::NpyRows rows = quire::io::NpyRows::open(path);
    if (!rows.rows_readable() || rows.rows() > (1 << 16)) return;  // read whole, or too many to read one by one
    std::vector<int64_t> order(static_cast<size_t>(rows.rows()));
    std::iota(order.begin(), order.end(), int64_t{0});
    const quire::runtime::Tensor forward = rows.read(order);
    if (!whole || !same_bits(forward, *whole)) std::abort();
    std::vector<int64_t> backward(order.rbegin(), order.rend());
    const quire::runtime::Tensor reversed = rows.read(backward);
    if (reversed.shape != whole->shape) std::abort();
  } catch (const quire::io::IoError& e) {
    error = e.reason;
  }
  if (error != whole_error) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  // Errors from the writers below are findings (the writer refusing what the
  // reader accepted), so only the decoders' IoErrors are caught.
  std::optional<quire::runtime::Tensor> array;
  std::string array_error;
  try {
    array = quire::io::decode_npy(bytes, "fuzz.npy");
  } catch (const quire::io::IoError& e) {
    array_error = e.reason;
  }
  check_rows(bytes, array, array_error);
  if (array)
    (void)quire::io::decode_npy(quire::io::encode_npy(*array, quire::io::StoreType::F64, "fuzz.npy"), "fuzz.npy");
  quire::io::NamedTensors entries;
  try {
    entries = quire::io::decode_npz(bytes, "fuzz.npz");
  } catch (const quire::io::IoError&) {
    return 0;
  }
  const std::string again = quire::io::encode_npz(entries, quire::io::StoreType::F64, "fuzz.npz");
  if (quire::io::decode_npz(again, "fuzz.npz").size() != entries.size()) std::abort();
  return 0;
}
