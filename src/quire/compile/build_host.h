#pragma once
// Building the host program (host_program.h) of one call of an entry, at the
// run's dimensions and under its realization, without running it.
//
// The walk follows the reference interpreter's evaluation order exactly
// (interp/interpreter.cpp: calls, folds, fold_vjp, tuples, parameter trees,
// `--remat`'s kept forwards), with values that carry only what lowering
// reads: their kind, realized type and run-time shape. Each launch is
// lowered into the catalog as the run would first meet it, so the kernels
// are numbered as a run numbers them.
//
// Requires: an elaborated program without errors, the realization of
// `entry` (or none: f64), and every dimension the entry's shapes name.
// A shape the run cannot have (an unbound dimension, a size that does not
// divide) throws runtime::RuntimeError naming the site.

#include <map>
#include <memory>
#include <string>

#include "quire/compile/host_program.h"

namespace quire::compile {

/// `arguments`, when given, are the call's (only their kinds and shapes are
/// read: an entry whose types have `...` axes takes its shapes from them);
/// otherwise the entry's declared types at `dims` give the shapes. With
/// `library_kernels`, an instance of a function that has a library kernel
/// (library_kernel.h) is that kernel's one step where its sites allow, run
/// on at most `threads` threads.
HostProgram build_host(const elab::Program& prog, int entry, const std::map<std::string, int64_t>& dims,
                       const precision::Realization* realization, std::shared_ptr<kernel::KernelCatalog> catalog,
                       interp::Remat remat, const std::vector<interp::Value>* arguments = nullptr,
                       bool library_kernels = false, int threads = 1);

/// Bytes an element of a tensor of this kind takes at its storage type (a
/// real's `type`; i32 4, bool 1, other integers 8).
int64_t element_bytes(runtime::ElemKind elem, runtime::FloatType type);

/// A value's bytes as a buffer holds it (HostBuffer::bytes): a tensor's
/// elements at element_bytes; 0 for the rest.
int64_t buffer_bytes(const interp::Value& v);

}  // namespace quire::compile
