#include "self_command.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace quire::cli {

namespace {

/// An unlinked temporary file: the child writes a stream there, and the
/// parent reads it back after the child ends. Files rather than pipes, so
/// that neither side can block on the other however much is printed.
class ScratchFile {
 public:
  ScratchFile() {
    FILE* f = std::tmpfile();
    if (!f) throw std::runtime_error(fmt::format("cannot make a temporary file: {}", std::strerror(errno)));
    file_ = f;
  }
  ~ScratchFile() { std::fclose(file_); }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;
  int fd() const { return fileno(file_); }
  std::string read_all() const {
    std::string text;
    char buffer[1 << 16];
    for (off_t at = 0;;) {
      const ssize_t n = pread(fd(), buffer, sizeof buffer, at);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw std::runtime_error(fmt::format("cannot read a temporary file: {}", std::strerror(errno)));
      if (n == 0) return text;
      text.append(buffer, static_cast<size_t>(n));
      at += n;
    }
  }

 private:
  FILE* file_ = nullptr;
};

bool plain(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::strchr("-_./=,:+@%", c) != nullptr;
}

}  // namespace

CommandOutput run_self(const std::vector<std::string>& args) {
  ScratchFile out, err;
  std::vector<std::string> argv = {"quire"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> pointers;
  for (std::string& a : argv) pointers.push_back(a.data());
  pointers.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out.fd(), 1);
  posix_spawn_file_actions_adddup2(&actions, err.fd(), 2);
  pid_t pid = 0;
  const int error = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, pointers.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) throw std::runtime_error(fmt::format("cannot run quire again: {}", std::strerror(error)));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw std::runtime_error(fmt::format("waiting for quire: {}", std::strerror(errno)));
  CommandOutput result;
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = out.read_all();
  result.err = err.read_all();
  return result;
}

std::string command_line(const std::vector<std::string>& args) {
  std::string line = "quire";
  for (const std::string& a : args) {
    bool simple = !a.empty();
    for (char c : a) simple = simple && plain(c);
    line += ' ';
    if (simple) {
      line += a;
    } else if (a.rfind("$DOC/", 0) == 0 || a.rfind("@$DOC/", 0) == 0) {
      // A path in the document's folder: in double quotes, so that $DOC
      // expands whatever folder it names (the rest of such a path is quire's).
      line += '"' + a + '"';
    } else {
      line += "'";
      for (char c : a) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
      line += "'";
    }
  }
  return line;
}

}  // namespace quire::cli
