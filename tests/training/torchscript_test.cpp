// Users' own models and data: modules saved with torch.jit.script and tensors saved with
// torch.save / numpy.save (by tests/training/torchscript_fixtures.py, with python3-torch),
// loaded, trained, kept in sync and checkpointed so that Python loads the weights back; and
// wrong files rejected at start with the file and the reason. (3 ranks equal to 1 rank:
// equivalence_test.cpp, TorchScriptEquivalence.)
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/training/test_support.hpp"
#include "tests/training/torchscript_fixtures.hpp"

namespace omnilearn::training {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class TorchScript : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    const auto& dir = testing::TorchScriptFixtures::dir(&why);
    if (!dir) GTEST_SKIP() << why;
    dir_ = *dir;
    at::set_num_threads(1);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  // A model file on the classification set (train.pt / test.pt).
  TrainerConfig config(const std::string& model) const {
    TrainerConfig c;
    c.model.kind = "torchscript";
    c.model.path = file(model);
    c.data.dataset = "tensors";
    c.data.tensors.train = file("train.pt");
    c.data.tensors.test = file("test.pt");
    c.data.seed = 3;
    c.optimizer.kind = "sgd";
    c.optimizer.lr = 0.05;
    c.optimizer.momentum = 0.9;
    return c;
  }

  static std::vector<std::string> names_of(const std::vector<NamedTensor>& tensors) {
    std::vector<std::string> out;
    for (const auto& [name, t] : tensors) out.push_back(name);
    return out;
  }

  // What constructing a Trainer with `c` throws (a DatasetError or ModelError), or "".
  static std::string start_error(const TrainerConfig& c) {
    try {
      Trainer t(c);
    } catch (const DatasetError& e) {
      return std::string("DatasetError: ") + e.what();
    } catch (const ModelError& e) {
      return std::string("ModelError: ") + e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(TorchScript, ParametersAndBuffersHaveThePythonNamesInPythonsOrder) {
  std::ifstream in(file("names.json"));
  const nlohmann::json names = nlohmann::json::parse(in);
  for (const char* model : {"cnn", "bn", "regressor"}) {
    SCOPED_TRACE(model);
    TrainerConfig c = config(std::string(model) + ".pt");
    if (std::string(model) == "regressor") {
      c.data.tensors.train = file("reg_train.pt");
      c.data.tensors.test = file("reg_test.pt");
      c.loss = "mse";
    }
    Trainer t(c);
    EXPECT_EQ(names_of(t.named_parameters()),
              names[model]["parameters"].get<std::vector<std::string>>());
    EXPECT_EQ(names_of(t.named_buffers()), names[model]["buffers"].get<std::vector<std::string>>());
  }
}

// The flat buffers an asynchronous job's shard 0 keeps: an integer counter travels as a float
// and comes back an integer of the same type.
TEST_F(TorchScript, FlatBuffersKeepIntegerCountersIntegers) {
  const TrainerConfig c = config("bn.pt");
  Trainer t(c, load_datasets(c.data));
  std::vector<float> flat(static_cast<size_t>(t.flat_buffer_count()));
  ASSERT_FALSE(flat.empty());
  t.copy_flat_buffers(flat.data());
  int64_t offset = 0;
  bool counter = false;
  for (const auto& [name, b] : t.named_buffers()) {
    if (name == "bn.num_batches_tracked") {
      counter = true;
      flat[static_cast<size_t>(offset)] = 41.75f;  // a sum of float differences, rounded back
    }
    offset += b.numel();
  }
  ASSERT_TRUE(counter);
  t.set_flat_buffers(flat.data());
  for (const auto& [name, b] : t.named_buffers()) {
    if (name == "bn.num_batches_tracked") {
      EXPECT_EQ(b.scalar_type(), at::kLong);
      EXPECT_EQ(b.item<int64_t>(), 42);
    }
  }
}

// BatchNorm in a user's module: float buffers averaged with weight b_r / B, the int counter
// advanced on every rank (the empty slice's included), so the replicas stay identical; a
// parameter with requires_grad=False is kept, synced and checkpointed, never trained.
TEST_F(TorchScript, BuffersStayInSyncAndFrozenParametersStayFrozen) {
  const TrainerConfig c = config("bn.pt");
  const DatasetPair data = load_datasets(c.data);
  const Trainer untouched(c, data);
  const std::vector<std::vector<int>> plans = {{40, 100, 116}, {0, 128, 128}, {1, 1, 254}};
  testing::LoopbackStore store;
  std::vector<std::vector<NamedTensor>> params(3), buffers(3);
  testing::run_ranks(3, [&](int rank) {
    Trainer t(c, data);
    ASSERT_TRUE(t.join_group(store.client(), 0, rank, 3, 20s, testing::loopback()).ok);
    ASSERT_TRUE(t.sync_state_from_rank0().ok);
    for (const auto& plan : plans) {
      const StepResult r = t.step(plan);
      ASSERT_TRUE(r.committed) << r.error;
    }
    params[static_cast<size_t>(rank)] = t.named_parameters();
    buffers[static_cast<size_t>(rank)] = t.named_buffers();
  });
  for (int r = 1; r < 3; ++r) {
    testing::expect_equal(params[static_cast<size_t>(r)], params[0], "parameters");
    testing::expect_equal(buffers[static_cast<size_t>(r)], buffers[0], "buffers");
  }
  for (const auto& [name, b] : buffers[0]) {
    if (name == "bn.num_batches_tracked") {
      EXPECT_EQ(b.scalar_type(), at::kLong);
      EXPECT_EQ(b.item<int64_t>(), 3);
    }
    if (name == "bn.running_mean") {
      EXPECT_GT(b.abs().sum().item<double>(), 0) << "never updated";
    }
  }
  const auto before = untouched.named_parameters();
  for (size_t i = 0; i < before.size(); ++i) {
    if (before[i].first == "scale") {
      EXPECT_TRUE(at::equal(params[0][i].second, before[i].second)) << "a frozen parameter moved";
    } else {
      EXPECT_FALSE(at::equal(params[0][i].second, before[i].second)) << before[i].first;
    }
  }
}

// The checkpoint's "model" entry is a state dict the same scripted module loads in Python
// (load_state_dict, strict), and it then scores the test set as the trainer did.
TEST_F(TorchScript, PythonLoadsTheCheckpointIntoTheScriptedModule) {
  Trainer t(config("bn.pt"));
  for (int s = 0; s < 5; ++s) ASSERT_TRUE(t.step({64}).committed);
  const EvalResult eval = t.evaluate();
  const std::string checkpoint = file("bn-checkpoint.pt");
  t.save_checkpoint(checkpoint);

  std::string why;
  const auto python = omnilearn::testing::find_torch_python(&why);
  ASSERT_TRUE(python) << why;
  const std::string script =
      "import sys, torch\n"
      "torch.set_num_threads(1)\n"
      "m = torch.jit.load(sys.argv[1])\n"
      "m.load_state_dict(torch.load(sys.argv[2])['model'])\n"
      "m.eval()\n"
      "d = torch.load(sys.argv[3])\n"
      "with torch.no_grad():\n"
      "    out = m(d['x'])\n"
      "    loss = torch.nn.functional.cross_entropy(out, d['y'], reduction='sum') / len(d['y'])\n"
      "    print((out.argmax(1) == d['y']).float().mean().item(), loss.item())\n";
  const auto result = omnilearn::testing::run_python(
      *python, {"-c", script, file("bn.pt"), checkpoint, file("test.pt")});
  ASSERT_EQ(result.status.code, 0) << result.err;
  double accuracy = -1, loss = -1;
  std::istringstream(result.out) >> accuracy >> loss;
  EXPECT_NEAR(accuracy, eval.accuracy, 1e-6) << result.out;
  EXPECT_NEAR(loss, eval.loss, 1e-5 * eval.loss) << result.out;
}

TEST_F(TorchScript, NpyPairsReadBackAsTheSameTensorsAsTorchSave) {
  for (const char* key : {"f4", "f8", "i8", "i4", "u1", "fortran"}) {
    SCOPED_TRACE(key);
    TensorFilesSpec spec;
    spec.train_x = file(std::string(key) + ".npy");
    spec.train_y = file("labels7.npy");
    spec.test = file(std::string(key) + ".pt");
    const DatasetPair pair = load_tensor_files(spec);
    EXPECT_EQ(pair.train->inputs.scalar_type(), pair.test->inputs.scalar_type());
    EXPECT_TRUE(pair.train->inputs.is_contiguous());
    EXPECT_TRUE(at::equal(pair.train->inputs, pair.test->inputs));
    EXPECT_TRUE(at::equal(pair.train->labels, pair.test->labels));
    EXPECT_EQ(pair.train->num_classes, 3);
    EXPECT_EQ(pair.train->inputs_origin, spec.train_x);
  }
  // A saved slice holds only its own samples.
  TensorFilesSpec spec;
  spec.train = file("slice.pt");
  spec.test = file("train.pt");
  const DatasetPair pair = load_tensor_files(spec);
  ASSERT_EQ(pair.train->size(), 10);
  EXPECT_EQ(pair.train->inputs.storage().nbytes(), pair.train->inputs.nbytes());
  EXPECT_TRUE(at::equal(pair.train->inputs, pair.test->inputs.slice(0, 10, 20)));
  EXPECT_TRUE(at::equal(pair.train->labels, pair.test->labels.slice(0, 10, 20)));
}

TEST_F(TorchScript, NpyFilesTrainExactlyAsTorchSaveFiles) {
  TrainerConfig pt = config("cnn.pt");
  TrainerConfig npy = pt;
  npy.data.tensors = TensorFilesSpec{};
  npy.data.tensors.train_x = file("train_x.npy");
  npy.data.tensors.train_y = file("train_y.npy");
  npy.data.tensors.test_x = file("test_x.npy");
  npy.data.tensors.test_y = file("test_y.npy");
  Trainer a(pt), b(npy);
  for (int s = 0; s < 5; ++s) {
    ASSERT_TRUE(a.step({128}).committed);
    ASSERT_TRUE(b.step({128}).committed);
  }
  testing::expect_equal(a.named_parameters(), b.named_parameters(), ".npy vs .pt");
  EXPECT_EQ(a.evaluate().accuracy, b.evaluate().accuracy);
}

TEST_F(TorchScript, MseTrainsRegressionTargetsAndReportsNoAccuracy) {
  TrainerConfig c = config("regressor.pt");
  c.data.tensors.train = file("reg_train.pt");
  c.data.tensors.test = file("reg_test.pt");
  c.loss = "mse";
  c.optimizer.lr = 0.01;
  Trainer t(c);
  const double before = t.evaluate().loss;
  for (int s = 0; s < 30; ++s) ASSERT_TRUE(t.step({50}).committed);
  const EvalResult after = t.evaluate();
  EXPECT_LT(after.loss, before / 4) << "before " << before;
  EXPECT_EQ(after.accuracy, -1);
}

// Each wrong file is reported when the trainer starts: which file, and what is wrong with it.
TEST_F(TorchScript, WrongFilesAreRejectedAtStartWithTheFileAndTheReason) {
  struct Case {
    std::string name;
    std::function<void(TrainerConfig&)> change;
    std::vector<std::string> expected;  // substrings of the error
  };
  auto train = [&](const std::string& f) {
    return [this, f](TrainerConfig& c) { c.data.tensors.train = file(f); };
  };
  auto model = [&](const std::string& f) {
    return [this, f](TrainerConfig& c) { c.model.path = file(f); };
  };
  auto train_npy_x = [&](const std::string& f) {
    return [this, f](TrainerConfig& c) {
      c.data.tensors.train.clear();
      c.data.tensors.train_x = file(f);
      c.data.tensors.train_y = file("train_y.npy");
    };
  };
  const std::vector<Case> cases = {
      {"missing model",
       model("no-such-model.pt"),
       {"ModelError", "no-such-model.pt", "does not exist", "every worker"}},
      {"a state dict, not a module",
       model("state_dict.pt"),
       {"ModelError", "state_dict.pt", "cannot load it as a TorchScript module",
        "torch.jit.script"}},
      {"a data file as the model",
       model("train_x.npy"),
       {"ModelError", "train_x.npy", "not a TorchScript archive"}},
      {"forward returns a tuple",
       model("tuple_out.pt"),
       {"ModelError", "tuple_out.pt", "returned a Tuple", "one tensor"}},
      {"inputs the model cannot take",
       [this](TrainerConfig& c) {
         c.data.tensors.train = c.data.tensors.test = file("three_channels.pt");
       },
       {"ModelError", "cnn.pt", "forward failed on inputs of shape [2, 3, 12, 12]",
        "three_channels.pt"}},
      {"splits whose samples differ in shape",
       train("three_channels.pt"),
       {"DatasetError", "test.pt [\"x\"]", "[1, 12, 12] per sample", "three_channels.pt"}},
      {"more classes than the model outputs",
       train("seven_classes.pt"),
       {"ModelError", "cnn.pt", "outputs of shape [2, 5]", "C >= 7", "seven_classes.pt"}},
      {"missing data file",
       train("no-such-train.pt"),
       {"DatasetError", "no-such-train.pt", "does not exist"}},
      {"legacy torch.save format",
       train("legacy.pt"),
       {"DatasetError", "legacy.pt", "not a torch.save archive", "_use_new_zipfile_serialization"}},
      {"a list, not a dict",
       train("list.pt"),
       {"DatasetError", "list.pt", "holds a GenericList", "{\"x\": inputs, \"y\": labels}"}},
      {"no x entry", train("no_x.pt"), {"DatasetError", "no_x.pt", "no \"x\" entry", "\"inputs\""}},
      {"float labels with cross_entropy",
       train("float_labels.pt"),
       {"DatasetError", "float_labels.pt [\"y\"]", "integer class labels", "float32", "mse"}},
      {"fewer labels than inputs",
       train("short_labels.pt"),
       {"DatasetError", "short_labels.pt [\"y\"]", "[599]", "same first dimension"}},
      {"a negative label",
       train("negative_labels.pt"),
       {"DatasetError", "negative_labels.pt [\"y\"]", "label -1 is negative"}},
      {"a label outside [data] classes",
       [this](TrainerConfig& c) {
         c.data.tensors.train = file("seven_classes.pt");
         c.data.tensors.classes = 5;
       },
       {"DatasetError", "seven_classes.pt [\"y\"]", "label 6 is outside [0, 5)"}},
      {"splits of different input types",
       [this](TrainerConfig& c) { c.data.tensors.test = file("test_float64.pt"); },
       {"DatasetError", "test_float64.pt [\"x\"]", "float64", "same type"}},
      {"big-endian .npy",
       train_npy_x("big_endian.npy"),
       {"DatasetError", "big_endian.npy", "'>f4' is not supported", "big-endian"}},
      {"float16 .npy",
       train_npy_x("float16.npy"),
       {"DatasetError", "float16.npy", "'<f2' is not supported"}},
      {"structured .npy",
       train_npy_x("structured.npy"),
       {"DatasetError", "structured.npy", "structured array"}},
      {"a torch.save file named as .npy",
       train_npy_x("train.pt"),
       {"DatasetError", "train.pt", "not a .npy file", "zip archive"}},
      {"integer targets with mse",
       [](TrainerConfig& c) {
         c.loss = "mse";
         c.model.path.replace(c.model.path.find("cnn.pt"), 6, "regressor.pt");
       },
       {"DatasetError", "train.pt [\"y\"]", "mse\" needs floating-point targets", "int64"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TrainerConfig cfg = config("cnn.pt");
    c.change(cfg);
    const std::string error = start_error(cfg);
    ASSERT_FALSE(error.empty()) << "accepted";
    for (const std::string& part : c.expected) {
      EXPECT_NE(error.find(part), std::string::npos) << "missing \"" << part << "\" in: " << error;
    }
  }
}

TEST_F(TorchScript, TruncatedNpyFilesAreRejected) {
  std::ifstream in(file("train_x.npy"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t keep : {size_t{5}, size_t{40}, bytes.size() - 3}) {
    const std::string cut = file("cut.npy");
    std::ofstream(cut, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(keep));
    try {
      read_npy_header(cut);
      ADD_FAILURE() << "accepted " << keep << " bytes";
    } catch (const DatasetError& e) {
      EXPECT_NE(std::string(e.what()).find("cut.npy"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace omnilearn::training
