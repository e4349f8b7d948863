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
// BATCHES. A process per kernel spends most of its time starting the
// compiler: a GPT's step of 103 kernels took 7 s to compile cold on two
// cores, where two translation units of half of them each take under a second.
// prepare_batched() compiles what the cache lacks in at most one unit per
// job. A unit is each member's own text in turn, its kernel symbol renamed
// by a #define (the emitted prelude guards itself, so it is compiled once),
// kept beside its object as any source is, with the object's record. Each
// member gets a link `<key>.in` naming its batch, its symbol and its own
// build digest. A member is loaded from its batch only when the link's
// digest is its source's, the batch's object passes its record, and the
// unit kept beside it holds the member's text under that symbol; otherwise
// (and warned where something is damaged) it is compiled alone as before.
//
// TIME LIMIT. A compiler that never returns would block `run` and `train`
// forever: each run of the compiler is killed (with everything it started)
// after `$QUIRE_CC_TIMEOUT` seconds (120 by default), which is a NativeError,
// so the engine falls back to the kernel interpreter with a warning.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
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

  /// prepare(), with the sources the cache lacks compiled several to a
  /// translation unit (BATCHES below): at most `jobs` compiler processes,
  /// each building one object that holds its share of the sources, each
  /// source's `symbol` renamed `symbol_<its key's first 16 digits>`. A
  /// batch that fails to compile is compiled again source by source, so a
  /// failure names its own source. The loads that follow find each source
  /// in its batch.
  void prepare_batched(const std::vector<std::string>& sources, const std::string& symbol, int jobs);

  int64_t compilations() const { return compilations_; }  ///< compiler runs (failed ones included)
  /// Loads whose object had to be compiled (by the load or a prepare
  /// before it): a batch of n sources counts n here and one compiler run.
  int64_t built() const { return built_; }
  int64_t cache_hits() const { return cache_hits_; }      ///< loads that found their object built
  const CompilerSettings& settings() const { return settings_; }

 private:
  std::string cache_key(const std::string& source) const;
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

  /// Where a source's object is: its own (`batch` empty), or a batch's,
  /// under the member's own symbol.
  struct Placement {
    std::string batch;   ///< the batch object's key
    std::string symbol;  ///< the member's symbol in it
  };
  /// The batch that holds `source` (key `key`) under `symbol`, checked
  /// (BATCHES below); nullopt where there is none, or none that passes
  /// (warned about).
  std::optional<Placement> find_member(const std::string& source, const std::string& key, const std::string& symbol);
  /// Compiles `members` (sources and keys) as one batch object and returns
  /// its key; on a failed compile (or for one member), each member alone,
  /// and "". Safe on several threads, each with its own `runs`.
  std::string compile_batch(const std::vector<std::pair<const std::string*, std::string>>& members, const std::string& symbol,
                     int64_t& runs) const;
  /// The loaded object of a batch (loaded once).
  SharedObject& batch_object(const std::string& batch);

  struct Loaded {
    std::shared_ptr<SharedObject> object;
    std::string symbol;  ///< "" : the caller's
  };
  struct Prepared {
    bool built = false;  ///< compiled by prepare (else found whole in the cache)
    std::optional<Placement> in_batch;
  };

  CompilerSettings settings_;
  bool cache_dir_ready_ = false;
  std::map<std::string, Loaded> objects_;  ///< by cache key
  std::map<std::string, std::shared_ptr<SharedObject>> batches_;  ///< by batch key
  std::map<std::string, std::string> checked_units_;  ///< batch key → its unit's text, checked (find_member)
  /// Keys prepare() settled, not yet loaded: built by it or found whole in
  /// the cache, in an object of its own or a batch's. Loaded without a check.
  std::map<std::string, Prepared> prepared_;
  int64_t compilations_ = 0;
  int64_t built_ = 0;
  int64_t cache_hits_ = 0;
};

}  // namespace quire::native
