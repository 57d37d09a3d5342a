// Ask: a reply, a timeout (future and actor-callback forms), a fast failure for a missing actor,
// and every pending ask answered when the system shuts down.

#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <thread>

#include "runtime/actor_scheduler.hpp"
#include "runtime/actor_system.hpp"
#include "runtime/system_messages.hpp"
#include "tests/support/actor_probe.hpp"
#include "tests/support/wait.hpp"

namespace omnilearn::runtime {
namespace {

using namespace std::chrono_literals;
using testing::FunctionActor;
using Clock = std::chrono::steady_clock;

// Replies Pong{n} to Ping{n}; ignores everything else.
std::unique_ptr<Actor> echo_actor() {
  return std::make_unique<FunctionActor>([](FunctionActor& self, const Envelope& message) {
    if (auto ping = unpack_payload<Ping>(message.payload); ping && message.kind == Ping::kKind) {
      self.reply(message, Pong{ping->sequence});
    }
  });
}

std::unique_ptr<Actor> silent_actor() {
  return std::make_unique<FunctionActor>([](FunctionActor&, const Envelope&) {});
}

TEST(Ask, FutureGetsTheReply) {
  ActorSystem system;
  auto echo = system.spawn("echo", echo_actor());
  for (std::uint64_t i = 1; i <= 100; ++i) {
    auto result = system.ask(echo, Ping{i}, 5s).get();
    ASSERT_TRUE(result.ok()) << result.error;
    auto pong = result.as<Pong>();
    ASSERT_TRUE(pong);
    EXPECT_EQ(pong->sequence, i);
    EXPECT_EQ(result.reply.from, echo);
    EXPECT_FALSE(result.as<Ping>()) << "as<M> checks the kind";
  }
  EXPECT_EQ(system.stats().pending_asks, 0u);
}

TEST(Ask, ConcurrentAsksGetTheirOwnReplies) {
  ActorSystem system;
  auto echo = system.spawn("echo", echo_actor());
  std::vector<std::jthread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (std::uint64_t i = 0; i < 500; ++i) {
        std::uint64_t sequence = t * 100000 + i;
        auto pong = system.ask(echo, Ping{sequence}, 5s).get().as<Pong>();
        if (!pong || pong->sequence != sequence) mismatches.fetch_add(1);
      }
    });
  }
  threads.clear();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(Ask, FutureTimesOutWhenNoReplyComes) {
  ActorSystem system;
  auto silent = system.spawn("silent", silent_actor());
  auto start = Clock::now();
  auto future = system.ask(silent, Ping{1}, 150ms);
  ASSERT_EQ(future.wait_for(5s), std::future_status::ready) << "the future must be satisfied";
  auto elapsed = Clock::now() - start;
  auto result = future.get();
  EXPECT_EQ(result.status, AskResult::Status::kTimeout);
  EXPECT_FALSE(result.ok());
  EXPECT_NE(result.error.find("150 ms"), std::string::npos) << result.error;
  EXPECT_GE(elapsed, 150ms);
  EXPECT_LT(elapsed, 2s);
  EXPECT_EQ(system.stats().pending_asks, 0u);
}

// Every ask arms a timeout; an answered ask cancels it. Cancelled timers must not pile up until
// their deadlines (a long-lived head answering thousands of asks a second with long timeouts).
TEST(Ask, AnsweredAsksDoNotLeaveTheirTimersBehind) {
  ActorSystem system;
  auto echo = system.spawn("echo", echo_actor());
  constexpr std::uint64_t kAsks = 20000;
  std::uint64_t peak = 0;
  for (std::uint64_t i = 0; i < kAsks; ++i) {
    auto result = system.ask(echo, Ping{i}, std::chrono::minutes(10)).get();
    ASSERT_TRUE(result.as<Pong>());
    peak = std::max(peak, system.stats().timer_entries);
  }
  EXPECT_EQ(system.stats().pending_asks, 0u);
  EXPECT_LT(peak, 2048u) << "cancelled timers stayed in the heap";
}

TEST(Ask, ALateReplyAfterTheTimeoutIsIgnored) {
  ActorSystem system;
  // Replies only after 300 ms, long after the asker gave up.
  auto slow = system.spawn(
      "slow", std::make_unique<FunctionActor>([](FunctionActor& self, const Envelope& message) {
        std::this_thread::sleep_for(300ms);
        self.reply(message, Pong{7});
      }));
  auto result = system.ask(slow, Ping{7}, 50ms).get();
  EXPECT_EQ(result.status, AskResult::Status::kTimeout);
  std::this_thread::sleep_for(400ms);  // the late reply arrives and must be dropped quietly
  EXPECT_EQ(system.stats().pending_asks, 0u);
  auto again = system.ask(slow, Ping{8}, 5s).get();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.as<Pong>()->sequence, 7u);  // the actor always answers 7
}

struct CallbackOutcome {
  AskResult result;
  // Run in one of the actor's turns: on an actor thread, never the I/O or the timer thread.
  bool callback_in_a_turn = false;
  Clock::duration elapsed{};
};

// An actor that asks `target` once from on_start and reports how the callback ran.
std::future<CallbackOutcome> ask_from_actor(ActorSystem& system, const std::string& name,
                                            ActorAddress target,
                                            std::chrono::milliseconds timeout) {
  auto promise = std::make_shared<std::promise<CallbackOutcome>>();
  auto future = promise->get_future();
  system.spawn(
      name,
      std::make_unique<FunctionActor>(
          [](FunctionActor&, const Envelope&) {},
          [promise, target, timeout](FunctionActor& self) {
            auto start = Clock::now();
            self.ask(target, Ping{42}, timeout, [promise, start](AskResult result) {
              promise->set_value(CallbackOutcome{std::move(result),
                                                 ActorScheduler::on_pool_thread(),
                                                 Clock::now() - start});
            });
          }));
  return future;
}

TEST(Ask, ActorCallbackGetsTheReplyInTheActorsTurn) {
  ActorSystem system;
  auto echo = system.spawn("echo", echo_actor());
  auto outcome = ask_from_actor(system, "client", echo, 5s);
  ASSERT_EQ(outcome.wait_for(5s), std::future_status::ready);
  auto got = outcome.get();
  ASSERT_TRUE(got.result.ok()) << got.result.error;
  EXPECT_EQ(got.result.as<Pong>()->sequence, 42u);
  EXPECT_TRUE(got.callback_in_a_turn);
}

TEST(Ask, ActorCallbackTimesOutInTheActorsTurn) {
  ActorSystem system;
  auto silent = system.spawn("silent", silent_actor());
  auto outcome = ask_from_actor(system, "client", silent, 120ms);
  ASSERT_EQ(outcome.wait_for(5s), std::future_status::ready) << "the callback never ran";
  auto got = outcome.get();
  EXPECT_EQ(got.result.status, AskResult::Status::kTimeout);
  EXPECT_TRUE(got.callback_in_a_turn);
  EXPECT_GE(got.elapsed, 120ms);
  EXPECT_LT(got.elapsed, 2s);
}

TEST(Ask, MissingActorFailsFastWithNoSuchActor) {
  ActorSystem system;
  auto start = Clock::now();
  auto result = system.ask(ActorAddress{system.id(), "nobody"}, Ping{1}, 10s).get();
  EXPECT_LT(Clock::now() - start, 1s) << "must not wait for the timeout";
  // The runtime answers with an ErrorReply: status ok, kind kError, error says why.
  EXPECT_EQ(result.reply.kind, MessageKind::kError);
  EXPECT_NE(result.error.find("no-such-actor"), std::string::npos) << result.error;
  EXPECT_NE(result.error.find("nobody"), std::string::npos) << result.error;
  EXPECT_FALSE(result.as<Pong>());
  auto error = result.as<ErrorReply>();
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code, "no-such-actor");
  EXPECT_EQ(system.stats().dead_letters, 1u);

  // Same from an actor's callback, and with an empty system id (= this system).
  auto outcome = ask_from_actor(system, "client", ActorAddress{"", "nobody"}, 10s);
  ASSERT_EQ(outcome.wait_for(2s), std::future_status::ready);
  auto got = outcome.get();
  EXPECT_NE(got.result.error.find("no-such-actor"), std::string::npos) << got.result.error;
}

TEST(Ask, AskingAStoppedActorFailsFast) {
  ActorSystem system;
  auto echo = system.spawn("echo", echo_actor());
  system.stop("echo");
  EXPECT_FALSE(system.has_actor("echo"));
  auto start = Clock::now();
  auto result = system.ask(echo, Ping{1}, 10s).get();
  EXPECT_LT(Clock::now() - start, 1s);
  EXPECT_NE(result.error.find("no-such-actor"), std::string::npos) << result.error;
}

TEST(Ask, HandlerThatThrowsAnswersWithAnErrorAndStopsTheActor) {
  ActorSystem system;
  auto faulty =
      system.spawn("faulty", std::make_unique<FunctionActor>([](FunctionActor&, const Envelope&) {
                     throw std::runtime_error("boom");
                   }));
  auto result = system.ask(faulty, Ping{1}, 5s).get();
  auto error = result.as<ErrorReply>();
  ASSERT_TRUE(error) << result.error;
  EXPECT_EQ(error->code, "internal");
  EXPECT_EQ(error->message, "boom");
  EXPECT_TRUE(testing::wait_until([&] { return !system.has_actor("faulty"); }, 2s));
}

TEST(Ask, UnknownSystemIdIsUnreachableAtOnce) {
  ActorSystem system;
  auto start = Clock::now();
  auto result = system.ask(ActorAddress{"s-ffffffffffffffff", "x"}, Ping{1}, 10s).get();
  EXPECT_LT(Clock::now() - start, 1s);
  EXPECT_EQ(result.status, AskResult::Status::kUnreachable);
  EXPECT_NE(result.error.find("no route"), std::string::npos) << result.error;
}

TEST(Ask, ShutdownAnswersEveryPendingAsk) {
  auto system = std::make_unique<ActorSystem>();
  auto silent = system->spawn("silent", silent_actor());
  std::vector<std::future<AskResult>> futures;
  for (int i = 0; i < 10; ++i) futures.push_back(system->ask(silent, Ping{1}, 60s));
  EXPECT_EQ(system->stats().pending_asks, 10u);
  system->shutdown();
  for (auto& future : futures) {
    ASSERT_EQ(future.wait_for(1s), std::future_status::ready);
    auto result = future.get();
    EXPECT_EQ(result.status, AskResult::Status::kError);
    EXPECT_NE(result.error.find("shut down"), std::string::npos);
  }
  system.reset();
}

}  // namespace
}  // namespace omnilearn::runtime
