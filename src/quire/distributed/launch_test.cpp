#include "quire/distributed/launch.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <optional>
#include <string>

namespace quire::distributed {
namespace {

/// Sets (or unsets) a variable for one test, restoring it after.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedVariable() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(LaunchedJob, ALaunchersVariableSaysHowManyRanks) {
  ScopedVariable pmi("PMI_SIZE", nullptr);
  {
    ScopedVariable ompi("OMPI_COMM_WORLD_SIZE", nullptr);
    EXPECT_FALSE(launched_job());
  }
  {
    ScopedVariable ompi("OMPI_COMM_WORLD_SIZE", "3");
    const std::optional<LaunchedJob> job = launched_job();
    ASSERT_TRUE(job);
    EXPECT_EQ(job->size, 3);
    EXPECT_EQ(job->variable, "OMPI_COMM_WORLD_SIZE=3");
  }
  {
    ScopedVariable ompi("OMPI_COMM_WORLD_SIZE", nullptr);
    ScopedVariable hydra("PMI_SIZE", "2");
    ASSERT_TRUE(launched_job());
    EXPECT_EQ(launched_job()->variable, "PMI_SIZE=2");
  }
}

TEST(LaunchedJob, AVariableThatIsNoCountIsRefusedNamingIt) {
  ScopedVariable pmi("PMI_SIZE", nullptr);
  for (const char* bad : {"", "two", "0", "-1", "2x"}) {
    ScopedVariable ompi("OMPI_COMM_WORLD_SIZE", bad);
    try {
      launched_job();
      ADD_FAILURE() << "OMPI_COMM_WORLD_SIZE=" << bad << " was taken for a count";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("OMPI_COMM_WORLD_SIZE=") + bad + ": a launcher's rank count"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(LaunchedJob, AProcessAloneOrAJobOfOneRankJoinsNothing) {
  ScopedVariable pmi("PMI_SIZE", nullptr);
  {
    ScopedVariable ompi("OMPI_COMM_WORLD_SIZE", nullptr);
    EXPECT_EQ(join_launched_job(1.0), nullptr);
  }
  {
    ScopedVariable ompi("OMPI_COMM_WORLD_SIZE", "1");
    EXPECT_EQ(join_launched_job(1.0), nullptr);
  }
}

TEST(LaunchedJob, TheMessageWithoutMpiSaysHowToGetIt) {
  EXPECT_NE(how_to_get_mpi().find("apt-get install openmpi-bin libopenmpi-dev"), std::string::npos);
  if (built_with_mpi()) GTEST_SKIP() << "this quire has MPI: a job of several ranks would start it";
  ScopedVariable pmi("PMI_SIZE", nullptr);
  ScopedVariable ompi("OMPI_COMM_WORLD_SIZE", "2");
  try {
    join_launched_job(1.0);
    ADD_FAILURE() << "a quire without MPI joined a job of 2 ranks";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("this process is one of 2 ranks (OMPI_COMM_WORLD_SIZE=2), but this quire was "
                                         "built without MPI"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace quire::distributed
