// The step's exchange: gradient buckets all-reduced from the gradient accumulators'
// hooks while backward still runs, ranks with empty slices taking part with zeros, rank 0's
// control words and every rank's compute time carried in the same exchange, and evaluation
// sharded across the ranks. Counts,
// not timings: what ran before backward returned is recorded by the trainer itself.
#include <ATen/Parallel.h>

#include "tests/training/test_support.hpp"
#include "training/gradient_exchange.hpp"

namespace omnilearn::training {
namespace {

using namespace std::chrono_literals;

TrainerConfig small_buckets(Precision precision = Precision::kFloat64) {
  TrainerConfig c = testing::synthetic_config(2000);
  c.precision = precision;
  c.bucket_bytes = 1024;  // the mlp's 6 tensors land in several buckets
  return c;
}

// `steps` steps of the whole batch on one process (the update a group must reproduce): each
// step's loss into *losses. Fatal on a step that does not commit (wrap the call in
// ASSERT_NO_FATAL_FAILURE).
void whole_batch_steps(Trainer& reference, int batch, size_t steps, std::vector<double>* losses) {
  for (size_t s = 0; s < steps; ++s) {
    const StepResult r = reference.step({batch});
    ASSERT_TRUE(r.committed) << r.error;
    losses->push_back(r.loss);
  }
}

TEST(Overlap, BucketsAreLaunchedWhileBackwardRuns) {
  at::set_num_threads(1);
  const TrainerConfig config = small_buckets();
  const DatasetPair data = load_datasets(config.data);
  testing::LoopbackStore store;
  testing::run_ranks(3, [&](int rank) {
    Trainer t(config, data);
    ASSERT_TRUE(t.join_group(store.client(), 0, rank, 3, 20s, testing::loopback()).ok);
    ASSERT_TRUE(t.sync_state_from_rank0().ok);
    const StepResult r = t.step({60, 0, 40});
    ASSERT_TRUE(r.committed) << r.error;
    EXPECT_GE(r.buckets, 3);  // 784x64, 64x32 and 32x10 weights do not share a 1 KiB bucket
    if (rank == 1) {
      // No backward ran: every bucket went after it, filled with zeros.
      EXPECT_EQ(r.buckets_launched_in_backward, 0);
      EXPECT_EQ(r.backward_time_s, 0.0);
    } else {
      // Every bucket's last gradient is accumulated inside backward, so every launch happened
      // before backward returned: the exchange of the last layers overlapped the first layers'
      // backward.
      EXPECT_EQ(r.buckets_launched_in_backward, r.buckets);
      EXPECT_GT(r.backward_time_s, 0.0);
    }
  });
}

// An injected compute throttle paces a step stretch by stretch: once after forward, before the
// buckets that backward completes (so a slowed rank's buckets are ready as late as a slower
// machine's), once at the end; its added time is the step's slowdown_time_s. One that is not
// active is never called.
class CountingThrottle : public ComputeThrottle {
 public:
  explicit CountingThrottle(bool active) : active_(active) {}
  bool active() const override { return active_; }
  ThrottleCharge after_compute(double wall_s, double cpu_s) override {
    ++calls;
    EXPECT_GE(wall_s, 0.0);
    EXPECT_GE(cpu_s, 0.0);
    return {0.25, 0.0};  // claims a quarter second per stretch, sleeps none
  }
  int calls = 0;

 private:
  bool active_;
};

TEST(Overlap, AnInjectedThrottlePacesEachStretchOfCompute) {
  at::set_num_threads(1);
  const TrainerConfig config = small_buckets();
  const DatasetPair data = load_datasets(config.data);
  testing::LoopbackStore store;
  testing::run_ranks(2, [&](int rank) {
    Trainer t(config, data);
    ASSERT_TRUE(t.join_group(store.client(), 0, rank, 2, 20s, testing::loopback()).ok);
    ASSERT_TRUE(t.sync_state_from_rank0().ok);
    auto idle = std::make_shared<CountingThrottle>(false);
    t.set_compute_throttle(idle);
    ASSERT_TRUE(t.step({40, 40}).committed);
    EXPECT_EQ(idle->calls, 0);
    auto counting = std::make_shared<CountingThrottle>(true);
    t.set_compute_throttle(counting);
    const StepResult r = t.step({40, 40});
    ASSERT_TRUE(r.committed) << r.error;
    ASSERT_GE(r.buckets, 3);
    EXPECT_EQ(r.buckets_launched_in_backward, r.buckets);
    // At least one bucket paced inside backward; at most one pacing per bucket (buckets that
    // complete together are paced once).
    EXPECT_GE(counting->calls, 3);
    EXPECT_LE(counting->calls, 2 + r.buckets);
    EXPECT_DOUBLE_EQ(r.slowdown_time_s, 0.25 * counting->calls);
    EXPECT_GE(r.compute_time_s, r.slowdown_time_s);
    // Back to the built-in slowdown, at factor 1: nothing added.
    const int calls_before = counting->calls;
    t.set_compute_throttle(nullptr);
    const StepResult plain = t.step({40, 40});
    ASSERT_TRUE(plain.committed) << plain.error;
    EXPECT_EQ(plain.slowdown_time_s, 0.0);
    EXPECT_EQ(counting->calls, calls_before);
  });
}

// Each rank's compute of the step rides in the exchange, one slot per rank, so that every rank
// (rank 0 reports it) learns every rank's compute of that very step: what the batch controller
// balances, without waiting for the agents' heartbeats.
class ChargingThrottle : public ComputeThrottle {
 public:
  explicit ChargingThrottle(double per_stretch_s) : per_stretch_s_(per_stretch_s) {}
  bool active() const override { return true; }
  ThrottleCharge after_compute(double, double) override { return {per_stretch_s_, 0.0}; }

 private:
  double per_stretch_s_;
};

TEST(Overlap, EveryRankLearnsEveryRanksComputeOfTheStep) {
  at::set_num_threads(1);
  for (const Precision precision : {Precision::kFloat64, Precision::kFloat32}) {
    SCOPED_TRACE(precision == Precision::kFloat64 ? "float64" : "float32");
    const TrainerConfig config = small_buckets(precision);
    const DatasetPair data = load_datasets(config.data);
    testing::LoopbackStore store;
    std::vector<std::vector<double>> seen(3);
    std::vector<double> own(3);
    testing::run_ranks(3, [&](int rank) {
      Trainer t(config, data);
      ASSERT_TRUE(t.join_group(store.client(), 0, rank, 3, 20s, testing::loopback()).ok);
      ASSERT_TRUE(t.sync_state_from_rank0().ok);
      // Rank 2 computes as a machine that takes a second longer per stretch would.
      if (rank == 2) t.set_compute_throttle(std::make_shared<ChargingThrottle>(1.0));
      const StepResult r = t.step({40, 30, 30});
      ASSERT_TRUE(r.committed) << r.error;
      seen[rank] = r.rank_compute_times_s;
      own[rank] = r.compute_time_s;
      // A rank with nothing to compute tells none (its throttle charges it all the same).
      const StepResult empty = t.step({50, 50, 0});
      ASSERT_TRUE(empty.committed) << empty.error;
      ASSERT_EQ(empty.rank_compute_times_s.size(), 3u);
      EXPECT_GT(empty.rank_compute_times_s[0], 0.0);
      EXPECT_GT(empty.rank_compute_times_s[1], 0.0);
      EXPECT_EQ(empty.rank_compute_times_s[2], 0.0);
    });
    for (int rank = 0; rank < 3; ++rank) {
      ASSERT_EQ(seen[rank].size(), 3u) << rank;
      EXPECT_EQ(seen[rank], seen[0]) << "rank " << rank << " learnt other times than rank 0";
    }
    for (int rank = 0; rank < 3; ++rank) {
      // Up to the launch of the last bucket: short of the step's compute by at most its last
      // stretch (for rank 2, the throttle's last second).
      const double slack = (rank == 2 ? 1.0 : 0.0) + 0.05;
      EXPECT_LE(seen[0][rank], own[rank] * (1 + 1e-6)) << rank;
      EXPECT_GE(seen[0][rank], own[rank] - slack) << rank;
      EXPECT_GT(seen[0][rank], 0.0) << rank;
    }
    EXPECT_GT(seen[0][2], seen[0][0] + 1.0);  // at least the throttle's stretches before it
  }
  // Bucket 0 launched on its own after forward: the compute is not known yet when it leaves.
  TrainerConfig alone = small_buckets();
  alone.extras_with_gradients = false;
  const DatasetPair data = load_datasets(alone.data);
  testing::LoopbackStore store;
  testing::run_ranks(2, [&](int rank) {
    Trainer t(alone, data);
    ASSERT_TRUE(t.join_group(store.client(), 0, rank, 2, 20s, testing::loopback()).ok);
    const StepResult r = t.step({40, 40});
    ASSERT_TRUE(r.committed) << r.error;
    EXPECT_TRUE(r.rank_compute_times_s.empty());
  });
}

TEST(Overlap, OneBucketIsLaunchedInBackwardToo) {
  at::set_num_threads(1);
  TrainerConfig config = testing::synthetic_config(2000);  // 4 MiB: one gradient bucket
  config.first_layer_bucket = false;
  const DatasetPair data = load_datasets(config.data);
  testing::LoopbackStore store;
  testing::run_ranks(2, [&](int rank) {
    Trainer t(config, data);
    ASSERT_TRUE(t.join_group(store.client(), 0, rank, 2, 20s, testing::loopback()).ok);
    const StepResult r = t.step({30, 34});
    ASSERT_TRUE(r.committed) << r.error;
    EXPECT_EQ(r.buckets, 1);
    EXPECT_EQ(r.buckets_launched_in_backward, 1);
  });
}

// With the first layer alone, a model whose gradients fit one bucket makes two all-reduces,
// both launched inside backward, and the update is one process's with the whole batch and the
// single-bucket layout's, in float64 (the extras, loss and control words, ride in the last).
TEST(Overlap, TheFirstLayerBucketGivesTheSameSteps) {
  at::set_num_threads(1);
  const std::vector<std::vector<int>> plans = {{30, 34}, {64, 0}, {0, 64}, {17, 47}};
  std::vector<std::vector<NamedTensor>> layouts;
  std::vector<std::vector<double>> layout_losses;
  for (const bool alone : {true, false}) {
    SCOPED_TRACE(std::string("first_layer_bucket ") + (alone ? "true" : "false"));
    TrainerConfig config = testing::synthetic_config(2000);  // 4 MiB: the mlp fits one bucket
    config.precision = Precision::kFloat64;
    config.first_layer_bucket = alone;
    const DatasetPair data = load_datasets(config.data);
    Trainer reference(config, data);
    std::vector<double> losses;
    ASSERT_NO_FATAL_FAILURE(whole_batch_steps(reference, 64, plans.size(), &losses));
    testing::LoopbackStore store;
    std::vector<std::vector<NamedTensor>> params(2);
    std::vector<double> step_losses(plans.size());
    testing::run_ranks(2, [&](int rank) {
      Trainer t(config, data);
      ASSERT_TRUE(t.join_group(store.client(), 0, rank, 2, 20s, testing::loopback()).ok);
      ASSERT_TRUE(t.sync_state_from_rank0().ok);
      for (size_t s = 0; s < plans.size(); ++s) {
        const StepResult r = t.step(plans[s]);
        ASSERT_TRUE(r.committed) << r.error;
        EXPECT_EQ(r.buckets, alone ? 2 : 1);
        if (plans[s][static_cast<size_t>(rank)] > 0) {
          EXPECT_EQ(r.buckets_launched_in_backward, r.buckets);
        }
        EXPECT_NEAR(r.loss, losses[s], 1e-12 * std::abs(losses[s])) << "step " << s;
        if (rank == 0) step_losses[s] = r.loss;
      }
      params[static_cast<size_t>(rank)] = t.named_parameters();
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_LE(
          testing::max_relative_l2(params[static_cast<size_t>(r)], reference.named_parameters()),
          1e-12)
          << "rank " << r;
    }
    layouts.push_back(params[0]);
    layout_losses.push_back(step_losses);
  }
  ASSERT_EQ(layouts.size(), 2u);
  EXPECT_LE(testing::max_relative_l2(layouts[0], layouts[1]), 1e-12);
  for (size_t s = 0; s < plans.size(); ++s) {
    EXPECT_NEAR(layout_losses[0][s], layout_losses[1][s], 1e-12 * std::abs(layout_losses[1][s]));
  }
}

TEST(Overlap, AloneThereIsNoExchange) {
  Trainer t(small_buckets());
  const StepResult r = t.step({64});
  ASSERT_TRUE(r.committed);
  EXPECT_EQ(r.buckets, 0);
  EXPECT_EQ(r.buckets_launched_in_backward, 0);
  EXPECT_EQ(r.allreduce_time_s, 0.0);
  // Alone, rank 0's own words decide: confirming ones commit, others drop the step.
  StepControl same;
  same.words = {0, 0, 1, 64};
  same.accept = [](const std::vector<int64_t>& w) { return w[2] == 1; };
  EXPECT_TRUE(t.step({64}, &same).committed);
  StepControl other = same;
  other.words[2] = 2;
  const StepResult dropped = t.step({64}, &other);
  EXPECT_FALSE(dropped.committed);
  EXPECT_TRUE(dropped.control_rejected);
  EXPECT_EQ(t.step_count(), 2);
}

// Ranks with empty slices take part with zeros and the weighting stays b_r / B: three ranks of
// which one or two hold nothing equal one process with the whole batch, in float64.
TEST(Overlap, EmptySlicesKeepTheUpdateExact) {
  at::set_num_threads(1);
  const TrainerConfig config = small_buckets();
  const DatasetPair data = load_datasets(config.data);
  const std::vector<std::vector<int>> plans = {{0, 100, 28}, {128, 0, 0}, {0, 0, 128}, {1, 0, 127}};
  Trainer reference(config, data);
  std::vector<double> losses;
  ASSERT_NO_FATAL_FAILURE(whole_batch_steps(reference, 128, plans.size(), &losses));
  testing::LoopbackStore store;
  std::vector<std::vector<NamedTensor>> params(3);
  testing::run_ranks(3, [&](int rank) {
    Trainer t(config, data);
    ASSERT_TRUE(t.join_group(store.client(), 0, rank, 3, 20s, testing::loopback()).ok);
    for (size_t s = 0; s < plans.size(); ++s) {
      const StepResult r = t.step(plans[s]);
      ASSERT_TRUE(r.committed) << r.error;
      EXPECT_NEAR(r.loss, losses[s], 1e-12 * std::abs(losses[s])) << "step " << s;
    }
    params[static_cast<size_t>(rank)] = t.named_parameters();
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_LE(testing::max_relative_l2(params[static_cast<size_t>(r)],
                                       reference.named_parameters()),
              1e-12)
        << "rank " << r;
  }
  EXPECT_GT(testing::max_relative_l2(reference.named_parameters(),
                                     Trainer(config, data).named_parameters()),
            1e-3);  // it trained
}

// BatchNorm statistics, the loss and the control words travel at the end of the last gradient
// bucket (one all-reduce per step for a one-bucket model) or in a bucket of their own launched
// after forward (`extras_with_gradients = false`, kept for side-by-side measurements): both
// give one process's update, buffers included, with one bucket and several, and carry the words.
// The whole batch on one rank is what one process can check exactly (BatchNorm normalizes per
// rank); split plans, where the weights b_r / B are neither 0 nor 1, are checked between the two
// layouts.
TEST(Overlap, ExtrasAloneOrWithTheGradientsGiveTheSameSteps) {
  at::set_num_threads(1);
  const std::vector<std::vector<int>> plans = {{40, 0}, {0, 40}, {40, 0}, {0, 40}};
  const std::vector<std::vector<int>> split = {{10, 30}, {25, 15}, {33, 7}};
  const std::vector<int64_t> words = {0, 3, 1, 40, 0};
  for (const int64_t bucket_bytes : {int64_t{4} << 20, int64_t{1024}}) {
    std::vector<std::vector<NamedTensor>> split_params, split_buffers;
    std::vector<std::vector<double>> split_losses;
    for (const bool with_gradients : {true, false}) {
      SCOPED_TRACE("bucket_bytes " + std::to_string(bucket_bytes) + ", extras_with_gradients " +
                   std::to_string(with_gradients));
      TrainerConfig config = testing::synthetic_config(400, 12);
      config.model.kind = "resnet";  // BatchNorm statistics ride in the extras
      config.model.channels = {4, 8};
      config.precision = Precision::kFloat64;
      config.bucket_bytes = bucket_bytes;
      config.extras_with_gradients = with_gradients;
      const DatasetPair data = load_datasets(config.data);
      Trainer reference(config, data);
      std::vector<double> losses;
      ASSERT_NO_FATAL_FAILURE(whole_batch_steps(reference, 40, plans.size(), &losses));
      testing::LoopbackStore store;
      std::vector<std::vector<NamedTensor>> params(2), buffers(2);
      testing::run_ranks(2, [&](int rank) {
        Trainer t(config, data);
        ASSERT_TRUE(t.join_group(store.client(), 3, rank, 2, 20s, testing::loopback()).ok);
        ASSERT_TRUE(t.sync_state_from_rank0().ok);
        for (size_t s = 0; s < plans.size(); ++s) {
          StepControl control;
          if (rank == 0) control.words = words;
          control.accept = [&](const std::vector<int64_t>& w) { return w == words; };
          const StepResult r = t.step(plans[s], &control);
          ASSERT_TRUE(r.committed) << r.error;
          EXPECT_EQ(control.words, words);
          EXPECT_NEAR(r.loss, losses[s], 1e-12 * std::abs(losses[s])) << "step " << s;
          if (bucket_bytes > 1024) {
            EXPECT_EQ(r.buckets, 1);
          } else {
            EXPECT_GT(r.buckets, 1);
          }
        }
        // A plan that rank 0's words do not confirm is dropped on both ranks alike.
        StepControl other;
        if (rank == 0) other.words = {0, 3, 2, 20, 20};
        other.accept = [&](const std::vector<int64_t>& w) { return w == words; };
        const StepResult dropped = t.step({20, 20}, &other);
        EXPECT_TRUE(dropped.control_rejected) << dropped.error;
        EXPECT_EQ(other.words, (std::vector<int64_t>{0, 3, 2, 20, 20}));
        params[static_cast<size_t>(rank)] = t.named_parameters();
        buffers[static_cast<size_t>(rank)] = t.named_buffers();
      });
      for (int r = 0; r < 2; ++r) {
        EXPECT_LE(testing::max_relative_l2(params[static_cast<size_t>(r)],
                                           reference.named_parameters()),
                  1e-12)
            << "rank " << r;
        EXPECT_LE(testing::max_relative_l2(buffers[static_cast<size_t>(r)],
                                           reference.named_buffers()),
                  1e-12)
            << "rank " << r << " buffers";
      }

      // Split plans: rank 0's replica and the global losses, for the comparison below.
      testing::LoopbackStore split_store;
      std::vector<double> step_losses(split.size());
      testing::run_ranks(2, [&](int rank) {
        Trainer t(config, data);
        ASSERT_TRUE(t.join_group(split_store.client(), 4, rank, 2, 20s, testing::loopback()).ok);
        ASSERT_TRUE(t.sync_state_from_rank0().ok);
        for (size_t s = 0; s < split.size(); ++s) {
          const StepResult r = t.step(split[s]);
          ASSERT_TRUE(r.committed) << r.error;
          if (rank == 0) step_losses[s] = r.loss;
        }
        if (rank == 0) {
          split_params.push_back(t.named_parameters());
          split_buffers.push_back(t.named_buffers());
        }
      });
      split_losses.push_back(step_losses);
    }
    ASSERT_EQ(split_params.size(), 2u);
    EXPECT_LE(testing::max_relative_l2(split_params[0], split_params[1]), 1e-12);
    EXPECT_LE(testing::max_relative_l2(split_buffers[0], split_buffers[1]), 1e-12);
    for (size_t s = 0; s < split.size(); ++s) {
      EXPECT_NEAR(split_losses[0][s], split_losses[1][s], 1e-12 * std::abs(split_losses[1][s]))
          << "split step " << s;
    }
  }
}

// Rank 0's words ride in the exchange: confirming words commit the step on every rank; others
// make every rank drop it (state unchanged, group usable) and deliver the words; words longer
// than the exchange carries arrive whole by a broadcast inside the step.
TEST(Overlap, ControlWordsTravelInTheExchange) {
  at::set_num_threads(1);
  const TrainerConfig config = small_buckets();
  const DatasetPair data = load_datasets(config.data);
  testing::LoopbackStore store;
  const std::vector<int64_t> plan = {0, 7, 3, 20, 0, 44};  // continue, generation, version, b
  const std::vector<int> batches = {20, 0, 44};
  const std::vector<int64_t> new_plan = {0, 7, 4, 30, 30, 4};
  std::vector<int64_t> long_words;
  for (int i = 0; i < 40; ++i) long_words.push_back(int64_t{1} << 40 | i);  // > world + 4 words
  testing::run_ranks(3, [&](int rank) {
    Trainer t(config, data);
    ASSERT_TRUE(t.join_group(store.client(), 7, rank, 3, 20s, testing::loopback()).ok);
    auto accept = [&](const std::vector<int64_t>& w) { return w == plan; };

    // 1. Confirming words: committed everywhere, every rank holds them.
    StepControl carried;
    if (rank == 0) carried.words = plan;
    carried.accept = accept;
    StepResult r = t.step(batches, &carried);
    ASSERT_TRUE(r.committed) << r.error;
    EXPECT_FALSE(r.control_rejected);
    EXPECT_EQ(carried.words, plan);
    EXPECT_EQ(t.step_count(), 1);

    // 2. A new plan: nobody commits, nothing changes, everyone learns it; rank 0 skipped the
    // computation (its words refuse the step), the others computed and dropped it.
    const std::vector<NamedTensor> before = t.named_parameters();
    StepControl changed;
    if (rank == 0) changed.words = new_plan;
    changed.accept = accept;
    r = t.step(batches, &changed);
    EXPECT_FALSE(r.committed);
    EXPECT_TRUE(r.control_rejected) << r.error;
    EXPECT_EQ(changed.words, new_plan);
    EXPECT_EQ(t.step_count(), 1);
    testing::expect_equal(t.named_parameters(), before, "after a dropped step");
    if (rank == 0) {
      EXPECT_EQ(r.forward_time_s, 0.0);
    }

    // 3. Words too long for the exchange: whole, by broadcast; the step is dropped.
    StepControl long_control;
    if (rank == 0) long_control.words = long_words;
    long_control.accept = accept;
    r = t.step(batches, &long_control);
    EXPECT_FALSE(r.committed);
    EXPECT_TRUE(r.control_rejected) << r.error;
    EXPECT_EQ(long_control.words, long_words);

    // 4. The group is still in step: the new plan trains.
    StepControl next;
    if (rank == 0) next.words = new_plan;
    next.accept = [&](const std::vector<int64_t>& w) { return w == new_plan; };
    r = t.step({30, 30, 4}, &next);
    ASSERT_TRUE(r.committed) << r.error;
    EXPECT_EQ(t.step_count(), 2);
    EXPECT_TRUE(t.in_group());
  });
}

// Sharded evaluation gives the figures of one full pass: the correct count exactly, the loss up
// to summation order (float64).
TEST(Overlap, ShardedEvaluationEqualsOnePass) {
  at::set_num_threads(1);
  TrainerConfig config = testing::synthetic_config(2000);
  config.precision = Precision::kFloat64;
  const DatasetPair data = load_datasets(config.data);
  testing::LoopbackStore store;
  testing::run_ranks(3, [&](int rank) {
    Trainer t(config, data);
    ASSERT_TRUE(t.join_group(store.client(), 0, rank, 3, 20s, testing::loopback()).ok);
    for (int s = 0; s < 5; ++s) ASSERT_TRUE(t.step({40, 0, 60}).committed);
    // The replicas are identical: each rank's full pass is the reference.
    const EvalResult full = t.evaluate();
    const EvalResult prefix = t.evaluate(333);
    EvalResult sharded;
    ASSERT_TRUE(t.evaluate_sharded(&sharded).ok);
    EXPECT_EQ(sharded.samples, full.samples);
    EXPECT_EQ(sharded.accuracy, full.accuracy);
    EXPECT_GT(full.accuracy, 0.0);
    EXPECT_NEAR(sharded.loss, full.loss, 1e-9 * full.loss);
    ASSERT_TRUE(t.evaluate_sharded(&sharded, 333).ok);  // 333 does not divide by 3 ranks evenly
    EXPECT_EQ(sharded.samples, 333);
    EXPECT_EQ(sharded.accuracy, prefix.accuracy);
    EXPECT_NEAR(sharded.loss, prefix.loss, 1e-9 * prefix.loss);
    // Shares in proportion to the plan's batches, one rank with none: the same figures.
    const std::vector<int> plan{40, 0, 60};
    ASSERT_TRUE(t.evaluate_sharded(&sharded, 333, plan).ok);
    EXPECT_EQ(sharded.samples, 333);
    EXPECT_EQ(sharded.accuracy, prefix.accuracy);
    EXPECT_NEAR(sharded.loss, prefix.loss, 1e-9 * prefix.loss);
    ASSERT_TRUE(t.evaluate_sharded(&sharded, 0, plan).ok);
    EXPECT_EQ(sharded.accuracy, full.accuracy);
    EXPECT_NEAR(sharded.loss, full.loss, 1e-9 * full.loss);
  });
  // Alone it is evaluate().
  Trainer alone(config, data);
  EvalResult r;
  ASSERT_TRUE(alone.evaluate_sharded(&r).ok);
  EXPECT_EQ(r.accuracy, alone.evaluate().accuracy);
  EXPECT_EQ(r.loss, alone.evaluate().loss);
}

}  // namespace
}  // namespace omnilearn::training
