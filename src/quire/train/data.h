#pragma once
// The data of a training run: `data = stream "FILE" |> shuffle(seed = S) |> batch(B = 8)`.
//
// A sample is what one row of the objective's batch argument holds: for
// `batch : (ℝ[batch: B, model: 4], i32[batch: B])` a sample is an ℝ[4] and an
// i32 scalar. SampleSpec lists those elements (kind and shape, the batch axis
// removed); Dataset reads a file and checks it against the spec before any
// training; Loader walks the samples epoch by epoch in batches.
//
// FILES. An `.npy` holds one array: samples along its first axis, so an array
// of shape [N, 4] is N samples of shape [4]. It serves a spec of one element.
// An `.npz` holds one array per element, named by the element's position:
// "0", "1", … (np.savez(path, **{"0": x, "1": y})) or "arr_0", "arr_1", …
// (what np.savez(path, x, y) writes). One naming for the whole file; every
// element must have its array and no other array may be present. Arrays are
// never matched by file order: a zip's order is the writer's business.
// Every array has the same number of samples N ≥ 1 along its first axis.
//
// KINDS. A real element takes an f8, f4 or f2 array (every value of those is
// an f64 exactly); an i64 element an i4, u1 or i8 array; an i32 element an i4
// or u1 array, or an i8 array whose values all fit i32; a bool element a b1
// array. Integer arrays are refused for real elements (a likely mix-up of
// features and labels), as are reals for integers.
//
// VALIDATION. Every mismatch is an io::IoError "PATH: reason" naming the array
// and what was expected and found, e.g.
//   data/pairs.npz: array `1`: expected shape [N, 4] for N samples of ℝ[model: 4], found [64, 3]
//   data/pairs.npz: array `0`: expected real elements (f8, f4 or f2) for samples of ℝ[model: 4], found i64
//   data/pairs.npz: array `1` has 63 samples, array `0` has 64: every array holds one row per sample
//
// SHUFFLE. Without `shuffle`, every epoch visits the samples in file order.
// With `shuffle(seed = S)`, epoch e (counted from 0) visits them in the order
// perm_e computed by Fisher–Yates from Philox draws (random.h):
//   K_e = derive_key(key_from_seed(S), "shuffle:epoch:" + decimal(e))
//   perm = [0, 1, …, N − 1]; t = 0
//   for i = N − 1 down to 1:
//     j = draw(i + 1); swap(perm[i], perm[j])
//   draw(n), an integer uniform in [0, n) without modulo bias:
//     repeat: w = philox(t mod 2^32, t div 2^32, 0, 1; K_e)   (stream 1, "uniform")
//             x = w1 · 2^32 + w0                              (64 bits); t = t + 1
//     until x < 2^64 − (2^64 mod n)
//     return x mod n
// The counter t runs over the whole epoch, rejected draws included (a
// rejection has probability below n / 2^64, so in practice never happens).
//
// READING. Dataset::open reads the file whole and checks every value before
// the first step, unless asked for DataReading::Rows and the file is an .npy
// whose rows lie contiguous (C order, io/npy_rows.h): then it checks the
// header (shape, kind) at open and reads each sample's row when gather asks
// for it, checking its values then, with the same checks and words (an i8
// value outside i32 is found when its row is first read, not before the
// run). Each rank of an MPI run opens its data so (trainer.cpp), and so
// reads only its shards' rows. An .npz, or a Fortran-ordered .npy, is read
// whole whatever is asked.
//
// BATCHES. `batch(B = b)` cuts the epoch's order into batches of b
// consecutive samples: batch k holds perm_e[k·b], …, perm_e[k·b + b − 1]. The
// last N mod b samples of each epoch form no batch (a partial batch would
// change the batch dim mid-run): steps_per_epoch = N div b, and a file with
// fewer than b samples is an error. Under shuffle a dropped sample is a
// different one each epoch.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "quire/core/program.h"
#include "quire/runtime/tensor.h"

namespace quire::io {
class NpyRows;
}

namespace quire::train {

/// A training run's data that cannot be used: a batch type of the wrong form,
/// a data position that does not fit the data. (A bad file is an io::IoError.)
struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A file the training block names (its data, its held-out data): `path`
/// relative to the main file's folder, as written.
std::string training_file(const elab::Program& prog, const std::string& path);

/// `dims` with the run's batch dimension bound as `batch(B = b)` binds it;
/// DataError when `dims` binds it otherwise (`--dim B=4` against `batch(B = 8)`).
std::map<std::string, int64_t> run_dims(const elab::TrainingInfo& run, std::map<std::string, int64_t> dims);

/// One element of a sample: one tensor of the batch argument, its batch axis removed.
struct SampleElement {
  runtime::ElemKind kind = runtime::ElemKind::Real;
  runtime::Shape shape;     ///< without the batch axis
  std::string description;  ///< the type as the program writes it, batch axis removed: "ℝ[model: 4]"
};

/// What each sample of a data file holds, in element order.
struct SampleSpec {
  std::vector<SampleElement> elements;
  bool tuple = false;  ///< the batch argument is a tuple (else a single tensor, one element)
};

/// The spec of the objective's batch argument `batch_type`: a tensor or a
/// tuple of tensors, each with the batch dim `batch_dim` as its size of its
/// FIRST axis; the other sizes are evaluated under `dims`. Throws DataError
/// naming the element and what is wrong with it.
SampleSpec sample_spec(const elab::Program& prog, const elab::Type& batch_type, const std::string& batch_dim,
                       const std::map<std::string, int64_t>& dims);

/// How a Dataset reads its file (READING above).
enum class DataReading {
  Whole,  ///< all of it at open, every value checked before the first step
  Rows,   ///< an .npy in C order: each row when gathered (anything else: whole)
};

/// The samples of one data file, checked against a spec: held in memory, or
/// read row by row from the file (reads_rows()).
/// Invariant: unless reads_rows(), arrays()[i] has kind spec.elements[i].kind
/// and shape [samples()] + spec.elements[i].shape; when it does, arrays() is
/// empty and gather's tensors are of that kind and shape.
class Dataset {
 public:
  /// Reads `path` (`.npy` or `.npz`, resolved by the caller) and checks it
  /// against `spec`: IoError "PATH: reason" on any mismatch (see above).
  static Dataset open(const std::string& path, const SampleSpec& spec, DataReading reading = DataReading::Whole);
  /// Checks arrays already in memory, one per element in order; `origin`
  /// names them in errors (as PATH) and in `array `N`` as their position.
  static Dataset from_arrays(const std::string& origin, const SampleSpec& spec, std::vector<runtime::Tensor> arrays);

  const std::string& path() const { return path_; }
  const SampleSpec& spec() const { return spec_; }
  int64_t samples() const { return samples_; }
  const std::vector<runtime::Tensor>& arrays() const { return arrays_; }
  /// Whether samples are read from the file as gathered (READING above).
  bool reads_rows() const { return rows_ != nullptr; }
  /// The bytes read from the file so far when reads_rows() (its header's
  /// included), else 0: what a test counts to see a rank read its rows only.
  uint64_t bytes_read() const;

  /// The samples `indices` (each in [0, samples())), stacked: one tensor per
  /// element, of shape [indices.size()] + the element's shape. When
  /// reads_rows(), reads those rows and checks their values: IoError
  /// "PATH: reason" as open would have thrown for them.
  std::vector<runtime::Tensor> gather(const std::vector<int64_t>& indices) const;

 private:
  Dataset(std::string path, SampleSpec spec, std::vector<runtime::Tensor> arrays, int64_t samples)
      : path_(std::move(path)), spec_(std::move(spec)), arrays_(std::move(arrays)), samples_(samples) {}
  std::string path_;
  SampleSpec spec_;
  std::vector<runtime::Tensor> arrays_;
  /// The file's rows when they are read as gathered; shared so that a copy
  /// of the Dataset reads the same open file.
  std::shared_ptr<const io::NpyRows> rows_;
  int64_t samples_ = 0;
};

/// The order of the samples in epoch `epoch` under `shuffle(seed = seed)`:
/// the Fisher–Yates permutation of [0, n) documented above.
std::vector<int64_t> shuffle_permutation(uint64_t seed, int64_t epoch, int64_t n);

/// How a Loader walks the data: the run's `shuffle`, `batch` and `epochs`.
struct LoaderOptions {
  std::optional<uint64_t> shuffle_seed;  ///< none: file order every epoch
  int64_t batch_size = 1;
  int64_t epochs = 1;
};

/// The options of an elaborated training run (its `shuffle(seed = S)`,
/// `batch(B = b)` and `epochs`). Throws DataError unless its stages are
/// `stream`, at most one `shuffle` with a seed, then one `batch`: a shuffle
/// after the batch would order batches, which quire does not do.
LoaderOptions loader_options(const elab::TrainingInfo& run);

/// Where a Loader stands: the next batch it will give. `samples` (the samples
/// given so far, over all epochs) is redundant with the others and lets seek
/// detect a data file whose size changed between a checkpoint and its resume.
struct DataPosition {
  int64_t epoch = 0;    ///< counted from 0; equal to the epoch count when the run is done
  int64_t batch = 0;    ///< the next batch's index within its epoch, in [0, steps_per_epoch)
  int64_t samples = 0;  ///< (epoch · steps_per_epoch + batch) · batch_size
  bool operator==(const DataPosition&) const = default;
};

/// Rows [begin, end) of a batch: a shard's (shards.h).
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t rows() const { return end - begin; }
  bool operator==(const RowRange&) const = default;
};

/// Batches of a Dataset, epoch after epoch. Holds a reference to the dataset,
/// which must outlive it. Deterministic: the batches depend only on the file,
/// the options and the position, so a run resumed with seek(position()) gives
/// the same batches as one never stopped.
class Loader {
 public:
  /// Throws DataError if the batch size or epoch count is below 1 or the
  /// data holds fewer samples than one batch.
  Loader(const Dataset& data, LoaderOptions options);

  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  /// steps_per_epoch() · epochs: the steps of the whole run.
  int64_t total_steps() const { return steps_per_epoch_ * options_.epochs; }
  const LoaderOptions& options() const { return options_; }

  /// The next batch, one tensor per element with the batch axis first
  /// ([B] + element shape), or nullopt when every epoch is done. After it,
  /// position() is where to resume: save it with the step that uses this batch.
  std::optional<std::vector<runtime::Tensor>> next();
  /// The rows `ranges` of the next batch (each a non-empty range within
  /// [0, batch_size)), one tensor list per range, each gathered alone: a
  /// shard's rows without the others'. Advances one batch, as next() does.
  std::optional<std::vector<std::vector<runtime::Tensor>>> next_rows(const std::vector<RowRange>& ranges);
  /// The position of the next batch (the start: {0, 0, 0}).
  DataPosition position() const { return position_; }
  /// Continues from `position` (one that position() returned, for the same
  /// file and options). Throws DataError naming both if it does not fit this
  /// data: an epoch or batch out of range, or a sample count that disagrees.
  void seek(const DataPosition& position);
  /// The order of the samples in `epoch`: the shuffle permutation, or 0 … N−1.
  std::vector<int64_t> epoch_order(int64_t epoch) const;

 private:
  const Dataset& data_;
  LoaderOptions options_;
  int64_t steps_per_epoch_ = 0;
  DataPosition position_;
  int64_t order_epoch_ = -1;  ///< the epoch `order_` belongs to; -1 before the first
  std::vector<int64_t> order_;
};

/// The first `count` batches a run of `prog`'s training run takes (its data
/// stream in its order, from the first epoch on, as many as the run has), as
/// a file of samples (interp::SampleFile) of its objective: each leaf of the
/// batch argument under its path (`batch`, or `batch.0`, `batch.1` for a
/// tuple) with the batches along a new first axis, [K, B, …]. `data_path`
/// is the stream's file, resolved by the caller; `dims` bind the batch dim
/// as the run does. DataError for a program without a training run; the
/// data's own errors as Dataset::open throws them.
std::vector<std::pair<std::string, runtime::Tensor>> run_batches_as_samples(const elab::Program& prog,
                                                                            const std::string& data_path,
                                                                            const std::map<std::string, int64_t>& dims,
                                                                            int64_t count);

}  // namespace quire::train
