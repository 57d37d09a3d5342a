// NodeRegistry and NodeAgent as actors, in one process: a head system and worker systems talking
// over real TCP on 127.0.0.1. Subscribers see joined / suspect / dead / left, a dead node's
// system is declared down (monitors get Down), and bad requests get an ErrorReply.

#include "cluster/node_registry.hpp"

#include <gtest/gtest.h>

#include "cluster/node_agent.hpp"
#include "runtime/system_messages.hpp"
#include "tests/support/actor_probe.hpp"
#include "tests/support/wait.hpp"

namespace omnilearn::actors {
namespace {

using namespace std::chrono_literals;
using runtime::ActorAddress;

class Registry : public ::testing::Test {
 protected:
  void SetUp() override {
    MembershipConfig config;
    config.heartbeat_interval = 50ms;
    config.heartbeat_timeout = 1000ms;  // suspect after 100 ms, dead after 1 s
    head_endpoint = head.listen("tcp://127.0.0.1:0");
    head.spawn<NodeRegistry>(kRegistryActor, config);
    events = testing::spawn_probe(head, "subscriber");
    auto subscribed = std::make_shared<std::promise<bool>>();
    events.run([subscribed](testing::ProbeActor& self) {
      self.ask(ActorAddress{"", kRegistryActor}, SubscribeNodes{}, 5s,
               [subscribed](runtime::AskResult result) {
                 subscribed->set_value(result.as<StatusReply>().has_value());
               });
    });
    auto done = subscribed->get_future();
    ASSERT_EQ(done.wait_for(10s), std::future_status::ready);
    ASSERT_TRUE(done.get()) << "SubscribeNodes was not answered with a snapshot";
  }

  // The next NodeEvent for `name` (other events stay queued).
  std::optional<NodeEvent> next_event(const std::string& name, std::chrono::milliseconds timeout) {
    auto envelope = events.queue->pop_if(
        [&](const runtime::Envelope& e) {
          auto event = runtime::unpack_payload<NodeEvent>(e.payload);
          return e.kind == NodeEvent::kKind && event && event->node.name == name &&
                 event->event != "heartbeat";
        },
        timeout);
    if (!envelope) return std::nullopt;
    return runtime::unpack_payload<NodeEvent>(envelope->payload);
  }

  StatusReply status(bool include_dead = true) {
    auto reply = head.ask(ActorAddress{"", kRegistryActor}, StatusRequest{include_dead}, 5s).get();
    auto status = reply.as<StatusReply>();
    EXPECT_TRUE(status) << reply.error;
    return status.value_or(StatusReply{});
  }

  runtime::ActorSystem head;
  std::string head_endpoint;
  testing::Probe events;
};

AgentOptions agent_options(const std::string& endpoint, const std::string& name) {
  AgentOptions options;
  options.head_endpoint = endpoint;
  options.name = name;
  options.resources.cpus = 3;
  options.register_timeout = 500ms;
  options.leave_timeout = 500ms;
  return options;
}

TEST_F(Registry, AnAgentJoinsHeartbeatsAndLeaves) {
  auto worker = std::make_unique<runtime::ActorSystem>();
  worker->spawn<NodeAgent>(kAgentActor, agent_options(head_endpoint, "w1"));
  auto joined = next_event("w1", 5s);
  ASSERT_TRUE(joined);
  EXPECT_EQ(joined->event, "joined");
  EXPECT_EQ(joined->node.incarnation, 1u);
  EXPECT_EQ(joined->node.system, worker->id());
  EXPECT_EQ(joined->node.resources.cpus, 3);

  // Heartbeats keep it alive well past the timeout.
  std::this_thread::sleep_for(1500ms);
  auto now = status();
  ASSERT_EQ(now.nodes.size(), 1u);
  EXPECT_EQ(now.nodes[0].state, "alive");
  EXPECT_LT(now.nodes[0].last_heartbeat_ms, 1000);
  EXPECT_GT(now.nodes[0].usage.rss_bytes, 0) << "heartbeats carry usage";
  EXPECT_FALSE(next_event("w1", 0ms)) << "no suspect/dead while heartbeating";

  worker.reset();  // a graceful stop: the agent says goodbye from on_stop
  auto left = next_event("w1", 5s);
  ASSERT_TRUE(left);
  EXPECT_EQ(left->event, "left");
  EXPECT_EQ(status().nodes.at(0).state, "left");
  EXPECT_TRUE(status(/*include_dead=*/false).nodes.empty());
}

TEST_F(Registry, ASilentNodeIsSuspectThenDeadAndItsSystemIsDeclaredDown) {
  // A "node" that registers and then never heartbeats: a process that froze or was killed.
  runtime::ActorSystem node;
  node.spawn("trainer", std::make_unique<testing::FunctionActor>(
                            [](testing::FunctionActor&, const runtime::Envelope&) {}));
  RegisterNode request;
  request.name = "frozen";
  auto reply = node.ask(ActorAddress{head_endpoint, kRegistryActor}, request, 5s).get();
  auto registered = reply.as<RegisterNodeReply>();
  ASSERT_TRUE(registered && registered->accepted) << reply.error;
  EXPECT_EQ(registered->heartbeat_interval_ms, 50);
  ASSERT_TRUE(next_event("frozen", 5s));  // joined

  // Someone on the head watches an actor on that node.
  head.monitor(events.address, ActorAddress{node.id(), "trainer"});

  auto suspect = next_event("frozen", 5s);
  ASSERT_TRUE(suspect);
  EXPECT_EQ(suspect->event, "suspect");
  auto dead = next_event("frozen", 5s);
  ASSERT_TRUE(dead);
  EXPECT_EQ(dead->event, "dead");
  EXPECT_GE(dead->node.last_heartbeat_ms, 1000);
  auto down = events.queue->pop_as<runtime::Down>(5s);
  ASSERT_TRUE(down) << "the dead node's actors must be reported down";
  EXPECT_EQ(down->actor, "trainer");
  EXPECT_EQ(down->reason, "node dead");

  // A late heartbeat from the dead incarnation is refused: the agent must register again.
  Heartbeat beat;
  beat.node_id = registered->node_id;
  beat.incarnation = registered->incarnation;
  auto answer = node.ask(ActorAddress{head_endpoint, kRegistryActor}, beat, 5s).get();
  ASSERT_TRUE(answer.as<HeartbeatReply>()) << answer.error;
  EXPECT_FALSE(answer.as<HeartbeatReply>()->known);
}

TEST_F(Registry, ANodeThatHeartbeatsAgainAfterSuspectIsAliveAgain) {
  runtime::ActorSystem node;
  RegisterNode request;
  request.name = "flaky";
  auto registered = node.ask(ActorAddress{head_endpoint, kRegistryActor}, request, 5s)
                        .get()
                        .as<RegisterNodeReply>();
  ASSERT_TRUE(registered);
  ASSERT_TRUE(next_event("flaky", 5s));  // joined
  auto suspect = next_event("flaky", 5s);
  ASSERT_TRUE(suspect);
  ASSERT_EQ(suspect->event, "suspect");
  Heartbeat beat;
  beat.node_id = registered->node_id;
  beat.incarnation = registered->incarnation;
  auto answer = node.ask(ActorAddress{head_endpoint, kRegistryActor}, beat, 5s).get();
  ASSERT_TRUE(answer.as<HeartbeatReply>());
  EXPECT_TRUE(answer.as<HeartbeatReply>()->known);
  auto back = next_event("flaky", 5s);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->event, "alive");
}

TEST_F(Registry, BadRequestsGetAnErrorReply) {
  runtime::ActorSystem client;
  ActorAddress registry{head_endpoint, kRegistryActor};
  auto garbage = client.make_envelope(registry, runtime::MessageKind::kRegisterNode,
                                      runtime::pack_payload(std::string("not a request")), {});
  auto reply = client.ask_envelope(std::move(garbage), 5s).get();
  auto error = reply.as<runtime::ErrorReply>();
  ASSERT_TRUE(error) << reply.error;
  EXPECT_EQ(error->code, "bad-request");

  reply = client.ask(registry, runtime::Ping{1}, 5s).get();
  error = reply.as<runtime::ErrorReply>();
  ASSERT_TRUE(error) << reply.error;
  EXPECT_EQ(error->code, "bad-request");
  EXPECT_NE(error->message.find("Ping"), std::string::npos) << error->message;

  RegisterNode nameless;
  auto refused = client.ask(registry, nameless, 5s).get().as<RegisterNodeReply>();
  ASSERT_TRUE(refused);
  EXPECT_FALSE(refused->accepted);
  EXPECT_FALSE(refused->error.empty());
}

TEST_F(Registry, StatusCountsTheHeadsTraffic) {
  auto counters = status().counters;
  for (const char* key :
       {"messages_in", "messages_out", "dropped_malformed", "dropped_oversized",
        "dropped_unknown_kind", "dropped_bad_version", "refused_registrations", "dead_letters"}) {
    EXPECT_TRUE(counters.count(key)) << key;
  }
}

TEST_F(Registry, StatusCountsWhatTheHeadHolds) {
  auto counters = status().counters;
  EXPECT_EQ(counters.at("actors"), 2u) << "the registry and the fixture's subscriber";
  EXPECT_GE(counters.at("threads"), 3u) << "two actor threads, the timer and I/O threads";
  EXPECT_GE(counters.at("open_fds"), 3u);
  EXPECT_FALSE(counters.count("store_keys")) << "only the head's counter source adds those";

  runtime::ActorSystem head_with_store;
  MembershipConfig config;
  head_with_store.spawn<NodeRegistry>(kRegistryActor, config, [] {
    return std::map<std::string, std::uint64_t>{{"store_keys", 7}};
  });
  auto reply = head_with_store.ask(ActorAddress{"", kRegistryActor}, StatusRequest{}, 5s).get();
  ASSERT_TRUE(reply.as<StatusReply>()) << reply.error;
  EXPECT_EQ(reply.as<StatusReply>()->counters.at("store_keys"), 7u);
}

TEST_F(Registry, AnUnsubscribedActorGetsNoMoreEvents) {
  auto leaver = testing::spawn_probe(head, "leaver");
  auto answered = std::make_shared<std::promise<bool>>();
  leaver.run([answered](testing::ProbeActor& self) {
    self.ask(ActorAddress{"", kRegistryActor}, SubscribeNodes{}, 5s,
             [&self, answered](runtime::AskResult subscribed) {
               if (!subscribed.as<StatusReply>()) return answered->set_value(false);
               self.ask(ActorAddress{"", kRegistryActor}, UnsubscribeNodes{}, 5s,
                        [answered](runtime::AskResult result) {
                          answered->set_value(result.as<SimpleReply>().has_value());
                        });
             });
  });
  auto done = answered->get_future();
  ASSERT_EQ(done.wait_for(10s), std::future_status::ready);
  ASSERT_TRUE(done.get()) << "SubscribeNodes then UnsubscribeNodes must both be answered";

  runtime::ActorSystem node;
  RegisterNode request;
  request.name = "after-unsubscribe";
  ASSERT_TRUE(node.ask(ActorAddress{head_endpoint, kRegistryActor}, request, 5s)
                  .get()
                  .as<RegisterNodeReply>());
  ASSERT_TRUE(next_event("after-unsubscribe", 5s)) << "the remaining subscriber hears of it";
  status();  // the registry has finished publishing that event
  EXPECT_FALSE(leaver.queue->pop_as<NodeEvent>(0ms)) << "the unsubscribed actor does not";
}

TEST_F(Registry, ASubscriberThatStopsIsDropped) {
  auto subscribed = std::make_shared<std::promise<bool>>();
  head.spawn("short-lived", std::make_unique<testing::FunctionActor>(
                                [](testing::FunctionActor&, const runtime::Envelope&) {},
                                [subscribed](testing::FunctionActor& self) {
                                  self.ask(ActorAddress{"", kRegistryActor}, SubscribeNodes{}, 5s,
                                           [subscribed](runtime::AskResult result) {
                                             subscribed->set_value(
                                                 result.as<StatusReply>().has_value());
                                           });
                                }));
  auto done = subscribed->get_future();
  ASSERT_EQ(done.wait_for(10s), std::future_status::ready);
  ASSERT_TRUE(done.get());
  // stop() returns after the actor's Down was handed to the registry, so the registry handles
  // the Down before the registration below.
  head.stop("short-lived", "crashed: test");
  const auto dead_letters = status().counters.at("dead_letters");

  runtime::ActorSystem node;
  RegisterNode request;
  request.name = "after-stop";
  ASSERT_TRUE(node.ask(ActorAddress{head_endpoint, kRegistryActor}, request, 5s)
                  .get()
                  .as<RegisterNodeReply>());
  ASSERT_TRUE(next_event("after-stop", 5s));
  EXPECT_EQ(status().counters.at("dead_letters"), dead_letters)
      << "an event was sent to the stopped subscriber: it was not dropped";
}

TEST(Agent, ReRegistersWhenTheHeadForgetsIt) {
  MembershipConfig config;
  config.heartbeat_interval = 50ms;
  config.heartbeat_timeout = 300ms;
  auto head = std::make_unique<runtime::ActorSystem>();
  auto endpoint = head->listen("tcp://127.0.0.1:0");
  head->spawn<NodeRegistry>(kRegistryActor, config);
  runtime::ActorSystem worker;
  worker.spawn<NodeAgent>(kAgentActor, agent_options(endpoint, "w"));
  auto alive_on = [&](runtime::ActorSystem& system) {
    auto reply = system.ask(ActorAddress{"", kRegistryActor}, StatusRequest{}, 2s).get();
    auto status = reply.as<StatusReply>();
    return status && status->nodes.size() == 1 && status->nodes[0].state == "alive";
  };
  ASSERT_TRUE(testing::wait_until([&] { return alive_on(*head); }, 5s));

  // The head "restarts": a fresh system and registry on the same port, with no memory.
  head.reset();
  head = std::make_unique<runtime::ActorSystem>();
  ASSERT_TRUE(testing::wait_until(
      [&] {
        try {
          head->listen(endpoint);
          return true;
        } catch (const std::runtime_error&) {
          return false;
        }
      },
      5s, 50ms));
  head->spawn<NodeRegistry>(kRegistryActor, config);
  EXPECT_TRUE(testing::wait_until([&] { return alive_on(*head); }, 10s))
      << "the agent did not register with the new head";
}

}  // namespace
}  // namespace omnilearn::actors

namespace omnilearn::actors {
namespace {

// The registry over a state store: a burst of registrations is acknowledged only once written,
// and a second registry started over the same state knows the
// nodes as they were, answers their heartbeats with the new epoch, and counts them back.
TEST(RegistryState, RegistrationsAreWrittenBeforeTheReplyAndARestartedRegistryKnowsThem) {
  std::shared_ptr<state::StateStore> store = state::open_memory_store();
  MembershipConfig config;
  config.heartbeat_interval = 50ms;
  config.heartbeat_timeout = 5000ms;
  std::vector<RegisterNodeReply> registered;
  {
    runtime::ActorSystem head;
    RegistryState first;
    first.store = store;
    auto restored = start_head_epoch(*store, 1000.0);
    first.head = restored.info;
    head.spawn<NodeRegistry>(kRegistryActor, config, HeadCounterSource{}, DashboardAddress{},
                             first);
    std::vector<std::future<runtime::AskResult>> asks;
    for (int i = 0; i < 200; ++i) {
      RegisterNode request;
      request.name = "n" + std::to_string(i);
      request.machine_id = "m" + std::to_string(i);
      asks.push_back(head.ask(ActorAddress{"", kRegistryActor}, request, 10s));
    }
    for (auto& ask : asks) {
      auto reply = ask.get().as<RegisterNodeReply>();
      ASSERT_TRUE(reply && reply->accepted);
      EXPECT_EQ(reply->head_epoch, 1u);
      // Acknowledged means written.
      EXPECT_TRUE(store->get(node_key(reply->node_id))) << reply->node_id;
      registered.push_back(*reply);
    }
  }
  EXPECT_EQ(store->load("nodes/").size(), 200u);
  EXPECT_EQ(store->get(name_key("n7")), "1");
  {
    // A drain holds for later jobs, so a restarted head knows it too.
    runtime::ActorSystem head;
    RegistryState again;
    again.store = store;
    again.head.epoch = 1;
    head.spawn<NodeRegistry>(kRegistryActor, config, HeadCounterSource{}, DashboardAddress{},
                             again);
    auto drained = head.ask(ActorAddress{"", kRegistryActor}, SetNodeDrained{"n3", true}, 5s)
                       .get()
                       .as<SimpleReply>();
    ASSERT_TRUE(drained && drained->ok);
    EXPECT_EQ(store->get(drained_key("n3")), "1") << "answered before it was written";
  }

  runtime::ActorSystem head;
  auto restored = start_head_epoch(*store, 1002.5);
  EXPECT_EQ(restored.info.epoch, 2u);
  ASSERT_EQ(restored.nodes.size(), 200u);
  EXPECT_GE(restored.info.outage_s, 0.0);
  RegistryState second;
  second.store = store;
  second.head = restored.info;
  second.nodes = restored.nodes;
  second.incarnations = restored.incarnations;
  second.drained = restored.drained;
  EXPECT_EQ(restored.drained, (std::set<std::string>{"n3"}));
  head.spawn<NodeRegistry>(kRegistryActor, config, HeadCounterSource{}, DashboardAddress{}, second);
  for (const auto& node : registered) {
    Heartbeat beat;
    beat.node_id = node.node_id;
    beat.incarnation = node.incarnation;
    auto reply = head.ask(ActorAddress{"", kRegistryActor}, beat, 5s).get().as<HeartbeatReply>();
    ASSERT_TRUE(reply);
    EXPECT_TRUE(reply->known) << node.node_id;
    EXPECT_EQ(reply->head_epoch, 2u);
  }
  auto status =
      head.ask(ActorAddress{"", kRegistryActor}, StatusRequest{}, 5s).get().as<StatusReply>();
  ASSERT_TRUE(status);
  EXPECT_EQ(status->nodes.size(), 200u);
  EXPECT_EQ(status->head.epoch, 2u);
  EXPECT_EQ(status->head.restored_nodes, 200);
  for (const auto& node : status->nodes) EXPECT_EQ(node.drained, node.name == "n3") << node.name;
  EXPECT_GE(status->head.nodes_back_ms, 0.0) << "every restored node was heard from";

  // The same name from the same machine is a restart: a newer incarnation than the stored one.
  RegisterNode again;
  again.name = "n7";
  again.machine_id = "m7";
  auto reply =
      head.ask(ActorAddress{"", kRegistryActor}, again, 5s).get().as<RegisterNodeReply>();
  ASSERT_TRUE(reply && reply->accepted);
  EXPECT_EQ(reply->incarnation, 2u);
}

// A record the head did not write is refused, not guessed at.
TEST(RegistryState, AnUnreadableRecordStopsTheStart) {
  auto store = state::open_memory_store();
  store->put("nodes/n-1", "{\"id\": \"n-1\"}");
  try {
    start_head_epoch(*store, 1.0);
    ADD_FAILURE() << "a node record without its fields was accepted";
  } catch (const state::StateStoreError& e) {
    EXPECT_NE(std::string(e.what()).find("nodes/n-1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(store->get(kHeadEpochKey), std::nullopt) << "nothing written";
}

}  // namespace
}  // namespace omnilearn::actors
