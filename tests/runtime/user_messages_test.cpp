// Open message types: user structs registered by name travel between systems over real TCP,
// typed both ways; a kind nobody registered is still dropped and counted (decoding stays total).
// Also the two reply/routing rules: a reply counts only from the peer that was asked, and a
// routing id shaped like an endpoint is refused (it could otherwise make this process dial).

#include <gtest/gtest.h>

#include <map>
#include <zmq.hpp>

#include "runtime/actor_system.hpp"
#include "runtime/message_types.hpp"
#include "runtime/system_messages.hpp"
#include "tests/support/actor_probe.hpp"
#include "tests/support/wait.hpp"

namespace usertypes {

struct Reading {
  std::string sensor;
  std::vector<double> values;
  std::map<std::string, int> tags;
  MSGPACK_DEFINE(sensor, values, tags);
};

struct Verdict {
  bool accepted = false;
  double total = 0;
  MSGPACK_DEFINE(accepted, total);
};

}  // namespace usertypes

OMNILEARN_MESSAGE(usertypes::Reading, "test.usertypes.Reading");
OMNILEARN_MESSAGE(usertypes::Verdict, "test.usertypes.Verdict");

namespace omnilearn::runtime {
namespace {

using namespace std::chrono_literals;
using testing::FunctionActor;
using usertypes::Reading;
using usertypes::Verdict;

class UserMessages : public ::testing::Test {
 protected:
  void SetUp() override {
    endpoint_a = a.listen("tcp://127.0.0.1:0");
    endpoint_b = b.listen("tcp://127.0.0.1:0");
  }
  ActorSystem a;
  ActorSystem b;
  std::string endpoint_a;
  std::string endpoint_b;
};

TEST(UserKinds, AreDerivedFromTheNameAloneAndLiveAboveTheRuntimeRange) {
  EXPECT_EQ(user_kind_for("test.usertypes.Reading"), user_kind_for("test.usertypes.Reading"));
  EXPECT_NE(user_kind_for("test.usertypes.Reading"), user_kind_for("test.usertypes.Verdict"));
  EXPECT_GE(static_cast<unsigned>(kind_of<Reading>()), kFirstUserKind);
  EXPECT_EQ(kind_of<Reading>(), user_kind_for("test.usertypes.Reading"));
  EXPECT_EQ(kind_of<Ping>(), MessageKind::kPing);  // runtime kinds keep their numbers
  EXPECT_TRUE(is_known_kind(static_cast<std::uint16_t>(kind_of<Verdict>())));
  EXPECT_FALSE(is_known_kind(static_cast<std::uint16_t>(user_kind_for("never.registered"))));
  EXPECT_EQ(registered_name(static_cast<std::uint16_t>(kind_of<Verdict>())),
            "test.usertypes.Verdict");
}

TEST_F(UserMessages, TellAndAskCarryUserTypesBothWays) {
  auto inbox = testing::spawn_probe(b, "inbox");
  Reading reading{"t1", {1.0, 2.5, -3.25}, {{"room", 4}, {"floor", 2}}};
  a.tell(ActorAddress{endpoint_b, "inbox"}, reading);
  auto got = inbox.queue->pop_as<Reading>(5s);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->sensor, "t1");
  EXPECT_EQ(got->values, reading.values);
  EXPECT_EQ(got->tags, reading.tags);

  b.spawn("judge", std::make_unique<FunctionActor>([](FunctionActor& self, const Envelope& m) {
    if (auto r = message_as<Reading>(m)) {
      double total = 0;
      for (double v : r->values) total += v;
      self.reply(m, Verdict{total > 0, total});
    }
  }));
  auto answer = a.ask(ActorAddress{endpoint_b, "judge"}, reading, 5s).get();
  ASSERT_TRUE(answer.ok()) << answer.error;
  auto verdict = answer.as<Verdict>();
  ASSERT_TRUE(verdict);
  EXPECT_TRUE(verdict->accepted);
  EXPECT_DOUBLE_EQ(verdict->total, 0.25);
  EXPECT_FALSE(answer.as<Reading>()) << "a reply is decoded only as its own type";
}

TEST_F(UserMessages, AKindNobodyRegisteredIsDroppedAndCounted) {
  auto inbox = testing::spawn_probe(b, "inbox");
  auto before = b.transport_stats().dropped_unknown_kind.load();
  a.send(a.make_envelope(ActorAddress{endpoint_b, "inbox"}, user_kind_for("never.registered"),
                         pack_payload(Verdict{true, 1}), {}));
  a.tell(ActorAddress{endpoint_b, "inbox"}, Verdict{true, 2});  // sent after: arrives after
  auto got = inbox.queue->pop_as<Verdict>(5s);
  ASSERT_TRUE(got);
  EXPECT_DOUBLE_EQ(got->total, 2);
  EXPECT_EQ(b.transport_stats().dropped_unknown_kind.load(), before + 1);
  EXPECT_FALSE(inbox.queue->pop(100ms)) << "nothing else was delivered";
}

TEST_F(UserMessages, AMalformedPayloadOfARegisteredKindIsNoValueNotACrash) {
  auto inbox = testing::spawn_probe(b, "inbox");
  a.send(a.make_envelope(ActorAddress{endpoint_b, "inbox"}, kind_of<Reading>(),
                         pack_payload(std::string("not a reading")), {}));
  auto envelope = inbox.queue->pop(5s);
  ASSERT_TRUE(envelope);
  EXPECT_FALSE(message_as<Reading>(*envelope));
}

TEST_F(UserMessages, AReplyCountsOnlyFromThePeerThatWasAsked) {
  // b's "silent" actor never answers; c forges replies for every correlation id a may be using.
  b.spawn("silent", std::make_unique<FunctionActor>([](FunctionActor&, const Envelope&) {}));
  ActorSystem c;
  auto pending = a.ask(ActorAddress{endpoint_b, "silent"}, Ping{7}, 1500ms);
  for (std::uint64_t correlation = 1; correlation <= 64; ++correlation) {
    Envelope forged = c.make_envelope(ActorAddress{endpoint_a, "$ask"}, MessageKind::kPong,
                                      pack_payload(Pong{7}), {});
    forged.correlation = correlation;
    forged.flags = Envelope::kReply;
    c.send(std::move(forged));
  }
  auto answer = pending.get();
  EXPECT_EQ(answer.status, AskResult::Status::kTimeout)
      << "a reply from a system that was not asked must not complete the ask";
  EXPECT_TRUE(testing::wait_until([&] { return a.stats().mismatched_replies > 0; }, 5s));
}

TEST_F(UserMessages, ARoutingIdShapedLikeAnEndpointIsRefused) {
  zmq::context_t context;
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::routing_id, "tcp://127.0.0.1:9");
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(endpoint_a);
  Envelope ping = b.make_envelope(ActorAddress{"", "$system"}, MessageKind::kPing,
                                  pack_payload(Ping{1}), {});
  ping.correlation = 1;
  auto frames = encode_envelope(ping);
  auto before = a.transport_stats().dropped_malformed.load();
  dealer.send(zmq::buffer(frames[0]), zmq::send_flags::none);
  EXPECT_TRUE(testing::wait_until(
      [&] { return a.transport_stats().dropped_malformed.load() == before + 1; }, 5s));
  // No answer comes back: the ping was never dispatched.
  zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
  EXPECT_EQ(zmq::poll(&item, 1, std::chrono::milliseconds(300)), 0);
}

}  // namespace
}  // namespace omnilearn::runtime
