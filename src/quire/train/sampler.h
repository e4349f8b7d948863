#pragma once
// Generation from trained parameters in one process (`quire sample`): the
// program's sampling entry is compiled once and called once per character.
//
// THE ENTRY. `fn next(θ : params M, context : i32[…, time: T], at : i32[…],
// temperature : f64, k : key) -> i32[…]` returns, for each context, the id
// after position `at`, drawn with temperature from the model's logits there
// (the GPT example's uses the prelude's `categorical`). The context's other
// axes (a batch) are one sequence: their dimensions, unless given, are bound
// to 1. A model with causal attention ignores the positions after `at`.
//
// THE LOOP. The text so far is the prompt's ids, then each id drawn. Draw i
// (0 for the first) calls the entry on the last T ids of the text, padded
// with id 0 after them, `at` the last of them, and the key
// derive_key(key_from_seed(seed), "sample:i") (runtime/random.h), so a seed
// gives the same text on every backend and thread count.
//
// THE ALPHABET. vocab.json (prepare.py writes it) is {"alphabet": [c0, c1,
// …]}: id i is the character (a UTF-8 string) c_i. A prompt character outside
// it is refused, naming it and its position.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "quire/core/program.h"
#include "quire/kernel/engine.h"
#include "quire/runtime/random.h"

namespace quire::train {

/// A file that cannot be used, or an entry that does not fit (what() says which).
struct SampleError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Alphabet {
 public:
  /// Reads and checks vocab.json: at least one character, none repeated, each
  /// one UTF-8 character. Throws SampleError naming the path.
  static Alphabet read(const std::string& path);
  explicit Alphabet(std::vector<std::string> characters);

  /// The ids of `text`, or SampleError naming the first character outside the alphabet.
  std::vector<int32_t> encode(const std::string& text) const;
  const std::string& character(int32_t id) const;
  int32_t size() const { return static_cast<int32_t>(characters_.size()); }

 private:
  std::vector<std::string> characters_;
  std::map<std::string, int32_t> ids_;
};

struct SampleOptions {
  std::string entry = "next";
  std::string params;  ///< the trained parameters (safetensors)
  std::string prompt;
  int64_t length = 200;  ///< characters to draw
  double temperature = 1.0;
  uint64_t seed = 0;
  std::map<std::string, int64_t> dims;
  kernel::Backend backend = kernel::Backend::Native;
  int threads = 1;
};

/// The key of draw i under `seed`: derive_key(key_from_seed(seed), "sample:i").
runtime::Key sample_key(uint64_t seed, int64_t draw);

/// Draws options.length characters after the prompt; `emit` receives each
/// as it is drawn. Returns the drawn text (without the prompt).
std::string sample(const elab::Program& prog, const Alphabet& alphabet, const SampleOptions& options,
                   const std::function<void(const std::string&)>& emit);

}  // namespace quire::train
