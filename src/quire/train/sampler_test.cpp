// quire sample's loop (sampler.h): the window it passes, the alphabet's
// checks, the keys of its draws, and the same text on every backend.

#include "quire/train/sampler.h"

#include <gtest/gtest.h>

#include <fstream>

#include "quire/elab/elab_testing.h"
#include "quire/interp/params.h"
#include "quire/support/testing.h"

namespace quire::train {
namespace {

using quire::testing::error_of;
using quire::testing::ScratchDir;

// `next` is the character after the one at `at`, the counter's successor; it
// shows which window and position each call received. `draw` is a
// categorical draw over three ids with the model's logits.
const char* kProgram = R"(dim B
module M {
  param logits : ℝ[id: 3] init = normal(1.0)
}
fn next(θ : params M, context : i32[batch: B, time: 4], at : i32[batch: B], temperature : f64, k : key) -> i32[batch: B] =
  let here = iota(time: 4) == split(axis batch, at, batch: B, time: 1)
  (sum(axis time, where(here, context, 0)) + 1) as i32
fn draw(θ : params M, context : i32[batch: 1, time: 4], at : i32[batch: 1], temperature : f64, k : key) -> i32[batch: 1] =
  categorical(k, split(axis id, θ.logits, batch: 1, id: 3) / real(temperature))
fn wrong(θ : params M, context : i32[batch: B, time: 4]) -> i32[batch: B, time: 4] = context
)";

struct Fixture {
  ScratchDir dir{"sampler"};
  std::unique_ptr<elab::testing::Elaborated> e = elab::testing::elaborate_text(kProgram);
  std::string params = dir.file("m.safetensors");
  Fixture() {
    EXPECT_TRUE(e->ok()) << e->rendered();
    const elab::Program& prog = *e->prog;
    const int m = 0;
    interp::save_params(params, prog, elab::ParamsType{m, {}, {}},
                        interp::init_params(prog, elab::ParamsType{m, {}, {}}, 3, {}));
  }
  std::string run(const std::string& entry, const std::string& prompt, int64_t length, uint64_t seed = 0,
                  kernel::Backend backend = kernel::Backend::Interp) const {
    SampleOptions o;
    o.entry = entry;
    o.params = params;
    o.prompt = prompt;
    o.length = length;
    o.seed = seed;
    o.backend = backend;
    std::string emitted;
    const std::string drawn =
        sample(*e->prog, Alphabet({"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}), o,
               [&](const std::string& c) { emitted += c; });
    EXPECT_EQ(drawn, emitted);
    return drawn;
  }
};

TEST(Sampler, EachCallSeesTheLastTCharactersAndTheirLastPosition) {
  Fixture f;
  // "0" alone is padded (0 at position 0, `at` 0), and past 4 characters the
  // window slides: every call continues the last character.
  EXPECT_EQ(f.run("next", "0", 6), "123456");
  EXPECT_EQ(f.run("next", "52", 3), "345");
  EXPECT_EQ(f.run("next", "0", 0), "");
  // A drawn id outside the alphabet is refused, naming it.
  EXPECT_EQ(error_of<SampleError>([&] { f.run("next", "7", 5); }),
            "the entry drew id 10, outside the alphabet's 10 characters");
}

TEST(Sampler, TheDrawsKeysFollowTheSeedOnEveryBackend) {
  Fixture f;
  const std::string text = f.run("draw", "0", 40, 5);
  for (char c : text) EXPECT_TRUE(c >= '0' && c <= '2') << text;
  for (kernel::Backend b : {kernel::Backend::Kernels, kernel::Backend::Native})
    EXPECT_EQ(f.run("draw", "0", 40, 5, b), text) << kernel::backend_name(b);
  EXPECT_NE(f.run("draw", "0", 40, 6), text);
  const runtime::Key k = sample_key(5, 12);
  EXPECT_EQ(k, runtime::derive_key(runtime::key_from_seed(5), "sample:12"));
}

TEST(Sampler, AnEntryOfAnotherShapeOrABadPromptIsRefused) {
  Fixture f;
  EXPECT_NE(error_of<SampleError>([&] { f.run("wrong", "0", 1); }).find("`wrong` is not a sampling entry"),
            std::string::npos);
  EXPECT_EQ(error_of<SampleError>([&] { f.run("absent", "0", 1); }),
            "the program has no function `absent` to sample with");
  EXPECT_EQ(error_of<SampleError>([&] { f.run("next", "0a", 1); }),
            "the prompt's character 2 (\"a\") is not in the alphabet");
  EXPECT_EQ(error_of<SampleError>([&] { f.run("next", "", 1); }),
            "the prompt is empty: give at least one character to continue");
}

TEST(Sampler, TheAlphabetFileIsChecked) {
  ScratchDir dir("sampler");
  auto alphabet_in = [&](const std::string& text) {
    std::ofstream(dir.file("vocab.json")) << text;
    return error_of<SampleError>([&] { Alphabet::read(dir.file("vocab.json")); });
  };
  const std::string path = dir.file("vocab.json");
  EXPECT_EQ(alphabet_in(R"({"alphabet": ["a", "b", "a"]})"), path + ": alphabet entry 2 repeats \"a\"");
  EXPECT_EQ(alphabet_in(R"({"alphabet": ["a", "bc"]})"), path + ": alphabet entry 1 is \"bc\", not one UTF-8 character");
  EXPECT_NE(alphabet_in(R"([1, 2])").find("not an alphabet"), std::string::npos);
  EXPECT_NE(alphabet_in("{").find("not an alphabet"), std::string::npos);
  std::ofstream(dir.file("vocab.json")) << R"({"alphabet": ["\n", " ", "é", "a"]})";
  const Alphabet a = Alphabet::read(path);
  EXPECT_EQ(a.size(), 4);
  EXPECT_EQ(a.encode("a é\n"), (std::vector<int32_t>{3, 1, 2, 0}));
  EXPECT_EQ(a.character(2), "é");
}

}  // namespace
}  // namespace quire::train
