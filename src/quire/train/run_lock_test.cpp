#include "quire/train/run_lock.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "quire/io/atomic_file.h"
#include "quire/support/testing.h"

namespace quire::train {
namespace {

/// The message of the IoError `f` throws ("" if none).
template <typename F>
std::string refusal(F f) {
  try {
    f();
  } catch (const io::IoError& e) {
    return e.what();
  }
  return "";
}

TEST(RunLock, ASecondHolderIsRefusedNamingTheFirstsPid) {
  quire::testing::ScratchDir dir("run-lock");
  {
    RunLock first(dir.str());
    EXPECT_EQ(io::read_file(first.path()), std::to_string(::getpid()) + "\n");
    EXPECT_EQ(refusal([&] { RunLock second(dir.str()); }),
              dir.str() + ": another `quire train` (pid " + std::to_string(::getpid()) +
                  ") is running on this run folder: wait for it to end, or choose another --run-dir");
  }
  // Released with its holder.
  EXPECT_EQ(refusal([&] { RunLock again(dir.str()); }), "");
}

TEST(RunLock, AKilledHolderReleasesIt) {
  quire::testing::ScratchDir dir("run-lock");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    RunLock held(dir.str());
    const char byte = 1;
    (void)!::write(ready[1], &byte, 1);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ::close(ready[0]);
  const std::string message = refusal([&] { RunLock second(dir.str()); });
  EXPECT_NE(message.find("(pid " + std::to_string(child) + ")"), std::string::npos) << message;
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_EQ(refusal([&] { RunLock after(dir.str()); }), "");
}

}  // namespace
}  // namespace quire::train
