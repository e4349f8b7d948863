#pragma once
// A machine profile: what a cost model needs to know about the machine a
// program will run on. The precision solver prices a stored value by the
// roofline of its traffic and arithmetic (precision/solver.h); the layout
// plan of the native backend (kernel/layout.h) predicts each loop nest's time
// from the caches, bandwidths, the cost of starting a split launch and the
// constants `quire profile calibrate` fitted on this machine.
//
//   {"format": "quire-profile", "version": 2, "name": "…", "cores": 2,
//    "memory_bandwidth": 3.1e10,                      ← bytes a second, read plus written
//    "peak_flops": {"f64": …, "f32": …, "bf16": …, "f16": …},  ← a second, all cores
//    "vector_bytes": 64, "caches": {"l1": …, "l2": …, "l3": …, "l3_shared_by": 2, "line": 64},
//    "bandwidth": {"l2": …, "l3": …},                 ← bytes a second on one core
//    "layout_model": {"launch_seconds": …, "spawn_seconds": …, "op_seconds": …, "load_seconds": …,
//                     "call_seconds": …, "fresh_seconds": …, "lane_speedup": …, "p": …, "error": …, "rank_correlation": …, "points": …},
//    "source": "how these numbers were obtained"}
//
// Version 1 files (the first four keys) are still read; they carry no layout
// model, and the layout plan refuses them.

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "quire/runtime/float_types.h"

namespace quire::machine {

struct Caches {
  int64_t l1 = 0, l2 = 0, l3 = 0;  ///< bytes; l1 and l2 per core
  int l3_shared_by = 1;            ///< cores sharing one l3
  int line = 64;                   ///< bytes
};

/// The layout plan's cost model, fitted on a calibration (kernel/layout.h
/// says how each constant enters a prediction).
struct LayoutModel {
  double launch_seconds = 0;  ///< λ: what any launch costs
  double spawn_seconds = 0;   ///< starting a launch split over workers (measured)
  double op_seconds = 0;      ///< one floating-point operation on one lane
  double load_seconds = 0;    ///< one element loaded or stored on one lane
  double call_seconds = 0;    ///< one call of a library function (exp, log, …), never vectorized
  double fresh_seconds = 0;   ///< one byte of a launch's output, allocated and zeroed before it runs
  double lane_speedup = 1;    ///< what a vectorized loop gains over a scalar one
  /// FLOP/s of one thread's packed f32 product (kernel_ir.h, PackedProduct),
  /// measured; 0 where the profile predates it: no packed layout is offered.
  double packed_flops = 0;
  double p = 1;               ///< the terms combine by a p-norm
  double error = 0;           ///< u: the mean relative error on the calibration
  double rank_correlation = 0;  ///< Spearman's, predictions against measurements
  int points = 0;             ///< measurements fitted
};

struct Profile {
  std::string name;
  std::string source;
  int cores = 1;
  double memory_bandwidth = 0;  ///< bytes per second, read plus written
  std::map<runtime::FloatType, double> peak_flops;  ///< floating-point operations per second, by operand type
  int vector_bytes = 0;  ///< the widest vector register
  Caches caches;
  double l2_bandwidth = 0, l3_bandwidth = 0;  ///< bytes per second, read plus written, one core
  std::optional<LayoutModel> layout;          ///< absent in version 1 files

  /// The roofline time of moving `bytes` and computing `flops` in `type`:
  /// whichever of the two limits binds.
  double roofline_seconds(double bytes, double flops, runtime::FloatType type) const;
};

/// Reads a profile. io::IoError(path, "key `peak_flops.bf16`: …") when the
/// file is unreadable, malformed, or a number is missing or not positive.
Profile read_profile(const std::string& path);
/// The same from JSON already read; `origin` names it in errors.
Profile parse_profile(const nlohmann::json& j, const std::string& origin);
/// Version 2 JSON.
nlohmann::ordered_json profile_json(const Profile& p);
/// Writes profile_json(p) atomically (io::IoError on failure).
void write_profile(const std::string& path, const Profile& p);

/// The profile a layout plan reads: the file at `path`, or the shipped one
/// when `path` is empty. io::IoError naming the path when the file has no
/// layout model (a version 1 profile).
Profile planning_profile(const std::string& path);

/// The profile that ships for the machine CI runs on (profiles/ci-2core-avx512.json,
/// compiled in): the plan's default when no --profile is given.
const Profile& shipped_profile();

}  // namespace quire::machine
