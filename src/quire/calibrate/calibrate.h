#pragma once
// Calibration: measuring this machine and fitting the layout plan's cost
// model (kernel/layout.h) to kernels timed on it, which gives the version 2
// profile `quire profile calibrate` writes (profile.h).
//
// What is read, measured and fitted, in order:
//   1. cores, caches (sysfs) and the vector width (the CPU's features);
//   2. a calibration set of loop nests, each timed natively at every point
//      of its layout space (needs a C compiler: native/c_compiler.h);
//   3. the pool's spawn cost, the copy bandwidths of L2, L3 and memory, and
//      the peak rate of fused multiply-adds in f64 and f32;
//   4. the model's remaining constants, fitted to the timings of step 2 by
//      Nelder–Mead on Σ (log predicted − log measured)².
// Every number in the profile is measured or fitted; none is assumed.

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "quire/kernel/kernel_ir.h"
#include "quire/kernel/layout.h"
#include "quire/machine/profile.h"

namespace quire::machine {

/// The caches described under `cache_dir` (sysfs's `…/cpu0/cache`: one
/// `index*` folder per cache, with `level`, `type`, `size`, `shared_cpu_list`
/// and `coherency_line_size`). Instruction caches are skipped. io::IoError
/// naming the folder or file when it is missing or malformed.
Caches read_caches(const std::string& cache_dir);
/// Where the kernel publishes cpu0's caches.
inline constexpr const char* kSysfsCacheDir = "/sys/devices/system/cpu/cpu0/cache";

/// The widest vector register the CPU supports: 64 (AVX-512), 32 (AVX2) or 16.
int host_vector_bytes();

/// One nest of the calibration set, before any layout.
struct CalibrationNest {
  std::string name;  ///< "chain4 [64, 64]"
  kernel::Kernel kernel;
};
/// The calibration set: element-wise chains of 1, 4 and 16 operations and
/// row sums, over 2^8 to 2^22 elements and a few beyond (to reach memory).
/// `quick`: a small subset, for tests.
std::vector<CalibrationNest> calibration_nests(bool quick);

/// One timed point: a nest at one layout.
struct CalibrationSample {
  std::string nest;
  kernel::NestFacts facts;
  kernel::Layout layout;
  double seconds = 0;  ///< the median launch
};

/// Fits launch_seconds, op_seconds, load_seconds, lane_speedup and p (in
/// [1, 3]) to `samples` under `measured`'s caches, bandwidths and
/// layout->spawn_seconds, which are kept. Fills error, rank_correlation and
/// points too. std::invalid_argument without samples or without a layout model
/// in `measured` (it carries spawn_seconds).
LayoutModel fit_layout_model(const std::vector<CalibrationSample>& samples, const Profile& measured);

/// Fits launch_seconds and one factor s to `samples` under `measured`'s
/// caches, bandwidths and layout->spawn_seconds, keeping the shape of
/// `anchor` (a model fitted to a full calibration set): op, load, call and
/// fresh are anchor's times s, lane_speedup and p anchor's own. The quick
/// calibration's four nests cannot pin seven constants (fitted freely on this
/// machine they gave a lane speedup of 45 to 250 and loads at 0.04 ns, and
/// plans under them ran the GPT example's step 2.5 times slower than the
/// shipped profile's); two they can. Fills error, rank_correlation and points
/// too. std::invalid_argument as fit_layout_model.
LayoutModel fit_layout_scale(const std::vector<CalibrationSample>& samples, const Profile& measured,
                             const LayoutModel& anchor);

/// The model a point of the fit's search stands for: `x` holds the logs of
/// launch, op, load, lane speedup, (p through a logistic map onto (1, 3)),
/// call and fresh, each log held within ±35, so that every point is a model
/// whose constants are positive (exp of a log the search walked far down
/// would underflow to 0, which a profile refuses). Other fields from `m`.
LayoutModel layout_model_at(LayoutModel m, const std::vector<double>& x);

/// Spearman's ρ: Pearson's correlation of the ranks, ties given their mean
/// rank. 0 when either side is constant; std::invalid_argument when the sizes
/// differ.
double spearman(const std::vector<double>& a, const std::vector<double>& b);

struct CalibrationOptions {
  std::string name;                       ///< the profile's name
  bool quick = false;                     ///< the small calibration set and short measurements, the
                                          ///< model fitted by fit_layout_scale on the shipped one's shape
  std::string cache_dir = kSysfsCacheDir;  ///< where read_caches looks
  std::function<void(const std::string&)> progress;  ///< told each step as it starts (may be empty)
};

struct Calibration {
  Profile profile;
  std::vector<CalibrationSample> samples;
  std::vector<double> predicted;  ///< seconds, by sample, under profile's fitted model
};

/// Measures this machine and fits the model. native::NativeError when no
/// kernel can be compiled, io::IoError when sysfs cannot be read.
Calibration calibrate(const CalibrationOptions& options);

/// Floating-point operations per second of fused multiply-adds in `t` (f64
/// or f32) on `threads` threads: independent chains in the widest vector
/// registers runtime::widest_isa() allows (16 zmm chains on AVX-512, 12 ymm
/// on AVX2, else 16 scalar), each thread running for about `seconds`; the
/// median of 5 runs after a warm-up.
double peak_rate(runtime::FloatType t, int threads, double seconds);

/// Floating-point operations per second of one thread's packed f32 product
/// (runtime/gemm.h's sgemm, which packed kernels run) at n × n × n: the
/// median of 5 runs after a warm-up. The layout model's packed_flops.
double packed_product_rate(int64_t n);

/// The report: caches, bandwidths, peak rates, spawn, the fitted constants,
/// u and ρ, and a dozen samples spread over the measured range.
std::string print_calibration(const Calibration& c);

}  // namespace quire::machine
