// The public header's futures without a cluster: states completed by hand (from this thread or
// another, as the client's I/O thread would), wait_any's registrations, empty handles, then()
// and when_all.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <omnilearn/omnilearn.hpp>

namespace omnilearn {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<detail::FutureState> pending() { return std::make_shared<detail::FutureState>(); }

template <class T>
void succeed(const std::shared_ptr<detail::FutureState>& state, const T& value) {
  state->set(detail::Outcome{ErrorCode::kOk, {}, detail::encode(value)});
}
void fail(const std::shared_ptr<detail::FutureState>& state, ErrorCode code, std::string why) {
  state->set(detail::Outcome{code, std::move(why), {}});
}

// Notifiers registered in all of `futures` together.
std::size_t registrations(const std::vector<Future<int>>& futures) {
  std::size_t total = 0;
  for (const auto& f : futures) total += f.state()->notifier_count();
  return total;
}

// The loop of a driver that takes results as they come: wait_any, use the ready one, remove it.
// Each round finds nothing ready first (a wait that times out), then gets one completed by
// another thread while it waits. Before, every wait left a notifier in every pending future,
// N^2/2 entries for N futures (50 million here); now none outlives its wait.
TEST(FutureTest, AWaitAnyLoopOverTenThousandFuturesLeavesNoRegistrations) {
  constexpr int kFutures = 10000;
  std::vector<std::shared_ptr<detail::FutureState>> states;
  std::vector<Future<int>> futures;
  for (int i = 0; i < kFutures; ++i) {
    states.push_back(pending());
    futures.emplace_back(states.back());
  }
  std::vector<int> values;  // the value each future carries, in the order they are left
  for (int i = 0; i < kFutures; ++i) values.push_back(i);
  std::size_t most = 0;
  for (int round = 0; round < kFutures; ++round) {
    EXPECT_FALSE(wait_any(futures, 0ms).has_value());
    // Summing 10,000 counters each round would be most of the test's time; a leak grows, so
    // every 10th round sees it.
    if (round % 10 == 0) most = std::max(most, registrations(futures));
    // The last pending one completes while wait_any waits on this thread (every 100th round
    // from another thread, the way replies arrive; the rest before the call, to keep the test
    // quick: a completion found at registration).
    const std::size_t target = futures.size() - 1;
    std::thread setter;
    if (round % 100 == 0) {
      setter = std::thread([&, state = futures[target].state(), value = values[target]] {
        succeed(state, value);
      });
    } else {
      succeed(futures[target].state(), values[target]);
    }
    auto ready = wait_any(futures, 60s);
    if (setter.joinable()) setter.join();
    ASSERT_TRUE(ready.has_value());
    ASSERT_EQ(*ready, target);
    EXPECT_EQ(futures[*ready].get(0ms), values[*ready]);
    futures.erase(futures.begin() + static_cast<std::ptrdiff_t>(*ready));
    values.erase(values.begin() + static_cast<std::ptrdiff_t>(*ready));
  }
  EXPECT_EQ(most, 0u) << "a wait_any left notifiers in futures it no longer waits on";
}

TEST(FutureTest, WaitAnyWakesForACompletionFromAnotherThread) {
  std::vector<Future<int>> futures{Future<int>(pending()), Future<int>(pending()),
                                   Future<int>(pending())};
  std::thread setter([state = futures[1].state()] {
    std::this_thread::sleep_for(20ms);
    succeed(state, 7);
  });
  auto ready = wait_any(futures, 60s);
  setter.join();
  ASSERT_TRUE(ready.has_value());
  EXPECT_EQ(*ready, 1u);
  EXPECT_EQ(registrations(futures), 0u);
}

TEST(FutureTest, EmptyHandlesThrowSayingSoInsteadOfDereferencingNull) {
  Future<int> empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_FALSE(empty.ready());
  auto expect_empty = [](auto&& use, const char* what) {
    try {
      use();
      ADD_FAILURE() << what << " on an empty handle must throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kEmptyHandle) << e.what();
      EXPECT_NE(std::string(e.what()).find("default-constructed"), std::string::npos) << e.what();
    }
  };
  expect_empty([&] { (void)empty.get(0ms); }, "get");
  expect_empty([&] { (void)empty.then([](int x) { return x; }); }, "then");
  std::vector<Future<int>> with_empty{Future<int>(pending()), empty};
  expect_empty([&] { (void)wait_any(with_empty, 0ms); }, "wait_any");
  expect_empty([&] { (void)wait_all(with_empty, 0ms); }, "wait_all");
  expect_empty([&] { (void)when_all(with_empty); }, "when_all");

  struct Counter {
    int add(int d) { return d; }
  };
  ActorHandle<Counter> handle;
  EXPECT_FALSE(handle.valid());
  expect_empty([&] { (void)handle.call(&Counter::add, 1); }, "call");
  expect_empty([&] { handle.tell(&Counter::add, 1); }, "tell");
  expect_empty([&] { handle.kill(); }, "kill");
  expect_empty([&] { (void)handle.monitor(); }, "monitor");
}

TEST(FutureTest, ThenRunsOnTheContinuationThreadAndChains) {
  auto source = pending();
  const auto caller = std::this_thread::get_id();
  std::atomic<bool> on_caller{true};
  Future<std::string> text =
      Future<int>(source)
          .then([&](int x) {
            on_caller = std::this_thread::get_id() == caller;
            return x * 2;
          })
          .then([](int doubled) { return "got " + std::to_string(doubled); });
  EXPECT_FALSE(text.ready());
  std::thread([source] { succeed(source, 21); }).join();
  EXPECT_EQ(text.get(60s), "got 42");
  EXPECT_FALSE(on_caller.load()) << "then() must not run its function on the caller's thread";

  // Already complete: runs all the same; void on either side.
  auto done = pending();
  succeed(done, msgpack::type::nil_t());
  std::atomic<int> calls{0};
  Future<void> after = Future<void>(done).then([&] { ++calls; });
  after.get(60s);
  EXPECT_EQ(calls.load(), 1);
}

TEST(FutureTest, ThenPassesErrorsOnAndTurnsExceptionsIntoErrors) {
  auto failed = pending();
  std::atomic<int> calls{0};
  auto skipped = Future<int>(failed).then([&](int x) {
    ++calls;
    return x;
  });
  fail(failed, ErrorCode::kNodeDied, "node w1 died");
  try {
    (void)skipped.get(60s);
    FAIL() << "the source's error must pass on";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNodeDied);
    EXPECT_EQ(e.message(), "node w1 died");
  }
  EXPECT_EQ(calls.load(), 0) << "then()'s function must not run for an error";

  auto source = pending();
  auto throwing = Future<int>(source).then([](int) -> int { throw std::invalid_argument("no"); });
  succeed(source, 1);
  try {
    (void)throwing.get(60s);
    FAIL() << "an exception in the function must reach get()";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRemoteException);
    EXPECT_NE(e.message().find("no"), std::string::npos) << e.what();
  }
}

TEST(FutureTest, AThenThatWaitsForAnotherThenIsRefusedInsteadOfHanging) {
  auto first = pending();
  auto second = pending();
  Future<int> later = Future<int>(second).then([](int x) { return x; });
  Future<int> outer = Future<int>(first).then([later](int) { return later.get(60s); });
  succeed(first, 1);
  try {
    (void)outer.get(60s);
    FAIL() << "waiting for another then() on the continuation thread must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRefused) << e.what();
  }
  succeed(second, 2);
  EXPECT_EQ(later.get(60s), 2);
}

TEST(FutureTest, WhenAllGathersInOrderAndFailsWithTheFirstError) {
  std::vector<std::shared_ptr<detail::FutureState>> states{pending(), pending(), pending()};
  std::vector<Future<std::string>> futures;
  for (auto& s : states) futures.emplace_back(s);
  auto all = when_all(futures);
  succeed(states[2], std::string("c"));
  std::thread([&] { succeed(states[0], std::string("a")); }).join();
  EXPECT_FALSE(all.ready());
  succeed(states[1], std::string("b"));
  EXPECT_EQ(all.get(60s), (std::vector<std::string>{"a", "b", "c"}));

  EXPECT_TRUE(when_all(std::vector<Future<int>>{}).get(0ms).empty());

  std::vector<std::shared_ptr<detail::FutureState>> more{pending(), pending()};
  auto failing = when_all(std::vector<Future<void>>{Future<void>(more[0]), Future<void>(more[1])});
  fail(more[1], ErrorCode::kTimeout, "no result");
  EXPECT_TRUE(failing.ready()) << "when_all must fail as soon as one fails";
  try {
    failing.get(0ms);
    FAIL() << "when_all must fail with the failed one's error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  }
}

}  // namespace
}  // namespace omnilearn
