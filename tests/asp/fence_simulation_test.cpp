// Exactly once per shard under faults, in virtual time (issue 13): the scheduler's dealer and
// fences (asp::EpochDealer, asp::BatchFences) and the shards (asp::ServerCore) driven as the
// actors drive them. Unlike asp_simulation_test, a push reaches the shards directly and the
// scheduler hears of it only in the worker's next ask, so the faults that matter can happen:
// - a push that arrives after the worker's bound (the worker reports it unanswered, the shard
//   applies it late) or never (the connection dropped);
// - a worker declared gone while it keeps running (a frozen agent): its pushes still arrive,
//   and so does the one it made just before it was declared gone;
// - a shard slow to read a fence (its turns blocked past the fence's bound), so that a late
//   push of the batch reaches it first: the scheduler asks it again while it lives, as the
//   actor does, and must not take the silence for "not taken";
// - a shard that dies (at a random time, or just as a fence reaches it) and resumes from its
//   last checkpoint (every few updates) a few seconds later: pushes and fences in flight to it
//   are lost, workers wait while it is down, the scheduler fences gone workers off the restart
//   and asks it the rounds its predecessor never answered, as the actor does.
// Each seeded schedule checks the invariant at the end: in the state each shard serves with,
// every (epoch, shard, sample) was taken exactly once, except samples whose update a restart
// lost (taken after the checkpoint it resumed from, and not dealt again: at most once), and
// every epoch completed. The same schedules without fencing (the dealer told at once, as before
// fences existed), or taking a dead shard's silence for "not taken", must break it, or the test
// proves nothing. A failure names its seed: rerun with ASP_FENCE_SEED=N to replay only that one.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <memory>
#include <iostream>
#include <limits>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include "asp/batch_fences.hpp"
#include "asp/epoch_dealer.hpp"
#include "asp/server_core.hpp"

namespace omnilearn::asp {
namespace {

constexpr double kBound = 5.0;       // the worker's push bound (AspPush asks: 5 s)
constexpr double kFenceBound = 5.0;  // the scheduler's fence bound (AspFence asks: 5 s)
constexpr double kNever = std::numeric_limits<double>::infinity();
const StalenessConfig kConfig{StalenessMode::kNone, 0, LrScaling::kNone};

struct Schedule {
  std::uint64_t seed = 1;
  bool fencing = true;
  int workers = 4;
  int shards = 3;
  std::int64_t dataset = 1024;
  std::int64_t epochs = 2;
  double late = 0.03;  // a push arrives after the bound
  double lost = 0.01;  // a push never arrives
  int zombies = 2;     // workers declared gone while they keep running
  double slow_fences = 0.1;   // a fence reaches its shard after the fence's bound
  bool ask_again = true;      // a live shard silent past the bound is asked again (the actor's
                              // rule); false: its silence counts as "not taken"
  int crashes = 0;            // shards that die at a random time and resume from a checkpoint
  double crash_on_fence = 0;  // a shard dies just as a fence reaches it
  std::int64_t checkpoint_every = 3;  // updates between a shard's checkpoints
  bool ask_restart = true;  // rounds a dead shard did not answer are asked of its restart (the
                            // actor's rule); false: its silence counts as "not taken"
};

struct Outcome {
  bool finished = false;
  std::int64_t violations = 0;  // (epoch, shard, sample) taken other than once
  std::string first_violation;
  std::int64_t fenced_pushes = 0;
  std::int64_t late_pushes = 0;
  std::int64_t zombie_pushes = 0;  // pushes arriving after their worker was declared gone
  std::int64_t fence_timeouts = 0;
  std::int64_t restarts = 0;
  std::int64_t lost_samples = 0;  // (epoch, shard, sample) whose update a restart lost
  std::int64_t answered_by_restart = 0;  // fence asks a restarted shard answered
};

class Simulation {
 public:
  explicit Simulation(Schedule s)
      : s_(s), rng_(s.seed), dealer_(s.dataset, s.seed, s.epochs), fences_(s.shards) {
    for (int i = 0; i < s.shards; ++i) {
      servers_.emplace_back(1, kConfig, [](double, std::span<const float>) {});
      shards_.push_back(Shard{});
    }
    taken_.assign(static_cast<std::size_t>(s.epochs),
                  std::vector<std::vector<int>>(static_cast<std::size_t>(s.shards),
                                                std::vector<int>(static_cast<std::size_t>(s.dataset), 0)));
    lost_ = std::vector<std::vector<std::vector<bool>>>(
        taken_.size(), std::vector<std::vector<bool>>(
                           static_cast<std::size_t>(s.shards),
                           std::vector<bool>(static_cast<std::size_t>(s.dataset), false)));
    for (int i = 0; i < s.shards; ++i) save_checkpoint(i);
    std::uniform_real_distribution<double> speed(0.5, 4.0);
    for (int w = 0; w < s.workers; ++w) {
      Worker worker;
      worker.time_per_sample = 0.01 * speed(rng_);
      worker.batch = 16 + static_cast<int>(rng_() % 48);
      workers_.push_back(worker);
    }
  }

  Outcome run() {
    for (int w = 0; w < s_.workers; ++w) at(0, [this, w] { ask(w); });
    // Zombies: declared gone at a random time in the first epoch's worth of work; never the
    // last worker, so that someone finishes the job.
    std::uniform_real_distribution<double> when(1.0, 60.0);
    for (int z = 0; z < s_.zombies && z < s_.workers - 1; ++z) {
      at(when(rng_), [this, z] { declare_gone(z); });
    }
    std::uniform_real_distribution<double> crash_at(1.0, 80.0);
    for (int c = 0; c < s_.crashes; ++c) {
      const int shard = static_cast<int>(rng_() % static_cast<std::uint64_t>(s_.shards));
      at(crash_at(rng_), [this, shard] { crash(shard); });
    }
    std::int64_t steps = 0;
    while (!events_.empty() && !dealer_.finished()) {
      if (++steps > 2'000'000) break;  // a livelock: reported as not finished
      Event e = events_.top();
      events_.pop();
      now_ = e.at;
      e.run();
    }
    Outcome out = outcome_;
    out.finished = dealer_.finished();
    for (std::size_t e = 0; e < taken_.size(); ++e) {
      for (std::size_t sh = 0; sh < taken_[e].size(); ++sh) {
        for (std::size_t i = 0; i < taken_[e][sh].size(); ++i) {
          if (taken_[e][sh][i] == 1) continue;
          if (taken_[e][sh][i] == 0 && lost_[e][sh][i]) {
            ++out.lost_samples;
            continue;
          }
          if (out.violations++ == 0) {
            out.first_violation = "epoch " + std::to_string(e) + ", shard " + std::to_string(sh) +
                                  ", sample " + std::to_string(i) + " taken " +
                                  std::to_string(taken_[e][sh][i]) + " times";
          }
        }
      }
    }
    for (const auto& server : servers_) out.fenced_pushes += server.fenced_pushes();
    return out;
  }

 private:
  struct Event {
    double at;
    std::uint64_t seq;
    std::function<void()> run;
  };
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.at > b.at || (a.at == b.at && a.seq > b.seq);
    }
  };
  // The worker's report of its last batch, filled in as its pushes are answered.
  struct Report {
    std::uint64_t batch = 0;
    std::vector<std::int32_t> taken;       // answered: applied or dropped
    std::vector<std::int32_t> unanswered;  // no answer within the bound
    bool failed = false;                   // some shard did not take it
  };
  // A shard's process: whether it serves, its incarnation, and the checkpoint a restart resumes
  // from with what the shard had taken at that point (taken_ for the shard, per epoch).
  struct Shard {
    bool alive = true;
    std::int64_t incarnation = 0;
    ServerCheckpoint checkpoint;
    std::vector<std::vector<int>> taken_at_checkpoint;  // [epoch][sample]
  };
  struct Worker {
    double time_per_sample = 0.01;
    int batch = 32;
    bool declared_gone = false;  // the scheduler's view
    bool stopped = false;        // the process: a zombie stops at its next ask
    Report report;
  };

  void at(double when, std::function<void()> fn) {
    events_.push(Event{when, seq_++, std::move(fn)});
  }

  // The scheduler's side of a deal request, then the worker's next batch.
  void ask(int w) {
    Worker& worker = workers_[static_cast<std::size_t>(w)];
    if (worker.stopped) return;
    if (worker.declared_gone) {  // answered kDone: "unknown worker"
      worker.stopped = true;
      return;
    }
    Report report = std::move(worker.report);
    worker.report = Report{};
    if (report.batch != 0 && !report.failed) {
      EXPECT_EQ(dealer_.push(w, report.batch), Receipt::kAccepted) << "seed " << s_.seed;
    } else if (report.batch != 0) {
      if (s_.fencing) {
        // The unanswered shards are asked (a dead one when it restarts, as the actor does).
        handle(fences_.push_failed(dealer_, w, report.batch, report.taken, false,
                                   report.unanswered));
      } else {
        dealer_.push_failed(w, report.batch, report.taken);
      }
    }
    const bool all_up = std::all_of(shards_.begin(), shards_.end(),
                                    [](const Shard& sh) { return sh.alive; });
    DealtBatch batch = all_up ? dealer_.pull(w, worker.batch) : DealtBatch{};
    if (batch.empty()) {
      at(now_ + 0.05, [this, w] { ask(w); });  // kWait: what is left is out or being fenced
      return;
    }
    std::uniform_real_distribution<double> jitter(0.8, 1.2), quick(0.0, 0.05 * kBound),
        late(1.01 * kBound, 3.0 * kBound), coin(0.0, 1.0);
    const double pushed_at = now_ + static_cast<double>(batch.indices.size()) *
                                        worker.time_per_sample * jitter(rng_);
    double answers_by = pushed_at;
    bool waits_for_bound = false;
    Report& next = worker.report;
    next.batch = batch.id;
    for (std::int32_t s = 0; s < s_.shards; ++s) {
      if (std::find(batch.shards_done.begin(), batch.shards_done.end(), s) !=
          batch.shards_done.end()) {
        continue;
      }
      const Version pulled = servers_[static_cast<std::size_t>(s)].pull();
      const double roll = coin(rng_);
      const double delay = roll < s_.lost ? kNever : roll < s_.lost + s_.late ? late(rng_) : quick(rng_);
      if (delay > kBound) {
        next.unanswered.push_back(s);
        next.failed = true;
        waits_for_bound = true;
        if (delay != kNever) ++outcome_.late_pushes;
      } else {
        answers_by = std::max(answers_by, pushed_at + delay);
      }
      if (delay == kNever) continue;
      const std::int64_t incarnation = shards_[static_cast<std::size_t>(s)].incarnation;
      at(pushed_at + delay, [this, w, s, batch, pulled, incarnation, answered = delay <= kBound] {
        const Shard& shard = shards_[static_cast<std::size_t>(s)];
        if (!shard.alive || shard.incarnation != incarnation) {
          // Lost with the incarnation it was sent to: the worker sees no answer.
          Report& r = workers_[static_cast<std::size_t>(w)].report;
          if (answered && r.batch == batch.id) {
            r.unanswered.push_back(s);
            r.failed = true;
          }
          return;
        }
        const PushOutcome o = servers_[static_cast<std::size_t>(s)].push(
            w, pulled, static_cast<std::int64_t>(batch.indices.size()), std::vector<float>{1.0f},
            s_.fencing ? batch.id : 0);
        if (workers_[static_cast<std::size_t>(w)].declared_gone) ++outcome_.zombie_pushes;
        const bool took = o.status == PushStatus::kApplied || o.status == PushStatus::kDropped;
        if (took) {
          for (const std::int64_t i : batch.indices) {
            ++taken_[static_cast<std::size_t>(batch.epoch)][static_cast<std::size_t>(s)]
                    [static_cast<std::size_t>(i)];
          }
          // (The version counts applied pushes: nothing is dropped here.)
          if (o.status == PushStatus::kApplied && o.version.number % s_.checkpoint_every == 0) {
            save_checkpoint(s);
          }
        }
        if (!answered) return;  // the worker stopped waiting for this one
        Report& r = workers_[static_cast<std::size_t>(w)].report;
        if (r.batch != batch.id) return;
        if (took) {
          r.taken.push_back(s);
        } else {
          r.failed = true;  // fenced: answered, not taken
        }
      });
    }
    at(waits_for_bound ? pushed_at + kBound : answers_by, [this, w] { ask(w); });
  }

  void declare_gone(int w) {
    Worker& worker = workers_[static_cast<std::size_t>(w)];
    if (worker.declared_gone || worker.stopped) return;
    worker.declared_gone = true;
    if (!s_.fencing) {
      dealer_.worker_gone(w);
      return;
    }
    gone_.push_back(w);
    handle(fences_.worker_gone(dealer_, w));
  }

  void save_checkpoint(int s) {
    Shard& shard = shards_[static_cast<std::size_t>(s)];
    // Through the bytes a restart reads, as the server writes them.
    const auto decoded =
        decode_checkpoint(encode_checkpoint(servers_[static_cast<std::size_t>(s)].checkpoint()));
    ASSERT_TRUE(decoded) << "seed " << s_.seed;
    shard.checkpoint = *decoded;
    shard.taken_at_checkpoint.clear();
    for (const auto& epoch : taken_) shard.taken_at_checkpoint.push_back(epoch[static_cast<std::size_t>(s)]);
  }

  // The shard's process dies: what it took after its checkpoint is lost, pushes and fences in
  // flight to it are lost; it resumes from the checkpoint a few seconds later.
  void crash(int s) {
    Shard& shard = shards_[static_cast<std::size_t>(s)];
    if (!shard.alive || dealer_.finished()) return;
    shard.alive = false;
    ++shard.incarnation;
    ++outcome_.restarts;
    for (std::size_t e = 0; e < taken_.size(); ++e) {
      auto& now = taken_[e][static_cast<std::size_t>(s)];
      const auto& then = shard.taken_at_checkpoint[e];
      for (std::size_t i = 0; i < now.size(); ++i) {
        if (now[i] > then[i]) lost_[e][static_cast<std::size_t>(s)][i] = true;
        now[i] = then[i];
      }
    }
    if (!s_.ask_restart) {
      // The rule before: every round waiting for the dead shard counts it as not having taken
      // its batches.
      for (const FenceAsk& ask : fences_.waiting_on(s)) {
        settled_ += static_cast<std::int64_t>(fences_.answer(dealer_, ask.round, s, std::nullopt).size());
      }
    }
    std::uniform_real_distribution<double> down(0.5, 8.0);
    at(now_ + down(rng_), [this, s] { restart(s); });
  }

  void restart(int s) {
    Shard& shard = shards_[static_cast<std::size_t>(s)];
    ServerCheckpoint from = shard.checkpoint;
    from.incarnation = shard.incarnation - 1;  // resume() makes it the scheduler's incarnation
    servers_[static_cast<std::size_t>(s)] =
        ServerCore::resume(from, 1, kConfig, [](double, std::span<const float>) {});
    shard.alive = true;
    // As on_server_ready: gone workers are fenced off it, then the rounds it owes are asked.
    for (const int w : gone_) servers_[static_cast<std::size_t>(s)].fence(w, kWholeWorker);
    for (const FenceAsk& ask : fences_.waiting_on(s)) {
      ++outcome_.answered_by_restart;
      fence(ask, s);
    }
  }

  // A fence's asks: each reaches its shard after a short delay (or, for a slow shard, after the
  // fence's bound), its answer comes back later.
  void handle(const FenceStart& start) {
    settled_ += static_cast<std::int64_t>(start.settled.size());
    if (!start.ask) return;
    for (const std::int32_t s : start.ask->shards) fence(*start.ask, s);
  }

  void fence(const FenceAsk& ask, std::int32_t s) {
    if (!shards_[static_cast<std::size_t>(s)].alive) {
      if (!s_.ask_restart) {  // the rule before: nobody to ask counts as not taken
        settled_ += static_cast<std::int64_t>(fences_.answer(dealer_, ask.round, s, std::nullopt).size());
      }
      return;  // asked when it restarts
    }
    auto over = std::make_shared<bool>(false);  // this ask answered, or past its bound
    std::uniform_real_distribution<double> hop(0.0, 0.5), coin(0.0, 1.0),
        slow(1.2 * kFenceBound, 3.0 * kFenceBound);
    const double arrive = coin(rng_) < s_.slow_fences ? slow(rng_) : hop(rng_);
    const std::int64_t incarnation = shards_[static_cast<std::size_t>(s)].incarnation;
    at(now_ + arrive, [this, ask, s, over, incarnation] {
      Shard& shard = shards_[static_cast<std::size_t>(s)];
      if (!shard.alive || shard.incarnation != incarnation) return;  // lost with it
      std::uniform_real_distribution<double> coin(0.0, 1.0);
      if (coin(rng_) < s_.crash_on_fence) {
        crash(s);  // just before it reads the fence
        return;
      }
      auto taken = servers_[static_cast<std::size_t>(s)].fence(ask.worker, ask.through);
      std::uniform_real_distribution<double> back(0.0, 0.5);
      at(now_ + back(rng_), [this, ask, s, taken, over, incarnation] {
        if (*over) return;  // the ask timed out: its answer is dropped, as the actor's is
        *over = true;
        // Answered, then died before the answer was read: the scheduler asks its restart (the
        // actor drops an answer from an incarnation declared gone).
        if (s_.ask_restart && shards_[static_cast<std::size_t>(s)].incarnation != incarnation) return;
        settled_ += static_cast<std::int64_t>(fences_.answer(dealer_, ask.round, s, taken).size());
      });
    });
    at(now_ + kFenceBound, [this, ask, s, over, incarnation] {
      if (*over) return;
      *over = true;
      ++outcome_.fence_timeouts;
      const Shard& shard = shards_[static_cast<std::size_t>(s)];
      if (!shard.alive || shard.incarnation != incarnation) {
        // Gone: its restart is (or was) asked; under the rule before, crash() answered.
        return;
      }
      if (s_.ask_again) {
        fence(ask, s);  // the shard lives: slow, not gone
      } else {
        settled_ += static_cast<std::int64_t>(
            fences_.answer(dealer_, ask.round, s, std::nullopt).size());
      }
    });
  }

  Schedule s_;
  std::mt19937_64 rng_;
  EpochDealer dealer_;
  BatchFences fences_;
  std::vector<ServerCore> servers_;
  std::vector<Shard> shards_;
  std::vector<int> gone_;  // workers declared gone
  std::vector<Worker> workers_;
  std::vector<std::vector<std::vector<int>>> taken_;  // [epoch][shard][sample], the state served
  std::vector<std::vector<std::vector<bool>>> lost_;  // taken, then lost with a restart
  std::priority_queue<Event, std::vector<Event>, Later> events_;
  std::uint64_t seq_ = 0;
  double now_ = 0;
  std::int64_t settled_ = 0;
  Outcome outcome_;
};

#ifndef OMNILEARN_TEST_SEED_DIVISOR
#define OMNILEARN_TEST_SEED_DIVISOR 1
#endif

// `count` seeds, a fifth of them under the sanitizers (tests/asp/CMakeLists.txt): what they
// look for does not need every schedule.
std::vector<std::uint64_t> seeds(std::uint64_t count) {
  if (const char* one = std::getenv("ASP_FENCE_SEED")) return {std::strtoull(one, nullptr, 10)};
  count /= OMNILEARN_TEST_SEED_DIVISOR;
  std::vector<std::uint64_t> out;
  for (std::uint64_t s = 1; s <= count; ++s) out.push_back(s);
  return out;
}

// The schedule of `seed`: 1-3 shards, the faults of Schedule's defaults.
Schedule schedule(std::uint64_t seed) {
  Schedule s;
  s.seed = seed;
  s.shards = 1 + static_cast<int>(seed % 3);
  return s;
}

// Shards that die: 1-3 at random times, and in 5% of the fences' arrivals.
Schedule with_dying_shards(Schedule s) {
  s.crashes = 1 + static_cast<int>(s.seed % 3);
  s.crash_on_fence = 0.05;
  return s;
}

// How many of `count` schedules, each changed by `rule`, gave some shard a sample other than
// once: the controls, rules that must break the invariant or the tests above prove nothing.
std::int64_t broken_schedules(std::uint64_t count, const std::function<Schedule(Schedule)>& rule,
                              std::size_t* ran) {
  std::int64_t broken = 0;
  const auto all = seeds(count);
  for (const std::uint64_t seed : all) broken += Simulation(rule(schedule(seed))).run().violations > 0;
  *ran = all.size();
  return broken;
}

TEST(AspFenceSimulation, EveryShardTakesEverySampleOncePerEpochUnderLateLostAndZombiePushes) {
  std::int64_t fenced = 0, late = 0, zombie = 0, timeouts = 0;
  const auto all = seeds(5000);
  for (const std::uint64_t seed : all) {
    const Outcome o = Simulation(schedule(seed)).run();
    ASSERT_TRUE(o.finished) << "seed " << seed << " (ASP_FENCE_SEED=" << seed << " replays it)";
    ASSERT_EQ(o.violations, 0) << "seed " << seed << ": " << o.first_violation;
    fenced += o.fenced_pushes;
    late += o.late_pushes;
    zombie += o.zombie_pushes;
    timeouts += o.fence_timeouts;
  }
  // The faults happened: late pushes, zombies' pushes, fences that refused some, and fences
  // asked again after their bound.
  if (all.size() > 1) {
    EXPECT_GT(late, 0);
    EXPECT_GT(zombie, 0);
    EXPECT_GT(fenced, 0);
    EXPECT_GT(timeouts, 0);
  }
  std::cout << all.size() << " schedules: " << late << " late pushes, " << zombie
            << " pushes from workers declared gone, " << fenced << " refused by a fence, "
            << timeouts << " fences asked again after their bound\n";
}

// The rule the actor follows for a live shard silent past the fence's bound: ask again.
// Taking the silence for "not taken" instead deals a batch again that a late push already gave
// the slow shard.
TEST(AspFenceSimulation, ASlowShardsSilenceTakenForNotTakenGivesSamplesTwice) {
  std::size_t ran = 0;
  const std::int64_t broken = broken_schedules(500, [](Schedule s) {
    s.ask_again = false;
    s.slow_fences = 0.5;
    return s;
  }, &ran);
  if (ran > 1) {
    EXPECT_GT(broken, 0);
  }
  std::cout << "silence taken for not taken: " << broken << " of " << ran
            << " schedules gave some shard a sample twice\n";
}

// Shards die (at random, and just as fences reach them) and resume from checkpoints taken every
// 3 updates, on top of the faults above: what a shard serves with holds each sample at most
// once, and exactly once unless a restart lost its update.
TEST(AspFenceSimulation, ShardsThatDieAndResumeFromTheirCheckpointsTakeNoSampleTwice) {
  std::int64_t restarts = 0, lost = 0, by_restart = 0;
  const auto all = seeds(3000);
  for (const std::uint64_t seed : all) {
    const Outcome o = Simulation(with_dying_shards(schedule(seed))).run();
    ASSERT_TRUE(o.finished) << "seed " << seed << " (ASP_FENCE_SEED=" << seed << " replays it)";
    ASSERT_EQ(o.violations, 0) << "seed " << seed << ": " << o.first_violation;
    restarts += o.restarts;
    lost += o.lost_samples;
    by_restart += o.answered_by_restart;
  }
  if (all.size() > 1) {
    EXPECT_GT(restarts, 0);
    EXPECT_GT(lost, 0);
    EXPECT_GT(by_restart, 0);
  }
  std::cout << all.size() << " schedules with dying shards: " << restarts << " restarts, "
            << by_restart << " fence asks answered by a restarted shard, " << lost
            << " (epoch, shard, sample) updates lost with a restart\n";
}

// The rule before: a dead shard's silence counted as "not taken", so a batch in the checkpoint
// its restart resumed from was dealt to it again.
TEST(AspFenceSimulation, ADeadShardsSilenceTakenForNotTakenGivesSamplesTwice) {
  std::size_t ran = 0;
  const std::int64_t broken = broken_schedules(1000, [](Schedule s) {
    s = with_dying_shards(s);
    s.ask_restart = false;
    return s;
  }, &ran);
  if (ran > 1) {
    EXPECT_GT(broken, 0);
  }
  std::cout << "dead shard's silence taken for not taken: " << broken << " of " << ran
            << " schedules gave some shard a sample twice\n";
}

TEST(AspFenceSimulation, WithoutFencesTheSameSchedulesGiveShardsSamplesTwice) {
  std::size_t ran = 0;
  const std::int64_t broken = broken_schedules(200, [](Schedule s) {
    s.fencing = false;
    return s;
  }, &ran);
  if (ran > 1) {
    EXPECT_GT(broken, static_cast<std::int64_t>(ran) / 4);
  }
  std::cout << "without fences: " << broken << " of " << ran
            << " schedules gave some shard a sample twice (or never)\n";
}

}  // namespace
}  // namespace omnilearn::asp
