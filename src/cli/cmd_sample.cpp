// `quire sample FILE --params P.safetensors`: text from trained parameters,
// one character a call of the program's sampling entry (train/sampler.h).

#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "commands.h"
#include "common.h"
#include "quire/train/sampler.h"

namespace quire::cli {

Handler setup_sample(CLI::App& sub) {
  struct Options {
    std::string file, params, vocab, prompt = "The ", entry = "next", backend = "native";
    std::vector<std::string> dims;
    int64_t length = 200;
    double temperature = 1.0;
    int64_t seed = 0;
    int threads = default_threads();
  };
  auto o = std::make_shared<Options>();
  sub.add_option("file", o->file, "the program (.qr) with a sampling entry")->required();
  sub.add_option("--params", o->params, "the trained parameters (safetensors, e.g. from `quire train --params-out`)")
      ->required();
  sub.add_option("--entry", o->entry,
                 "the sampling entry: (θ, context : i32[…, time: T], at : i32[…], temperature : f64, k : key) -> i32[…] "
                 "(default next)");
  sub.add_option("--vocab", o->vocab, "the alphabet, {\"alphabet\": […]} (default: data/vocab.json beside the program)");
  sub.add_option("--prompt", o->prompt, "the text to continue (default \"The \")");
  sub.add_option("--length", o->length, "characters to draw (default 200)")->check(CLI::NonNegativeNumber);
  sub.add_option("--temperature", o->temperature, "divides the logits before the draw (default 1)")
      ->check(CLI::PositiveNumber);
  sub.add_option("--seed", o->seed, "the draws' seed: draw i uses derive_key(key_from_seed(seed), \"sample:i\")")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--dim", o->dims, "bind a dimension, NAME=SIZE (the context's batch dimensions default to 1)");
  sub.add_option("--backend", o->backend, "native (default), kernels or interp: the same text")
      ->check(CLI::IsMember({"native", "kernels", "interp"}));
  sub.add_option("--threads", o->threads, "threads a native kernel may use (default: the machine's cores)")
      ->check(CLI::Range(1, 256));
  return [o]() {
    auto prog = load_program(o->file);
    if (!prog) return 1;
    train::SampleOptions options;
    options.entry = o->entry;
    options.params = o->params;
    options.prompt = o->prompt;
    options.length = o->length;
    options.temperature = o->temperature;
    options.seed = static_cast<uint64_t>(o->seed);
    options.dims = parse_dims(o->dims, *prog);
    options.backend = *kernel::parse_backend(o->backend);
    options.threads = o->threads;
    const std::string vocab =
        o->vocab.empty() ? (std::filesystem::path(o->file).parent_path() / "data" / "vocab.json").string() : o->vocab;
    const train::Alphabet alphabet = train::Alphabet::read(vocab);
    alphabet.encode(o->prompt);  // a prompt outside the alphabet is refused before anything prints
    std::cout << o->prompt << std::flush;
    train::sample(*prog, alphabet, options, [](const std::string& c) { std::cout << c << std::flush; });
    std::cout << "\n";
    return 0;
  };
}

}  // namespace quire::cli
