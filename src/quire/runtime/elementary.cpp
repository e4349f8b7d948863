#include "quire/runtime/elementary.h"

#include <math.h>    // NOLINT: elementary.inc is C as well, and uses the C names
#include <stdint.h>  // NOLINT
#include <string.h>  // NOLINT

namespace quire::runtime {

extern const char* const kElementarySource;      // elementary.inc's text (embed_text.cmake)
extern const char* const kElementaryFastSource;  // elementary_fast.inc's

namespace {
#include "quire/runtime/elementary.inc"
}  // namespace

double elementary_exp(double x) { return quire_exp(x); }
double elementary_erf(double x) { return quire_erf(x); }
double elementary_log1p(double x) { return quire_log1p(x); }
double elementary_expm1(double x) { return quire_expm1(x); }
double elementary_softplus(double x) { return quire_softplus(x); }

const char* elementary_c_source() { return kElementarySource; }
const char* elementary_fast_c_source() { return kElementaryFastSource; }

}  // namespace quire::runtime
