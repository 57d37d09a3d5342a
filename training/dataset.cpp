#include "training/dataset.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <tuple>

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
  if (raw.scalar_type() == at::kByte) {
    return raw.to(at::kFloat).mul_(1.0 / (255.0 * d.stddev)).sub_(d.mean / d.stddev);
  }
  // Floating-point inputs keep their type (the Trainer converts them to its precision); other
  // integers are indices (token ids, say) for an embedding.
  return raw.is_floating_point() ? raw : raw.to(at::kLong);
}

at::Tensor labels_of(const at::Tensor& raw) {
  return raw.is_floating_point() ? raw : raw.to(at::kLong);
}

// NumPy's name of a tensor's element type, the vocabulary of TensorFacts.
std::string dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: return c10::toString(type);
  }
}

TensorFacts facts_of(const at::Tensor& t, const std::string& origin) {
  TensorFacts f;
  f.origin = origin;
  f.dtype = dtype_name(t.scalar_type());
  f.shape.assign(t.sizes().begin(), t.sizes().end());
  if (t.numel() > 0 && !t.is_floating_point() && t.scalar_type() != at::kBool) {
    f.has_range = true;
    f.min = t.min().item<int64_t>();
    f.max = t.max().item<int64_t>();
  }
  return f;
}

// A tensor that owns exactly its elements, contiguous: a torch.save of a slice stores the whole
// storage it views.
at::Tensor compact(const at::Tensor& t) {
  at::Tensor out = t.detach();
  if (!out.is_contiguous() || out.storage().nbytes() != out.nbytes()) {
    out = out.clone(at::MemoryFormat::Contiguous);
  }
  return out;
}

// {"x": inputs, "y": labels} from a torch.save archive.
std::pair<at::Tensor, at::Tensor> read_torch_save(const std::string& file) {
  check_torch_save_file(file);
  std::ifstream in(file, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  c10::IValue value;
  try {
    value = torch::jit::pickle_load(bytes);
  } catch (const std::exception& e) {
    std::string why = e.what();
    why = why.substr(0, why.find('\n'));
    throw DatasetError(file + ": cannot read it as a torch.save archive (" + why +
                       "): write it with torch.save({\"x\": X, \"y\": Y}, path)");
  }
  if (!value.isGenericDict()) {
    throw DatasetError(file + ": holds a " + value.tagKind() +
                       ", expected a dict {\"x\": inputs, \"y\": labels}");
  }
  const c10::impl::GenericDict dict = value.toGenericDict();
  std::string keys;
  for (const auto& entry : dict) {
    keys += (keys.empty() ? "" : ", ") +
            (entry.key().isString() ? "\"" + entry.key().toStringRef() + "\""
                                    : entry.key().tagKind());
  }
  at::Tensor out[2];
  for (int i = 0; i < 2; ++i) {
    const std::string key = i == 0 ? "x" : "y";
    const auto it = dict.find(key);
    if (it == dict.end()) {
      throw DatasetError(file + ": has no \"" + key + "\" entry (it has " + keys +
                         "); expected {\"x\": inputs, \"y\": labels}");
    }
    if (!it->value().isTensor()) {
      throw DatasetError(file + ": \"" + key + "\" is a " + it->value().tagKind() +
                         ", not a tensor");
    }
    const at::Tensor t = it->value().toTensor();
    if (t.layout() != at::kStrided || t.is_quantized()) {
      throw DatasetError(file + ": \"" + key + "\" must be a dense tensor (call .to_dense())");
    }
    out[i] = compact(t.to(at::kCPU));
  }
  return {out[0], out[1]};
}

at::ScalarType npy_scalar_type(const std::string& dtype) {
  if (dtype == "float32") return at::kFloat;
  if (dtype == "float64") return at::kDouble;
  if (dtype == "int64") return at::kLong;
  if (dtype == "int32") return at::kInt;
  return at::kByte;  // read_npy_header admits nothing else
}

at::Tensor read_npy(const std::string& file) {
  const NpyHeader header = read_npy_header(file);
  // A Fortran-order payload is the transpose in C order: read it so, then transpose back.
  std::vector<int64_t> stored = header.shape;
  if (header.fortran_order) std::reverse(stored.begin(), stored.end());
  at::Tensor t = at::empty(stored, at::TensorOptions().dtype(npy_scalar_type(header.dtype)));
  std::ifstream in(file, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(header.data_offset));
  in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(header.data_bytes));
  if (static_cast<uint64_t>(in.gcount()) != header.data_bytes) {
    throw DatasetError(file + ": truncated payload");
  }
  if (header.fortran_order && t.dim() > 1) {
    std::vector<int64_t> reverse(static_cast<size_t>(t.dim()));
    for (int64_t i = 0; i < t.dim(); ++i) reverse[static_cast<size_t>(i)] = t.dim() - 1 - i;
    t = t.permute(reverse).contiguous();
  }
  return t;
}

Dataset tensor_split(const std::string& split, const std::string& file, const std::string& x_file,
                     const std::string& y_file) {
  Dataset d;
  d.name = "tensors/" + split;
  if (!file.empty()) {
    std::tie(d.inputs, d.labels) = read_torch_save(file);
    d.inputs_origin = file + " [\"x\"]";
    d.labels_origin = file + " [\"y\"]";
  } else {
    d.inputs = read_npy(x_file);
    d.labels = read_npy(y_file);
    d.inputs_origin = x_file;
    d.labels_origin = y_file;
  }
  if (d.inputs.dim() == 0 || d.labels.dim() == 0 || d.inputs.size(0) != d.labels.size(0)) {
    throw DatasetError(d.labels_origin + ": shape " + std::string(c10::str(d.labels.sizes())) +
                       " does not match the " + std::string(c10::str(d.inputs.sizes())) +
                       " of " + d.inputs_origin +
                       ": inputs and labels need the same first dimension (one per sample)");
  }
  return d;
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
  return {normalize(*this, inputs.index_select(0, idx)), labels_of(labels.index_select(0, idx))};
}

std::pair<at::Tensor, at::Tensor> Dataset::range(int64_t begin, int64_t end) const {
  return {normalize(*this, inputs.slice(0, begin, end)), labels_of(labels.slice(0, begin, end))};
}

SplitFacts Dataset::facts() const {
  return SplitFacts{facts_of(inputs, inputs_origin.empty() ? name + " inputs" : inputs_origin),
                    facts_of(labels, labels_origin.empty() ? name + " labels" : labels_origin)};
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

DatasetPair load_tensor_files(const TensorFilesSpec& spec) {
  Dataset train = tensor_split("train", spec.train, spec.train_x, spec.train_y);
  Dataset test = tensor_split("test", spec.test, spec.test_x, spec.test_y);
  // Integer labels are classes: [data] classes of them, or as many as the largest label says
  // (check_splits, run by the Trainer, rejects labels outside that range).
  if (!train.labels.is_floating_point() && !test.labels.is_floating_point()) {
    int64_t classes = spec.classes;
    for (const Dataset* d : {&train, &test}) {
      if (spec.classes == 0 && d->labels.numel() > 0) {
        classes = std::max(classes, d->labels.max().item<int64_t>() + 1);
      }
    }
    train.num_classes = test.num_classes = classes;
  }
  return DatasetPair{std::make_shared<const Dataset>(std::move(train)),
                     std::make_shared<const Dataset>(std::move(test))};
}

DatasetPair load_datasets(const DataSpec& spec) {
  validate(spec);
  if (spec.dataset == "synthetic") return make_synthetic(spec.synthetic, spec.seed);
  if (spec.dataset == "tensors") return load_tensor_files(spec.tensors);
  return load_fashion_mnist(spec.path);
}

}  // namespace omnilearn::training
