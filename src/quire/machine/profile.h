#pragma once
// A machine profile: what a cost model needs to know about the machine a
// program will run on. The precision solver prices a stored value by the
// roofline of its traffic and arithmetic (precision/solver.h); the layout
// plan of the native backend reads the same file.
//
//   {"format": "quire-profile", "version": 1, "name": "…", "cores": 2,
//    "memory_bandwidth": 3.1e10,                      ← bytes a second, read plus written
//    "peak_flops": {"f64": …, "f32": …, "bf16": …, "f16": …},  ← a second, all cores
//    "source": "how these numbers were obtained"}

#include <map>
#include <string>

#include "quire/runtime/float_types.h"

namespace quire::machine {

struct Profile {
  std::string name;
  std::string source;
  int cores = 1;
  double memory_bandwidth = 0;  ///< bytes per second, read plus written
  std::map<runtime::FloatType, double> peak_flops;  ///< floating-point operations per second, by operand type

  /// The roofline time of moving `bytes` and computing `flops` in `type`:
  /// whichever of the two limits binds.
  double roofline_seconds(double bytes, double flops, runtime::FloatType type) const;
};

/// Reads a profile. io::IoError(path, "key `peak_flops.bf16`: …") when the
/// file is unreadable, malformed, or a number is missing or not positive.
Profile read_profile(const std::string& path);

}  // namespace quire::machine
