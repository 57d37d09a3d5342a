// Checkpoints: round trip of model, optimizer, step and cursor; PyTorch-compatible names;
// atomic replacement; corrupt or mismatched files rejected without touching the trainer.
#include <ATen/Parallel.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "tests/training/test_support.hpp"

namespace omnilearn::training {
namespace {

namespace fs = std::filesystem;

class Checkpoints : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    std::string tmpl = (fs::temp_directory_path() / "ol_ckpt_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    config_ = testing::synthetic_config(700, 12);
    config_.model.kind = "resnet";  // buffers (BatchNorm) and integer buffers too
    config_.model.channels = {4, 8};
    config_.optimizer.kind = "adam";
    config_.optimizer.lr = 0.01;
    data_ = load_datasets(config_.data);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  std::string dir_;
  TrainerConfig config_;
  DatasetPair data_;
};

TEST_F(Checkpoints, RoundTripResumesExactly) {
  Trainer original(config_, data_);
  for (int s = 0; s < 12; ++s) ASSERT_TRUE(original.step({64}).committed);  // crosses an epoch
  const std::string file = path("model.pt");
  original.save_checkpoint(file);

  TrainerConfig other = config_;
  other.model.seed = 999;
  Trainer restored(other, data_);
  restored.load_checkpoint(file);
  testing::expect_equal(restored.named_parameters(), original.named_parameters(), "parameters");
  testing::expect_equal(restored.named_buffers(), original.named_buffers(), "buffers");
  testing::expect_equal(restored.named_optimizer_state(), original.named_optimizer_state(),
                        "optimizer");
  EXPECT_EQ(restored.step_count(), 12);
  EXPECT_EQ(restored.cursor(), original.cursor());
  EXPECT_EQ(restored.cursor().epoch, 1);

  // Resuming continues the same trajectory (same data order, Adam bias correction, ...).
  for (int s = 0; s < 4; ++s) {
    ASSERT_TRUE(original.step({64}).committed);
    ASSERT_TRUE(restored.step({64}).committed);
  }
  testing::expect_equal(restored.named_parameters(), original.named_parameters(), "after resume");

  // Only the checkpoint remains: the temporary file was renamed, not left behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(Checkpoints, ArchiveHoldsAPyTorchStateDict) {
  Trainer t(config_, data_);
  ASSERT_TRUE(t.step({32}).committed);
  const std::string file = path("model.pt");
  t.save_checkpoint(file);
  std::ifstream in(file, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  const c10::IValue top = torch::jit::pickle_load(bytes);
  ASSERT_TRUE(top.isGenericDict());
  const auto model = top.toGenericDict().at("model").toGenericDict();
  EXPECT_TRUE(model.contains("0.weight"));
  EXPECT_TRUE(model.contains("1.running_var"));
  EXPECT_TRUE(model.contains("4.shortcut.0.weight"));
  EXPECT_TRUE(at::equal(model.at("0.weight").toTensor(), t.named_parameters()[0].second));
  EXPECT_EQ(top.toGenericDict().at("trainer").toGenericDict().at("step").toInt(), 1);
  EXPECT_EQ(top.toGenericDict().at("optimizer_kind").toStringRef(), "adam");
}

TEST_F(Checkpoints, SaveReplacesAtomically) {
  Trainer t(config_, data_);
  const std::string file = path("model.pt");
  t.save_checkpoint(file);
  ASSERT_TRUE(t.step({32}).committed);
  t.save_checkpoint(file);  // overwrite in place
  Trainer restored(config_, data_);
  restored.load_checkpoint(file);
  EXPECT_EQ(restored.step_count(), 1);
  EXPECT_THROW(t.save_checkpoint(path("missing-dir/model.pt")), CheckpointError);
}

TEST_F(Checkpoints, BadFilesAreRejectedWithoutChangingTheTrainer) {
  Trainer source(config_, data_);
  ASSERT_TRUE(source.step({32}).committed);
  const std::string good = path("good.pt");
  source.save_checkpoint(good);

  const std::string cut = path("cut.pt");
  fs::copy_file(good, cut);
  fs::resize_file(cut, fs::file_size(good) / 2);

  TrainerConfig other_model = config_;
  other_model.model.channels = {4, 16};
  Trainer mismatched(other_model, data_);
  TrainerConfig other_optimizer = config_;
  other_optimizer.optimizer.kind = "sgd";
  Trainer wrong_optimizer(other_optimizer, data_);
  Trainer target(config_, data_);
  const auto before = target.named_parameters();

  EXPECT_THROW(target.load_checkpoint(path("absent.pt")), CheckpointError);
  EXPECT_THROW(target.load_checkpoint(cut), CheckpointError);
  try {
    mismatched.load_checkpoint(good);
    FAIL() << "loaded a checkpoint of another model";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(good), std::string::npos) << e.what();
  }
  EXPECT_THROW(wrong_optimizer.load_checkpoint(good), CheckpointError);
  testing::expect_equal(target.named_parameters(), before, "after failed loads");
  EXPECT_EQ(target.step_count(), 0);
}

}  // namespace
}  // namespace omnilearn::training
