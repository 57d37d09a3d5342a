// Actors on a shared pool: any number of actors on a fixed set of threads, one letter at a time
// per actor, a busy actor yields its thread, and a handler that waits for another actor cannot
// deadlock the pool.

#include "runtime/actor_scheduler.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include "runtime/actor_system.hpp"
#include "runtime/system_messages.hpp"
#include "runtime/transport.hpp"
#include "tests/support/actor_probe.hpp"
#include "tests/support/wait.hpp"

namespace omnilearn::runtime {
namespace {

using namespace std::chrono_literals;
using testing::FunctionActor;

SystemOptions pool_of(std::size_t threads) {
  SystemOptions options;
  options.actor_threads = threads;
  return options;
}

std::unique_ptr<FunctionActor> echo_actor() {
  return std::make_unique<FunctionActor>([](FunctionActor& self, const Envelope& message) {
    if (auto ping = unpack_payload<Ping>(message.payload)) self.reply(message, Pong{ping->sequence});
  });
}

// Wake-ups are skipped while one is on its way, never when a turn would be left waiting: turns
// scheduled in bursts, singly to a pool that has fallen asleep, and from many threads all run.
TEST(ActorScheduler, EveryTurnRunsWhetherThePoolIsBusyOrAsleep) {
  ActorScheduler scheduler(2);
  std::atomic<int> ran{0};
  auto wait_for = [&](int count) {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (ran.load() < count && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(200us);
    }
    return ran.load();
  };
  int expected = 0;
  for (int round = 0; round < 200; ++round) {
    int turns = round % 2 == 0 ? 50 : 1;
    for (int i = 0; i < turns; ++i) scheduler.schedule([&] { ran.fetch_add(1); });
    expected += turns;
    ASSERT_EQ(wait_for(expected), expected) << "round " << round;
  }
  std::vector<std::thread> schedulers;
  for (int t = 0; t < 4; ++t) {
    schedulers.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        scheduler.schedule([&] { ran.fetch_add(1); });
        if (i % 97 == 0) std::this_thread::sleep_for(300us);
      }
    });
  }
  for (auto& thread : schedulers) thread.join();
  expected += 4 * 2000;
  EXPECT_EQ(wait_for(expected), expected);
  scheduler.stop();
}

TEST(ActorScheduler, TenThousandActorsRunOnAFixedPool) {
  constexpr int kActors = 10000;
  ActorSystem system(pool_of(4));
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kActors; ++i) system.spawn("echo-" + std::to_string(i), echo_actor());
  auto spawned = std::chrono::steady_clock::now();
  std::vector<std::future<AskResult>> answers;
  answers.reserve(kActors);
  for (int i = 0; i < kActors; ++i) {
    answers.push_back(system.ask(ActorAddress{"", "echo-" + std::to_string(i)},
                                 Ping{static_cast<std::uint64_t>(i)}, 30s));
  }
  for (int i = 0; i < kActors; ++i) {
    auto pong = answers[i].get().as<Pong>();
    ASSERT_TRUE(pong) << "actor " << i << " did not answer";
    EXPECT_EQ(pong->sequence, static_cast<std::uint64_t>(i));
  }
  auto answered = std::chrono::steady_clock::now();
  EXPECT_EQ(system.stats().actors, static_cast<std::uint64_t>(kActors));
  EXPECT_EQ(system.stats().actor_threads, 4u) << "actors must not cost threads";
  std::printf("10,000 actors: spawned in %.0f ms, each asked once in %.0f ms, on %llu threads\n",
              std::chrono::duration<double, std::milli>(spawned - start).count(),
              std::chrono::duration<double, std::milli>(answered - spawned).count(),
              static_cast<unsigned long long>(system.stats().actor_threads));
  system.shutdown();
  EXPECT_EQ(system.stats().actors, 0u) << "every actor ran on_stop and was unregistered";
}

TEST(ActorScheduler, NoActorEverRunsOnTwoThreadsAtOnce) {
  constexpr int kActors = 8;
  constexpr int kSenders = 8;
  constexpr std::uint64_t kPerSender = 3000;
  // Declared before the system, so they outlive every handler (the system stops first).
  std::atomic<int> overlaps{0};
  std::vector<std::unique_ptr<std::atomic<int>>> inside;
  std::vector<std::unique_ptr<std::atomic<std::uint64_t>>> handled;
  ActorSystem system(pool_of(4));
  for (int a = 0; a < kActors; ++a) {
    inside.push_back(std::make_unique<std::atomic<int>>(0));
    handled.push_back(std::make_unique<std::atomic<std::uint64_t>>(0));
    auto* in = inside.back().get();
    auto* count = handled.back().get();
    system.spawn("a" + std::to_string(a),
                 std::make_unique<FunctionActor>([&overlaps, in, count](FunctionActor&,
                                                                       const Envelope&) {
                   if (in->fetch_add(1) != 0) overlaps.fetch_add(1);
                   std::this_thread::yield();  // widen the window a second runner would hit
                   in->fetch_sub(1);
                   count->fetch_add(1);
                 }));
  }
  std::vector<std::jthread> senders;
  for (int s = 0; s < kSenders; ++s) {
    senders.emplace_back([&, s] {
      for (std::uint64_t i = 0; i < kPerSender; ++i) {
        system.tell(ActorAddress{"", "a" + std::to_string((s + i) % kActors)}, Ping{i});
      }
    });
  }
  senders.clear();
  const std::uint64_t total = kSenders * kPerSender;
  auto deadline = std::chrono::steady_clock::now() + 30s;
  auto sum = [&] {
    std::uint64_t n = 0;
    for (auto& c : handled) n += c->load();
    return n;
  };
  while (sum() < total && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(sum(), total) << "letters were lost or left unscheduled";
  EXPECT_EQ(overlaps.load(), 0) << "an actor ran on two threads at once";
}

TEST(ActorScheduler, ABusyActorYieldsItsThreadToOthers) {
  constexpr int kLetters = 1000;
  std::atomic<int> hog_handled{0};  // before the system: the hog still runs when the test ends
  std::promise<int> seen_by_other;
  ActorSystem system(pool_of(1));  // one thread: fairness comes from the turns alone
  system.spawn("hog", std::make_unique<FunctionActor>([&](FunctionActor&, const Envelope&) {
                 std::this_thread::sleep_for(100us);
                 hog_handled.fetch_add(1);
               }));
  system.spawn("other", std::make_unique<FunctionActor>([&](FunctionActor&, const Envelope&) {
                 seen_by_other.set_value(hog_handled.load());
               }));
  for (int i = 0; i < kLetters; ++i) system.tell(ActorAddress{"", "hog"}, Ping{1});
  system.tell(ActorAddress{"", "other"}, Ping{1});
  auto future = seen_by_other.get_future();
  ASSERT_EQ(future.wait_for(30s), std::future_status::ready);
  int when = future.get();
  EXPECT_LT(when, kLetters) << "the hog kept the only thread until its mailbox was empty";
  std::printf("the other actor ran after the hog's %d-th letter (batch %d)\n", when, 64);
}

TEST(ActorScheduler, WaitingForAnotherActorInsideAHandlerDoesNotDeadlockTheOnlyThread) {
  std::atomic<bool> target_stopped{false};
  ActorSystem system(pool_of(1));
  system.spawn("target", std::make_unique<FunctionActor>(
                             [](FunctionActor&, const Envelope&) {}, FunctionActor::Hook{},
                             [&](FunctionActor&) { target_stopped = true; }));
  system.spawn("stopper", std::make_unique<FunctionActor>([](FunctionActor& self,
                                                             const Envelope& message) {
                 // Blocks this turn until target's on_stop ran, which needs a thread: the pool
                 // starts a spare for the wait.
                 self.system().stop("target", "stopped by stopper");
                 self.reply(message, Pong{7});
               }));
  auto answer = system.ask(ActorAddress{"", "stopper"}, Ping{1}, 10s).get();
  ASSERT_TRUE(answer.as<Pong>()) << "the pool deadlocked: " << answer.error;
  EXPECT_TRUE(target_stopped.load());
  EXPECT_FALSE(system.has_actor("target"));
  // The spare leaves once the wait is over and it finds nothing to do.
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (system.stats().actor_threads > 1 && std::chrono::steady_clock::now() < deadline) {
    system.tell(ActorAddress{"", "stopper-absent"}, Ping{1});  // a wake-up for idle threads
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(system.stats().actor_threads, 1u) << "the spare thread never left";
}

TEST(ActorScheduler, AnActorStoppingItselfFinishesAfterItsLetter) {
  ActorSystem system(pool_of(2));
  auto probe = testing::spawn_probe(system, "watcher");
  system.spawn("quitter", std::make_unique<FunctionActor>([](FunctionActor& self, const Envelope& m) {
                 self.reply(m, Pong{1});
                 self.system().stop(self.self().actor, "done");  // its own handler: no wait
               }));
  probe.run([](testing::ProbeActor& p) {
    p.monitor(ActorAddress{"", "quitter"});  // registered before this returns (a local target)
    p.tell(p.self(), Pong{99});
  });
  ASSERT_TRUE(probe.queue->pop_as<Pong>(10s)) << "the probe never ran";
  auto answer = system.ask(ActorAddress{"", "quitter"}, Ping{1}, 10s).get();
  EXPECT_TRUE(answer.as<Pong>());
  auto down = probe.queue->pop_as<Down>(10s);
  ASSERT_TRUE(down);
  EXPECT_EQ(down->reason, "done");
}

// An actor that declares its handlers quick and non-blocking.
class InlineEcho : public Actor {
 public:
  InlineEcho(std::atomic<int>& on_io, std::atomic<int>& off_io, std::promise<bool>& stopped_on_pool)
      : on_io_(on_io), off_io_(off_io), stopped_on_pool_(stopped_on_pool) {}
  bool runs_inline() const override { return true; }
  void on_message(const Envelope& message) override {
    (Transport::on_io_thread() ? on_io_ : off_io_).fetch_add(1);
    auto ping = unpack_payload<Ping>(message.payload);
    if (!ping) return;
    if (ping->sequence == 13) throw std::runtime_error("thirteen");
    reply(message, Pong{ping->sequence});
  }
  void on_stop() override { stopped_on_pool_.set_value(ActorScheduler::on_pool_thread()); }

 private:
  std::atomic<int>& on_io_;
  std::atomic<int>& off_io_;
  std::promise<bool>& stopped_on_pool_;
};

TEST(ActorScheduler, AnInlineActorHandlesNetworkMessagesOnTheIoThreadButStopsOnThePool) {
  std::atomic<int> on_io{0}, off_io{0};
  std::promise<bool> stopped_on_pool;
  ActorSystem client;
  ActorSystem server(pool_of(2));
  auto endpoint = server.listen("tcp://127.0.0.1:0");
  server.spawn("inline", std::make_unique<InlineEcho>(on_io, off_io, stopped_on_pool));
  for (std::uint64_t i = 100; i < 150; ++i) {  // not 13: that one throws
    auto answer = client.ask(ActorAddress{endpoint, "inline"}, Ping{i}, 10s).get();
    ASSERT_TRUE(answer.as<Pong>()) << answer.error;
    EXPECT_EQ(answer.as<Pong>()->sequence, i);
  }
  EXPECT_EQ(on_io.load(), 50) << off_io.load() << " handled on other threads";
  // A local tell does not come from the I/O thread: it runs on the pool as usual.
  server.tell(ActorAddress{"", "inline"}, Ping{0});
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (off_io.load() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(2ms);
  }
  EXPECT_EQ(off_io.load(), 1);
  // A handler that throws on the I/O thread: the asker gets the error, the actor ends, and its
  // on_stop runs on a pool thread, never on the I/O thread.
  auto crash = client.ask(ActorAddress{endpoint, "inline"}, Ping{13}, 10s).get();
  ASSERT_TRUE(crash.ok());
  EXPECT_EQ(crash.reply.kind, MessageKind::kError);
  EXPECT_NE(crash.error.find("thirteen"), std::string::npos) << crash.error;
  auto stopped = stopped_on_pool.get_future();
  ASSERT_EQ(stopped.wait_for(10s), std::future_status::ready) << "on_stop never ran";
  EXPECT_TRUE(stopped.get());
  EXPECT_TRUE(testing::wait_until([&] { return !server.has_actor("inline"); }, 5s));
}

}  // namespace
}  // namespace omnilearn::runtime
