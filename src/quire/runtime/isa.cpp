#include "quire/runtime/isa.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <string>

#include "quire/runtime/runtime_error.h"

namespace quire::runtime {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Baseline:
      return "baseline";
    case Isa::Neon:
      return "neon";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
  }
  return "?";
}

Isa cpu_isa() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  // The features the paths' target attributes name: an Avx512 path may use
  // any of them, so all must be present.
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma"))
    return Isa::Avx512;
  // F16C by CPUID leaf 1 (ECX bit 29): Clang's __builtin_cpu_supports does
  // not know the name.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c) return Isa::Avx2;
#elif defined(__aarch64__)
  return Isa::Neon;
#endif
  return Isa::Baseline;
}

Isa isa_cap(std::string_view value) {
  if (value.empty()) return Isa::Avx512;
  for (Isa isa : {Isa::Baseline, Isa::Neon, Isa::Avx2, Isa::Avx512})
    if (value == isa_name(isa)) return isa;
  throw RuntimeError("QUIRE_ISA=" + std::string(value) +
                     ": not an instruction set; use avx512, avx2, neon or baseline");
}

Isa capped_isa(Isa cpu, Isa cap) {
  const Isa capped = std::min(cpu, cap);
  // Only an x86-64 processor's level lies above Neon, and it has no NEON:
  // the cap's 128-bit vectors are its baseline's.
  return capped == Isa::Neon && cpu != Isa::Neon ? Isa::Baseline : capped;
}

Isa widest_isa() {
  // The cap, or the error of a bad value, settled once: the variable is read
  // before the first choice of a path and never again.
  struct Cap {
    Isa isa = Isa::Avx512;
    std::string error;  // non-empty for a bad value
  };
  static const Cap cap = [] {
    const char* value = std::getenv("QUIRE_ISA");
    try {
      return Cap{isa_cap(value == nullptr ? "" : value), ""};
    } catch (const RuntimeError& e) {
      return Cap{Isa::Baseline, e.what()};
    }
  }();
  static const Isa cpu = cpu_isa();
  if (!cap.error.empty()) throw RuntimeError(cap.error);
  return capped_isa(cpu, cap.isa);
}

}  // namespace quire::runtime
