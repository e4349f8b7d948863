#pragma once
// Compiling C source (c_emit.h's) with the system C compiler into shared
// objects, caching them on disk, and loading them.
//
// The compiler is `$CC` (split on blanks, so `ccache cc` works) or `cc`, run
// without a shell and with flags that forbid contraction and fast-math: the
// emitted code's bits depend on them (c_emit.h). An object is named by the
// SHA-256 of everything that decides its bytes (the C text, the compiler's
// version, the flags, the host CPU's features, since -march=native), so a
// second run finds every object already built and compiles nothing. Objects
// are written under a temporary name and renamed into place, so a process
// never loads a half-written one, even with others compiling the same text.
//
// The cache directory is `$QUIRE_CACHE_DIR`, else `$XDG_CACHE_HOME/quire/native`,
// else `$HOME/.cache/quire/native`, created on first use.
//
// TRUST. A file name is no proof of what a file holds: another kernel's
// object copied under this one's name, a truncated object (SIGBUS when
// called) or overwritten code would run silently. Beside each object
// <key>.so lies <key>.sum, recording the SHA-256 of what it was built from
// (the C source, the compiler command and the flags) and of the object's
// bytes. Both are checked before the object is loaded; any mismatch is a
// warning and a compile that replaces the object. An object without a record
// (from a quire before records, which may share the cache) is compiled again
// without a warning: nothing says it is damaged, only that it cannot be checked.
//
// TIME LIMIT. A compiler that never returns would block `run` and `train`
// forever: each run of the compiler is killed (with everything it started)
// after `$QUIRE_CC_TIMEOUT` seconds (120 by default), which is a NativeError,
// so the engine falls back to the kernel interpreter with a warning.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace quire::native {

/// A failure of the native toolchain: no compiler, a failed compile, an
/// unusable cache directory, a failed load. The message names the cause.
class NativeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A compile of one kernel takes well under a second; 120 s leaves room for a
/// loaded machine and a huge kernel while still ending a hung compiler.
inline constexpr double kDefaultCompileTimeoutSeconds = 120;

/// The compiler command and the cache directory, as the environment gives them.
struct CompilerSettings {
  std::vector<std::string> command;  ///< $CC split on blanks, or {"cc"}
  std::string cache_dir;
  /// Seconds a run of the compiler may take before it is killed ($QUIRE_CC_TIMEOUT).
  double timeout_s = kDefaultCompileTimeoutSeconds;
  /// Why $QUIRE_CC_TIMEOUT is unusable ("" when it is fine): every load then
  /// fails with it, rather than compiling without a limit.
  std::string timeout_error;
  /// Where a cache object that fails its check is reported (stderr when empty).
  std::function<void(const std::string&)> warn;

  static CompilerSettings from_environment();
};

/// The flags every compile uses (the cache key includes them).
const std::vector<std::string>& compile_flags();

/// A dlopen'ed shared object, closed when destroyed.
class SharedObject {
 public:
  explicit SharedObject(const std::string& path);  ///< NativeError with dlerror() on failure
  ~SharedObject();
  SharedObject(const SharedObject&) = delete;
  SharedObject& operator=(const SharedObject&) = delete;

  /// The address of `name`; NativeError with dlerror() if it is absent.
  void* symbol(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void* handle_ = nullptr;
};

/// Compiles through the cache and keeps every object it loaded open for its
/// own lifetime (the addresses it hands out point into them).
class CCompiler {
 public:
  explicit CCompiler(CompilerSettings settings = CompilerSettings::from_environment());

  /// The address of `symbol` in the object built from `source`: loaded from
  /// the cache, or compiled into it first. NativeError on any failure.
  void* load(const std::string& source, const std::string& symbol);

  /// Builds into the cache, up to `jobs` compiler processes at a time, the
  /// object of every source in `sources` that load() would compile (each
  /// distinct source once), so that the loads that follow find them built:
  /// a program's kernels are compiled side by side before its first launch
  /// instead of one after another. NativeError (the first failure in
  /// `sources`' order) if a compile fails; the objects built before it stay.
  void prepare(const std::vector<std::string>& sources, int jobs);

  int64_t compilations() const { return compilations_; }  ///< compiler runs (failed ones included)
  int64_t cache_hits() const { return cache_hits_; }      ///< loads that found their object built
  const CompilerSettings& settings() const { return settings_; }

 private:
  std::string cache_key(const std::string& source);
  /// What the object at `object` fails of its record (TRUST above); "" when it passes.
  std::string check_object(const std::string& source, const std::string& object);
  void warn(const std::string& message) const;
  void ensure_cache_dir();
  std::string object_path(const std::string& key) const;
  /// Whether the cached `object` of `source` must be built: absent, without
  /// a record, or failing its record (which is warned about).
  bool needs_compile(const std::string& source, const std::string& object);
  /// Counts a compiler run in `runs` (failed ones included). Safe to run on
  /// several threads at once, each with its own `runs` (prepare does).
  void compile(const std::string& source, const std::string& key, const std::string& object, int64_t& runs) const;

  CompilerSettings settings_;
  bool cache_dir_ready_ = false;
  std::map<std::string, std::unique_ptr<SharedObject>> objects_;  ///< by cache key
  /// Keys prepare() settled, not yet loaded: true where it built the object,
  /// false where it found it whole in the cache. Loaded without a check.
  std::map<std::string, bool> prepared_;
  int64_t compilations_ = 0;
  int64_t cache_hits_ = 0;
};

}  // namespace quire::native
