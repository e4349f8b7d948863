#include "quire/native/c_compiler.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <sstream>

#include "quire/support/sha256.h"

extern char** environ;

namespace quire::native {

namespace {

/// The lines of the compiler's diagnostics a failed compile's message quotes;
/// the rest stays in the log the message names.
constexpr int kQuotedErrorLines = 20;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string command_text(const std::vector<std::string>& command) { return fmt::format("{}", fmt::join(command, " ")); }

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
  return fmt::format("wait status {}", status);
}

/// Runs `argv` (searched on PATH, no shell) with stdin from /dev/null and
/// stdout and stderr into `output_fd`; returns its wait status. A compiler
/// that cannot be started at all is the one error a user must be told about
/// by name, so it is reported here.
int run_program(const std::vector<std::string>& argv, int output_fd, int close_fd) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, output_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, output_fd, 2);
  if (close_fd >= 0) posix_spawn_file_actions_addclose(&actions, close_fd);
  pid_t pid = 0;
  const int error = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0)
    throw NativeError(
        fmt::format("no C compiler: could not run `{}` (set $CC to a C compiler): {}", argv[0], std::strerror(error)));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw NativeError(fmt::format("waiting for `{}`: {}", argv[0], std::strerror(errno)));
  return status;
}

/// The first line of `<command> --version`, once per process per command: it
/// stands for the compiler in the cache key, and asking costs a process.
std::string compiler_version(const std::vector<std::string>& command) {
  static std::mutex mutex;
  static std::map<std::vector<std::string>, std::string> known;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = known.find(command); it != known.end()) return it->second;

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw NativeError(fmt::format("pipe: {}", std::strerror(errno)));
  std::vector<std::string> argv = command;
  argv.push_back("--version");
  int status = 0;
  try {
    status = run_program(argv, fds[1], fds[0]);
  } catch (...) {
    close(fds[0]);
    close(fds[1]);
    throw;
  }
  // The version text is a few lines, far below a pipe's capacity, so the
  // child never blocks on a full pipe before the wait above returns.
  close(fds[1]);
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof buffer)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw NativeError(fmt::format("C compiler `{}` does not answer --version ({}): {}", command_text(command),
                                  describe_status(status), text.substr(0, text.find('\n'))));
  return known[command] = text.substr(0, text.find('\n'));
}

/// The CPU's feature list: -march=native makes the object's instructions
/// depend on it, and a cache directory may be shared between machines.
const std::string& cpu_features() {
  static const std::string features = [] {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);)
      if (line.rfind("flags", 0) == 0) return line;
    return std::string();
  }();
  return features;
}

std::string first_lines(const std::string& path, int count) {
  std::ifstream in(path);
  std::string text, line;
  for (int n = 0; n < count && std::getline(in, line); ++n) text += "\n  " + line;
  return text;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) throw NativeError(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
}

void rename_into_place(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    throw NativeError(fmt::format("cannot rename {} to {}: {}", from, to, std::strerror(errno)));
}

}  // namespace

CompilerSettings CompilerSettings::from_environment() {
  CompilerSettings s;
  std::istringstream words(env("CC"));
  for (std::string w; words >> w;) s.command.push_back(w);
  if (s.command.empty()) s.command = {"cc"};
  if (!env("QUIRE_CACHE_DIR").empty())
    s.cache_dir = env("QUIRE_CACHE_DIR");
  else if (!env("XDG_CACHE_HOME").empty())
    s.cache_dir = env("XDG_CACHE_HOME") + "/quire/native";
  else if (!env("HOME").empty())
    s.cache_dir = env("HOME") + "/.cache/quire/native";
  return s;
}

const std::vector<std::string>& compile_flags() {
  // -ffp-contract=off and -fno-fast-math: the emitted code must round every
  // product and sum on its own, as the kernel interpreter does.
  // -fopenmp-simd: the layout's `lanes` become `#pragma omp simd` (no
  // OpenMP runtime; only the vectorizer's pragma).
  // -fno-tree-slp-vectorize: GCC 12.2's straight-line (SLP) vectorizer,
  // with AVX, drops the round trip `(double)(float)x` of independent values
  // it packs together, so four f32 roundings side by side (a tile's copies,
  // nest_order.h) came out unrounded (tests:
  // NativeRunnerTest.RoundingsSideBySideAreEachRounded). The lanes' loops
  // are vectorized by the loop vectorizer, which rounds them.
  // -fno-math-errno: sqrt becomes the instruction alone (no call that
  // might set errno for a negative argument, which kept every loop with a
  // sqrt scalar); its value is the same correctly rounded square root, and
  // no kernel reads errno.
  static const std::vector<std::string> flags = {
      "-O2",           "-march=native",           "-fPIC",    "-shared",        "-ffp-contract=off", "-fno-fast-math",
      "-fopenmp-simd", "-fno-tree-slp-vectorize", "-std=c99", "-fno-math-errno"};
  return flags;
}

SharedObject::SharedObject(const std::string& path) : path_(path) {
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) throw NativeError(fmt::format("cannot load {}: {}", path, dlerror()));
}

SharedObject::~SharedObject() {
  if (handle_) dlclose(handle_);
}

void* SharedObject::symbol(const std::string& name) const {
  dlerror();  // clears a stale error, so that a null below is this lookup's
  void* address = dlsym(handle_, name.c_str());
  if (!address) {
    const char* why = dlerror();
    throw NativeError(fmt::format("no symbol `{}` in {}: {}", name, path_, why ? why : "its address is null"));
  }
  return address;
}

CCompiler::CCompiler(CompilerSettings settings) : settings_(std::move(settings)) {}

void CCompiler::ensure_cache_dir() {
  if (cache_dir_ready_) return;
  if (settings_.cache_dir.empty())
    throw NativeError("no cache directory for compiled kernels: set QUIRE_CACHE_DIR (or HOME)");
  std::error_code ec;
  std::filesystem::create_directories(settings_.cache_dir, ec);
  if (ec)
    throw NativeError(
        fmt::format("cannot create the kernel cache directory {}: {}", settings_.cache_dir, ec.message()));
  if (access(settings_.cache_dir.c_str(), W_OK | X_OK) != 0)
    throw NativeError(
        fmt::format("cannot write to the kernel cache directory {}: {}", settings_.cache_dir, std::strerror(errno)));
  cache_dir_ready_ = true;
}

std::string CCompiler::cache_key(const std::string& source) {
  std::string identity = source;
  identity += '\0' + compiler_version(settings_.command);
  identity += '\0' + command_text(compile_flags());
  identity += '\0' + cpu_features();
  return support::sha256_hex(identity);
}

void CCompiler::compile(const std::string& source, const std::string& key, const std::string& object) {
  // Unique per process and call, so concurrent compiles of one text never
  // write the same file; the renames below make the last one win, whole.
  static std::atomic<int64_t> attempts{0};
  const std::string stem = fmt::format("{}/{}.{}.{}", settings_.cache_dir, key, getpid(), attempts++);
  const std::string source_path = stem + ".c";
  const std::string log_path = stem + ".log";
  const std::string object_tmp = stem + ".so";
  const std::string kept_source = fmt::format("{}/{}.c", settings_.cache_dir, key);
  write_file(source_path, source);

  const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log < 0) throw NativeError(fmt::format("cannot write {}: {}", log_path, std::strerror(errno)));
  std::vector<std::string> argv = settings_.command;
  argv.insert(argv.end(), compile_flags().begin(), compile_flags().end());
  argv.insert(argv.end(), {"-o", object_tmp, source_path, "-lm"});
  int status = 0;
  try {
    status = run_program(argv, log, -1);
  } catch (...) {
    close(log);
    std::remove(source_path.c_str());
    std::remove(log_path.c_str());
    throw;
  }
  close(log);
  ++compilations_;
  // The source stays beside its object: what a cached object was built
  // from, or what failed to build, can be read there.
  rename_into_place(source_path, kept_source);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const std::string diagnostics = first_lines(log_path, kQuotedErrorLines);
    std::remove(log_path.c_str());
    std::remove(object_tmp.c_str());
    throw NativeError(fmt::format("C compiler `{}` failed ({}) on {}:{}", command_text(settings_.command),
                                  describe_status(status), kept_source, diagnostics));
  }
  std::remove(log_path.c_str());
  rename_into_place(object_tmp, object);
}

void* CCompiler::load(const std::string& source, const std::string& symbol) {
  ensure_cache_dir();
  const std::string key = cache_key(source);
  auto it = objects_.find(key);
  if (it != objects_.end()) {
    ++cache_hits_;
  } else {
    const std::string object = fmt::format("{}/{}.so", settings_.cache_dir, key);
    if (access(object.c_str(), R_OK) == 0)
      ++cache_hits_;
    else
      compile(source, key, object);
    it = objects_.emplace(key, std::make_unique<SharedObject>(object)).first;
  }
  return it->second->symbol(symbol);
}

}  // namespace quire::native
