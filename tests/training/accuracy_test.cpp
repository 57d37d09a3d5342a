// The mlp reaches >= 85% test accuracy on Fashion-MNIST in two epochs, trained by two ranks
// with unequal batches (so the data-parallel path is what is being judged).
#include <ATen/Parallel.h>

#include <cstdio>

#include "tests/training/test_support.hpp"

namespace omnilearn::training {
namespace {

using namespace std::chrono_literals;

TEST(Accuracy, MlpOnFashionMnistReaches85Percent) {
  at::set_num_threads(1);
  const auto start = std::chrono::steady_clock::now();
  TrainerConfig c;
  c.data.dataset = "fashion-mnist";
  c.data.seed = 1;
  c.model.kind = "mlp";
  c.model.hidden = {256, 128};
  c.optimizer.kind = "sgd";
  c.optimizer.lr = 0.05;
  c.optimizer.momentum = 0.9;
  c.optimizer.nesterov = true;
  c.optimizer.schedule.kind = "cosine";
  c.optimizer.schedule.warmup_steps = 50;
  const std::vector<int> plan = {48, 80};
  constexpr int kEpochs = 2;
  const DatasetPair data = load_datasets(c.data);
  const int64_t steps = kEpochs * data.train->size() / 128;
  c.optimizer.schedule.total_steps = steps;
  testing::LoopbackStore store;
  EvalResult result;
  testing::run_ranks(2, [&](int rank) {
    Trainer t(c, data);
    ASSERT_TRUE(t.join_group(store.client(), 0, rank, 2, 30s, testing::loopback()).ok);
    ASSERT_TRUE(t.sync_state_from_rank0().ok);
    for (int64_t s = 0; s < steps; ++s) ASSERT_TRUE(t.step(plan).committed);
    // kEpochs * 60000 / 128 whole steps stop just short of the last epoch boundary.
    EXPECT_EQ(t.cursor().epoch, kEpochs - 1);
    if (rank == 0) result = t.evaluate();
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("accuracy %.4f loss %.4f after %d epochs (%lld steps, b = 48/80) in %.1f s\n",
              result.accuracy, result.loss, kEpochs, static_cast<long long>(steps), seconds);
  RecordProperty("accuracy", std::to_string(result.accuracy));
  RecordProperty("seconds", std::to_string(seconds));
  EXPECT_EQ(result.samples, 10000);
  EXPECT_GE(result.accuracy, 0.85);
}

}  // namespace
}  // namespace omnilearn::training
