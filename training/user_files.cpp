#include "training/user_files.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

namespace omnilearn::training {
namespace {

namespace fs = std::filesystem;

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

std::vector<int64_t> per_sample(const std::vector<int64_t>& shape) {
  return shape.empty() ? shape : std::vector<int64_t>(shape.begin() + 1, shape.end());
}

bool is_one_of(const std::string& value, std::initializer_list<const char*> allowed) {
  return std::any_of(allowed.begin(), allowed.end(), [&](const char* a) { return value == a; });
}

constexpr std::initializer_list<const char*> kInputTypes = {"float32", "float64", "uint8", "int32",
                                                            "int64"};
constexpr std::initializer_list<const char*> kLabelTypes = {"int64", "int32", "uint8"};
constexpr std::initializer_list<const char*> kTargetTypes = {"float32", "float64"};

std::string list_text(std::initializer_list<const char*> names) {
  std::string out;
  for (const char* n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

// The first bytes of `file`; throws `Error` if it cannot be opened.
template <class Error>
std::string leading_bytes(const std::string& file, size_t n, const char* what) {
  std::error_code ec;
  if (!fs::exists(file, ec)) {
    throw Error(std::string(what) + " " + file +
                " does not exist (relative paths in a job file are relative to the job file; the "
                "file must be at this path on every worker)");
  }
  if (fs::is_directory(file, ec)) throw Error(std::string(what) + " " + file + " is a directory");
  std::ifstream in(file, std::ios::binary);
  if (!in)
    throw Error("cannot read " + std::string(what) + " " + file + ": " + std::strerror(errno));
  std::string bytes(n, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(n));
  bytes.resize(static_cast<size_t>(in.gcount()));
  return bytes;
}

bool is_zip(const std::string& head) { return head.rfind(std::string("PK\x03\x04", 4), 0) == 0; }
bool is_npy(const std::string& head) { return head.rfind("\x93NUMPY", 0) == 0; }

// A reader of the Python dict literal in a .npy header, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (5, 1, 28, 28), }
class HeaderDict {
 public:
  HeaderDict(const std::string& file, std::string text) : file_(file), text_(std::move(text)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw DatasetError(file_ + ": malformed .npy header (" + what + "): " + text_);
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool consume(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!consume(c)) fail(std::string("expected '") + c + "'");
  }
  std::string quoted() {
    skip_space();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
      fail("expected a quoted string");
    }
    const char quote = text_[pos_++];
    const size_t end = text_.find(quote, pos_);
    if (end == std::string::npos) fail("unterminated string");
    std::string out = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return out;
  }
  bool boolean() {
    skip_space();
    for (auto [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      if (text_.compare(pos_, std::strlen(word), word) == 0) {
        pos_ += std::strlen(word);
        return value;
      }
    }
    fail("expected True or False");
  }
  std::vector<int64_t> tuple() {
    expect('(');
    std::vector<int64_t> out;
    while (!consume(')')) {
      skip_space();
      const size_t start = pos_;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
      if (pos_ == start) fail("expected a dimension");
      if (pos_ - start > 15) fail("dimension too large");
      out.push_back(std::stoll(text_.substr(start, pos_ - start)));
      consume('L');  // written by Python 2's NumPy
      if (!consume(',')) {
        expect(')');
        break;
      }
    }
    return out;
  }
  bool at_end() {
    skip_space();
    return pos_ == text_.size();
  }

 private:
  const std::string& file_;
  std::string text_;
  size_t pos_ = 0;
};

uint64_t little_endian(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

void check_split(const SplitFacts& split, const std::string& loss, int64_t classes) {
  const TensorFacts& x = split.x;
  const TensorFacts& y = split.y;
  if (x.shape.empty()) {
    throw DatasetError(x.origin + ": inputs must have a first dimension of samples, got a scalar");
  }
  if (x.shape[0] < 1)
    throw DatasetError(x.origin + ": holds no samples (shape " + shape_text(x.shape) + ")");
  if (!is_one_of(x.dtype, kInputTypes)) {
    throw DatasetError(x.origin + ": inputs of type " + x.dtype +
                       " are not supported (use one of " + list_text(kInputTypes) + ")");
  }
  if (y.shape.empty() || y.shape[0] != x.shape[0]) {
    throw DatasetError(
        y.origin + ": holds " +
        (y.shape.empty() ? std::string("a scalar") : std::to_string(y.shape[0]) + " samples") +
        " but " + x.origin + " holds " + std::to_string(x.shape[0]) +
        ": inputs and labels must have the same first dimension");
  }
  if (loss == "mse") {
    if (!is_one_of(y.dtype, kTargetTypes)) {
      throw DatasetError(y.origin + ": loss = \"mse\" needs floating-point targets (" +
                         list_text(kTargetTypes) + "), got " + y.dtype +
                         " (class labels train with loss = \"cross_entropy\")");
    }
    return;
  }
  if (!is_one_of(y.dtype, kLabelTypes)) {
    throw DatasetError(y.origin + ": loss = \"cross_entropy\" needs integer class labels (" +
                       list_text(kLabelTypes) + "), got " + y.dtype +
                       " (real-valued targets train with loss = \"mse\")");
  }
  if (y.shape.size() != 1) {
    throw DatasetError(y.origin + ": class labels must be one per sample, shape [N], got " +
                       shape_text(y.shape));
  }
  if (y.has_range && y.min < 0) {
    throw DatasetError(y.origin + ": label " + std::to_string(y.min) +
                       " is negative; class labels are 0, 1, ..., classes - 1");
  }
  if (y.has_range && classes > 0 && y.max >= classes) {
    throw DatasetError(y.origin + ": label " + std::to_string(y.max) + " is outside [0, " +
                       std::to_string(classes) + ") ([data] classes = " + std::to_string(classes) +
                       ")");
  }
}

int64_t check_splits(const SplitFacts& train, const SplitFacts& test, const std::string& loss,
                     int64_t classes) {
  check_split(train, loss, classes);
  check_split(test, loss, classes);
  if (train.x.dtype != test.x.dtype) {
    throw DatasetError(test.x.origin + ": inputs of type " + test.x.dtype + " but " +
                       train.x.origin + " holds " + train.x.dtype +
                       ": both splits must have the same type (uint8 inputs are scaled by 1/255, "
                       "others are not)");
  }
  for (auto [a, b, what] :
       {std::tuple{&train.x, &test.x, "inputs"}, std::tuple{&train.y, &test.y, "targets"}}) {
    if (per_sample(a->shape) != per_sample(b->shape)) {
      throw DatasetError(b->origin + ": " + what + " of shape " + shape_text(per_sample(b->shape)) +
                         " per sample, but " + a->origin + " has " +
                         shape_text(per_sample(a->shape)));
    }
  }
  if (loss == "mse") return 0;
  if (classes > 0) return classes;
  if (!train.y.has_range || !test.y.has_range) return 0;
  const int64_t found = std::max(train.y.max, test.y.max) + 1;
  if (found < 2) {
    throw DatasetError(train.y.origin +
                       ": every label is 0; a classifier needs at least 2 "
                       "classes (set [data] classes if the test split holds the others)");
  }
  return found;
}

NpyHeader read_npy_header(const std::string& file) {
  const std::string head = leading_bytes<DatasetError>(file, 12, ".npy file");
  if (!is_npy(head)) {
    throw DatasetError(file +
                       ": not a .npy file (it must start with \\x93NUMPY, as numpy.save "
                       "writes)" +
                       (is_zip(head) ? std::string(": this is a zip archive; a torch.save file "
                                                   "goes in train / test, not train_x ...")
                                     : std::string()));
  }
  if (head.size() < 10) throw DatasetError(file + ": truncated .npy header");
  const auto* bytes = reinterpret_cast<const unsigned char*>(head.data());
  const int major = bytes[6];
  if (major < 1 || major > 3) {
    throw DatasetError(file + ": .npy format version " + std::to_string(major) + "." +
                       std::to_string(bytes[7]) + " is not supported (1.0, 2.0 and 3.0 are)");
  }
  const int length_bytes = major == 1 ? 2 : 4;
  if (head.size() < static_cast<size_t>(8 + length_bytes)) {
    throw DatasetError(file + ": truncated .npy header");
  }
  const uint64_t header_length = little_endian(bytes + 8, length_bytes);
  const uint64_t data_offset = 8 + length_bytes + header_length;
  std::error_code ec;
  const uint64_t file_size = fs::file_size(file, ec);
  if (ec || header_length > (1u << 20) || data_offset > file_size) {
    throw DatasetError(file + ": truncated .npy header (it says " + std::to_string(header_length) +
                       " bytes)");
  }
  std::ifstream in(file, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(8 + length_bytes));
  std::string text(header_length, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_length));
  if (static_cast<uint64_t>(in.gcount()) != header_length) {
    throw DatasetError(file + ": truncated .npy header");
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\0')) {
    text.pop_back();
  }

  HeaderDict dict(file, text);
  std::optional<std::string> descr;
  std::optional<bool> fortran;
  std::optional<std::vector<int64_t>> shape;
  dict.expect('{');
  while (!dict.consume('}')) {
    const std::string key = dict.quoted();
    dict.expect(':');
    if (key == "descr") {
      dict.skip_space();
      if (dict.consume('[')) {
        throw DatasetError(file +
                           ": holds a structured array (descr is a list of fields); save "
                           "plain numeric arrays, one for inputs and one for labels");
      }
      descr = dict.quoted();
    } else if (key == "fortran_order") {
      fortran = dict.boolean();
    } else if (key == "shape") {
      shape = dict.tuple();
    } else {
      dict.fail("unknown key '" + key + "'");
    }
    if (!dict.consume(',')) {
      dict.expect('}');
      break;
    }
  }
  if (!dict.at_end()) dict.fail("text after the dict");
  if (!descr || !fortran || !shape) dict.fail("it needs descr, fortran_order and shape");

  static const std::array<std::tuple<const char*, const char*, int64_t>, 5> kTypes = {{
      {"<f4", "float32", 4},
      {"<f8", "float64", 8},
      {"<i8", "int64", 8},
      {"<i4", "int32", 4},
      {"|u1", "uint8", 1},
  }};
  NpyHeader header;
  for (auto [code, name, size] : kTypes) {
    if (*descr == code) {
      header.dtype = name;
      header.item_size = size;
    }
  }
  if (header.dtype.empty()) {
    std::string hint = "convert it with numpy, e.g. a.astype(\"float32\") or a.astype(\"int64\")";
    if (!descr->empty() && (*descr)[0] == '>') hint = "it is big-endian; " + hint;
    throw DatasetError(file + ": element type '" + *descr +
                       "' is not supported (supported: '<f4' float32, '<f8' float64, '<i8' int64, "
                       "'<i4' int32, '|u1' uint8): " +
                       hint);
  }
  header.fortran_order = *fortran;
  header.shape = *shape;
  header.data_offset = data_offset;
  uint64_t elements = 1;
  for (int64_t d : header.shape) {
    if (d != 0 && elements > (uint64_t{1} << 50) / static_cast<uint64_t>(d)) {
      throw DatasetError(file + ": shape " + shape_text(header.shape) + " is too large");
    }
    elements *= static_cast<uint64_t>(d);
  }
  header.data_bytes = elements * static_cast<uint64_t>(header.item_size);
  const uint64_t payload = file_size - data_offset;
  if (payload != header.data_bytes) {
    throw DatasetError(file + ": the header says shape " + shape_text(header.shape) + " of " +
                       header.dtype + " (" + std::to_string(header.data_bytes) +
                       " bytes) but the file holds " + std::to_string(payload) +
                       " bytes of data (truncated or not a plain array)");
  }
  return header;
}

TensorFacts npy_facts(const std::string& file, bool read_values) {
  const NpyHeader header = read_npy_header(file);
  TensorFacts facts;
  facts.origin = file;
  facts.dtype = header.dtype;
  facts.shape = header.shape;
  if (!read_values || header.dtype.rfind("float", 0) == 0 || header.data_bytes == 0) return facts;
  std::ifstream in(file, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(header.data_offset));
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  std::vector<char> chunk(1 << 16);
  uint64_t left = header.data_bytes;
  while (left > 0) {
    const uint64_t n = std::min<uint64_t>(left, chunk.size());
    in.read(chunk.data(), static_cast<std::streamsize>(n));
    if (static_cast<uint64_t>(in.gcount()) != n) throw DatasetError(file + ": truncated payload");
    const auto* p = reinterpret_cast<const unsigned char*>(chunk.data());
    for (uint64_t i = 0; i < n; i += static_cast<uint64_t>(header.item_size)) {
      int64_t v = 0;
      if (header.dtype == "uint8") {
        v = p[i];
      } else if (header.dtype == "int32") {
        v = static_cast<int32_t>(static_cast<uint32_t>(little_endian(p + i, 4)));
      } else {
        v = static_cast<int64_t>(little_endian(p + i, 8));
      }
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    left -= n;
  }
  facts.has_range = true;
  facts.min = lo;
  facts.max = hi;
  return facts;
}

void check_torch_save_file(const std::string& file) {
  const std::string head = leading_bytes<DatasetError>(file, 8, "tensor file");
  if (is_npy(head)) {
    throw DatasetError(file +
                       ": is a .npy file; name .npy inputs and labels with train_x / "
                       "train_y (test_x / test_y) instead of train (test)");
  }
  if (!is_zip(head)) {
    throw DatasetError(file +
                       ": not a torch.save archive (a zip file): write it with "
                       "torch.save({\"x\": X, \"y\": Y}, path) in PyTorch >= 1.6's default format "
                       "(not _use_new_zipfile_serialization=False)");
  }
}

void check_torchscript_file(const std::string& file) {
  const std::string head = leading_bytes<ModelError>(file, 8, "model file");
  if (!is_zip(head)) {
    throw ModelError(file +
                     ": not a TorchScript archive (a zip file): save the model with "
                     "torch.jit.script(model).save(path) (or torch.jit.trace), not torch.save");
  }
}

}  // namespace omnilearn::training
