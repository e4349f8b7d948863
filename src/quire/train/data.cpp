#include "quire/train/data.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "quire/io/npy.h"
#include "quire/io/npy_rows.h"
#include "quire/runtime/random.h"

namespace quire::train {

namespace {

runtime::ElemKind runtime_kind(elab::Elem elem) {
  switch (elem) {
    case elab::Elem::Real: return runtime::ElemKind::Real;
    case elab::Elem::I32: return runtime::ElemKind::I32;
    case elab::Elem::I64: return runtime::ElemKind::I64;
    case elab::Elem::Bool: return runtime::ElemKind::Bool;
  }
  return runtime::ElemKind::Real;
}

/// One element of the batch argument: a tensor whose first axis is the batch dim.
SampleElement spec_element(const elab::Program& prog, const elab::Type& type, const std::string& what,
                           const std::string& batch_dim, const std::map<std::string, int64_t>& dims) {
  const elab::TypePrinter printer = prog.printer();
  if (!type.is_tensor())
    throw DataError(
        fmt::format("{}, `{}`, is not a tensor: the batch argument is a tensor or a tuple of tensors, each "
                    "with the batch dim `{}` as its first axis",
                    what, printer(type), batch_dim));
  const elab::TensorType& t = type.tensor;
  if (t.rest)
    throw DataError(fmt::format("{}, `{}`, has `...` axes: a sample needs a known shape", what, printer(type)));
  if (t.axes.empty() || !(t.axes[0].size == elab::Size::symbol(batch_dim)))
    throw DataError(
        fmt::format("{}, `{}`, must have the batch dim `{}` as its first axis (samples are stacked along it)", what,
                    printer(type), batch_dim));
  SampleElement element;
  element.kind = runtime_kind(t.elem);
  elab::TensorType sample = t;
  sample.axes.erase(sample.axes.begin());
  element.description = printer.tensor(sample);
  for (const elab::Axis& axis : sample.axes) {
    const std::optional<int64_t> size = axis.size.evaluate(dims);
    if (!size) {
      for (const std::string& symbol : axis.size.symbols())
        if (!dims.count(symbol))
          throw DataError(fmt::format("{}, `{}`: its size {} needs the dimension {}", what, printer(type),
                                      axis.size.str(), symbol));
      throw DataError(fmt::format("{}, `{}`: its size {} is not a whole number", what, printer(type), axis.size.str()));
    }
    if (*size < 1)
      throw DataError(fmt::format("{}, `{}`: its size {} is {}, not positive", what, printer(type), axis.size.str(),
                                  *size));
    element.shape.push_back(*size);
  }
  return element;
}

/// "[N, 4]": the shape an array of samples of `shape` must have.
std::string array_shape_text(const runtime::Shape& shape) {
  std::string text = "[N";
  for (int64_t d : shape) text += fmt::format(", {}", d);
  return text + "]";
}

/// "0, 1" or "arr_0, arr_1": the names an .npz's arrays must have.
std::string names_text(size_t count, const std::string& prefix) {
  std::string text;
  for (size_t i = 0; i < count; ++i) text += fmt::format("{}{}{}", i ? ", " : "", prefix, i);
  return text;
}

/// Checks an array's shape and element kind (its header's, when it is read
/// by rows) against its element. `label` is "array `1`: " in an .npz, "" in
/// an .npy.
void check_layout(const std::string& path, const std::string& label, const SampleElement& element,
                  const runtime::Shape& shape, runtime::ElemKind kind) {
  const bool shape_ok = shape.size() == element.shape.size() + 1 &&
                        std::equal(element.shape.begin(), element.shape.end(), shape.begin() + 1);
  if (!shape_ok)
    throw io::IoError(
        path, fmt::format("{}expected shape {} for N samples of {}, found {}", label, array_shape_text(element.shape),
                          element.description, runtime::shape_string(shape)));
  const auto refuse = [&](const char* expected) {
    throw io::IoError(path, fmt::format("{}expected {} for samples of {}, found {}", label, expected,
                                        element.description, runtime::elem_kind_name(kind)));
  };
  const bool is_integer = kind == runtime::ElemKind::I32 || kind == runtime::ElemKind::I64;
  switch (element.kind) {
    case runtime::ElemKind::Real:
      if (kind != runtime::ElemKind::Real) refuse("real elements (f8, f4 or f2)");
      return;
    case runtime::ElemKind::Bool:
      if (kind != runtime::ElemKind::Bool) refuse("boolean elements (b1)");
      return;
    case runtime::ElemKind::I64:
      if (!is_integer) refuse("integer elements (i8, i4 or u1)");
      return;
    case runtime::ElemKind::I32:
      if (!is_integer) refuse("integer elements (i4 or u1, or i8 within the range of i32)");
      return;
  }
}

/// Checks `count` values of an array of a kind check_layout accepted for
/// `element` (the whole array's, or a row's whose first value is the file's
/// element `first_element`): the values the element's kind cannot hold.
void check_values(const std::string& path, const std::string& label, const SampleElement& element,
                  const int64_t* values, int64_t count, int64_t first_element) {
  if (element.kind != runtime::ElemKind::I32) return;
  // The kernels trust a tensor's kind: an i8 array must fit before it is called i32.
  for (int64_t i = 0; i < count; ++i)
    if (values[i] < std::numeric_limits<int32_t>::min() || values[i] > std::numeric_limits<int32_t>::max())
      throw io::IoError(path, fmt::format("{}holds {} (element {}), outside the range of i32 for samples of {}", label,
                                          values[i], first_element + i, element.description));
}

/// Checks one array against its element and gives it the element's kind.
void check_array(const std::string& path, const std::string& label, const SampleElement& element,
                 runtime::Tensor& array) {
  check_layout(path, label, element, array.shape, array.kind);
  if (!array.is_real())
    check_values(path, label, element, array.ints.data(), static_cast<int64_t>(array.ints.size()), 0);
  array.kind = element.kind;
}

/// Checks named arrays (one per element, in element order) and builds the dataset's parts.
std::vector<runtime::Tensor> check_arrays(const std::string& path, const SampleSpec& spec,
                                          std::vector<std::pair<std::string, runtime::Tensor>> named,
                                          int64_t& samples) {
  std::vector<runtime::Tensor> arrays;
  for (size_t i = 0; i < named.size(); ++i) {
    const std::string label = named[i].first.empty() ? "" : fmt::format("array `{}`: ", named[i].first);
    check_array(path, label, spec.elements[i], named[i].second);
  }
  samples = named.empty() ? 0 : named[0].second.shape[0];
  for (size_t i = 1; i < named.size(); ++i)
    if (named[i].second.shape[0] != samples)
      throw io::IoError(path, fmt::format("array `{}` has {} samples, array `{}` has {}: every array holds one row "
                                          "per sample",
                                          named[i].first, named[i].second.shape[0], named[0].first, samples));
  if (samples == 0)
    throw io::IoError(path, fmt::format("holds no samples (shape {})", runtime::shape_string(named[0].second.shape)));
  for (auto& [name, array] : named) arrays.push_back(std::move(array));
  return arrays;
}

std::string lowercase_extension(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  std::string ext = path.substr(dot);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

/// An integer uniform in [0, n), n ≥ 1, from the Philox blocks t, t+1, … of
/// `key` (stream 1); advances t past the blocks used. Rejection sampling keeps
/// it unbiased: of the 2^64 values of x, the top 2^64 mod n are refused so
/// that each residue is hit equally often.
uint64_t bounded_draw(runtime::Key key, uint64_t& t, uint64_t n) {
  const uint64_t excess = (0 - n) % n;  // 2^64 mod n, in 64-bit arithmetic
  for (;;) {
    const auto w = runtime::element_words(key, t++, runtime::Stream::Uniform);
    const uint64_t x = (static_cast<uint64_t>(w[1]) << 32) | w[0];
    if (x <= std::numeric_limits<uint64_t>::max() - excess) return x % n;  // x < 2^64 − excess
  }
}

}  // namespace

SampleSpec sample_spec(const elab::Program& prog, const elab::Type& batch_type, const std::string& batch_dim,
                       const std::map<std::string, int64_t>& dims) {
  SampleSpec spec;
  if (batch_type.kind == elab::TypeKind::Tuple) {
    spec.tuple = true;
    if (batch_type.elements.empty()) throw DataError("the batch argument is an empty tuple: a sample needs a tensor");
    for (size_t i = 0; i < batch_type.elements.size(); ++i)
      spec.elements.push_back(spec_element(prog, batch_type.elements[i],
                                           fmt::format("element {} of the batch argument", i), batch_dim, dims));
  } else {
    spec.elements.push_back(spec_element(prog, batch_type, "the batch argument", batch_dim, dims));
  }
  return spec;
}

Dataset Dataset::open(const std::string& path, const SampleSpec& spec, DataReading reading) {
  const std::string ext = lowercase_extension(path);
  std::vector<std::pair<std::string, runtime::Tensor>> named;
  if (ext == ".npy") {
    if (spec.elements.size() != 1)
      throw io::IoError(path, fmt::format("an .npy file holds one array, but a sample has {} elements: give an .npz "
                                          "with arrays {}",
                                          spec.elements.size(), names_text(spec.elements.size(), "")));
    std::error_code ec;
    if (reading == DataReading::Rows && std::filesystem::is_regular_file(path, ec)) {
      auto rows = std::make_shared<io::NpyRows>(io::NpyRows::open(path));
      if (rows->rows_readable()) {
        // What open checks of a whole array before its values, from the header.
        check_layout(path, "", spec.elements[0], rows->shape(), rows->kind());
        if (rows->rows() == 0)
          throw io::IoError(path, fmt::format("holds no samples (shape {})", runtime::shape_string(rows->shape())));
        Dataset data(path, spec, {}, rows->rows());
        data.rows_ = std::move(rows);
        return data;
      }
    }
    named.emplace_back("", io::read_npy(path));
  } else if (ext == ".npz") {
    io::NamedTensors entries = io::read_npz(path);
    const size_t count = spec.elements.size();
    // One naming for the whole file: "0", "1", … unless the file has "arr_0" and no "0".
    const auto has = [&](const std::string& name) {
      return std::any_of(entries.begin(), entries.end(), [&](const auto& e) { return e.first == name; });
    };
    const std::string prefix = !has("0") && has("arr_0") ? "arr_" : "";
    const std::string expected = names_text(count, prefix);
    for (size_t i = 0; i < count; ++i) {
      const std::string name = fmt::format("{}{}", prefix, i);
      auto it = std::find_if(entries.begin(), entries.end(), [&](const auto& e) { return e.first == name; });
      if (it == entries.end())
        throw io::IoError(path, fmt::format("no array `{}` (expected arrays {}: one per element of the sample, in the "
                                            "order of the batch argument)",
                                            name, expected));
      named.emplace_back(name, std::move(it->second));
      entries.erase(it);
    }
    if (!entries.empty())
      throw io::IoError(path, fmt::format("array `{}` is not an element of the sample (expected arrays {})",
                                          entries.front().first, expected));
  } else {
    throw io::IoError(path, "a data file is an .npy (one array) or an .npz (one array per element of the sample)");
  }
  int64_t samples = 0;
  std::vector<runtime::Tensor> arrays = check_arrays(path, spec, std::move(named), samples);
  return Dataset(path, spec, std::move(arrays), samples);
}

Dataset Dataset::from_arrays(const std::string& origin, const SampleSpec& spec, std::vector<runtime::Tensor> arrays) {
  if (arrays.size() != spec.elements.size())
    throw io::IoError(origin,
                      fmt::format("{} arrays for a sample of {} elements", arrays.size(), spec.elements.size()));
  std::vector<std::pair<std::string, runtime::Tensor>> named;
  for (size_t i = 0; i < arrays.size(); ++i) named.emplace_back(std::to_string(i), std::move(arrays[i]));
  int64_t samples = 0;
  std::vector<runtime::Tensor> checked = check_arrays(origin, spec, std::move(named), samples);
  return Dataset(origin, spec, std::move(checked), samples);
}

uint64_t Dataset::bytes_read() const { return rows_ ? rows_->bytes_read() : 0; }

std::vector<runtime::Tensor> Dataset::gather(const std::vector<int64_t>& indices) const {
  std::vector<runtime::Tensor> batch;
  const int64_t count = static_cast<int64_t>(indices.size());
  for (int64_t sample : indices)
    if (sample < 0 || sample >= samples_)
      throw DataError(fmt::format("{}: sample {} is out of range (it holds {})", path_, sample, samples_));
  if (rows_) {
    // An .npy: one element. Each row's values checked as open checks a whole
    // array's, naming each element by its index in the file.
    const SampleElement& element = spec_.elements[0];
    runtime::Tensor rows = rows_->read(indices);
    const int64_t row = runtime::element_count(element.shape);
    if (!rows.is_real())
      for (int64_t k = 0; k < count; ++k)
        check_values(path_, "", element, rows.ints.data() + k * row, row, indices[static_cast<size_t>(k)] * row);
    rows.kind = element.kind;
    batch.push_back(std::move(rows));
    return batch;
  }
  // Samples in order (an unshuffled stream) are a window onto the arrays'
  // elements, shared rather than copied (runtime::RealStorage::window).
  bool in_order = true;
  for (int64_t k = 1; k < count && in_order; ++k) in_order = indices[k] == indices[0] + k;
  for (size_t e = 0; e < arrays_.size(); ++e) {
    const runtime::Tensor& array = arrays_[e];
    runtime::Shape shape = spec_.elements[e].shape;
    shape.insert(shape.begin(), count);
    const int64_t row = runtime::element_count(spec_.elements[e].shape);
    if (array.is_real() && in_order && count > 0) {
      runtime::Tensor out;
      out.shape = std::move(shape);
      out.reals = runtime::RealStorage::window(array.reals, static_cast<size_t>(indices[0] * row),
                                               static_cast<size_t>(count * row));
      batch.push_back(std::move(out));
      continue;
    }
    runtime::Tensor out =
        array.is_real() ? runtime::Tensor::real_for_overwrite(shape) : runtime::Tensor::integer(array.kind, shape);
    for (int64_t k = 0; k < count; ++k) {
      const int64_t sample = indices[k];
      if (array.is_real())
        std::copy_n(array.reals.begin() + sample * row, row, out.reals.begin() + k * row);
      else
        std::copy_n(array.ints.begin() + sample * row, row, out.ints.begin() + k * row);
    }
    batch.push_back(std::move(out));
  }
  return batch;
}

std::vector<int64_t> shuffle_permutation(uint64_t seed, int64_t epoch, int64_t n) {
  std::vector<int64_t> perm(static_cast<size_t>(std::max<int64_t>(n, 0)));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  const runtime::Key key =
      runtime::derive_key(runtime::key_from_seed(seed), fmt::format("shuffle:epoch:{}", epoch));
  uint64_t t = 0;
  for (int64_t i = n - 1; i >= 1; --i) {
    const uint64_t j = bounded_draw(key, t, static_cast<uint64_t>(i) + 1);
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

LoaderOptions loader_options(const elab::TrainingInfo& run) {
  LoaderOptions options;
  options.epochs = run.epochs;
  bool seen_shuffle = false;
  bool seen_batch = false;
  for (const elab::PipelineStageInfo& stage : run.data) {
    if (stage.name == "shuffle") {
      if (seen_shuffle) throw DataError("the data shuffles twice: give one `shuffle(seed = N)`");
      if (seen_batch) throw DataError("`shuffle` must come before `batch`: it orders the samples, not the batches");
      seen_shuffle = true;
      for (const auto& [key, value] : stage.args)
        if (key == "seed") {
          // 2^64 as a double: the first value that no uint64_t holds.
          if (!(value >= 0 && value < 18446744073709551616.0) ||
              value != static_cast<double>(static_cast<uint64_t>(value)))
            throw DataError(fmt::format("shuffle's seed {} is not a 64-bit natural number", value));
          options.shuffle_seed = static_cast<uint64_t>(value);
        }
      if (!options.shuffle_seed) throw DataError("`shuffle` needs `seed = N`: the order must be reproducible");
    } else if (stage.name == "batch") {
      if (seen_batch) throw DataError("the data is batched twice: give one `batch(B = N)`");
      seen_batch = true;
    }
  }
  if (!seen_batch || run.batch_size < 1) throw DataError("the data has no `batch(B = N)` stage");
  options.batch_size = run.batch_size;
  return options;
}

Loader::Loader(const Dataset& data, LoaderOptions options) : data_(data), options_(options) {
  if (options_.batch_size < 1)
    throw DataError(fmt::format("a batch holds at least one sample, not {}", options_.batch_size));
  if (options_.epochs < 1) throw DataError(fmt::format("a run has at least one epoch, not {}", options_.epochs));
  steps_per_epoch_ = data.samples() / options_.batch_size;
  if (steps_per_epoch_ == 0)
    throw DataError(
        fmt::format("{}: {} samples make no batch of {}", data.path(), data.samples(), options_.batch_size));
}

std::vector<int64_t> Loader::epoch_order(int64_t epoch) const {
  if (options_.shuffle_seed) return shuffle_permutation(*options_.shuffle_seed, epoch, data_.samples());
  std::vector<int64_t> order(static_cast<size_t>(data_.samples()));
  std::iota(order.begin(), order.end(), int64_t{0});
  return order;
}

std::optional<std::vector<runtime::Tensor>> Loader::next() {
  std::optional<std::vector<std::vector<runtime::Tensor>>> whole = next_rows({{0, options_.batch_size}});
  if (!whole) return std::nullopt;
  return std::move(whole->front());
}

std::optional<std::vector<std::vector<runtime::Tensor>>> Loader::next_rows(const std::vector<RowRange>& ranges) {
  if (position_.epoch >= options_.epochs) return std::nullopt;
  for (const RowRange& r : ranges)
    if (r.begin < 0 || r.end > options_.batch_size || r.begin >= r.end)
      throw std::logic_error(fmt::format("internal: rows [{}, {}) of a batch of {}", r.begin, r.end,
                                         options_.batch_size));
  if (order_epoch_ != position_.epoch) {
    order_ = epoch_order(position_.epoch);
    order_epoch_ = position_.epoch;
  }
  const int64_t begin = position_.batch * options_.batch_size;
  std::vector<std::vector<runtime::Tensor>> parts;
  for (const RowRange& r : ranges) {
    const std::vector<int64_t> indices(order_.begin() + begin + r.begin, order_.begin() + begin + r.end);
    parts.push_back(data_.gather(indices));
  }
  position_.samples += options_.batch_size;
  if (++position_.batch == steps_per_epoch_) {
    position_.batch = 0;
    ++position_.epoch;
  }
  return parts;
}

void Loader::seek(const DataPosition& position) {
  const bool in_range = position.epoch >= 0 && position.batch >= 0 &&
                        (position.epoch < options_.epochs ? position.batch < steps_per_epoch_
                                                          : position.epoch == options_.epochs && position.batch == 0);
  const bool consistent =
      in_range && position.samples == (position.epoch * steps_per_epoch_ + position.batch) * options_.batch_size;
  if (!consistent)
    throw DataError(fmt::format(
        "{}: the data position (epoch {}, batch {}, {} samples given) does not fit this data ({} samples: {} batches "
        "of {} per epoch, {} epochs); did the file or the batch size change since the checkpoint?",
        data_.path(), position.epoch, position.batch, position.samples, data_.samples(), steps_per_epoch_,
        options_.batch_size, options_.epochs));
  position_ = position;
}

std::vector<std::pair<std::string, runtime::Tensor>> run_batches_as_samples(const elab::Program& prog,
                                                                            const std::string& data_path,
                                                                            const std::map<std::string, int64_t>& dims,
                                                                            int64_t count) {
  const elab::TrainingInfo* run = prog.training();
  if (!run) throw DataError("the program has no `training run` block whose data to take");
  const core::Function& objective = prog.functions.at(static_cast<size_t>(run->objective));
  const SampleSpec spec = sample_spec(prog, objective.args.at(1).type, run->batch_dim, dims);
  const Dataset data = Dataset::open(data_path, spec);
  Loader loader(data, loader_options(*run));
  std::vector<std::vector<runtime::Tensor>> batches;
  while (static_cast<int64_t>(batches.size()) < count)
    if (auto batch = loader.next())
      batches.push_back(std::move(*batch));
    else
      break;
  std::vector<std::pair<std::string, runtime::Tensor>> out;
  const std::string& name = objective.args.at(1).name;
  for (size_t e = 0; e < spec.elements.size(); ++e) {
    runtime::Shape shape{static_cast<int64_t>(batches.size())};
    if (!batches.empty()) shape.insert(shape.end(), batches[0][e].shape.begin(), batches[0][e].shape.end());
    runtime::Tensor t = spec.elements[e].kind == runtime::ElemKind::Real
                            ? runtime::Tensor::real_for_overwrite(shape)
                            : runtime::Tensor::integer(spec.elements[e].kind, shape);
    size_t at = 0;
    for (const auto& batch : batches) {
      const runtime::Tensor& b = batch[e];
      if (t.is_real()) {
        std::copy(b.reals.begin(), b.reals.end(), t.reals.data() + at);
        at += b.reals.size();
      } else {
        std::copy(b.ints.begin(), b.ints.end(), t.ints.begin() + static_cast<std::ptrdiff_t>(at));
        at += b.ints.size();
      }
    }
    out.emplace_back(spec.tuple ? fmt::format("{}.{}", name, e) : name, std::move(t));
  }
  return out;
}

std::string training_file(const elab::Program& prog, const std::string& path) {
  return (std::filesystem::path(prog.files[prog.main_file].path).parent_path() / path).lexically_normal().string();
}

std::map<std::string, int64_t> run_dims(const elab::TrainingInfo& run, std::map<std::string, int64_t> dims) {
  if (auto it = dims.find(run.batch_dim); it != dims.end() && it->second != run.batch_size)
    throw DataError(fmt::format("--dim {}={}: the training run binds {} with `batch({} = {})`", run.batch_dim,
                                it->second, run.batch_dim, run.batch_dim, run.batch_size));
  dims[run.batch_dim] = run.batch_size;
  return dims;
}

}  // namespace quire::train
