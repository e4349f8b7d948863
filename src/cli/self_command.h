#pragma once
// Running `quire` again, as a child process, and keeping what it printed:
// `quire explain` assembles its document from the printouts of the commands
// its appendix lists, run by this very binary, so that each section is, byte
// for byte, what its command prints.

#include <string>
#include <vector>

namespace quire::cli {

/// What one run of a command printed, and how it ended.
struct CommandOutput {
  int status = 0;   ///< the exit status; 128 + n when killed by signal n
  std::string out;  ///< standard output
  std::string err;  ///< standard error
};

/// Runs this binary (/proc/self/exe) with `args` (without the program name),
/// in the current directory and environment, stdin from /dev/null, and
/// returns what it printed on each stream. std::runtime_error when it cannot
/// be started or its output cannot be kept (the reason named).
CommandOutput run_self(const std::vector<std::string>& args);

/// `args` as one shell command line after `quire`: each argument quoted
/// where the shell would split or expand it, except a leading `$DOC`, which
/// stays a variable for the reader to set.
std::string command_line(const std::vector<std::string>& args);

}  // namespace quire::cli
