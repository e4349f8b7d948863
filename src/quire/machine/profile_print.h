#pragma once
// A machine profile as the cost models read it, printed for people:
// `quire profile show [FILE]`, and §8 of `quire explain`'s document.

#include <string>

#include "quire/machine/profile.h"

namespace quire::machine {

/// The profile's machine (cores, vector width, caches, bandwidths, peak
/// rates) and its layout model's fitted constants, one per line with its
/// unit; "no layout model" for a version 1 profile.
std::string print_profile(const Profile& p);

}  // namespace quire::machine
