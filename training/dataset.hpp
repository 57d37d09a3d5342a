#pragma once
// In-memory datasets: Fashion-MNIST from gzipped IDX files, and a seeded synthetic set.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "training/specs.hpp"

namespace omnilearn::training {

// A dataset file is missing, unreadable or malformed; the message names the file and the fix.
class DatasetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Samples and labels held in memory. Immutable after construction, so one instance may be shared
// by every rank of a process (read from any thread).
struct Dataset {
  std::string name;
  at::Tensor inputs;  // [N, C, H, W], uint8 raw pixels or float32 features
  at::Tensor labels;  // [N], int64 in [0, num_classes)
  int64_t num_classes = 0;
  // Applied by gather() to uint8 inputs: x = (pixel / 255 - mean) / stddev.
  double mean = 0.0;
  double stddev = 1.0;

  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
  std::vector<int64_t> sample_shape() const;  // {C, H, W}
  // Float32 inputs [n, C, H, W] and int64 labels [n] of the given samples, in that order.
  std::pair<at::Tensor, at::Tensor> gather(const std::vector<int64_t>& indices) const;
  // Float32 inputs and labels of samples [begin, end).
  std::pair<at::Tensor, at::Tensor> range(int64_t begin, int64_t end) const;
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

// Validates `spec` and builds the dataset it names.
DatasetPair load_datasets(const DataSpec& spec);

}  // namespace omnilearn::training
