#pragma once
// The runtime of a C export (`quire export --target c`): the C files that
// every exported program holds beside its kernels and host program.
// quire_runtime.h declares buffers, box copies, gathers, the random
// streams of runtime/random.h, the packed product's chain and NumPy files;
// quire_runtime.c defines them in C11 with libc and libm alone.

#include <string>

namespace quire::exports {

std::string c_runtime_header();  ///< quire_runtime.h
std::string c_runtime_source();  ///< quire_runtime.c

}  // namespace quire::exports
