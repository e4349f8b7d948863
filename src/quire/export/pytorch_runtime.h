#pragma once
// quire_runtime.py, written beside every PyTorch export: the operations of
// Core that are not one PyTorch call (alignment, restructuring by explicit
// axes, gather and pick, keys and draws), each with the reference
// interpreter's semantics stated in its docstring.

#include <string_view>

namespace quire::exports {

/// The text of quire_runtime.py.
std::string_view pytorch_runtime_module();

}  // namespace quire::exports
