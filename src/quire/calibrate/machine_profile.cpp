#include "quire/calibrate/machine_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "quire/io/io_error.h"
#include "quire/runtime/isa.h"
#include "quire/support/sha256.h"

namespace quire::machine {

namespace {

std::string processor_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    std::string name = line.substr(colon + 1);
    name.erase(0, name.find_first_not_of(" \t"));
    if (!name.empty()) return name;
  }
  return "unknown processor";
}

std::string kib(int64_t bytes) { return fmt::format("{} KiB", bytes / 1024); }

std::string caches_text(int cores, int vector_bytes, const Caches& c) {
  return fmt::format("{}-byte vectors, {} cores, L1 {}, L2 {}, L3 {}", vector_bytes, cores, kib(c.l1), kib(c.l2),
                     kib(c.l3));
}

}  // namespace

MachineFacts this_machine(const std::string& cache_dir) {
  MachineFacts m;
  m.processor = processor_name();
  m.isa = runtime::isa_name(runtime::widest_isa());
  // As calibrate() counts them, so that a profile measured here describes here.
  m.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  m.vector_bytes = host_vector_bytes();
  m.caches = read_caches(cache_dir);
  return m;
}

std::string facts_text(const MachineFacts& m) {
  return fmt::format("{}, {}", m.isa, caches_text(m.cores, m.vector_bytes, m.caches));
}

std::string profile_facts_text(const Profile& p) {
  const char* isa = p.vector_bytes >= 64 ? "avx512" : p.vector_bytes == 32 ? "avx2" : "128-bit or narrower";
  return fmt::format("{}, {}", isa, caches_text(p.cores, p.vector_bytes, p.caches));
}

bool describes(const Profile& p, const MachineFacts& m) {
  return p.cores == m.cores && p.vector_bytes == m.vector_bytes && p.caches.l1 == m.caches.l1 &&
         p.caches.l2 == m.caches.l2 && p.caches.l3 == m.caches.l3;
}

std::string machine_key(const MachineFacts& m) {
  const std::string text =
      fmt::format("{}\n{}\n{}\n{}\n{} {} {} {} {}\n", m.processor, m.isa, m.cores, m.vector_bytes, m.caches.l1,
                  m.caches.l2, m.caches.l3, m.caches.l3_shared_by, m.caches.line);
  return support::sha256_hex(text).substr(0, 16);
}

MachineProfile machine_profile(const MachineFacts& here, const std::string& object_cache,
                               const std::function<Calibration(const CalibrationOptions&)>& measure) {
  MachineProfile result;
  if (describes(shipped_profile(), here)) return result;
  const std::string name = "machine-" + machine_key(here);
  result.path = (std::filesystem::path(object_cache) / (name + ".json")).string();

  // A kept profile is used only when it reads back whole, with a layout
  // model of the shipped model's shape (calibrate.h, fit_layout_scale), under
  // this machine's name; anything else is measured again.
  std::string refused;
  std::error_code ec;
  if (std::filesystem::exists(result.path, ec)) {
    try {
      const Profile kept = read_profile(result.path);
      if (!kept.layout)
        refused = "it has no layout model";
      else if (kept.name != name)
        refused = fmt::format("it is named `{}`, not `{}`", kept.name, name);
      else if (kept.layout->lane_speedup != shipped_profile().layout->lane_speedup ||
               kept.layout->p != shipped_profile().layout->p)
        // Fitted freely (before fit_layout_scale), or on a shipped model that
        // has since changed.
        refused = fmt::format("its model is not the shipped model's shape (lane speedup {:g} and p {:g}, not {:g} and {:g})",
                              kept.layout->lane_speedup, kept.layout->p, shipped_profile().layout->lane_speedup,
                              shipped_profile().layout->p);
      else
        return result;
    } catch (const io::IoError& e) {
      refused = e.what();
    }
  }

  std::filesystem::create_directories(object_cache, ec);
  if (ec) throw io::IoError(object_cache, fmt::format("cannot create the folder for the machine's profile: {}", ec.message()));
  CalibrationOptions options;
  options.name = name;
  options.quick = true;
  const auto start = std::chrono::steady_clock::now();
  Calibration c = measure(options);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  c.profile.name = name;
  c.profile.source = fmt::format("measured by quire on first use (a quick calibration) for {} ({}): {}",
                                 here.processor, facts_text(here), c.profile.source);
  write_profile(result.path, c.profile);
  result.measured_now = true;
  result.note = fmt::format(
      "quire: this machine ({}) is not the one the shipped profile describes ({}): measured a quick profile for "
      "planning kernel layouts in {:.1f} s, kept in {}{}",
      facts_text(here), profile_facts_text(shipped_profile()), result.seconds, result.path,
      refused.empty() ? "" : fmt::format(" (the profile kept there was refused: {})", refused));
  return result;
}

}  // namespace quire::machine
