// How the command reports an error that ends it: one line on stderr (a
// program's diagnostics as they render), and the exit status.

#include <iostream>
#include <new>

#include "common.h"
#include "quire/compile/memory.h"
#include "quire/compile/memory_symbolic.h"
#include "quire/distributed/communicator.h"
#include "quire/interp/interpreter.h"
#include "quire/io/io_error.h"
#include "quire/runtime/runtime_error.h"
#include "quire/train/data.h"
#include "quire/train/sampler.h"
#include "quire/train/trainer.h"

namespace quire::cli {

int report_error(const std::string& who) {
  try {
    throw;
  } catch (const UsageError& e) {
    std::cerr << who << ": error: " << e.what() << "\n";
  } catch (const io::IoError& e) {
    std::cerr << who << ": error: " << e.what() << "\n";
  } catch (const interp::EvalError& e) {
    std::cerr << who << ": error: " << e.what() << "\n";
  } catch (const runtime::RuntimeError& e) {
    std::cerr << who << ": error: " << e.what() << "\n";
  } catch (const train::TrainError& e) {
    if (e.diagnostic)
      std::cerr << e.what();
    else
      std::cerr << who << ": error: " << e.what() << "\n";
  } catch (const train::SampleError& e) {
    std::cerr << who << ": error: " << e.what() << "\n";
  } catch (const train::DataError& e) {
    std::cerr << who << ": error: " << e.what() << "\n";
  } catch (const compile::SymbolicError& e) {
    std::cerr << who << ": error: " << e.what() << "\n";
  } catch (const compile::MemoryLimitError& e) {
    std::cerr << who << ": error: " << e.what() << "\n";
  } catch (const distributed::CommunicatorError& e) {
    std::cerr << who << ": error: " << e.what() << "\n";
  } catch (const std::bad_alloc&) {
    std::cerr << who << ": error: out of memory (are the dimensions what you meant?)\n";
  } catch (const std::exception& e) {
    // Anything else is a broken invariant of quire itself, not the user's mistake.
    std::cerr << who << ": internal error: " << e.what() << "\n";
    return 2;
  }
  return 1;
}

}  // namespace quire::cli
