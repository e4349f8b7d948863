#include "quire/native/c_compiler.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>

#include "quire/runtime/isa.h"
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
/// by name, so it is reported here, as is one that runs past `timeout_s`.
int run_program(const std::vector<std::string>& argv, int output_fd, int close_fd, double timeout_s) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, output_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, output_fd, 2);
  if (close_fd >= 0) posix_spawn_file_actions_addclose(&actions, close_fd);
  // A process group of its own, so that a compiler past its time is killed
  // with the programs it started (cc1, as), which would otherwise run on
  // and could hold the --version pipe open.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);
  pid_t pid = 0;
  const int error = posix_spawnp(&pid, args[0], &actions, &attributes, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (error != 0)
    throw NativeError(
        fmt::format("no C compiler: could not run `{}` (set $CC to a C compiler): {}", argv[0], std::strerror(error)));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  // Polled: a compile takes tens of milliseconds or more, so a wait that
  // starts at 1 ms and doubles to 20 ms costs it nothing measurable.
  auto pause = std::chrono::milliseconds(1);
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return status;
    if (done < 0 && errno != EINTR)
      throw NativeError(fmt::format("waiting for `{}`: {}", argv[0], std::strerror(errno)));
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(-pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      throw NativeError(fmt::format("C compiler `{}` did not finish within {} s and was killed (the limit is "
                                    "$QUIRE_CC_TIMEOUT, in seconds)",
                                    argv[0], timeout_s));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

/// The first line of `<command> --version`, once per process per command: it
/// stands for the compiler in the cache key, and asking costs a process.
std::string compiler_version(const std::vector<std::string>& command, double timeout_s) {
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
    status = run_program(argv, fds[1], fds[0], timeout_s);
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

/// The first line of every object's record; a change of its layout changes it.
constexpr const char* kRecordHeader = "quire-native-object 1";

/// What decides an object's bytes besides the CPU: the C text, the compiler
/// command and the flags (TRUST in c_compiler.h).
std::string build_digest(const std::string& source, const std::vector<std::string>& command) {
  return support::sha256_hex(source + '\0' + command_text(command) + '\0' + command_text(compile_flags()));
}

std::string record_path(const std::string& object) {
  return object.substr(0, object.size() - std::string_view(".so").size()) + ".sum";
}

std::string record_text(const std::string& build, const std::string& object_digest) {
  return fmt::format("{}\nbuild {}\nobject {}\n", kRecordHeader, build, object_digest);
}

/// The whole of a file, or nullopt when it cannot be read.
std::optional<std::string> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return std::nullopt;
  return bytes;
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
  if (const std::string limit = env("QUIRE_CC_TIMEOUT"); !limit.empty()) {
    char* end = nullptr;
    const double seconds = std::strtod(limit.c_str(), &end);
    if (end == limit.c_str() || *end != '\0' || !(seconds > 0) || !std::isfinite(seconds))
      s.timeout_error = fmt::format("QUIRE_CC_TIMEOUT={}: not a positive number of seconds", limit);
    else
      s.timeout_s = seconds;
  }
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
  //
  // The instruction set: the processor's own (-march=native), unless
  // QUIRE_ISA caps it below what the processor has (runtime/isa.h): under
  // avx2, -mno-avx512f (which turns off every AVX-512 extension with it),
  // under baseline x86-64's own. The cache key holds the flags, so the
  // objects of different caps never mix.
  static const std::vector<std::string> flags = [] {
    std::vector<std::string> f = {
        "-O2",           "-march=native",           "-fPIC",    "-shared",        "-ffp-contract=off", "-fno-fast-math",
        "-fopenmp-simd", "-fno-tree-slp-vectorize", "-std=c99", "-fno-math-errno"};
    if (runtime::widest_isa() < runtime::cpu_isa()) {
      switch (runtime::widest_isa()) {
#if defined(__aarch64__)
        // armv8-a: the architecture's own level (Advanced SIMD included).
        case runtime::Isa::Baseline: f[1] = "-march=armv8-a"; break;
#else
        case runtime::Isa::Baseline: f[1] = "-march=x86-64"; break;
#endif
        case runtime::Isa::Avx2: f.insert(f.begin() + 2, "-mno-avx512f"); break;
        case runtime::Isa::Neon:  // aarch64's only level: never below the processor's
        case runtime::Isa::Avx512: break;  // never below the processor's
      }
    }
    return f;
  }();
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

std::string CCompiler::cache_key(const std::string& source) const {
  std::string identity = source;
  identity += '\0' + compiler_version(settings_.command, settings_.timeout_s);
  identity += '\0' + command_text(compile_flags());
  identity += '\0' + cpu_features();
  return support::sha256_hex(identity);
}

void CCompiler::compile(const std::string& source, const std::string& key, const std::string& object,
                        int64_t& runs) const {
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
    status = run_program(argv, log, -1, settings_.timeout_s);
  } catch (...) {
    close(log);
    std::remove(source_path.c_str());
    std::remove(log_path.c_str());
    throw;
  }
  close(log);
  ++runs;
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
  const std::optional<std::string> built = file_bytes(object_tmp);
  if (!built) throw NativeError(fmt::format("cannot read the compiled object {}", object_tmp));
  // The record goes in first: a reader that sees the new object with the
  // old record (or none) compiles again, never trusts a stale record.
  const std::string record_tmp = stem + ".sum";
  write_file(record_tmp, record_text(build_digest(source, settings_.command), support::sha256_hex(*built)));
  rename_into_place(record_tmp, record_path(object));
  rename_into_place(object_tmp, object);
}

std::string CCompiler::check_object(const std::string& source, const std::string& object) {
  const std::string record_file = record_path(object);
  const std::optional<std::string> record = file_bytes(record_file);
  if (!record) return fmt::format("has no record of what it was built from ({} cannot be read)", record_file);
  std::istringstream lines(*record);
  std::string header, build_word, build, object_word, object_digest;
  std::getline(lines, header);
  lines >> build_word >> build >> object_word >> object_digest;
  if (header != kRecordHeader || build_word != "build" || object_word != "object")
    return fmt::format("has an unreadable record ({})", record_file);
  if (build != build_digest(source, settings_.command))
    return "was built from another kernel's source or another compiler command";
  const std::optional<std::string> bytes = file_bytes(object);
  if (!bytes) return "cannot be read";
  if (support::sha256_hex(*bytes) != object_digest)
    return fmt::format("does not match the checksum of the object built ({} bytes now: changed or truncated)",
                       bytes->size());
  return "";
}

void CCompiler::warn(const std::string& message) const {
  if (settings_.warn) settings_.warn(message);
  else std::cerr << "quire: warning: " << message << "\n";
}

std::string CCompiler::object_path(const std::string& key) const {
  return fmt::format("{}/{}.so", settings_.cache_dir, key);
}

bool CCompiler::needs_compile(const std::string& source, const std::string& object) {
  if (access(object.c_str(), R_OK) != 0) return true;
  // Written before objects had records (an older quire, maybe sharing the
  // cache): no sign of damage, only nothing to check it against.
  if (access(record_path(object).c_str(), F_OK) != 0) return true;
  if (const std::string problem = check_object(source, object); !problem.empty()) {
    warn(fmt::format("the cached kernel object {} {}: compiling it again", object, problem));
    return true;
  }
  return false;
}

void* CCompiler::load(const std::string& source, const std::string& symbol) {
  if (!settings_.timeout_error.empty()) throw NativeError(settings_.timeout_error);
  ensure_cache_dir();
  const std::string key = cache_key(source);
  auto it = objects_.find(key);
  if (it != objects_.end()) {
    ++cache_hits_;
  } else {
    const std::string object = object_path(key);
    std::optional<Placement> in_batch;
    if (const auto p = prepared_.find(key); p != prepared_.end()) {
      (p->second.built ? built_ : cache_hits_) += 1;  // compiled, or found whole in the cache, by prepare()
      in_batch = p->second.in_batch;
      prepared_.erase(p);
    } else if (!needs_compile(source, object)) {
      ++cache_hits_;
    } else if ((in_batch = find_member(source, key, symbol))) {
      ++cache_hits_;
    } else {
      compile(source, key, object, compilations_);
      ++built_;
    }
    Loaded loaded;
    if (in_batch) {
      batch_object(in_batch->batch);
      loaded = {batches_.at(in_batch->batch), in_batch->symbol};
    } else {
      loaded = {std::make_shared<SharedObject>(object), ""};
    }
    it = objects_.emplace(key, std::move(loaded)).first;
  }
  return it->second.object->symbol(it->second.symbol.empty() ? symbol : it->second.symbol);
}

SharedObject& CCompiler::batch_object(const std::string& batch) {
  auto it = batches_.find(batch);
  if (it == batches_.end()) it = batches_.emplace(batch, std::make_shared<SharedObject>(object_path(batch))).first;
  return *it->second;
}

namespace {

/// The first line of a member's link; a change of its layout changes it.
constexpr const char* kLinkHeader = "quire-native-member 1";

std::string link_path(const std::string& dir, const std::string& key) { return fmt::format("{}/{}.in", dir, key); }

/// A member's symbol in its batch: unique per source, the same in every batch.
std::string member_symbol(const std::string& symbol, const std::string& key) {
  return fmt::format("{}_{}", symbol, key.substr(0, 16));
}

/// The member's text in a batch's unit: its symbol renamed around it.
std::string member_text(const std::string& source, const std::string& symbol, const std::string& renamed) {
  return fmt::format("#define {} {}\n{}\n#undef {}\n", symbol, renamed, source, symbol);
}

}  // namespace

std::optional<CCompiler::Placement> CCompiler::find_member(const std::string& source, const std::string& key,
                                                           const std::string& symbol) {
  const std::optional<std::string> link = file_bytes(link_path(settings_.cache_dir, key));
  if (!link) return std::nullopt;
  std::istringstream lines(*link);
  std::string header, batch_word, batch, symbol_word, renamed, build_word, build;
  std::getline(lines, header);
  lines >> batch_word >> batch >> symbol_word >> renamed >> build_word >> build;
  auto damaged = [&](const std::string& why) -> std::optional<Placement> {
    warn(fmt::format("the cached kernel link {} {}: compiling the kernel again", link_path(settings_.cache_dir, key),
                     why));
    return std::nullopt;
  };
  if (header != kLinkHeader || batch_word != "batch" || symbol_word != "symbol" || build_word != "build")
    return damaged("is unreadable");
  if (build != build_digest(source, settings_.command) || renamed != member_symbol(symbol, key))
    return damaged("was written for another kernel's source or symbol");
  const std::string object = object_path(batch);
  auto unit = checked_units_.find(batch);
  if (unit == checked_units_.end()) {
    // Checked once a process: the object against its record, the record
    // against the unit kept beside it.
    std::optional<std::string> text = file_bytes(fmt::format("{}/{}.c", settings_.cache_dir, batch));
    if (!text) return damaged(fmt::format("names the batch {}, whose source cannot be read", object));
    if (const std::string problem = check_object(*text, object); !problem.empty())
      return damaged(fmt::format("names the batch object {}, which {}", object, problem));
    unit = checked_units_.emplace(batch, std::move(*text)).first;
  }
  if (unit->second.find(member_text(source, symbol, renamed)) == std::string::npos)
    return damaged(fmt::format("names the batch {}, which does not hold the kernel", object));
  return Placement{batch, renamed};
}

std::string CCompiler::compile_batch(const std::vector<std::pair<const std::string*, std::string>>& members,
                                     const std::string& symbol, int64_t& runs) const {
  if (members.size() == 1) {
    compile(*members[0].first, members[0].second, object_path(members[0].second), runs);
    return "";
  }
  std::string unit = fmt::format("/* A batch of {} kernels compiled together (c_compiler.h, BATCHES). */\n",
                                 members.size());
  for (const auto& [source, key] : members) unit += member_text(*source, symbol, member_symbol(symbol, key));
  const std::string batch = cache_key(unit);  // the unit's key as any source's
  try {
    compile(unit, batch, object_path(batch), runs);
  } catch (const NativeError&) {
    // One member that does not compile must not hide which, nor keep the
    // others from being built: each alone, the first failure reported.
    std::exception_ptr first;
    for (const auto& [source, key] : members) {
      try {
        compile(*source, key, object_path(key), runs);
      } catch (const NativeError&) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
    return "";
  }
  for (const auto& [source, key] : members) {
    static std::atomic<int64_t> attempts{0};
    const std::string tmp = fmt::format("{}/{}.{}.{}.in", settings_.cache_dir, key, getpid(), attempts++);
    write_file(tmp, fmt::format("{}\nbatch {}\nsymbol {}\nbuild {}\n", kLinkHeader, batch, member_symbol(symbol, key),
                                build_digest(*source, settings_.command)));
    rename_into_place(tmp, link_path(settings_.cache_dir, key));
  }
  return batch;
}

void CCompiler::prepare(const std::vector<std::string>& sources, int jobs) {
  if (!settings_.timeout_error.empty()) throw NativeError(settings_.timeout_error);
  ensure_cache_dir();
  struct Job {
    const std::string* source;
    std::string key;
    std::exception_ptr error;
    int64_t runs = 0;
  };
  std::vector<Job> todo;
  std::set<std::string> seen;
  for (const std::string& source : sources) {
    std::string key = cache_key(source);
    if (objects_.count(key) || prepared_.count(key) || !seen.insert(key).second) continue;
    if (needs_compile(source, object_path(key)))
      todo.push_back({&source, std::move(key), nullptr, 0});
    else
      prepared_.emplace(std::move(key), Prepared{false, std::nullopt});  // checked: load() need not again
  }
  // Each compile is a process of its own: the threads only start and wait
  // for them. Each writes its own temporary files and renames them into
  // place whole (compile), so side by side they never meet.
  std::atomic<size_t> next = 0;
  auto work = [&] {
    for (size_t i; (i = next++) < todo.size();) {
      try {
        compile(*todo[i].source, todo[i].key, object_path(todo[i].key), todo[i].runs);
      } catch (...) {
        todo[i].error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> helpers;
  const size_t threads = std::min<size_t>(todo.size(), static_cast<size_t>(std::max(jobs, 1)));
  for (size_t t = 1; t < threads; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& t : helpers) t.join();
  for (const Job& job : todo) compilations_ += job.runs;
  for (const Job& job : todo) {
    if (job.error) std::rethrow_exception(job.error);
    prepared_.emplace(job.key, Prepared{true, std::nullopt});
  }
}

void CCompiler::prepare_batched(const std::vector<std::string>& sources, const std::string& symbol, int jobs) {
  if (!settings_.timeout_error.empty()) throw NativeError(settings_.timeout_error);
  ensure_cache_dir();
  std::vector<std::pair<const std::string*, std::string>> todo;
  std::set<std::string> seen;
  for (const std::string& source : sources) {
    std::string key = cache_key(source);
    if (objects_.count(key) || prepared_.count(key) || !seen.insert(key).second) continue;
    if (access(object_path(key).c_str(), R_OK) == 0 && !needs_compile(source, object_path(key)))
      prepared_.emplace(std::move(key), Prepared{false, std::nullopt});
    else if (std::optional<Placement> in_batch = find_member(source, key, symbol))
      prepared_.emplace(std::move(key), Prepared{false, in_batch});
    else
      todo.emplace_back(&source, std::move(key));
  }
  // Contiguous shares, in the sources' order: the same sources make the same units.
  const size_t count = std::min<size_t>(todo.size(), static_cast<size_t>(std::max(jobs, 1)));
  std::vector<std::vector<std::pair<const std::string*, std::string>>> batches(count);
  for (size_t i = 0; i < todo.size(); ++i) batches[i * count / todo.size()].push_back(todo[i]);
  std::vector<std::exception_ptr> errors(count);
  std::vector<int64_t> runs(count, 0);
  std::vector<std::string> built(count);  // each batch's key ("": its members built alone)
  auto build = [&](size_t b) {
    try {
      built[b] = compile_batch(batches[b], symbol, runs[b]);
    } catch (...) {
      errors[b] = std::current_exception();
    }
  };
  std::vector<std::thread> helpers;
  for (size_t b = 1; b < count; ++b) helpers.emplace_back(build, b);
  if (count > 0) build(0);
  for (std::thread& t : helpers) t.join();
  for (int64_t r : runs) compilations_ += r;
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  for (size_t b = 0; b < count; ++b)
    for (const auto& [source, key] : batches[b]) {
      std::optional<Placement> in_batch;
      if (!built[b].empty()) in_batch = Placement{built[b], member_symbol(symbol, key)};
      prepared_.emplace(key, Prepared{true, in_batch});
    }
}

}  // namespace quire::native
