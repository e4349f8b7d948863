#pragma once
// The profile for the machine in use (docs/backends.md#the-machine-profile).
// The shipped profile describes the machine CI runs on; a plan made from it
// on another processor prices loops by the wrong caches, vector width and
// rates. So where this machine is not the one the shipped profile describes
// (its cores, its widest vector register under QUIRE_ISA's cap, or the sizes
// of its caches differ), `quire run` and `quire train` use a profile measured
// here: a quick calibration (calibrate.h, seconds), made once and kept in the
// object cache's folder as `machine-<key>.json`, the key a digest of the
// facts below, so that another machine (or another QUIRE_ISA cap) sharing the
// folder gets its own. A kept profile is read back as any profile is
// (validated: an unreadable or malformed one is measured again, and the
// reason said); a layout never changes a bit, only speed, so the profile in
// use never changes a result.

#include <functional>
#include <optional>
#include <string>

#include "quire/calibrate/calibrate.h"
#include "quire/machine/profile.h"

namespace quire::machine {

/// What a profile must agree with to describe a machine.
struct MachineFacts {
  std::string processor;  ///< /proc/cpuinfo's model name, "unknown processor" without one
  std::string isa;        ///< runtime::isa_name(widest_isa()): the paths the runtime takes
  int cores = 1;
  int vector_bytes = 0;  ///< host_vector_bytes(): under QUIRE_ISA's cap
  Caches caches;
};

/// This machine's facts: the cores and caches calibrate() reads (the caches
/// from `cache_dir`, sysfs's), the vector width and ISA under QUIRE_ISA.
MachineFacts this_machine(const std::string& cache_dir = kSysfsCacheDir);

/// "avx2, 32-byte vectors, 2 cores, L1 32 KiB, L2 1024 KiB, L3 32768 KiB"
std::string facts_text(const MachineFacts& m);
/// The same facts as a profile states them (the ISA from its vector width).
std::string profile_facts_text(const Profile& p);

/// Whether `p` describes a machine with these facts: the same cores, widest
/// vector register, and L1, L2 and L3 sizes.
bool describes(const Profile& p, const MachineFacts& m);

/// 16 hex digits of the SHA-256 of every fact, the processor's name included.
std::string machine_key(const MachineFacts& m);

struct MachineProfile {
  std::string path;           ///< the profile's file; empty: the shipped profile
  bool measured_now = false;  ///< this call ran the calibration (and wrote `path`)
  double seconds = 0;         ///< what measuring took
  std::string note;           ///< what to tell the user once: set when measured now, else empty
};

/// The profile for a machine with facts `here`: the shipped one when it
/// describes `here`; else the one kept at `<object_cache>/machine-<key>.json`
/// when that reads back as a version 2 profile named `machine-<key>`; else a
/// quick calibration (`measure`, calibrate() by default, given options with
/// quick set and the name), written there atomically, with a note naming the
/// machine, the shipped profile's machine, the time taken and the file (and,
/// when a kept file was refused, why). io::IoError when the folder cannot be
/// created or the file written; native::NativeError when nothing compiles.
MachineProfile machine_profile(const MachineFacts& here, const std::string& object_cache,
                               const std::function<Calibration(const CalibrationOptions&)>& measure = calibrate);

}  // namespace quire::machine
