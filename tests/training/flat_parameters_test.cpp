// The flat view asynchronous training exchanges: the trainable parameters as one
// float32 vector, a range of it set in place, and the flat gradient of a batch with no step.
// A flat gradient applied by hand with plain SGD is the step a lone Trainer takes.
#include <ATen/Parallel.h>

#include "tests/training/test_support.hpp"

namespace omnilearn::training {
namespace {

std::vector<float> flat(const Trainer& t) {
  std::vector<float> out(static_cast<size_t>(t.flat_parameter_count()));
  t.copy_flat_parameters(out.data());
  return out;
}

TEST(FlatParameters, CountAndRoundTripInModelOrder) {
  Trainer t(testing::synthetic_config(200, 12));
  int64_t expected = 0;
  for (const auto& [name, p] : t.named_parameters()) expected += p.numel();
  EXPECT_EQ(t.flat_parameter_count(), expected);
  std::vector<float> v = flat(t);
  const auto first = t.named_parameters().front().second.reshape({-1});
  EXPECT_EQ(v[0], first[0].item<float>());
  // Setting a range that spans two parameters changes exactly that range.
  const int64_t from = first.numel() - 3;
  std::vector<float> patch(6, 0.25f);
  t.set_flat_parameters(patch.data(), from, 6);
  const std::vector<float> after = flat(t);
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) {
    const bool patched = i >= from && i < from + 6;
    EXPECT_EQ(after[static_cast<size_t>(i)], patched ? 0.25f : v[static_cast<size_t>(i)]) << i;
  }
  EXPECT_THROW(t.set_flat_parameters(patch.data(), t.flat_parameter_count() - 2, 6),
               std::invalid_argument);
  EXPECT_THROW(t.set_flat_parameters(patch.data(), -1, 2), std::invalid_argument);
}

TEST(FlatParameters, AFlatGradientAppliedWithSgdIsTheLoneTrainersStep) {
  TrainerConfig config = testing::synthetic_config(256, 12);
  config.optimizer.momentum = 0;  // plain SGD: p -= lr g
  Trainer stepped(config);
  Trainer by_hand(config);
  const EpochSampler sampler(256, config.data.seed);
  const std::vector<int64_t> indices = sampler.slice(Cursor{}, {64}, 0);
  std::vector<float> g(static_cast<size_t>(by_hand.flat_parameter_count()));
  const auto result = by_hand.flat_gradient(indices, g.data());
  EXPECT_EQ(result.samples, 64);
  EXPECT_GT(result.compute_time_s, 0.0);
  // No parameter moved.
  EXPECT_EQ(flat(by_hand), flat(stepped));
  std::vector<float> p = flat(by_hand);
  const float lr = static_cast<float>(config.optimizer.lr);
  for (size_t i = 0; i < p.size(); ++i) p[i] -= lr * g[i];
  by_hand.set_flat_parameters(p.data(), 0, static_cast<int64_t>(p.size()));
  const StepResult step = stepped.step({64});
  ASSERT_TRUE(step.committed);
  EXPECT_NEAR(result.loss, step.loss, 1e-6);
  const std::vector<float> a = flat(stepped), b = flat(by_hand);
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  EXPECT_LE(worst, 1e-6);
  EXPECT_THROW(by_hand.flat_gradient({}, g.data()), std::invalid_argument);
}

// A flat gradient is computed, not exchanged: in a group it launches no bucket all-reduce
// (one rank's extra collective would put the group out of step, and the next step would pair
// the wrong collectives or time out).
TEST(FlatParameters, AFlatGradientInAGroupLaunchesNoCollective) {
  using namespace std::chrono_literals;
  at::set_num_threads(1);
  const TrainerConfig config = testing::synthetic_config(256, 12);
  const DatasetPair data = load_datasets(config.data);
  const EpochSampler sampler(256, config.data.seed);
  testing::LoopbackStore store;
  testing::run_ranks(2, [&](int rank) {
    Trainer t(config, data);
    ASSERT_TRUE(t.join_group(store.client(), 0, rank, 2, 20s, testing::loopback()).ok);
    if (rank == 0) {
      std::vector<float> g(static_cast<size_t>(t.flat_parameter_count()));
      t.flat_gradient(sampler.slice(Cursor{}, {32}, 0), g.data());
    }
    const StepResult r = t.step({20, 12});
    ASSERT_TRUE(r.committed) << r.error;
    EXPECT_EQ(t.step_count(), 1);
  });
}

std::vector<float> flat_buffers(const Trainer& t) {
  std::vector<float> out(static_cast<size_t>(t.flat_buffer_count()));
  t.copy_flat_buffers(out.data());
  return out;
}

TrainerConfig with_batch_norm() {
  TrainerConfig config = testing::synthetic_config(512, 12);
  config.model.kind = "resnet";  // BatchNorm: float statistics and integer counters
  config.model.channels = {4, 8};
  return config;
}

TEST(FlatBuffers, CountAndRoundTripCountersIncluded) {
  EXPECT_EQ(Trainer(testing::synthetic_config(200, 12)).flat_buffer_count(), 0);
  Trainer t(with_batch_norm());
  // The built-in models keep their counters as floats (Module::to converts every buffer);
  // TorchScript models keep them integers, which set_flat_buffers rounds.
  int64_t expected = 0, counters = 0;
  for (const auto& [name, b] : t.named_buffers()) {
    expected += b.numel();
    if (name.ends_with("num_batches_tracked")) ++counters;
  }
  ASSERT_GT(counters, 0);
  EXPECT_EQ(t.flat_buffer_count(), expected);
  std::vector<float> v(static_cast<size_t>(expected));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 13) + 0.5f;
  t.set_flat_buffers(v.data());
  const std::vector<float> back = flat_buffers(t);
  const std::vector<bool> flags = t.flat_buffer_counters();
  ASSERT_EQ(static_cast<int64_t>(flags.size()), expected);
  int64_t offset = 0;
  for (const auto& [name, b] : t.named_buffers()) {
    for (int64_t i = 0; i < b.numel(); ++i) {
      EXPECT_EQ(flags[static_cast<size_t>(offset + i)], name.ends_with("num_batches_tracked"))
          << name;
      const float want = v[static_cast<size_t>(offset + i)];
      // A counter is an integer: 0.5 more rounds to the nearest even one, as torch.round does.
      EXPECT_EQ(back[static_cast<size_t>(offset + i)],
                b.is_floating_point() ? want : std::nearbyint(want))
          << name;
    }
    offset += b.numel();
  }
}

// What a one-worker asynchronous job does with BatchNorm statistics: the worker sets the ones
// it pulled, computes a gradient (its forward moves them) and pushes the difference, which the
// server adds to its own. With nobody in between, that is the lone trainer's statistics.
TEST(FlatBuffers, PushedDifferencesReproduceTheLoneTrainersStatistics) {
  TrainerConfig config = with_batch_norm();
  config.optimizer.momentum = 0;
  Trainer stepped(config);
  Trainer worker(config);
  std::vector<float> server_params = flat(worker), server_buffers = flat_buffers(worker);
  const EpochSampler sampler(512, config.data.seed);
  std::vector<float> g(server_params.size()), before, after;
  const float lr = static_cast<float>(config.optimizer.lr);
  Cursor cursor;
  for (int step = 0; step < 6; ++step) {
    worker.set_flat_parameters(server_params.data(), 0, static_cast<int64_t>(g.size()));
    worker.set_flat_buffers(server_buffers.data());
    before = flat_buffers(worker);
    worker.flat_gradient(sampler.slice(cursor, {64}, 0), g.data());
    after = flat_buffers(worker);
    for (size_t i = 0; i < g.size(); ++i) server_params[i] -= lr * g[i];
    for (size_t i = 0; i < after.size(); ++i) server_buffers[i] += after[i] - before[i];
    ASSERT_TRUE(stepped.step({64}).committed);
    cursor = stepped.cursor();
  }
  const std::vector<float> want = flat_buffers(stepped);
  ASSERT_EQ(want.size(), server_buffers.size());
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(double(want[i]) - server_buffers[i]) /
                                std::max(1.0, std::abs(double(want[i]))));
  }
  EXPECT_LE(worst, 1e-5);
  EXPECT_NE(want, flat_buffers(Trainer(config)));  // the statistics did move
}

// Before an asynchronous evaluation the worker refreshes the statistics it pulled: afterwards
// they are the parameters' own, whatever they held before (here: a trained replica's and
// garbage agree), and nothing else moved.
TEST(FlatBuffers, RefreshedStatisticsDependOnTheParametersNotOnWhereTheyStarted) {
  const TrainerConfig config = with_batch_norm();
  Trainer trained(config);
  for (int step = 0; step < 3; ++step) ASSERT_TRUE(trained.step({64}).committed);
  Trainer other(config);
  const std::vector<float> params = flat(trained);
  other.set_flat_parameters(params.data(), 0, static_cast<int64_t>(params.size()));
  const std::vector<bool> counters = trained.flat_buffer_counters();
  std::vector<float> garbage(counters.size());
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = counters[i] ? 7.0f : 50.0f;
  other.set_flat_buffers(garbage.data());
  const std::vector<float> kept = flat_buffers(trained);

  trained.refresh_statistics(0, 64, 5);
  EXPECT_EQ(flat_buffers(trained), kept) << "0 passes: off";
  EXPECT_THROW(trained.refresh_statistics(4, 0, 5), std::invalid_argument);

  // 0.9^128 of the starting gap (49 for a variance here) is below 1e-4.
  trained.refresh_statistics(128, 64, 5);
  other.refresh_statistics(128, 64, 5);
  const std::vector<float> a = flat_buffers(trained), b = flat_buffers(other);
  double worst = 0;
  bool moved = false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (counters[i]) {
      EXPECT_EQ(a[i], kept[i]) << "a counter counts applied updates, not refresh passes";
      EXPECT_EQ(b[i], 7.0f);
      continue;
    }
    worst = std::max(worst, std::abs(double(a[i]) - b[i]) / std::max(1.0, std::abs(double(a[i]))));
    moved = moved || a[i] != kept[i];
  }
  EXPECT_LE(worst, 1e-3);
  EXPECT_TRUE(moved) << "the trained replica's statistics lagged its parameters";
  EXPECT_EQ(flat(trained), params) << "no parameter moved";
  EXPECT_EQ(flat(other), params);
}

}  // namespace
}  // namespace omnilearn::training
