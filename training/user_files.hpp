#pragma once
// The files users bring, read and checked without LibTorch: a TorchScript model file, and the
// tensor files of a "tensors" dataset (torch.save archives and NumPy .npy files). The trainer
// checks what it loaded against the same rules (training/dataset.cpp builds TensorFacts from
// tensors); `omnilearn submit` checks what it can read without LibTorch (.npy headers and
// labels, the archive signature of the others), so a wrong file is reported before anything
// starts wherever the submitting machine can read it.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace omnilearn::training {

// A dataset file is missing, unreadable or malformed; the message names the file and the fix.
class DatasetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A model file is missing, unreadable, not a TorchScript module, or does not fit the data.
class ModelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What the dataset rules need to know about one stored tensor, whoever read it.
struct TensorFacts {
  std::string origin;  // the file (and entry) it came from: `train.pt ["x"]`, `train_x.npy`
  std::string dtype;   // NumPy's names: "float32", "float64", "int64", "int32", "uint8", ...
  std::vector<int64_t> shape;
  // Smallest and largest value, for integer tensors whose values were read.
  bool has_range = false;
  int64_t min = 0;
  int64_t max = 0;
};

// The inputs and labels (or regression targets) of one split.
struct SplitFacts {
  TensorFacts x;
  TensorFacts y;
};

// Checks one split against the loss ("cross_entropy" | "mse"): at least one sample; x of a
// supported type; y with x's number of samples; cross_entropy: y integer class indices [N],
// each in [0, classes) (when classes > 0 and the values were read); mse: y floating-point.
// Throws DatasetError naming the file and what is wrong.
void check_split(const SplitFacts& split, const std::string& loss, int64_t classes);

// check_split on both splits, then that they agree (the type and per-sample shape of x, and of
// y). Returns the number of classes for cross_entropy: `classes` when > 0, else the largest
// label of either split + 1 (at least 2); 0 for mse. Throws DatasetError.
int64_t check_splits(const SplitFacts& train, const SplitFacts& test, const std::string& loss,
                     int64_t classes);

// The element types a .npy file may hold here (its header's descr), with their NumPy names.
// Little-endian only (what NumPy writes on x86 and ARM); anything else is a DatasetError.
struct NpyHeader {
  std::string dtype;  // "float32" ('<f4'), "float64" ('<f8'), "int64" ('<i8'), "int32" ('<i4'),
                      // "uint8" ('|u1')
  int64_t item_size = 0;
  bool fortran_order = false;  // the payload holds the transposed array, C order
  std::vector<int64_t> shape;
  uint64_t data_offset = 0;  // where the payload starts
  uint64_t data_bytes = 0;   // item_size x prod(shape); the file holds exactly that after offset
};

// Reads and checks the header of a .npy file (format 1.0, 2.0 or 3.0): magic, version, the
// dict with descr / fortran_order / shape, and that the payload is exactly as long as the
// shape says. Throws DatasetError naming the file.
NpyHeader read_npy_header(const std::string& file);

// Facts of a .npy file; with `read_values`, integer payloads are read for their min and max.
TensorFacts npy_facts(const std::string& file, bool read_values);

// Throws DatasetError unless `file` exists and starts as a torch.save archive (a zip file).
void check_torch_save_file(const std::string& file);
// Throws ModelError unless `file` exists and starts as a TorchScript archive (a zip file).
void check_torchscript_file(const std::string& file);

}  // namespace omnilearn::training
