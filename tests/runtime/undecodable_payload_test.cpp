// A handler that cannot decode a payload (Actor::decode) answers an ask at once with a
// "bad-request" error and counts the message with the transport's malformed frames, instead of
// dropping it and leaving the asker to wait out its timeout. The asks here allow 60 s: a test
// that passes got its answer long before.

#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "runtime/actor_system.hpp"
#include "runtime/system_messages.hpp"
#include "tests/support/actor_probe.hpp"
#include "tests/support/wait.hpp"

namespace omnilearn::runtime {
namespace {

using namespace std::chrono_literals;
using testing::FunctionActor;

// Not msgpack at all (0xc1 is the one byte msgpack never uses), and a valid value of the wrong
// shape (a string where a Ping's array is expected).
const std::string kGarbage("\xc1\xc1\xc1", 3);
const std::string kWrongShape = pack_payload(std::string("not a ping"));

class Undecodable : public ::testing::Test {
 protected:
  void SetUp() override {
    endpoint = server.listen("tcp://127.0.0.1:0");
    echo = ActorAddress{endpoint, "echo"};
    server.spawn("echo", std::make_unique<FunctionActor>([this](FunctionActor& self,
                                                                const Envelope& message) {
      if (auto ping = self.decode<Ping>(message)) {
        self.reply(message, Pong{ping->sequence});
      } else {
        ++refused;
      }
    }));
  }
  AskResult ask_with(const std::string& payload) {
    return client.ask_envelope(client.make_envelope(echo, MessageKind::kPing, payload, {}), 60s)
        .get();
  }
  ActorSystem server;
  ActorSystem client;
  std::string endpoint;
  ActorAddress echo;
  std::atomic<int> refused{0};
};

TEST_F(Undecodable, AnAskIsAnsweredAtOnceWithAnErrorAndCounted) {
  const auto before = server.transport_stats().dropped_malformed.load();
  for (const auto& payload : {kGarbage, kWrongShape}) {
    auto answer = ask_with(payload);
    ASSERT_TRUE(answer.ok()) << "no answer: " << answer.error;
    EXPECT_EQ(answer.reply.kind, MessageKind::kError);
    EXPECT_NE(answer.error.find("bad-request"), std::string::npos) << answer.error;
    EXPECT_NE(answer.error.find("could not decode"), std::string::npos) << answer.error;
    EXPECT_NE(answer.error.find("'echo'"), std::string::npos) << answer.error;
  }
  EXPECT_EQ(server.transport_stats().dropped_malformed.load(), before + 2);
  // The error answer leaves from inside decode(), before the handler counts the refusal: the
  // second count may land just after the answer arrives here.
  EXPECT_TRUE(testing::wait_until([&] { return refused.load() == 2; }, 20s)) << refused.load();
  EXPECT_EQ(refused.load(), 2);
  // A good one still works.
  auto good = client.ask(echo, Ping{7}, 60s).get();
  ASSERT_TRUE(good.ok()) << good.error;
  EXPECT_EQ(good.as<Pong>()->sequence, 7u);
}

TEST_F(Undecodable, ATellIsCountedAndNotAnswered) {
  const auto before = server.transport_stats().dropped_malformed.load();
  client.send(client.make_envelope(echo, MessageKind::kPing, kGarbage, {}));
  ASSERT_TRUE(testing::wait_until([&] { return refused.load() == 1; }, 20s));
  EXPECT_EQ(server.transport_stats().dropped_malformed.load(), before + 1);
  EXPECT_EQ(client.stats().dead_letters, 0u) << "no reply may go back for a tell";
}

TEST_F(Undecodable, TheSystemActorAnswersAMalformedPingToo) {
  auto answer = client
                    .ask_envelope(client.make_envelope(ActorAddress{endpoint, "$system"},
                                                       MessageKind::kPing, kGarbage, {}),
                                  60s)
                    .get();
  ASSERT_TRUE(answer.ok()) << "no answer: " << answer.error;
  EXPECT_NE(answer.error.find("bad-request"), std::string::npos) << answer.error;
}

}  // namespace
}  // namespace omnilearn::runtime
