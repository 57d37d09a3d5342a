#include "training/dataset.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

namespace omnilearn::training {
namespace {

// Fashion-MNIST training-set pixel statistics (of pixel / 255).
constexpr double kFashionMean = 0.2860;
constexpr double kFashionStd = 0.3530;
constexpr const char* kInstallHint =
    "install it with `apt-get install dataset-fashion-mnist` (or scripts/install-deps.sh), or "
    "point data.path at a directory holding the IDX files";

std::vector<uint8_t> read_gz(const std::string& file) {
  gzFile in = gzopen(file.c_str(), "rb");
  if (in == nullptr) throw DatasetError("cannot open " + file + ": " + std::strerror(errno));
  std::vector<uint8_t> data;
  uint8_t chunk[1 << 16];
  for (;;) {
    const int n = gzread(in, chunk, sizeof(chunk));
    if (n < 0) {
      int code = 0;
      const std::string msg = gzerror(in, &code);
      gzclose(in);
      throw DatasetError(file + ": corrupt or truncated gzip stream (" + msg + ")");
    }
    if (n == 0) break;
    data.insert(data.end(), chunk, chunk + n);
  }
  int code = 0;
  const std::string msg = gzerror(in, &code);
  gzclose(in);
  // zlib reports a stream cut short as Z_BUF_ERROR only after the last read.
  if (code != Z_OK && code != Z_STREAM_END) {
    throw DatasetError(file + ": corrupt or truncated gzip stream (" + msg + ")");
  }
  return data;
}

std::string find_file(const std::string& dir, const std::string& stem) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) {
    throw DatasetError("Fashion-MNIST directory " + dir + " does not exist: " + kInstallHint);
  }
  for (const std::string& candidate : {stem + ".gz", stem}) {
    const fs::path path = fs::path(dir) / candidate;
    if (fs::exists(path)) return path.string();
  }
  throw DatasetError("Fashion-MNIST file " + (fs::path(dir) / (stem + ".gz")).string() +
                     " is missing: " + kInstallHint);
}

Dataset fashion_split(const std::string& dir, const std::string& prefix) {
  const std::string images_file = find_file(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_file = find_file(dir, prefix + "-labels-idx1-ubyte");
  at::Tensor images = read_idx_u8(images_file, 3);
  at::Tensor labels = read_idx_u8(labels_file, 1);
  if (images.size(0) != labels.size(0)) {
    throw DatasetError(images_file + " holds " + std::to_string(images.size(0)) + " images but " +
                       labels_file + " holds " + std::to_string(labels.size(0)) + " labels");
  }
  const int64_t max_label = labels.max().item<int64_t>();
  if (max_label >= 10) {
    throw DatasetError(labels_file + ": label " + std::to_string(max_label) +
                       " outside the 10 Fashion-MNIST classes");
  }
  Dataset d;
  d.name = "fashion-mnist/" + prefix;
  d.inputs = images.unsqueeze(1).contiguous();  // [N, 1, 28, 28]
  d.labels = labels.to(at::kLong);
  d.num_classes = 10;
  d.mean = kFashionMean;
  d.stddev = kFashionStd;
  return d;
}

at::Tensor normalize(const Dataset& d, const at::Tensor& raw) {
  if (raw.scalar_type() != at::kByte) return raw.to(at::kFloat);
  return raw.to(at::kFloat).mul_(1.0 / (255.0 * d.stddev)).sub_(d.mean / d.stddev);
}

}  // namespace

std::vector<int64_t> Dataset::sample_shape() const {
  auto sizes = inputs.sizes();
  return std::vector<int64_t>(sizes.begin() + 1, sizes.end());
}

std::pair<at::Tensor, at::Tensor> Dataset::gather(const std::vector<int64_t>& indices) const {
  const at::Tensor idx =
      at::from_blob(const_cast<int64_t*>(indices.data()), {static_cast<int64_t>(indices.size())},
                    at::TensorOptions().dtype(at::kLong));
  return {normalize(*this, inputs.index_select(0, idx)), labels.index_select(0, idx)};
}

std::pair<at::Tensor, at::Tensor> Dataset::range(int64_t begin, int64_t end) const {
  return {normalize(*this, inputs.slice(0, begin, end)), labels.slice(0, begin, end)};
}

at::Tensor read_idx_u8(const std::string& file, int expected_rank) {
  if (!std::filesystem::exists(file)) throw DatasetError("IDX file " + file + " does not exist");
  const std::vector<uint8_t> data = read_gz(file);
  if (data.size() < 4) {
    throw DatasetError(file + ": truncated IDX header (" + std::to_string(data.size()) + " bytes)");
  }
  if (data[0] != 0 || data[1] != 0 || data[2] != 0x08) {
    char magic[16];
    std::snprintf(magic, sizeof(magic), "%02x%02x%02x%02x", data[0], data[1], data[2], data[3]);
    throw DatasetError(file + ": bad IDX magic 0x" + magic +
                       " (expected 0x000008xx: unsigned-byte data)");
  }
  const int rank = data[3];
  if (rank != expected_rank) {
    throw DatasetError(file + ": IDX has " + std::to_string(rank) + " dimensions, expected " +
                       std::to_string(expected_rank));
  }
  const size_t header = 4 + 4 * static_cast<size_t>(rank);
  if (data.size() < header) {
    throw DatasetError(file + ": truncated IDX header (" + std::to_string(data.size()) +
                       " bytes, expected " + std::to_string(header) + ")");
  }
  std::vector<int64_t> dims;
  uint64_t elements = 1;
  for (int i = 0; i < rank; ++i) {
    const uint8_t* p = data.data() + 4 + 4 * i;
    const uint64_t dim =
        (uint64_t{p[0]} << 24) | (uint64_t{p[1]} << 16) | (uint64_t{p[2]} << 8) | uint64_t{p[3]};
    if (dim == 0) throw DatasetError(file + ": IDX dimension " + std::to_string(i) + " is zero");
    elements *= dim;
    if (elements > (uint64_t{1} << 40)) throw DatasetError(file + ": IDX dimensions too large");
    dims.push_back(static_cast<int64_t>(dim));
  }
  const size_t payload = data.size() - header;
  if (payload < elements) {
    throw DatasetError(file + ": truncated IDX payload: " + std::to_string(payload) +
                       " bytes, expected " + std::to_string(elements));
  }
  if (payload > elements) {
    throw DatasetError(file + ": " + std::to_string(payload - elements) +
                       " unexpected bytes after the IDX payload");
  }
  at::Tensor out = at::empty(dims, at::TensorOptions().dtype(at::kByte));
  std::memcpy(out.data_ptr<uint8_t>(), data.data() + header, elements);
  return out;
}

DatasetPair load_fashion_mnist(const std::string& dir) {
  DatasetPair pair;
  pair.train = std::make_shared<const Dataset>(fashion_split(dir, "train"));
  pair.test = std::make_shared<const Dataset>(fashion_split(dir, "t10k"));
  if (pair.train->sample_shape() != pair.test->sample_shape()) {
    throw DatasetError("Fashion-MNIST in " + dir + ": train and test images differ in shape");
  }
  return pair;
}

DatasetPair make_synthetic(const SyntheticSpec& spec, uint64_t seed) {
  DataSpec check;
  check.dataset = "synthetic";
  check.synthetic = spec;
  validate(check);
  // Each image is a coarse random pattern z (at most 7x7 per channel) scaled up to H x W plus
  // pixel noise; the teacher labels z. Few effective features (learnable from a few thousand
  // samples) with spatial structure (so convolutions help too).
  const int64_t grid_h = std::min<int64_t>(spec.height, 7),
                grid_w = std::min<int64_t>(spec.width, 7);
  const int64_t features = spec.channels * grid_h * grid_w;
  // Generators are local: ranks running as threads must not race on the global one.
  at::Generator teacher_gen = at::make_generator<at::CPUGeneratorImpl>(seed * 3 + 1);
  const at::Tensor teacher =
      at::randn({features, spec.num_classes}, teacher_gen, at::TensorOptions().dtype(at::kFloat));
  auto make = [&](int64_t n, uint64_t stream, const std::string& split) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed * 3 + stream);
    const auto floats = at::TensorOptions().dtype(at::kFloat);
    const at::Tensor z = at::randn({n, spec.channels, grid_h, grid_w}, gen, floats);
    const at::Tensor noise = at::randn({n, spec.channels, spec.height, spec.width}, gen, floats);
    at::Tensor x = at::upsample_nearest2d(z, {spec.height, spec.width}).add_(noise, 0.5);
    Dataset d;
    d.name = "synthetic/" + split;
    d.labels = z.reshape({n, features}).matmul(teacher).argmax(1).to(at::kLong);
    d.inputs = x;
    d.num_classes = spec.num_classes;
    return std::make_shared<const Dataset>(std::move(d));
  };
  return DatasetPair{make(spec.train_size, 2, "train"), make(spec.test_size, 3, "test")};
}

DatasetPair load_datasets(const DataSpec& spec) {
  validate(spec);
  if (spec.dataset == "synthetic") return make_synthetic(spec.synthetic, spec.seed);
  return load_fashion_mnist(spec.path);
}

}  // namespace omnilearn::training
