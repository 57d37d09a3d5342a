// 10,000 actors (serial queues) on a pool of 4 threads: each runs one letter at a time, in the
// order its letters were posted, whatever thread posts them.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "core/work_pool.hpp"

namespace omnilearn::core {
namespace {

struct ActorState {
  std::atomic<int> running{0};
  std::atomic<bool> overlapped{false};
  std::vector<int> seen;  // touched only by the actor's letters
};

TEST(WorkPool, TenThousandActorsRunOneLetterAtATimeInOrder) {
  constexpr int kActors = 10000;
  constexpr int kLetters = 20;
  constexpr int kProducers = 4;  // letter i of an actor comes from producer i % kProducers
  WorkPool pool(4);
  std::vector<std::shared_ptr<SerialQueue>> queues;
  std::vector<ActorState> states(kActors);
  for (int a = 0; a < kActors; ++a) queues.push_back(std::make_shared<SerialQueue>(pool));
  std::atomic<int> done{0};
  std::promise<void> all_done;
  // Letters of one actor are posted in order by handing the actor from producer to producer:
  // each producer posts letter i only after letter i-1 was posted (a per-actor ticket).
  std::vector<std::atomic<int>> next_letter(kActors);
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      int remaining = kActors * kLetters / kProducers;
      while (remaining > 0) {
        for (int a = 0; a < kActors; ++a) {
          int i = next_letter[a].load();
          if (i >= kLetters || i % kProducers != p) continue;
          queues[a]->post([&, a, i] {
            auto& state = states[a];
            if (state.running.fetch_add(1) != 0) state.overlapped = true;
            state.seen.push_back(i);
            state.running.fetch_sub(1);
            if (done.fetch_add(1) + 1 == kActors * kLetters) all_done.set_value();
          });
          next_letter[a].store(i + 1);
          --remaining;
        }
      }
    });
  }
  for (auto& producer : producers) producer.join();
  ASSERT_EQ(all_done.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  for (int a = 0; a < kActors; ++a) {
    ASSERT_FALSE(states[a].overlapped) << "actor " << a << " ran two letters at once";
    ASSERT_EQ(states[a].seen.size(), static_cast<std::size_t>(kLetters));
    for (int i = 0; i < kLetters; ++i) ASSERT_EQ(states[a].seen[i], i) << "actor " << a;
  }
  EXPECT_EQ(pool.threads(), 4u);
}

TEST(WorkPool, ABusyActorDoesNotHoldAThreadFromTheOthers) {
  std::atomic<int> busy_done{0};  // before the pool: its destructor runs what is still queued
  std::promise<int> other_ran;
  std::promise<void> gate;
  WorkPool pool(1);
  // The only thread waits at the gate until everything is queued: the order of the turns, not
  // how fast the posting thread is, decides when the other actor runs.
  pool.post([opened = gate.get_future().share()] { opened.wait(); });
  auto busy = std::make_shared<SerialQueue>(pool);
  auto other = std::make_shared<SerialQueue>(pool);
  for (int i = 0; i < 1000; ++i) busy->post([&] { busy_done.fetch_add(1); });
  other->post([&] { other_ran.set_value(busy_done.load()); });
  gate.set_value();
  auto at = other_ran.get_future();
  ASSERT_EQ(at.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  // The busy queue yields after a batch: the other actor ran before all 1000 finished.
  EXPECT_LT(at.get(), 1000);
}

// Wake-ups are skipped while one is already on its way, never when an item would be left
// waiting: items posted in bursts, one at a time after the threads fell asleep, and from many
// threads at once all run, each within a bounded wait.
TEST(WorkPool, EveryItemRunsWhetherTheThreadsAreBusyOrAsleep) {
  WorkPool pool(3);
  std::atomic<int> ran{0};
  auto wait_for = [&](int count) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (ran.load() < count && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return ran.load();
  };
  int expected = 0;
  for (int round = 0; round < 200; ++round) {
    // Alternately a burst, and single items with the pool asleep in between.
    int items = round % 2 == 0 ? 50 : 1;
    for (int i = 0; i < items; ++i) pool.post([&] { ran.fetch_add(1); });
    expected += items;
    ASSERT_EQ(wait_for(expected), expected) << "round " << round;
  }
  std::vector<std::thread> posters;
  for (int t = 0; t < 4; ++t) {
    posters.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        pool.post([&] { ran.fetch_add(1); });
        if (i % 97 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
      }
    });
  }
  for (auto& poster : posters) poster.join();
  expected += 4 * 2000;
  EXPECT_EQ(wait_for(expected), expected);
}

}  // namespace
}  // namespace omnilearn::core
