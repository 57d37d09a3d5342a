// Workers of different speeds in virtual time, each looping pull -> compute -> push through the
// EpochDealer and a ServerCore (in pure code): with batches proportional to
// speed every worker pushes at about the same rate and staleness falls; with uniform batches a
// slow worker's pushes are the stale ones. Seeded; an event queue orders the pushes.

#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <queue>
#include <random>
#include <vector>

#include "asp/epoch_dealer.hpp"
#include "asp/server_core.hpp"
#include "controller/policy.hpp"

namespace omnilearn::asp {
namespace {

struct SimConfig {
  std::vector<double> time_per_sample;  // seconds per sample, per worker
  std::vector<int> batches;
  double noise = 0.1;                   // compute time x uniform(1 - noise, 1 + noise)
  std::int64_t dataset = 16384;
  std::int64_t epochs = 3;
  StalenessConfig staleness{StalenessMode::kNone, 0, LrScaling::kLinear};
  std::uint64_t seed = 1;
  int kill_worker = -1;     // this worker dies ...
  double kill_at = 0;       // ... at this virtual time; its last push arrives late (a zombie)
};

struct SimResult {
  StalenessSummary total;
  std::vector<double> samples_per_s;  // measured compute throughput per worker
  DealerCounters dealer;
  std::vector<std::vector<int>> used;  // per epoch, per sample: accepted pushes
  double end_time = 0;
  bool finished = false;
};

SimResult simulate(const SimConfig& cfg) {
  const int n = static_cast<int>(cfg.batches.size());
  EpochDealer dealer(cfg.dataset, cfg.seed, cfg.epochs);
  ServerCore server(1, cfg.staleness, [](double, std::span<const float>) {});
  std::int64_t total_batch = 0;
  for (int b : cfg.batches) total_batch += b;
  server.set_batch_plan(total_batch, n);
  std::mt19937_64 rng(cfg.seed);
  std::uniform_real_distribution<double> jitter(1 - cfg.noise, 1 + cfg.noise);

  struct InFlight {
    double at;
    int worker;
    Version pulled;
    DealtBatch batch;
  };
  auto later = [](const InFlight& a, const InFlight& b) {
    return a.at > b.at || (a.at == b.at && a.worker > b.worker);
  };
  std::priority_queue<InFlight, std::vector<InFlight>, decltype(later)> events(later);
  SimResult out;
  out.used.assign(static_cast<std::size_t>(cfg.epochs),
                  std::vector<int>(static_cast<std::size_t>(cfg.dataset), 0));
  std::vector<double> busy(static_cast<std::size_t>(n), 0), samples(busy);
  std::vector<bool> alive(static_cast<std::size_t>(n), true);
  auto start = [&](int w, double now) {
    DealtBatch batch = dealer.pull(w, cfg.batches[static_cast<std::size_t>(w)]);
    if (batch.empty()) return;  // nothing left to deal now
    const double compute = static_cast<double>(batch.indices.size()) *
                           cfg.time_per_sample[static_cast<std::size_t>(w)] * jitter(rng);
    busy[static_cast<std::size_t>(w)] += compute;
    samples[static_cast<std::size_t>(w)] += static_cast<double>(batch.indices.size());
    events.push(InFlight{now + compute, w, server.pull(), std::move(batch)});
  };
  for (int w = 0; w < n; ++w) start(w, 0);
  const std::vector<float> gradient(1, 1.0f);
  bool killed = false;
  std::vector<int> idle;
  while (!events.empty()) {
    InFlight e = events.top();
    events.pop();
    if (!killed && cfg.kill_worker >= 0 && e.at >= cfg.kill_at) {
      killed = true;
      alive[static_cast<std::size_t>(cfg.kill_worker)] = false;
      dealer.worker_gone(cfg.kill_worker);
      for (int w : idle) start(w, cfg.kill_at);  // reissued indices for whoever was waiting
      idle.clear();
    }
    // A dead worker's push still arrives (it was only partitioned): it must be a duplicate.
    const Receipt receipt = dealer.push(e.worker, e.batch.id);
    if (!alive[static_cast<std::size_t>(e.worker)]) {
      EXPECT_NE(receipt, Receipt::kAccepted);
      continue;
    }
    EXPECT_EQ(receipt, Receipt::kAccepted);
    if (receipt == Receipt::kAccepted) {
      server.push(e.worker, e.pulled, static_cast<std::int64_t>(e.batch.indices.size()), gradient);
      for (auto i : e.batch.indices) {
        ++out.used[static_cast<std::size_t>(e.batch.epoch)][static_cast<std::size_t>(i)];
      }
    }
    out.end_time = e.at;
    const auto before = events.size();
    start(e.worker, e.at);
    if (events.size() == before) idle.push_back(e.worker);
  }
  out.total = server.stats().total();
  for (int w = 0; w < n; ++w) {
    out.samples_per_s.push_back(samples[static_cast<std::size_t>(w)] / busy[static_cast<std::size_t>(w)]);
  }
  out.dealer = dealer.counters();
  out.finished = dealer.finished();
  return out;
}

// The scheduler's proportional policy over throughputs measured in a uniform run.
std::vector<int> proportional_batches(const std::vector<double>& samples_per_s, int global_batch) {
  std::vector<scheduler::WorkerView> views;
  for (double x : samples_per_s) {
    scheduler::WorkerView v;
    v.batch = global_batch / static_cast<int>(samples_per_s.size());
    v.throughput = x;
    v.bounds = scheduler::Bounds{1, global_batch};
    views.push_back(v);
  }
  scheduler::PolicyParams params;
  params.policy = scheduler::Policy::kProportional;
  params.global_batch = global_batch;
  return scheduler::decide_plan(views, params).batches;
}

double spread_of_updates(const StalenessSummary& s, int workers) {
  std::int64_t lo = INT64_MAX, hi = 0;
  for (int w = 0; w < workers; ++w) {
    const auto it = s.updates.find(w);
    const std::int64_t u = it == s.updates.end() ? 0 : it->second;
    lo = std::min(lo, u);
    hi = std::max(hi, u);
  }
  return static_cast<double>(hi - lo) / static_cast<double>(hi);
}

// Speeds (time per sample) and whether the p95 is the staleness figure to halve: under 1,1,1,8
// with uniform batches the slow worker makes 1 push in 25, under 5%, so the p95 never sees it
// (measured: 3.5 uniform vs 4 proportional) and the max is the figure that shows it.
struct Cluster {
  std::vector<double> speeds;
  bool p95_shows_the_slow_worker;
};

class AspSimulation : public ::testing::TestWithParam<Cluster> {};

TEST_P(AspSimulation, ProportionalBatchesHalveStalenessAndEvenTheUpdateRates) {
  const std::vector<double> speeds = GetParam().speeds;
  const bool by_p95 = GetParam().p95_shows_the_slow_worker;
  const int n = static_cast<int>(speeds.size());
  const int global_batch = 256;  // the job default; at 64 one sample is 17% of the slowest batch
  double sum_ratio = 0, worst_ratio = 0, worst_spread = 0;
  double uniform_p95 = 0, proportional_p95 = 0, uniform_mean = 0, proportional_mean = 0;
  double uniform_max = 0, proportional_max = 0, worst_max_ratio = 0;
  const int seeds = 40;
  for (int seed = 1; seed <= seeds; ++seed) {
    SimConfig uniform{speeds, std::vector<int>(static_cast<std::size_t>(n), global_batch / n)};
    uniform.seed = static_cast<std::uint64_t>(seed);
    const SimResult u = simulate(uniform);
    ASSERT_TRUE(u.finished);

    SimConfig prop = uniform;
    prop.batches = proportional_batches(u.samples_per_s, global_batch);
    const SimResult p = simulate(prop);
    ASSERT_TRUE(p.finished);

    const double ratio = static_cast<double>(p.total.p95) / static_cast<double>(u.total.p95);
    if (by_p95) {
      EXPECT_LE(ratio, 0.5) << "seed " << seed << ": p95 " << p.total.p95 << " vs " << u.total.p95;
    }
    if (!by_p95) {
      EXPECT_LE(2 * p.total.max, u.total.max) << "seed " << seed;
    }
    worst_max_ratio = std::max(worst_max_ratio,
                               static_cast<double>(p.total.max) / static_cast<double>(u.total.max));
    uniform_max += static_cast<double>(u.total.max) / seeds;
    proportional_max += static_cast<double>(p.total.max) / seeds;
    const double spread = spread_of_updates(p.total, n);
    EXPECT_LE(spread, 0.10) << "seed " << seed;
    // Uniform batches do not even the rates out: the check above can fail.
    EXPECT_GT(spread_of_updates(u.total, n), 0.10) << "seed " << seed;
    sum_ratio += ratio;
    worst_ratio = std::max(worst_ratio, ratio);
    worst_spread = std::max(worst_spread, spread);
    uniform_p95 += static_cast<double>(u.total.p95) / seeds;
    proportional_p95 += static_cast<double>(p.total.p95) / seeds;
    uniform_mean += u.total.mean / seeds;
    proportional_mean += p.total.mean / seeds;
    if (seed == 1) {
      std::cout << "proportional batches:";
      for (int b : prop.batches) std::cout << " " << b;
      std::cout << "\n";
    }
  }
  std::cout << "speeds";
  for (double s : speeds) std::cout << " " << s;
  std::cout << " | " << seeds << " seeds: staleness mean " << uniform_mean << " -> "
            << proportional_mean << ", p95 " << uniform_p95 << " -> " << proportional_p95
            << " (ratio mean " << sum_ratio / seeds << ", worst " << worst_ratio << "), max "
            << uniform_max << " -> " << proportional_max << " (worst ratio " << worst_max_ratio
            << "); worst update-count spread under proportional " << worst_spread << "\n";
}

INSTANTIATE_TEST_SUITE_P(Speeds, AspSimulation,
                         ::testing::Values(Cluster{{1, 1, 2, 4}, true},
                                           Cluster{{1, 1, 1, 8}, false}));

TEST(AspSimulationOneWorker, StalenessIsAlwaysZero) {
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    SimConfig one{{1.0}, {32}};
    one.seed = seed;
    one.staleness = StalenessConfig{StalenessMode::kNone, 0, LrScaling::kLinear};
    const SimResult r = simulate(one);
    ASSERT_TRUE(r.finished);
    EXPECT_EQ(r.total.max, 0);
    EXPECT_EQ(r.total.pushes, r.total.applied);
    EXPECT_EQ(r.total.applied, 3 * (16384 / 32));
  }
}

TEST(AspSimulationKill, ExactlyOncePerEpochWithAWorkerKilledMidEpoch) {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    SimConfig cfg{{1, 1, 2, 4}, {16, 16, 16, 16}};
    cfg.seed = seed;
    cfg.kill_worker = 3;
    cfg.kill_at = 6000.0 + 150.0 * static_cast<double>(seed);  // inside epoch 0 or 1
    const SimResult r = simulate(cfg);
    ASSERT_TRUE(r.finished) << "seed " << seed;
    EXPECT_GT(r.dealer.samples_reissued, 0) << "seed " << seed;
    EXPECT_GE(r.dealer.duplicates, 1) << "seed " << seed;  // the killed worker's late push
    for (const auto& epoch : r.used) {
      for (int count : epoch) ASSERT_EQ(count, 1) << "seed " << seed;
    }
  }
}

}  // namespace
}  // namespace omnilearn::asp
