// Mailbox order: many producers, one consumer, FIFO per sender — on the Mailbox itself and
// through ActorSystem::tell from many threads.

#include "runtime/mailbox.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/actor_system.hpp"
#include "runtime/system_messages.hpp"
#include "tests/support/actor_probe.hpp"

namespace omnilearn::runtime {
namespace {

using namespace std::chrono_literals;

Letter letter_from(int producer, std::uint64_t sequence) {
  Envelope e;
  e.kind = MessageKind::kPing;
  e.from.actor = "p" + std::to_string(producer);
  e.correlation = sequence;
  return Letter{std::move(e), {}, {}};
}

// Models the scheduler exactly: a producer whose push claims the mailbox hands a token to the
// run queue; one runner drains the mailbox per token until take() releases the claim. FIFO per
// sender holds and nothing is left behind unscheduled. (That no two threads run one actor is
// checked where it matters, on real actors: actor_scheduler_test.)
TEST(Mailbox, FifoPerSenderUnderManyProducersAndNoLetterLeftUnscheduled) {
  constexpr int kProducers = 8;
  constexpr std::uint64_t kPerProducer = 20000;
  Mailbox mailbox;
  // A new mailbox is claimed by its creator: release it first, as an actor's first turn would.
  Letter none;
  ASSERT_EQ(mailbox.take(none), Mailbox::Take::kReleased);

  std::mutex run_mutex;
  std::condition_variable run_ready;
  int tokens = 0;                 // guarded by run_mutex
  std::atomic<int> ready{0};
  std::vector<std::jthread> producers;  // joined even when an assertion returns early
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      ready.fetch_add(1);
      while (ready.load() < kProducers) std::this_thread::yield();  // start together
      for (std::uint64_t i = 1; i <= kPerProducer; ++i) {
        auto pushed = mailbox.push(letter_from(p, i));
        ASSERT_NE(pushed, Mailbox::Push::kRejected);
        if (pushed == Mailbox::Push::kClaimed) {
          {
            std::lock_guard lock(run_mutex);
            ++tokens;
          }
          run_ready.notify_one();
        }
      }
    });
  }
  std::map<std::string, std::uint64_t> last;
  std::uint64_t received = 0;
  bool interleaved = false;
  std::string previous;
  while (received < kProducers * kPerProducer) {
    {
      std::unique_lock lock(run_mutex);
      ASSERT_TRUE(run_ready.wait_for(lock, 10s, [&] { return tokens > 0; }))
          << "a letter was left unscheduled after " << received << " letters";
      --tokens;
    }
    Letter letter;
    while (mailbox.take(letter) == Mailbox::Take::kLetter) {
      ASSERT_TRUE(letter.envelope);
      const auto& from = letter.envelope->from.actor;
      auto& seen = last[from];
      ASSERT_EQ(letter.envelope->correlation, seen + 1) << "out of order from " << from;
      seen = letter.envelope->correlation;
      interleaved = interleaved || (!previous.empty() && previous != from);
      previous = from;
      ++received;
    }
  }
  producers.clear();
  EXPECT_EQ(last.size(), static_cast<std::size_t>(kProducers));
  EXPECT_TRUE(interleaved) << "the producers never ran concurrently; the test proved nothing";
  EXPECT_EQ(mailbox.size(), 0u);
  std::lock_guard lock(run_mutex);
  EXPECT_EQ(tokens, 0) << "a claim was handed out for an empty mailbox";
}

TEST(Mailbox, CloseDeliversWhatIsQueuedThenFinishes) {
  Mailbox mailbox;  // claimed by its creator
  ASSERT_EQ(mailbox.push(letter_from(0, 1)), Mailbox::Push::kQueued);
  ASSERT_EQ(mailbox.push(letter_from(0, 2)), Mailbox::Push::kQueued);
  EXPECT_FALSE(mailbox.close()) << "a claimed mailbox needs no new turn to finish";
  EXPECT_TRUE(mailbox.closed());
  auto rejected = letter_from(0, 3);
  EXPECT_EQ(mailbox.push(std::move(rejected)), Mailbox::Push::kRejected);
  ASSERT_TRUE(rejected.envelope) << "a refused letter is left untouched";
  EXPECT_EQ(rejected.envelope->correlation, 3u);
  Letter letter;
  ASSERT_EQ(mailbox.take(letter), Mailbox::Take::kLetter);
  EXPECT_EQ(letter.envelope->correlation, 1u);
  ASSERT_EQ(mailbox.take(letter), Mailbox::Take::kLetter);
  EXPECT_EQ(letter.envelope->correlation, 2u);
  EXPECT_EQ(mailbox.take(letter), Mailbox::Take::kFinished);
  EXPECT_EQ(mailbox.take(letter), Mailbox::Take::kFinished);
}

TEST(Mailbox, ClosingAnIdleMailboxClaimsItSoTheActorCanFinish) {
  Mailbox mailbox;
  Letter letter;
  ASSERT_EQ(mailbox.take(letter), Mailbox::Take::kReleased);
  EXPECT_EQ(mailbox.push(letter_from(0, 1)), Mailbox::Push::kClaimed);
  EXPECT_EQ(mailbox.push(letter_from(0, 2)), Mailbox::Push::kQueued);
  ASSERT_EQ(mailbox.take(letter), Mailbox::Take::kLetter);
  ASSERT_EQ(mailbox.take(letter), Mailbox::Take::kLetter);
  ASSERT_EQ(mailbox.take(letter), Mailbox::Take::kReleased);
  EXPECT_TRUE(mailbox.close()) << "an idle mailbox: the closer must schedule the last turn";
  EXPECT_FALSE(mailbox.close()) << "closing twice claims once";
  EXPECT_EQ(mailbox.take(letter), Mailbox::Take::kFinished);
}

TEST(Mailbox, ReleaseIfEmptyLetsGoOnlyOfAnEmptyOpenMailbox) {
  Mailbox mailbox;  // claimed by its creator
  ASSERT_EQ(mailbox.push(letter_from(0, 1)), Mailbox::Push::kQueued);
  EXPECT_FALSE(mailbox.release_if_empty()) << "a letter waits: the claim stays";
  Letter letter;
  ASSERT_EQ(mailbox.take(letter), Mailbox::Take::kLetter);
  EXPECT_TRUE(mailbox.release_if_empty());
  EXPECT_EQ(mailbox.push(letter_from(0, 2)), Mailbox::Push::kClaimed) << "it was released";
  ASSERT_EQ(mailbox.take(letter), Mailbox::Take::kLetter);
  EXPECT_FALSE(mailbox.close()) << "still claimed";
  EXPECT_FALSE(mailbox.release_if_empty()) << "closed: the actor must still finish";
  EXPECT_EQ(mailbox.take(letter), Mailbox::Take::kFinished);
}

// The claimer takes queued letters a burst at a time: letters pushed while it works through a
// burst come after it, the claim is kept while any are left, size() counts both, and closing
// mid-burst still delivers the rest of it.
TEST(Mailbox, LettersPushedDuringABurstComeAfterIt) {
  Mailbox mailbox;  // claimed by its creator
  for (std::uint64_t i = 1; i <= 3; ++i) mailbox.push(letter_from(0, i));
  Letter letter;
  ASSERT_EQ(mailbox.take(letter), Mailbox::Take::kLetter);
  EXPECT_EQ(letter.envelope->correlation, 1u);
  EXPECT_EQ(mailbox.push(letter_from(1, 4)), Mailbox::Push::kQueued);
  EXPECT_EQ(mailbox.push(letter_from(1, 5)), Mailbox::Push::kQueued);
  EXPECT_EQ(mailbox.size(), 4u);
  EXPECT_FALSE(mailbox.release_if_empty()) << "letters of the burst are left";
  for (std::uint64_t want = 2; want <= 5; ++want) {
    ASSERT_EQ(mailbox.take(letter), Mailbox::Take::kLetter);
    EXPECT_EQ(letter.envelope->correlation, want);
  }
  EXPECT_EQ(mailbox.size(), 0u);
  EXPECT_EQ(mailbox.take(letter), Mailbox::Take::kReleased);
  EXPECT_EQ(mailbox.push(letter_from(0, 6)), Mailbox::Push::kClaimed);
  mailbox.push(letter_from(0, 7));
  ASSERT_EQ(mailbox.take(letter), Mailbox::Take::kLetter);
  EXPECT_EQ(letter.envelope->correlation, 6u);
  EXPECT_FALSE(mailbox.close());
  ASSERT_EQ(mailbox.take(letter), Mailbox::Take::kLetter) << "closing mid-burst loses nothing";
  EXPECT_EQ(letter.envelope->correlation, 7u);
  EXPECT_EQ(mailbox.take(letter), Mailbox::Take::kFinished);
}

TEST(Mailbox, TasksAndMessagesShareOneOrder) {
  Mailbox mailbox;
  std::vector<int> order;
  mailbox.push(letter_from(0, 1));
  mailbox.push(Letter{std::nullopt, [&] { order.push_back(2); }, {}});
  mailbox.push(letter_from(0, 3));
  Letter letter;
  while (mailbox.take(letter) == Mailbox::Take::kLetter) {
    if (letter.envelope) {
      order.push_back(static_cast<int>(letter.envelope->correlation));
    } else {
      letter.task();
    }
  }
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST(ActorMailbox, TellFromManyThreadsKeepsFifoPerSender) {
  constexpr int kSenders = 6;
  constexpr std::uint64_t kPerSender = 5000;
  ActorSystem system;
  auto probe = testing::spawn_probe(system, "sink");
  std::vector<std::jthread> senders;
  for (int s = 0; s < kSenders; ++s) {
    senders.emplace_back([&, s] {
      ActorAddress from{"", "sender-" + std::to_string(s)};
      for (std::uint64_t i = 1; i <= kPerSender; ++i) system.tell(probe.address, Ping{i}, from);
    });
  }
  std::map<std::string, std::uint64_t> last;
  for (std::uint64_t n = 0; n < kSenders * kPerSender; ++n) {
    auto envelope = probe.queue->pop(10s);
    ASSERT_TRUE(envelope) << "only " << n << " messages arrived";
    auto ping = unpack_payload<Ping>(envelope->payload);
    ASSERT_TRUE(ping);
    auto& seen = last[envelope->from.actor];
    ASSERT_EQ(ping->sequence, seen + 1) << "out of order from " << envelope->from.actor;
    seen = ping->sequence;
    EXPECT_EQ(envelope->from.system, system.id());
  }
  senders.clear();
  EXPECT_EQ(last.size(), static_cast<std::size_t>(kSenders));
  EXPECT_EQ(system.stats().dead_letters, 0u);
}

}  // namespace
}  // namespace omnilearn::runtime
