#pragma once
// In-memory datasets: Fashion-MNIST from gzipped IDX files, a seeded synthetic set, and users'
// tensor files (torch.save archives or NumPy .npy pairs).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "training/specs.hpp"
#include "training/user_files.hpp"  // DatasetError

namespace omnilearn::training {

// Samples and labels held in memory. Immutable after construction, so one instance may be shared
// by every rank of a process (read from any thread).
struct Dataset {
  std::string name;
  // [N, ...] as stored: the built-in sets are [N, C, H, W] uint8 pixels or float32 features; a
  // tensors dataset may also hold float64, int32 or int64 inputs.
  at::Tensor inputs;
  // [N] class labels in [0, num_classes) (int64 for the built-in sets; int32 or uint8 allowed),
  // or [N, ...] floating-point regression targets (a tensors dataset trained with mse).
  at::Tensor labels;
  int64_t num_classes = 0;  // 0: targets are not classes
  // Applied by gather() to uint8 inputs: x = (pixel / 255 - mean) / stddev.
  double mean = 0.0;
  double stddev = 1.0;
  // Where the inputs and labels were read, for error messages (`train.pt ["x"]`, `x.npy`).
  std::string inputs_origin;
  std::string labels_origin;

  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
  std::vector<int64_t> sample_shape() const;  // inputs' shape without N: {C, H, W}, ...
  // Inputs and labels of the given samples, in that order: uint8 inputs become normalized
  // float32, other integer inputs int64, floating-point ones keep their type; integer labels
  // become int64.
  std::pair<at::Tensor, at::Tensor> gather(const std::vector<int64_t>& indices) const;
  // The same for samples [begin, end).
  std::pair<at::Tensor, at::Tensor> range(int64_t begin, int64_t end) const;
  // Type, shape and label range of the inputs and labels, for check_splits (user_files.hpp).
  SplitFacts facts() const;
};

// The train and test splits of one dataset.
struct DatasetPair {
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> test;
};

// Reads an IDX file (gzipped or not) whose element type is unsigned byte and whose rank is
// `expected_rank`. Throws DatasetError naming the file on a missing file, a wrong magic number
// or rank, a zero dimension, a truncated or oversized payload, or a corrupt gzip stream.
at::Tensor read_idx_u8(const std::string& file, int expected_rank);

// Loads Fashion-MNIST ({train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]) from `dir`. A missing
// directory or file gets a DatasetError saying how to install the dataset.
DatasetPair load_fashion_mnist(const std::string& dir);

// Images made of a seeded coarse Gaussian pattern z (at most 7x7, scaled up) plus pixel noise,
// labelled by a seeded random linear teacher on z (argmax of W z): learnable from a few thousand
// samples, and the same for a given spec and seed on every rank.
DatasetPair make_synthetic(const SyntheticSpec& spec, uint64_t seed);

// Reads a tensors dataset (spec.tensors): torch.save({"x": X, "y": Y}) archives or .npy pairs.
// Throws DatasetError naming the file: missing, not an archive or .npy file, no "x"/"y" tensor,
// an unsupported type, or x and y of different lengths. Whether the labels fit a loss is checked
// by the Trainer (check_splits), which knows the loss.
DatasetPair load_tensor_files(const TensorFilesSpec& spec);

// Validates `spec` and builds the dataset it names.
DatasetPair load_datasets(const DataSpec& spec);

}  // namespace omnilearn::training
