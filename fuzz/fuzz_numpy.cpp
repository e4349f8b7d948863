// Feeds arbitrary bytes to NumPy's readers, both .npy and .npz (an archive's
// entries are .npy files, so each reader's mutations reach the other): every
// input is either tensors or an io::IoError, never a crash, a hang, an
// out-of-bounds read or another exception. What is accepted must survive
// being written and read back.

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "quire/io/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  // Errors from the writers below are findings (the writer refusing what the
  // reader accepted), so only the decoders' IoErrors are caught.
  std::optional<quire::runtime::Tensor> array;
  try {
    array = quire::io::decode_npy(bytes, "fuzz.npy");
  } catch (const quire::io::IoError&) {
  }
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
