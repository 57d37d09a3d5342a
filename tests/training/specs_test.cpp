// Spec validation and the learning-rate schedule (pure functions).
#include "training/specs.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace omnilearn::training {
namespace {

template <typename Spec>
std::string error_of(const Spec& spec) {
  try {
    validate(spec);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(Specs, DefaultsAreValid) {
  EXPECT_EQ(error_of(ModelSpec{}), "");
  EXPECT_EQ(error_of(OptimizerSpec{}), "");
  EXPECT_EQ(error_of(DataSpec{}), "");
}

TEST(Specs, InvalidModelSaysWhatWasExpected) {
  ModelSpec m;
  m.kind = "transformer";
  EXPECT_NE(error_of(m).find("\"mlp\", \"cnn\", \"resnet\" or \"torchscript\""),
            std::string::npos);
  m = ModelSpec{};
  m.hidden = {64, 0};
  EXPECT_NE(error_of(m).find("model.hidden"), std::string::npos);
  m = ModelSpec{};
  m.kind = "cnn";
  m.channels = {6};
  EXPECT_NE(error_of(m).find("2 entries"), std::string::npos);
  m = ModelSpec{};
  m.kind = "resnet";
  m.channels = {16};
  m.blocks_per_stage = 0;
  EXPECT_NE(error_of(m).find("blocks_per_stage"), std::string::npos);
}

TEST(Specs, InvalidOptimizerSaysWhatWasExpected) {
  OptimizerSpec o;
  o.kind = "rmsprop";
  EXPECT_NE(error_of(o).find("\"sgd\", \"adam\" or \"adamw\""), std::string::npos);
  o = OptimizerSpec{};
  o.lr = -1;
  EXPECT_NE(error_of(o).find("optimizer.lr"), std::string::npos);
  o = OptimizerSpec{};
  o.momentum = 1.0;
  EXPECT_NE(error_of(o).find("optimizer.momentum"), std::string::npos);
  o = OptimizerSpec{};
  o.nesterov = true;
  EXPECT_NE(error_of(o).find("nesterov"), std::string::npos);
  o = OptimizerSpec{};
  o.kind = "adam";
  o.beta2 = 1.0;
  EXPECT_NE(error_of(o).find("beta2"), std::string::npos);
  o = OptimizerSpec{};
  o.schedule.kind = "step";
  EXPECT_NE(error_of(o).find("schedule.step_size"), std::string::npos);
  o = OptimizerSpec{};
  o.schedule.kind = "cosine";
  o.schedule.warmup_steps = 10;
  o.schedule.total_steps = 10;
  EXPECT_NE(error_of(o).find("total_steps"), std::string::npos);
  o = OptimizerSpec{};
  o.schedule.kind = "linear";
  EXPECT_NE(error_of(o).find("\"constant\", \"step\" or \"cosine\""), std::string::npos);
}

TEST(Specs, InvalidDataSaysWhatWasExpected) {
  DataSpec d;
  d.dataset = "cifar10";
  EXPECT_NE(error_of(d).find("\"fashion-mnist\", \"synthetic\" or \"tensors\""),
            std::string::npos);
  d = DataSpec{};
  d.dataset = "synthetic";
  d.synthetic.train_size = 0;
  EXPECT_NE(error_of(d).find("data.synthetic.train_size"), std::string::npos);
  d.synthetic.train_size = 10;
  d.synthetic.num_classes = 1;
  EXPECT_NE(error_of(d).find("num_classes"), std::string::npos);
}

TEST(Specs, TorchScriptModelNeedsAFile) {
  ModelSpec m;
  m.kind = "torchscript";
  EXPECT_NE(error_of(m).find("model.path"), std::string::npos);
  m.path = "model.pt";
  EXPECT_EQ(error_of(m), "");
}

TEST(Specs, TensorsDatasetNeedsOneFormPerSplit) {
  DataSpec d;
  d.dataset = "tensors";
  EXPECT_NE(error_of(d).find("needs data.train"), std::string::npos) << error_of(d);
  d.tensors.train = "train.pt";
  d.tensors.test_x = "x.npy";
  EXPECT_NE(error_of(d).find("data.test_x needs data.test_y"), std::string::npos) << error_of(d);
  d.tensors.test_y = "y.npy";
  EXPECT_EQ(error_of(d), "");
  d.tensors.test = "test.pt";
  EXPECT_NE(error_of(d).find("both name the test split"), std::string::npos) << error_of(d);
  d.tensors.test.clear();
  d.tensors.classes = 1;
  EXPECT_NE(error_of(d).find("data.classes"), std::string::npos) << error_of(d);
}

TEST(Specs, MseIsForTorchScriptModels) {
  ModelSpec m;
  EXPECT_NO_THROW(validate_loss("cross_entropy", m));
  EXPECT_THROW(validate_loss("hinge", m), std::invalid_argument);
  try {
    validate_loss("mse", m);
    ADD_FAILURE() << "mse accepted for a built-in classifier";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("torchscript"), std::string::npos) << e.what();
  }
  m.kind = "torchscript";
  m.path = "model.pt";
  EXPECT_NO_THROW(validate_loss("mse", m));
}

TEST(LrSchedule, WarmupThenStepDecay) {
  OptimizerSpec o;
  o.lr = 0.4;
  o.schedule.kind = "step";
  o.schedule.warmup_steps = 4;
  o.schedule.step_size = 10;
  o.schedule.gamma = 0.5;
  EXPECT_DOUBLE_EQ(scheduled_lr(o, 0), 0.1);
  EXPECT_DOUBLE_EQ(scheduled_lr(o, 3), 0.4);
  EXPECT_DOUBLE_EQ(scheduled_lr(o, 4), 0.4);
  EXPECT_DOUBLE_EQ(scheduled_lr(o, 13), 0.4);
  EXPECT_DOUBLE_EQ(scheduled_lr(o, 14), 0.2);
  EXPECT_DOUBLE_EQ(scheduled_lr(o, 34), 0.05);
}

TEST(LrSchedule, CosineReachesMinAndStays) {
  OptimizerSpec o;
  o.lr = 1.0;
  o.schedule.kind = "cosine";
  o.schedule.total_steps = 100;
  o.schedule.min_lr = 0.1;
  EXPECT_DOUBLE_EQ(scheduled_lr(o, 0), 1.0);
  EXPECT_NEAR(scheduled_lr(o, 50), 0.55, 1e-12);
  EXPECT_NEAR(scheduled_lr(o, 25), 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi / 4)), 1e-12);
  EXPECT_DOUBLE_EQ(scheduled_lr(o, 100), 0.1);
  EXPECT_DOUBLE_EQ(scheduled_lr(o, 1000), 0.1);
}

TEST(LrSchedule, ConstantIgnoresStep) {
  OptimizerSpec o;
  o.lr = 0.3;
  EXPECT_DOUBLE_EQ(scheduled_lr(o, 0), 0.3);
  EXPECT_DOUBLE_EQ(scheduled_lr(o, 123456), 0.3);
}

}  // namespace
}  // namespace omnilearn::training
