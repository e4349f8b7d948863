#include "quire/machine/profile_print.h"

#include <fmt/format.h>

namespace quire::machine {

namespace {

std::string kib(int64_t bytes) { return fmt::format("{} KiB", bytes / 1024); }
std::string gbs(double bytes_per_second) { return fmt::format("{:.1f} GB/s", bytes_per_second / 1e9); }

}  // namespace

std::string print_profile(const Profile& p) {
  std::string out = fmt::format("profile `{}`: {}\n", p.name, p.source);
  out += fmt::format("  {:<26} {}\n", "cores", p.cores);
  out += fmt::format("  {:<26} {} bytes\n", "widest vector register", p.vector_bytes);
  out += fmt::format("  {:<26} {} per core\n", "L1, L2", kib(p.caches.l1) + ", " + kib(p.caches.l2));
  out += fmt::format("  {:<26} {}, shared by {} cores\n", "L3", kib(p.caches.l3), p.caches.l3_shared_by);
  out += fmt::format("  {:<26} {} bytes\n", "cache line", p.caches.line);
  out += fmt::format("  {:<26} {}, {} (one core); memory {}\n", "bandwidth from L2, L3", gbs(p.l2_bandwidth),
                     gbs(p.l3_bandwidth), gbs(p.memory_bandwidth));
  std::string peaks;
  for (const auto& [type, flops] : p.peak_flops)
    peaks += fmt::format("{}{} {:.1f}", peaks.empty() ? "" : ", ", runtime::float_type_name(type), flops / 1e9);
  out += fmt::format("  {:<26} {} GFLOP/s (all cores)\n", "peak", peaks);
  if (!p.layout) return out + "  no layout model (a version 1 profile): the layout plan refuses it\n";
  const LayoutModel& m = *p.layout;
  out += fmt::format("layout model, fitted on {} measurements:\n", m.points);
  out += fmt::format("  {:<26} {:.4g} µs\n", "λ, any launch", m.launch_seconds * 1e6);
  out += fmt::format("  {:<26} {:.4g} µs\n", "spawn, a split launch", m.spawn_seconds * 1e6);
  out += fmt::format("  {:<26} {:.4g} ns a lane\n", "an operation", m.op_seconds * 1e9);
  out += fmt::format("  {:<26} {:.4g} ns a lane\n", "a load or store", m.load_seconds * 1e9);
  out += fmt::format("  {:<26} {:.4g} ns\n", "a library call (exp, …)", m.call_seconds * 1e9);
  out += fmt::format("  {:<26} {:.4g} ns a byte\n", "a fresh output", m.fresh_seconds * 1e9);
  out += fmt::format("  {:<26} {:.4g}\n", "vector lanes' speed-up", m.lane_speedup);
  out += fmt::format("  {:<26} {}\n", "packed f32 product",
                     m.packed_flops > 0 ? fmt::format("{:.1f} GFLOP/s a thread", m.packed_flops / 1e9)
                                        : std::string("not measured: no packed layout is offered"));
  out += fmt::format("  {:<26} a p-norm, p = {:.4g}\n", "terms combined by", m.p);
  out += fmt::format("  {:<26} u = {:.3g}; Spearman's rank correlation {:.3g}\n", "its error on the fit", m.error,
                     m.rank_correlation);
  return out;
}

}  // namespace quire::machine
