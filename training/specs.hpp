#pragma once
// Plain configuration structs for the training engine. The actor layer parses TOML into these;
// nothing here knows about files or torch. validate() throws std::invalid_argument saying what
// was expected.

#include <cstdint>
#include <string>
#include <vector>

namespace omnilearn::training {

// Where Debian's dataset-fashion-mnist package puts the gzipped IDX files.
inline constexpr const char* kDefaultFashionMnistPath = "/usr/share/datasets/fashion-mnist";

// Which network to build. Names of parameters follow the equivalent torch.nn.Sequential so a
// checkpoint loads in PyTorch (see models.hpp for the exact module layout); a "torchscript"
// model keeps the names its Python module gives them.
struct ModelSpec {
  std::string kind = "mlp";                  // "mlp" | "cnn" | "resnet" | "torchscript"
  std::vector<int64_t> hidden = {256, 128};  // mlp: widths of the hidden layers (may be empty)
  std::vector<int64_t> channels = {6, 16};   // cnn: the two conv widths; resnet: stage widths
  std::vector<int64_t> fc = {120, 84};       // cnn: widths of the fully connected layers
  int64_t blocks_per_stage = 1;              // resnet: residual blocks per stage
  uint64_t seed = 0;                         // initialization seed: equal seeds, equal weights
  // torchscript: a module saved with torch.jit.save (its weights are the initial ones; `seed`
  // does not apply). The job parser resolves a relative path against the job file's directory.
  std::string path;
};

// Learning-rate schedule over committed steps, after an optional linear warmup.
struct ScheduleSpec {
  std::string kind = "constant";  // "constant" | "step" | "cosine"
  int64_t warmup_steps = 0;       // lr ramps linearly to its base value over these steps
  int64_t step_size = 0;          // step: multiply by gamma every step_size steps after warmup
  double gamma = 0.1;             // step: decay factor
  int64_t total_steps = 0;        // cosine: step at which lr reaches min_lr (includes warmup)
  double min_lr = 0.0;            // cosine: final learning rate
};

// Optimizer and its hyper-parameters. Formulas follow torch.optim (SGD, Adam, AdamW).
struct OptimizerSpec {
  std::string kind = "sgd";  // "sgd" | "adam" | "adamw"
  double lr = 0.05;
  double momentum = 0.0;  // sgd only
  bool nesterov = false;  // sgd only; needs momentum > 0
  double weight_decay = 0.0;
  double beta1 = 0.9;  // adam/adamw
  double beta2 = 0.999;
  double eps = 1e-8;
  ScheduleSpec schedule;
};

// Sizes of the synthetic dataset (a seeded linear teacher labels Gaussian inputs).
struct SyntheticSpec {
  int64_t train_size = 4096;
  int64_t test_size = 1024;
  int64_t channels = 1;
  int64_t height = 28;
  int64_t width = 28;
  int64_t num_classes = 10;
};

// The files of a "tensors" dataset. Each split is either one file written with
// torch.save({"x": X, "y": Y}, path) or a pair of NumPy .npy files (x and y); X is [N, ...]
// (float32/float64; uint8, scaled by 1/255; int32/int64, passed as int64), Y is [N] class
// indices (cross_entropy) or [N, ...] floating-point targets (mse).
struct TensorFilesSpec {
  std::string train;    // torch.save file of the training split ...
  std::string train_x;  // ... or its .npy pair
  std::string train_y;
  std::string test;
  std::string test_x;
  std::string test_y;
  int64_t classes = 0;  // cross_entropy: labels lie in [0, classes); 0: the largest label + 1
};

// Which data to train on and the seed of the per-epoch shuffling (and of the synthetic rule).
struct DataSpec {
  std::string dataset = "fashion-mnist";  // "fashion-mnist" | "synthetic" | "tensors"
  std::string path = kDefaultFashionMnistPath;
  SyntheticSpec synthetic;
  TensorFilesSpec tensors;
  uint64_t seed = 0;
};

// What the model's output is compared with: "cross_entropy" (class labels; every model) or
// "mse" (floating-point targets; torchscript models on a tensors dataset).
inline constexpr const char* kDefaultLoss = "cross_entropy";

// Each throws std::invalid_argument naming the field and what was expected.
void validate(const ModelSpec& spec);
void validate(const ScheduleSpec& spec);
void validate(const OptimizerSpec& spec);
void validate(const DataSpec& spec);
// The loss's name, and that the model can train with it (whether the data can is a question
// for its files: check_splits in user_files.hpp).
void validate_loss(const std::string& loss, const ModelSpec& model);

// Learning rate for the step that follows `committed_steps` committed steps (pure function).
double scheduled_lr(const OptimizerSpec& spec, int64_t committed_steps);

}  // namespace omnilearn::training
