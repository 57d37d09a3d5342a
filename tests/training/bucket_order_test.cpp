// The gradient buckets follow the order backward makes the gradients ready: the pure planning
// from an order, rank 0's recorded order agreed on by every rank of a real Gloo group (a
// malformed one falling back to reverse registration order), and a model registered head first
// (its reverse registration order is the order forward runs) trained over a group: once the
// order is agreed every bucket but the last is launched before backward's last gradient, and
// the update is still one process's with the whole batch, in float64.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <stdlib.h>

#include <filesystem>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "tests/training/test_support.hpp"
#include "training/gradient_exchange.hpp"
#include "training/models.hpp"

namespace omnilearn::training {
namespace {

using namespace std::chrono_literals;
using Exchange = internal::GradientExchange;
using Buckets = std::vector<std::vector<size_t>>;
using Order = std::vector<size_t>;

std::vector<NamedTensor> named(const std::vector<std::pair<std::string, int64_t>>& sizes) {
  std::vector<NamedTensor> out;
  for (const auto& [name, n] : sizes) out.emplace_back(name, at::zeros({n}));
  return out;
}

// Registered head first, used fc1, fc2, head: backward makes head's gradients ready first.
const std::vector<NamedTensor> kHeadFirst = named({{"head.weight", 20},
                                                   {"head.bias", 2},
                                                   {"fc2.weight", 50},
                                                   {"fc2.bias", 5},
                                                   {"fc1.weight", 100},
                                                   {"fc1.bias", 10}});

// Which bucket a parameter lands in: reverse parameter order (the order backward makes the
// gradients ready), up to the capacity, and the first layer's parameters closing the last
// bucket alone.
TEST(BucketOrder, TheFirstLayerClosesTheLastBucketAlone) {
  const std::vector<NamedTensor> mlp = named({{"0.weight", 100},
                                              {"0.bias", 10},
                                              {"2.weight", 50},
                                              {"2.bias", 5},
                                              {"4.weight", 20},
                                              {"4.bias", 2}});
  EXPECT_EQ(Exchange::plan_buckets(mlp, 1000, true), (Buckets{{5, 4, 3, 2}, {1, 0}}));
  EXPECT_EQ(Exchange::plan_buckets(mlp, 1000, false), (Buckets{{5, 4, 3, 2, 1, 0}}));
  // The capacity still splits, the first layer's buckets included.
  EXPECT_EQ(Exchange::plan_buckets(mlp, 60, true), (Buckets{{5, 4, 3}, {2}, {1}, {0}}));
  EXPECT_EQ(Exchange::plan_buckets(mlp, 60, false), (Buckets{{5, 4, 3}, {2, 1}, {0}}));
  // The first layer is the run of parameters of the first one's module, however deep.
  const std::vector<NamedTensor> nested = named({{"stem.conv.weight", 30},
                                                 {"stem.bn.weight", 3},
                                                 {"stem.bn.bias", 3},
                                                 {"fc.weight", 40},
                                                 {"fc.bias", 4}});
  EXPECT_EQ(Exchange::plan_buckets(nested, 1000, true), (Buckets{{4, 3, 2, 1}, {0}}));
  // A model of one layer has nothing to launch before it: one bucket either way.
  const std::vector<NamedTensor> one = named({{"weight", 30}, {"bias", 3}});
  EXPECT_EQ(Exchange::plan_buckets(one, 1000, true), (Buckets{{1, 0}}));
  EXPECT_EQ(Exchange::plan_buckets(one, 1000, false), (Buckets{{1, 0}}));
}

TEST(BucketOrder, BucketsAreFilledInTheGivenOrder) {
  EXPECT_EQ(Exchange::registration_order(4), (Order{3, 2, 1, 0}));
  const Order ready = {1, 0, 3, 2, 5, 4};  // head, fc2, fc1
  EXPECT_EQ(Exchange::plan_buckets(kHeadFirst, ready, 1000, false), (Buckets{{1, 0, 3, 2, 5, 4}}));
  EXPECT_EQ(Exchange::plan_buckets(kHeadFirst, ready, 60, false),
            (Buckets{{1, 0, 3}, {2, 5}, {4}}));
  // The module made ready last (fc1) closes the last bucket alone, split by the capacity.
  EXPECT_EQ(Exchange::plan_buckets(kHeadFirst, ready, 1000, true), (Buckets{{1, 0, 3, 2}, {5, 4}}));
  EXPECT_EQ(Exchange::plan_buckets(kHeadFirst, ready, 60, true),
            (Buckets{{1, 0, 3}, {2}, {5}, {4}}));
  // In registration order the same model's first bucket waits for fc1, made ready last, and
  // "the first layer" is the head, made ready first.
  EXPECT_EQ(Exchange::plan_buckets(kHeadFirst, 1000, true), (Buckets{{5, 4, 3, 2}, {1, 0}}));
  EXPECT_EQ(Exchange::plan_buckets(kHeadFirst, Exchange::registration_order(6), 1000, true),
            Exchange::plan_buckets(kHeadFirst, 1000, true));
  // The last module is the run at the end of the order, wherever it was registered.
  EXPECT_EQ(Exchange::plan_buckets(kHeadFirst, {5, 4, 3, 2, 1, 0}, 1000, true),
            (Buckets{{5, 4, 3, 2}, {1, 0}}));
  EXPECT_EQ(Exchange::plan_buckets(kHeadFirst, {4, 5, 1, 3, 2, 0}, 1000, true),
            (Buckets{{4, 5, 1, 3, 2}, {0}}));
  // One module has nothing to launch before it.
  const std::vector<NamedTensor> one = named({{"weight", 30}, {"bias", 3}});
  EXPECT_EQ(Exchange::plan_buckets(one, {0, 1}, 1000, true), (Buckets{{0, 1}}));
  // Not a permutation of the trainable indices.
  EXPECT_THROW(Exchange::plan_buckets(kHeadFirst, {0, 1, 2}, 1000, true), std::invalid_argument);
  EXPECT_THROW(Exchange::plan_buckets(kHeadFirst, {0, 1, 2, 3, 4, 4}, 1000, true),
               std::invalid_argument);
  EXPECT_THROW(Exchange::plan_buckets(kHeadFirst, {0, 1, 2, 3, 4, 6}, 1000, true),
               std::invalid_argument);
}

TEST(BucketOrder, RankZerosWordsDecideAndMalformedOnesFallBack) {
  const Order ready = {1, 0, 3, 2, 5, 4};
  bool malformed = true;
  const std::vector<int64_t> words = Exchange::encode_order(ready, 6);
  EXPECT_EQ(words, (std::vector<int64_t>{1, 1, 0, 3, 2, 5, 4}));
  EXPECT_EQ(Exchange::decode_order(words, 6, &malformed), ready);
  EXPECT_FALSE(malformed);
  // Nothing recorded: the registration order, and that is not an error.
  EXPECT_EQ(Exchange::encode_order(std::nullopt, 6), std::vector<int64_t>(7, 0));
  EXPECT_EQ(Exchange::decode_order(Exchange::encode_order(std::nullopt, 6), 6, &malformed),
            Exchange::registration_order(6));
  EXPECT_FALSE(malformed);
  const std::vector<std::vector<int64_t>> bad = {{1, 1, 0, 3, 2, 5},  // too short (another model)
                                                 {1, 1, 0, 3, 2, 5, 4, 6},  // too long
                                                 {1, 1, 1, 3, 2, 5, 4},     // a duplicate
                                                 {1, 1, 0, 3, 2, 5, 6},     // out of range
                                                 {1, 1, 0, 3, 2, 5, -4},    // negative
                                                 {2, 1, 0, 3, 2, 5, 4},     // an unknown flag
                                                 {}};
  for (const auto& w : bad) {
    malformed = false;
    EXPECT_EQ(Exchange::decode_order(w, 6, &malformed), Exchange::registration_order(6));
    EXPECT_TRUE(malformed) << ::testing::PrintToString(w);
  }
}

// Ranks whose hooks fired in different orders end up with rank 0's layout after one broadcast
// over a real Gloo group; a malformed order leaves every rank in registration order.
TEST(BucketOrder, EveryRankAdoptsRankZerosRecordedOrder) {
  at::set_num_threads(1);
  const std::vector<std::vector<size_t>> fired = {{2, 0, 3, 1}, {3, 2, 1, 0}, {1, 3, 0, 2}};
  testing::LoopbackStore store;
  std::vector<Order> recorded(3), agreed(3), after_malformed(3);
  std::vector<Buckets> buckets(3);
  std::vector<bool> accepted(3), rejected(3);
  testing::run_ranks(3, [&](int rank) {
    std::vector<NamedTensor> params;
    for (const char* name : {"a.weight", "b.weight", "c.weight", "d.weight"}) {
      params.emplace_back(name, at::ones({40}, at::kDouble).requires_grad_());
    }
    Exchange::Layout layout;
    layout.bucket_bytes = 80 * 8;  // two parameters a bucket
    layout.real_bytes = 8;
    layout.first_layer_alone = false;
    Exchange exchange(params, {}, layout);
    // One step's backward, alone: each parameter's gradient in this rank's order.
    exchange.begin(1.0, nullptr);
    for (size_t k : fired[static_cast<size_t>(rank)]) {
      (params[k].second * 2).sum().backward();
    }
    exchange.end();
    ASSERT_TRUE(exchange.recorded_order().has_value());
    recorded[static_cast<size_t>(rank)] = *exchange.recorded_order();

    auto options = c10d::ProcessGroupGloo::Options::create(20s);
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>("order", store.client()), rank, 3, options);
    exchange.attach(group.get(), rank, 3, at::TensorOptions().dtype(at::kDouble));
    EXPECT_EQ(exchange.order(), Exchange::registration_order(4));
    auto broadcast = [&](std::vector<int64_t> words) {
      at::Tensor t = at::tensor(words, at::TensorOptions().dtype(at::kLong));
      std::vector<at::Tensor> one{t};
      group->broadcast(one)->wait();
      return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
    };
    accepted[static_cast<size_t>(rank)] =
        exchange.agree_order(broadcast(Exchange::encode_order(exchange.recorded_order(), 4)));
    agreed[static_cast<size_t>(rank)] = exchange.order();
    buckets[static_cast<size_t>(rank)] = exchange.buckets();
    // Rank 0 sends an order with a duplicate: every rank falls back alike.
    std::vector<int64_t> bad = Exchange::encode_order(exchange.recorded_order(), 4);
    if (rank == 0) bad[2] = bad[1];
    rejected[static_cast<size_t>(rank)] = !exchange.agree_order(broadcast(bad));
    after_malformed[static_cast<size_t>(rank)] = exchange.order();
    // A new group starts from the registration order again.
    exchange.agree_order(broadcast(Exchange::encode_order(exchange.recorded_order(), 4)));
    exchange.attach(group.get(), rank, 3, at::TensorOptions().dtype(at::kDouble));
    EXPECT_EQ(exchange.order(), Exchange::registration_order(4));
  });
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(recorded[r], fired[r]) << "rank " << r;
    EXPECT_TRUE(accepted[r]);
    EXPECT_EQ(agreed[r], fired[0]) << "rank " << r;
    EXPECT_EQ(buckets[r], (Buckets{{2, 0}, {3, 1}})) << "rank " << r;
    EXPECT_TRUE(rejected[r]);
    EXPECT_EQ(after_malformed[r], Exchange::registration_order(4)) << "rank " << r;
  }
}

// A parameter the backward did not reach follows the ones it did, in registration order.
TEST(BucketOrder, UnusedParametersComeLast) {
  std::vector<NamedTensor> params;
  for (const char* name : {"a.weight", "b.weight", "c.weight"}) {
    params.emplace_back(name, at::ones({4}).requires_grad_());
  }
  Exchange exchange(params, {}, Exchange::Layout{});
  EXPECT_FALSE(exchange.recorded_order().has_value());
  exchange.begin(1.0, nullptr);
  (params[1].second.sum() + params[0].second.sum() * 0).backward();
  exchange.end();
  ASSERT_TRUE(exchange.recorded_order().has_value());
  const Order order = *exchange.recorded_order();
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(order[2], 2u);
  EXPECT_TRUE(Exchange::is_order_of(order, 3));
  // A step without backward records nothing new; a backward outside a step records nothing.
  exchange.begin(1.0, nullptr);
  exchange.end();
  params[2].second.sum().backward();
  EXPECT_EQ(*exchange.recorded_order(), order);
}

// A temporary directory removed when the test ends.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ol_bucket_order_XXXXXX").string();
    if (mkdtemp(tmpl.data())) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

TrainerConfig head_first_config(const std::filesystem::path& dir) {
  TrainerConfig c = testing::synthetic_config(2000);
  const std::string path = (dir / "head_first.pt").string();
  save_head_first_mlp(path, 28 * 28, {16, 8}, 10, 5);
  c.model.kind = "torchscript";
  c.model.path = path;
  c.precision = Precision::kFloat64;
  c.bucket_bytes = 1024;  // 128 doubles: fc1's weight alone, the rest in a few buckets
  return c;
}

// Generation 0: two ranks, three steps; generation 1: a fresh third rank joins (state from rank
// 0), with an empty slice at the group's first step, so it has recorded nothing of its own when
// the group agrees. Every rank's parameters equal one process's with the whole batch.
TEST(BucketOrder, AModelRegisteredHeadFirstLaunchesItsBucketsInBackward) {
  at::set_num_threads(1);
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::vector<std::vector<int>> first = {{30, 34}, {40, 24}, {64, 0}};
  const std::vector<std::vector<int>> second = {{20, 44, 0}, {10, 30, 24}, {30, 20, 14}};
  for (const bool alone : {false, true}) {
    SCOPED_TRACE(std::string("first_layer_bucket ") + (alone ? "true" : "false"));
    TrainerConfig config = head_first_config(dir.path());
    config.first_layer_bucket = alone;
    const DatasetPair data = load_datasets(config.data);
    Trainer reference(config, data);
    std::vector<double> losses;
    for (size_t s = 0; s < first.size() + second.size(); ++s) {
      const StepResult r = reference.step({64});
      ASSERT_TRUE(r.committed) << r.error;
      losses.push_back(r.loss);
    }
    // The registration order of fc1, fc2, head: [head.weight, head.bias, fc2..., fc1...].
    const std::vector<NamedTensor> names = reference.named_parameters();
    ASSERT_EQ(names.size(), 6u);
    EXPECT_EQ(names[0].first, "head.weight");
    EXPECT_EQ(names[5].first, "fc1.bias");

    testing::LoopbackStore store;
    std::vector<std::vector<NamedTensor>> params(3);
    std::vector<std::unique_ptr<Trainer>> trainers(3);
    for (auto& t : trainers) t = std::make_unique<Trainer>(config, data);
    testing::run_ranks(2, [&](int rank) {
      Trainer& t = *trainers[static_cast<size_t>(rank)];
      ASSERT_TRUE(t.join_group(store.client(), 0, rank, 2, 20s, testing::loopback()).ok);
      ASSERT_TRUE(t.sync_state_from_rank0().ok);
      for (size_t s = 0; s < first.size(); ++s) {
        const StepResult r = t.step(first[s]);
        ASSERT_TRUE(r.committed) << r.error;
        EXPECT_NEAR(r.loss, losses[s], 1e-12 * std::abs(losses[s])) << "step " << s;
        if (first[s][static_cast<size_t>(rank)] == 0) continue;
        EXPECT_EQ(r.buckets_launched_in_backward, r.buckets);
        if (s == 0) {
          // Reverse registration order: the first bucket holds fc1's gradients, made ready last.
          EXPECT_LT(r.buckets_launched_before_last_gradient, r.buckets - 1) << "step " << s;
        } else {
          EXPECT_EQ(r.buckets_launched_before_last_gradient, r.buckets - 1) << "step " << s;
        }
      }
    });
    testing::run_ranks(3, [&](int rank) {
      Trainer& t = *trainers[static_cast<size_t>(rank)];
      ASSERT_TRUE(t.join_group(store.client(), 1, rank, 3, 20s, testing::loopback()).ok);
      ASSERT_TRUE(t.sync_state_from_rank0().ok);
      for (size_t s = 0; s < second.size(); ++s) {
        const StepResult r = t.step(second[s]);
        ASSERT_TRUE(r.committed) << r.error;
        const size_t global = first.size() + s;
        EXPECT_NEAR(r.loss, losses[global], 1e-12 * std::abs(losses[global])) << "step " << global;
        if (second[s][static_cast<size_t>(rank)] == 0) continue;
        if (s == 0) {
          // A new group starts in registration order.
          EXPECT_LT(r.buckets_launched_before_last_gradient, r.buckets - 1) << "step " << global;
        } else {
          EXPECT_EQ(r.buckets_launched_before_last_gradient, r.buckets - 1) << "step " << global;
        }
      }
      params[static_cast<size_t>(rank)] = t.named_parameters();
    });
    for (size_t r = 0; r < 3; ++r) {
      EXPECT_LE(testing::max_relative_l2(params[r], reference.named_parameters()), 1e-12)
          << "rank " << r;
    }
  }
}

// observed_bucket_order = false keeps reverse registration order for the group's life (the
// side-by-side measurement's other half), with the same sums.
TEST(BucketOrder, RegistrationOrderStaysWhenAsked) {
  at::set_num_threads(1);
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  TrainerConfig config = head_first_config(dir.path());
  config.observed_bucket_order = false;
  const DatasetPair data = load_datasets(config.data);
  Trainer reference(config, data);
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(reference.step({64}).committed);
  testing::LoopbackStore store;
  std::vector<std::vector<NamedTensor>> params(2);
  testing::run_ranks(2, [&](int rank) {
    Trainer t(config, data);
    ASSERT_TRUE(t.join_group(store.client(), 0, rank, 2, 20s, testing::loopback()).ok);
    for (int s = 0; s < 3; ++s) {
      const StepResult r = t.step({30, 34});
      ASSERT_TRUE(r.committed) << r.error;
      EXPECT_LT(r.buckets_launched_before_last_gradient, r.buckets - 1) << "step " << s;
    }
    params[static_cast<size_t>(rank)] = t.named_parameters();
  });
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_LE(testing::max_relative_l2(params[r], reference.named_parameters()), 1e-12);
  }
}

}  // namespace
}  // namespace omnilearn::training
