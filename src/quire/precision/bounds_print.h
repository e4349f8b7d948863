// The bounds' printout (bounds.h): `quire check --precision`, text and JSON.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "quire/precision/bounds.h"

namespace quire::precision {

/// The printout: the output's magnitude, each rule's bound (beside the
/// measured gap when there is one), the two estimates, the measurements, the
/// envelope, the `sites` sites with the largest componentwise bounds, and one
/// sentence per rule on what it covers.
std::string print_bounds(const BoundsReport& b, int sites = 10);

/// {"format": "quire-bounds", "version": 3, entry, result, realization,
/// magnitude, samples, rules: {componentwise|normwise|cond|running: {bound,
/// covers, infinite?}}, estimate (first-order, or null and estimate_absent),
/// probabilistic: {estimate, confidence, lambda, terms, covers}, measured?,
/// held_out?, sites: [...]}; non-finite numbers as "inf", "nan".
nlohmann::ordered_json bounds_json(const BoundsReport& b);

}  // namespace quire::precision
