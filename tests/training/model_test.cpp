// Model layouts (PyTorch-compatible names), seeded initialization and forward shapes.
#include <gtest/gtest.h>
#include <torch/nn/modules/container/sequential.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "training/models.hpp"

namespace omnilearn::training {
namespace {

std::vector<std::string> names(torch::nn::Sequential& m) {
  std::vector<std::string> out;
  for (const auto& p : m->named_parameters()) out.push_back(p.key());
  return out;
}

TEST(Models, MlpNamesMatchPyTorchSequential) {
  ModelSpec spec;
  spec.hidden = {32, 16};
  auto m = make_model(spec, {1, 28, 28}, 10);
  EXPECT_EQ(names(m), (std::vector<std::string>{"1.weight", "1.bias", "3.weight", "3.bias",
                                                "5.weight", "5.bias"}));
  EXPECT_EQ(m->named_parameters()["1.weight"].sizes(), (std::vector<int64_t>{32, 784}));
  EXPECT_EQ(m->forward(torch::zeros({5, 1, 28, 28})).sizes(), (std::vector<int64_t>{5, 10}));
}

TEST(Models, CnnIsLeNetLike) {
  ModelSpec spec;
  spec.kind = "cnn";
  auto m = make_model(spec, {1, 28, 28}, 10);
  EXPECT_EQ(names(m),
            (std::vector<std::string>{"0.weight", "0.bias", "3.weight", "3.bias", "7.weight",
                                      "7.bias", "9.weight", "9.bias", "11.weight", "11.bias"}));
  EXPECT_EQ(m->named_parameters()["7.weight"].sizes(), (std::vector<int64_t>{120, 400}));
  EXPECT_EQ(m->forward(torch::zeros({2, 1, 28, 28})).sizes(), (std::vector<int64_t>{2, 10}));
  EXPECT_THROW(make_model(spec, {1, 8, 8}, 10), std::invalid_argument);
}

TEST(Models, ResnetHasResidualBlocksAndBatchNormBuffers) {
  ModelSpec spec;
  spec.kind = "resnet";
  spec.channels = {8, 16};
  auto m = make_model(spec, {1, 28, 28}, 10);
  const auto n = names(m);
  for (const char* expected :
       {"0.weight", "1.weight", "3.conv1.weight", "3.bn2.bias", "4.conv1.weight",
        "4.shortcut.0.weight", "4.shortcut.1.weight", "7.weight", "7.bias"}) {
    EXPECT_NE(std::find(n.begin(), n.end(), expected), n.end()) << expected;
  }
  std::vector<std::string> buffers;
  for (const auto& b : m->named_buffers()) buffers.push_back(b.key());
  EXPECT_NE(std::find(buffers.begin(), buffers.end(), "1.running_mean"), buffers.end());
  EXPECT_NE(std::find(buffers.begin(), buffers.end(), "4.shortcut.1.num_batches_tracked"),
            buffers.end());
  EXPECT_EQ(m->forward(torch::randn({3, 1, 28, 28})).sizes(), (std::vector<int64_t>{3, 10}));
}

TEST(Models, InitializationDependsOnlyOnTheSeed) {
  ModelSpec spec;
  spec.kind = "cnn";
  spec.seed = 4;
  torch::manual_seed(1);
  auto a = make_model(spec, {1, 28, 28}, 10);
  torch::manual_seed(2);  // the global generator must not matter
  auto b = make_model(spec, {1, 28, 28}, 10);
  spec.seed = 5;
  auto c = make_model(spec, {1, 28, 28}, 10);
  const auto pa = a->parameters(), pb = b->parameters(), pc = c->parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(torch::equal(pa[i], pb[i])) << i;
    EXPECT_FALSE(torch::equal(pa[i], pc[i])) << i;
  }
  // PyTorch's default bound for Linear(400, 120) is 1/sqrt(400).
  const auto w = a->named_parameters()["7.weight"];
  EXPECT_LE(w.abs().max().item<double>(), 0.05);
  EXPECT_GT(w.abs().max().item<double>(), 0.045);
}

}  // namespace
}  // namespace omnilearn::training
