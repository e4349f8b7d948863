// Feeds arbitrary bytes to the safetensors reader: every input is either
// tensors or an io::IoError, never a crash, a hang, an out-of-bounds read or
// another exception. What it accepts must survive being written and read
// back, since a checkpoint quire resumes from is rewritten at the next step.

#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include "quire/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  quire::io::NamedTensors tensors;
  std::map<std::string, std::string> metadata;
  try {
    tensors = quire::io::decode_safetensors(bytes, "fuzz.safetensors", &metadata);
  } catch (const quire::io::IoError&) {
    return 0;
  }
  // An IoError here is a finding too: the writer refusing what the reader
  // accepted, so it is deliberately not caught.
  const std::string again =
      quire::io::encode_safetensors(tensors, metadata, quire::io::StoreType::F64, "fuzz.safetensors");
  std::map<std::string, std::string> metadata_again;
  if (quire::io::decode_safetensors(again, "fuzz.safetensors", &metadata_again).size() != tensors.size() ||
      metadata_again != metadata)
    std::abort();
  return 0;
}
