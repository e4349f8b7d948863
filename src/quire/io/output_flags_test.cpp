// Every flag that names a file to write (--out, --params-out, profile -o)
// writes through io::write_file_atomically, as a user meets it: a link given
// as the output is followed, a FIFO is written in place, `-` is standard
// output, and an empty name is refused by the flag's name.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "quire/io/atomic_file.h"
#include "quire/support/cli_testing.h"

namespace quire {
namespace {

namespace fs = std::filesystem;

using quire::testing::Outcome;

std::string train_example() {
  return (fs::path(QUIRE_SOURCE_DIR) / "examples" / "tutorial" / "07_train.qr").string();
}

Outcome plan_to(const std::string& out) {
  return quire::testing::run_quire("plan " + train_example() + " --entry loss --dim B=8 --out " + out);
}

using OutputFlags = quire::testing::CliTest;

TEST_F(OutputFlags, ALinkIsFollowedAndItsTargetWritten) {
  const std::string target = write("plan.json", "old");
  fs::create_symlink("plan.json", dir_ / "link.json");
  const Outcome o = plan_to(file("link.json"));
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_TRUE(fs::is_symlink(dir_ / "link.json"));
  EXPECT_EQ(io::read_file(target).rfind("{", 0), 0u) << "the link's target was not written";
}

TEST_F(OutputFlags, AFifoIsWrittenInPlace) {
  const std::string fifo = file("mynull");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Held open for reading (without blocking) so quire's open returns at once.
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  const Outcome o = plan_to(fifo);
  std::string received;
  char buffer[4096];
  for (ssize_t n; (n = ::read(reader, buffer, sizeof buffer)) > 0;) received.append(buffer, static_cast<size_t>(n));
  ::close(reader);
  ASSERT_EQ(o.status, 0) << o.output;
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "--out replaced the FIFO by a file";
  EXPECT_EQ(received.rfind("{", 0), 0u) << received;
}

TEST_F(OutputFlags, DashIsStandardOutput) {
  const Outcome o = plan_to("-");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_NE(o.output.find("\"quire-plan\""), std::string::npos) << o.output;
  EXPECT_FALSE(fs::exists(dir_ / "-"));
}

TEST_F(OutputFlags, AnEmptyNameIsRefusedByTheFlagsName) {
  for (const std::string& args :
       {"plan " + train_example() + " --entry loss --dim B=8 --out ''",
        "run " + train_example() + " --entry loss --dim B=8 --params-out ''",
        "train " + train_example() + " --params-out ''"}) {
    const Outcome o = quire::testing::run_quire(args);
    EXPECT_EQ(o.status, 105) << args << "\n" << o.output;
    EXPECT_NE(o.output.find("an empty file name"), std::string::npos) << o.output;
    EXPECT_NE(o.output.find("-out"), std::string::npos) << o.output;
  }
  // An empty run folder fell back to runs/<stem> without a word.
  const Outcome r = quire::testing::run_quire("train " + train_example() + " --run-dir ''");
  EXPECT_EQ(r.status, 105) << r.output;
  EXPECT_NE(r.output.find("--run-dir: an empty folder name"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace quire
