// Mailbox order: many producers, one consumer, FIFO per sender — on the Mailbox itself and
// through ActorSystem::tell from many threads.

#include "runtime/mailbox.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
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

TEST(Mailbox, FifoPerSenderUnderManyProducers) {
  constexpr int kProducers = 8;
  constexpr std::uint64_t kPerProducer = 20000;
  Mailbox mailbox;
  std::atomic<int> ready{0};
  std::vector<std::jthread> producers;  // joined even when an assertion returns early
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      ready.fetch_add(1);
      while (ready.load() < kProducers) std::this_thread::yield();  // start together
      for (std::uint64_t i = 1; i <= kPerProducer; ++i)
        ASSERT_TRUE(mailbox.push(letter_from(p, i)));
    });
  }
  std::map<std::string, std::uint64_t> last;
  std::uint64_t received = 0;
  bool interleaved = false;
  std::string previous;
  while (received < kProducers * kPerProducer) {
    auto letter = mailbox.pop_for(10s);
    ASSERT_TRUE(letter) << "mailbox stalled after " << received << " letters";
    ASSERT_TRUE(letter->envelope);
    const auto& from = letter->envelope->from.actor;
    auto& seen = last[from];
    ASSERT_EQ(letter->envelope->correlation, seen + 1) << "out of order from " << from;
    seen = letter->envelope->correlation;
    interleaved = interleaved || (!previous.empty() && previous != from);
    previous = from;
    ++received;
  }
  producers.clear();
  EXPECT_EQ(last.size(), static_cast<std::size_t>(kProducers));
  EXPECT_TRUE(interleaved) << "the producers never ran concurrently; the test proved nothing";
  EXPECT_EQ(mailbox.size(), 0u);
}

TEST(Mailbox, CloseDeliversWhatIsQueuedThenEnds) {
  Mailbox mailbox;
  ASSERT_TRUE(mailbox.push(letter_from(0, 1)));
  ASSERT_TRUE(mailbox.push(letter_from(0, 2)));
  mailbox.close();
  EXPECT_TRUE(mailbox.closed());
  auto rejected = letter_from(0, 3);
  EXPECT_FALSE(mailbox.push(std::move(rejected)));
  ASSERT_TRUE(rejected.envelope) << "a refused letter is left untouched";
  EXPECT_EQ(rejected.envelope->correlation, 3u);
  EXPECT_EQ(mailbox.pop()->envelope->correlation, 1u);
  EXPECT_EQ(mailbox.pop()->envelope->correlation, 2u);
  EXPECT_FALSE(mailbox.pop());
  EXPECT_FALSE(mailbox.pop_for(1ms));
}

TEST(Mailbox, PopForTimesOutAndCloseWakesABlockedOwner) {
  Mailbox mailbox;
  auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(mailbox.pop_for(30ms));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 30ms);
  std::jthread closer([&] {
    std::this_thread::sleep_for(50ms);
    mailbox.close();
  });
  EXPECT_FALSE(mailbox.pop()) << "pop() must return once the mailbox is closed";
}

TEST(Mailbox, TasksAndMessagesShareOneOrder) {
  Mailbox mailbox;
  std::vector<int> order;
  mailbox.push(letter_from(0, 1));
  mailbox.push(Letter{std::nullopt, [&] { order.push_back(2); }, {}});
  mailbox.push(letter_from(0, 3));
  for (int i = 0; i < 3; ++i) {
    auto letter = mailbox.pop();
    if (letter->envelope) {
      order.push_back(static_cast<int>(letter->envelope->correlation));
    } else {
      letter->task();
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
