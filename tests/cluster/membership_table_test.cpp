// MembershipTable with injected time: registration, incarnations, failure detection, leaving,
// limits and forgetting. No clock, no sockets: every step is explicit.

#include "cluster/membership_table.hpp"

#include <gtest/gtest.h>

namespace omnilearn::actors {
namespace {

using namespace std::chrono_literals;
using TimePoint = MembershipTable::TimePoint;

class Membership : public ::testing::Test {
 protected:
  static MembershipConfig config() {
    MembershipConfig c;
    c.heartbeat_interval = 100ms;
    c.heartbeat_timeout = 600ms;  // suspect after 200 ms (two missed beats), dead after 600 ms
    c.max_nodes = 3;
    c.forget_after = 10s;
    return c;
  }

  RegisterNodeReply join(const std::string& name, const std::string& system,
                         std::vector<StateChange>* changes = nullptr) {
    RegisterNode request;
    request.name = name;
    request.resources.cpus = 4;
    request.resources.labels = {{"zone", "a"}};
    return table.register_node(request, system, now, changes);
  }

  // A registration that says which machine it comes from and which incarnation its process
  // held before (0: none).
  RegisterNodeReply join_from(const std::string& name, const std::string& system,
                              const std::string& machine, std::uint64_t previous = 0,
                              std::vector<StateChange>* changes = nullptr) {
    RegisterNode request;
    request.name = name;
    request.machine_id = machine;
    request.previous_incarnation = previous;
    return table.register_node(request, system, now, changes);
  }

  bool beat(const RegisterNodeReply& node, std::optional<StateChange>* change = nullptr) {
    Heartbeat heartbeat;
    heartbeat.node_id = node.node_id;
    heartbeat.incarnation = node.incarnation;
    heartbeat.sequence = ++sequence;
    heartbeat.usage.load_average = 0.5;
    heartbeat.actors.push_back(ActorCounters{"trainer-0", "job-1", 0, 10, 32, 100.0, 0.3, 0.2});
    return table.heartbeat(heartbeat, now, change);
  }

  std::string state_of(const RegisterNodeReply& node) const {
    const auto* record = table.find(node.node_id);
    return record ? to_string(record->state) : "forgotten";
  }

  MembershipTable table{config(), /*seed=*/42};
  TimePoint now = TimePoint{} + 1h;  // a fake clock that moves only when the test says so
  std::uint64_t sequence = 0;
};

TEST_F(Membership, RegisterGivesAnIdAndTheFirstIncarnation) {
  std::vector<StateChange> changes;
  auto reply = join("w1", "s-1", &changes);
  ASSERT_TRUE(reply.accepted) << reply.error;
  EXPECT_FALSE(reply.node_id.empty());
  EXPECT_EQ(reply.incarnation, 1u);
  EXPECT_EQ(reply.heartbeat_interval_ms, 100);
  EXPECT_EQ(reply.heartbeat_timeout_ms, 600);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].to, NodeState::kAlive);
  EXPECT_EQ(changes[0].from, NodeState::kDead) << "a join is reported as dead -> alive";
  const auto* record = table.find(reply.node_id);
  ASSERT_NE(record, nullptr);
  EXPECT_EQ(record->name, "w1");
  EXPECT_EQ(record->system, "s-1");
  EXPECT_EQ(record->resources.cpus, 4);
  EXPECT_EQ(record->resources.labels.at("zone"), "a");
  EXPECT_EQ(table.live_count(), 1u);
  auto info = table.info(*record, now + 250ms);
  EXPECT_EQ(info.state, "alive");
  EXPECT_EQ(info.last_heartbeat_ms, 250);
  EXPECT_EQ(info.incarnation, 1u);
}

TEST_F(Membership, DistinctNodesGetDistinctIds) {
  auto a = join("w1", "s-1");
  auto b = join("w2", "s-2");
  auto c = join("w3", "s-2");  // two agents in one process: still two nodes
  EXPECT_NE(a.node_id, b.node_id);
  EXPECT_NE(b.node_id, c.node_id);
  EXPECT_EQ(table.live_count(), 3u);
}

TEST_F(Membership, RetriedRegistrationFromTheSameProcessIsIdempotent) {
  auto first = join("w1", "s-1");
  now += 50ms;
  std::vector<StateChange> changes;
  auto again = join("w1", "s-1", &changes);
  ASSERT_TRUE(again.accepted);
  EXPECT_EQ(again.node_id, first.node_id);
  EXPECT_EQ(again.incarnation, first.incarnation);
  EXPECT_TRUE(changes.empty());
  EXPECT_EQ(table.nodes().size(), 1u);
  // The retry counts as being heard from.
  EXPECT_EQ(table.info(*table.find(first.node_id), now).last_heartbeat_ms, 0);
  // Also while suspect.
  now += 300ms;
  ASSERT_EQ(table.sweep(now).size(), 1u);
  EXPECT_EQ(state_of(first), "suspect");
  auto while_suspect = join("w1", "s-1");
  EXPECT_EQ(while_suspect.node_id, first.node_id);
}

TEST_F(Membership, SameNameFromANewProcessIsANewIncarnationAndTheOldOneDies) {
  auto old_node = join("w1", "s-old");
  now += 50ms;
  std::vector<StateChange> changes;
  auto new_node = join("w1", "s-new", &changes);
  ASSERT_TRUE(new_node.accepted);
  EXPECT_NE(new_node.node_id, old_node.node_id);
  EXPECT_EQ(new_node.incarnation, old_node.incarnation + 1);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].node.id, old_node.node_id);
  EXPECT_EQ(changes[0].to, NodeState::kDead);
  EXPECT_EQ(changes[1].node.id, new_node.node_id);
  EXPECT_EQ(changes[1].to, NodeState::kAlive);
  EXPECT_EQ(state_of(old_node), "dead");
  EXPECT_FALSE(beat(old_node)) << "the old incarnation stays dead";
  EXPECT_EQ(state_of(old_node), "dead");
  EXPECT_TRUE(beat(new_node));
  EXPECT_EQ(table.find_by_name("w1")->id, new_node.node_id);
  EXPECT_EQ(table.live_count(), 1u);
}

TEST_F(Membership, ANameAliveOnAnotherMachineIsRefusedAndTheOwnerKeepsIt) {
  auto owner = join_from("w1", "s-a", "machine-a");
  ASSERT_TRUE(owner.accepted);
  now += 50ms;
  std::vector<StateChange> changes;
  auto intruder = join_from("w1", "s-b", "machine-b", 0, &changes);
  EXPECT_FALSE(intruder.accepted);
  EXPECT_EQ(intruder.refusal, kRefusedNameTaken);
  EXPECT_NE(intruder.error.find("'w1' is taken"), std::string::npos) << intruder.error;
  EXPECT_NE(intruder.error.find("another machine"), std::string::npos) << intruder.error;
  EXPECT_NE(intruder.error.find("--name"), std::string::npos) << "says what to do: "
                                                               << intruder.error;
  EXPECT_TRUE(changes.empty()) << "the owner is not touched";
  EXPECT_EQ(state_of(owner), "alive");
  EXPECT_TRUE(beat(owner));
  EXPECT_EQ(table.nodes().size(), 1u);

  // Suspect is still alive: refused too.
  now += 300ms;
  table.sweep(now);
  ASSERT_EQ(state_of(owner), "suspect");
  EXPECT_EQ(join_from("w1", "s-b", "machine-b").refusal, kRefusedNameTaken);

  // Once the owner is dead the name is free, and the refusals used no incarnation.
  now += 1s;
  table.sweep(now);
  ASSERT_EQ(state_of(owner), "dead");
  auto taken_over = join_from("w1", "s-b", "machine-b");
  ASSERT_TRUE(taken_over.accepted) << taken_over.error;
  EXPECT_EQ(taken_over.incarnation, 2u);
  EXPECT_TRUE(taken_over.refusal.empty());

  // And after a graceful leave.
  ASSERT_TRUE(table.leave(taken_over.node_id, taken_over.incarnation, now));
  EXPECT_TRUE(join_from("w1", "s-c", "machine-c").accepted);
}

TEST_F(Membership, ARestartOnTheSameMachineIsANewIncarnation) {
  auto old_node = join_from("w1", "s-old", "machine-a");
  now += 50ms;
  std::vector<StateChange> changes;
  auto restarted = join_from("w1", "s-new", "machine-a", 0, &changes);
  ASSERT_TRUE(restarted.accepted) << restarted.error;
  EXPECT_EQ(restarted.incarnation, 2u);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].node.id, old_node.node_id);
  EXPECT_EQ(changes[0].to, NodeState::kDead);
  EXPECT_EQ(table.find(restarted.node_id)->machine_id, "machine-a");
}

TEST_F(Membership, AnUnknownMachineIsTakenForARestartAsBefore) {
  // An agent too old to send its machine id, on either side: the pre-machine-id rule.
  auto old_node = join_from("w1", "s-1", "");
  auto second = join_from("w1", "s-2", "machine-b");
  ASSERT_TRUE(second.accepted) << second.error;
  EXPECT_EQ(state_of(old_node), "dead");
  auto third = join_from("w1", "s-3", "");
  ASSERT_TRUE(third.accepted) << third.error;
  EXPECT_EQ(state_of(second), "dead");
  EXPECT_EQ(third.incarnation, 3u);
}

TEST_F(Membership, AProcessThatWasReplacedCannotTakeItsNameBack) {
  // w1 freezes; the operator starts it again on the same machine (incarnation 2); the frozen
  // process thaws, is told it is unknown and registers again, still as incarnation 1's process.
  auto frozen = join_from("w1", "s-old", "machine-a");
  auto replacement = join_from("w1", "s-new", "machine-a");
  ASSERT_EQ(replacement.incarnation, 2u);
  EXPECT_FALSE(beat(frozen)) << "the frozen process is told to register again";
  std::vector<StateChange> changes;
  auto thawed = join_from("w1", "s-old", "machine-a", frozen.incarnation, &changes);
  EXPECT_FALSE(thawed.accepted);
  EXPECT_EQ(thawed.refusal, kRefusedNameTaken);
  EXPECT_NE(thawed.error.find("newer worker"), std::string::npos) << thawed.error;
  EXPECT_TRUE(changes.empty());
  EXPECT_EQ(state_of(replacement), "alive") << "no ping-pong: the newer process keeps the name";

  // With nobody holding the name, a forgotten process comes back as a new incarnation.
  auto lone = join_from("w2", "s-x", "machine-a");
  for (int i = 0; i < 10; ++i) {  // w2 silent for 1 s while w1's replacement is heard
    now += 100ms;
    ASSERT_TRUE(beat(replacement));
    table.sweep(now);
  }
  ASSERT_EQ(state_of(lone), "dead");
  auto back = join_from("w2", "s-x", "machine-a", lone.incarnation);
  ASSERT_TRUE(back.accepted) << back.error;
  EXPECT_EQ(back.incarnation, lone.incarnation + 1);
}

TEST_F(Membership, RefusalsSayWhy) {
  EXPECT_EQ(join_from("", "s", "m").refusal, kRefusedBadName);
  join("a", "s-1");
  join("b", "s-2");
  join("c", "s-3");
  EXPECT_EQ(join("d", "s-4").refusal, kRefusedFull);
}

TEST_F(Membership, IncarnationsKeepGrowingAcrossDeaths) {
  auto first = join("w1", "s-1");
  now += 1s;
  table.sweep(now);
  EXPECT_EQ(state_of(first), "dead");
  auto second = join("w1", "s-2");
  EXPECT_EQ(second.incarnation, 2u);
  EXPECT_TRUE(table.leave(second.node_id, second.incarnation, now));
  auto third = join("w1", "s-3");
  EXPECT_EQ(third.incarnation, 3u);
  // Even the same process registering after it was declared dead gets a new incarnation.
  now += 1s;
  table.sweep(now);
  auto fourth = join("w1", "s-3");
  EXPECT_EQ(fourth.incarnation, 4u);
  EXPECT_NE(fourth.node_id, third.node_id);
}

TEST_F(Membership, SilentNodeBecomesSuspectThenDead) {
  auto node = join("w1", "s-1");
  now += 150ms;  // one missed beat: still alive
  EXPECT_TRUE(table.sweep(now).empty());
  EXPECT_EQ(state_of(node), "alive");

  now += 50ms;  // 200 ms: two missed beats
  auto changes = table.sweep(now);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].from, NodeState::kAlive);
  EXPECT_EQ(changes[0].to, NodeState::kSuspect);
  EXPECT_EQ(state_of(node), "suspect");
  EXPECT_TRUE(table.sweep(now).empty()) << "a state change is reported once";

  now += 399ms;  // 599 ms: not yet dead
  EXPECT_TRUE(table.sweep(now).empty());
  now += 1ms;  // 600 ms
  changes = table.sweep(now);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].from, NodeState::kSuspect);
  EXPECT_EQ(changes[0].to, NodeState::kDead);
  EXPECT_EQ(changes[0].node.id, node.node_id);
  EXPECT_EQ(table.live_count(), 0u);
  EXPECT_TRUE(table.sweep(now + 1s).empty());
}

// The full-disruption rule (MembershipConfig::full_disruption_hold): a head that hears no node
// at all declares none dead. Three nodes whose beats are spread over the interval, as real
// agents' are, fall silent together: the first one silent must not die before the rule sees
// that every one is.
TEST_F(Membership, AHeadThatHearsNoNodeDeclaresNoneDead) {
  auto w1 = join("w1", "s-1");
  now += 40ms;
  auto w2 = join("w2", "s-2");
  now += 50ms;
  auto w3 = join("w3", "s-3");
  const TimePoint last_heard = now;
  for (int i = 0; i < 400; ++i) {  // 10 s of sweeps every 25 ms, five minutes being the hold
    now += 25ms;
    for (const auto& change : table.sweep(now)) {
      ASSERT_NE(change.to, NodeState::kDead) << change.node.name << " at +" << i * 25 << " ms";
    }
  }
  EXPECT_EQ(state_of(w1), "suspect");
  EXPECT_EQ(state_of(w2), "suspect");
  EXPECT_EQ(state_of(w3), "suspect");
  EXPECT_EQ(table.live_count(), 3u);
  ASSERT_TRUE(table.disrupted_since());
  EXPECT_EQ(*table.disrupted_since(), last_heard);
}

TEST_F(Membership, AfterHearingNoNodeTheSilentOnesHaveATimeoutFromTheFirstOneHeard) {
  auto w1 = join("w1", "s-1");
  auto w2 = join("w2", "s-2");
  auto w3 = join("w3", "s-3");
  now += 3s;
  table.sweep(now);
  ASSERT_TRUE(table.disrupted_since());
  now += 10ms;
  ASSERT_TRUE(beat(w1));  // the head's network is back
  const TimePoint back = now;
  table.sweep(now);
  EXPECT_FALSE(table.disrupted_since());
  EXPECT_EQ(state_of(w1), "alive");
  ASSERT_TRUE(beat(w2));
  // w3 is not heard: one timeout (600 ms) from the first heartbeat, not from its last one.
  while (now < back + 590ms) {
    now += 10ms;
    ASSERT_TRUE(beat(w1));
    ASSERT_TRUE(beat(w2));
    table.sweep(now);
    ASSERT_NE(state_of(w3), "dead") << "w3 declared dead before its timeout from the first beat";
  }
  EXPECT_EQ(state_of(w3), "suspect");
  now = back + 600ms;
  auto changes = table.sweep(now);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].node.id, w3.node_id);
  EXPECT_EQ(changes[0].to, NodeState::kDead);
  EXPECT_EQ(state_of(w1), "alive");
  EXPECT_EQ(state_of(w2), "alive");
}

TEST_F(Membership, ANodeSilentWhileOthersAreHeardIsDeclaredDeadAtItsTimeout) {
  auto w1 = join("w1", "s-1");
  now += 90ms;  // w1's beats come 90 ms before the others'
  auto w2 = join("w2", "s-2");
  auto w3 = join("w3", "s-3");
  const TimePoint w1_heard = now - 90ms;
  while (now < w1_heard + 590ms) {
    now += 10ms;
    if ((now - w1_heard) % 100ms == 90ms) {
      ASSERT_TRUE(beat(w2));
      ASSERT_TRUE(beat(w3));
    }
    table.sweep(now);
    ASSERT_NE(state_of(w1), "dead");
  }
  now = w1_heard + 600ms;
  auto changes = table.sweep(now);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].node.id, w1.node_id);
  EXPECT_EQ(changes[0].to, NodeState::kDead);
  EXPECT_FALSE(table.disrupted_since());
}

TEST(MembershipFullDisruption, TheHoldIsBoundedAndCanBeTurnedOff) {
  for (const auto hold : {2000ms, 0ms}) {
    SCOPED_TRACE(hold.count());
    MembershipConfig config;
    config.heartbeat_interval = 100ms;
    config.heartbeat_timeout = 600ms;
    config.full_disruption_hold = hold;
    MembershipTable table(config, 1);
    TimePoint now = TimePoint{} + 1h;
    RegisterNode a, b;
    a.name = "w1";
    b.name = "w2";
    ASSERT_TRUE(table.register_node(a, "s-1", now).accepted);
    ASSERT_TRUE(table.register_node(b, "s-2", now).accepted);
    const TimePoint heard = now;
    // Dead at the timeout without the rule, at timeout + hold with it; both in the same sweep.
    const TimePoint dies = heard + config.heartbeat_timeout + hold;
    while (now + 10ms < dies) {
      now += 10ms;
      table.sweep(now);
      ASSERT_EQ(table.live_count(), 2u) << "dead before the hold ended";
    }
    now = dies;
    auto changes = table.sweep(now);
    ASSERT_EQ(changes.size(), 2u);
    EXPECT_EQ(changes[0].to, NodeState::kDead);
    EXPECT_EQ(changes[1].to, NodeState::kDead);
    EXPECT_EQ(table.live_count(), 0u);
    table.sweep(now + 10ms);
    EXPECT_FALSE(table.disrupted_since());
  }
}

TEST_F(Membership, ASweepThatMissedTheSuspectWindowGoesStraightToDead) {
  auto node = join("w1", "s-1");
  now += 5s;
  auto changes = table.sweep(now);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].from, NodeState::kAlive);
  EXPECT_EQ(changes[0].to, NodeState::kDead);
}

TEST_F(Membership, AHeartbeatBringsASuspectBack) {
  auto node = join("w1", "s-1");
  now += 250ms;
  table.sweep(now);
  ASSERT_EQ(state_of(node), "suspect");
  std::optional<StateChange> change;
  EXPECT_TRUE(beat(node, &change));
  ASSERT_TRUE(change);
  EXPECT_EQ(change->from, NodeState::kSuspect);
  EXPECT_EQ(change->to, NodeState::kAlive);
  EXPECT_EQ(state_of(node), "alive");
  // Heartbeats keep it alive indefinitely.
  for (int i = 0; i < 50; ++i) {
    now += 100ms;
    std::optional<StateChange> none;
    ASSERT_TRUE(beat(node, &none));
    EXPECT_FALSE(none);
    EXPECT_TRUE(table.sweep(now).empty());
  }
  const auto* record = table.find(node.node_id);
  ASSERT_EQ(record->actors.size(), 1u);
  EXPECT_EQ(record->actors[0].job_id, "job-1");
  EXPECT_DOUBLE_EQ(record->usage.load_average, 0.5);
}

TEST_F(Membership, HeartbeatsFromUnknownOrDeadNodesAskForReRegistration) {
  RegisterNodeReply stranger;
  stranger.node_id = "n-deadbeef";
  stranger.incarnation = 1;
  EXPECT_FALSE(beat(stranger)) << "unknown node (e.g. the head restarted)";

  auto node = join("w1", "s-1");
  auto wrong_incarnation = node;
  wrong_incarnation.incarnation = 7;
  EXPECT_FALSE(beat(wrong_incarnation));

  now += 1s;
  table.sweep(now);
  ASSERT_EQ(state_of(node), "dead");
  std::optional<StateChange> change;
  EXPECT_FALSE(beat(node, &change)) << "a dead node must register again";
  EXPECT_FALSE(change);
  EXPECT_EQ(state_of(node), "dead") << "a late heartbeat does not resurrect it";
  // Registering again (what the agent does on known=false) gives a new incarnation.
  auto back = join("w1", "s-1");
  EXPECT_EQ(back.incarnation, 2u);
  EXPECT_TRUE(beat(back));
}

TEST_F(Membership, LeaveMarksTheNodeLeftOnce) {
  auto node = join("w1", "s-1");
  std::optional<StateChange> change;
  EXPECT_TRUE(table.leave(node.node_id, node.incarnation, now, &change));
  ASSERT_TRUE(change);
  EXPECT_EQ(change->from, NodeState::kAlive);
  EXPECT_EQ(change->to, NodeState::kLeft);
  EXPECT_EQ(state_of(node), "left");
  EXPECT_EQ(table.live_count(), 0u);
  std::optional<StateChange> again;
  EXPECT_TRUE(table.leave(node.node_id, node.incarnation, now, &again)) << "idempotent";
  EXPECT_FALSE(again);
  EXPECT_FALSE(beat(node)) << "a left node does not heartbeat back in";
  now += 5s;
  EXPECT_TRUE(table.sweep(now).empty()) << "left is final: never reported dead later";
  EXPECT_EQ(state_of(node), "left");

  EXPECT_FALSE(table.leave("n-unknown", 1, now));
  auto other = join("w2", "s-2");
  EXPECT_FALSE(table.leave(other.node_id, other.incarnation + 1, now)) << "wrong incarnation";
  EXPECT_EQ(state_of(other), "alive");
}

TEST_F(Membership, RegistrationsBeyondMaxNodesAreRefused) {
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(join("w" + std::to_string(i), "s-" + std::to_string(i)).accepted);
  }
  auto refused = join("w3", "s-3");
  EXPECT_FALSE(refused.accepted);
  EXPECT_TRUE(refused.node_id.empty());
  EXPECT_NE(refused.error.find("full"), std::string::npos) << refused.error;
  // Idempotent retries of members are still answered.
  EXPECT_TRUE(join("w0", "s-0").accepted);
  // Dead and left nodes do not count against the limit.
  auto w1 = table.find_by_name("w1");
  ASSERT_NE(w1, nullptr);
  EXPECT_TRUE(table.leave(w1->id, w1->incarnation, now));
  EXPECT_TRUE(join("w3", "s-3").accepted);
}

TEST_F(Membership, RejectsEmptyAndOverlongNames) {
  auto empty = join("", "s-1");
  EXPECT_FALSE(empty.accepted);
  EXPECT_FALSE(empty.error.empty());
  auto long_name = join(std::string(129, 'n'), "s-1");
  EXPECT_FALSE(long_name.accepted);
  EXPECT_TRUE(join(std::string(128, 'n'), "s-1").accepted);
}

TEST_F(Membership, DeadAndLeftRecordsAreForgottenAfterForgetAfter) {
  auto dies = join("w1", "s-1");
  auto leaves = join("w2", "s-2");
  auto stays = join("w3", "s-3");
  table.leave(leaves.node_id, leaves.incarnation, now);
  for (int i = 0; i < 8; ++i) {  // w3 keeps beating, w1 goes silent
    now += 100ms;
    beat(stays);
    table.sweep(now);
  }
  ASSERT_EQ(state_of(dies), "dead");
  auto died_at = table.find(dies.node_id)->state_since;
  auto left_at = table.find(leaves.node_id)->state_since;
  ASSERT_LT(left_at, died_at);
  while (now + 100ms < died_at + 10s) {
    now += 100ms;
    beat(stays);
    table.sweep(now);
    EXPECT_EQ(state_of(leaves), now - left_at > 10s ? "forgotten" : "left");
  }
  EXPECT_EQ(state_of(dies), "dead") << "kept for forget_after (10 s)";
  now = died_at + 10s + 1ms;
  beat(stays);
  table.sweep(now);
  EXPECT_EQ(state_of(dies), "forgotten");
  EXPECT_EQ(state_of(leaves), "forgotten");
  EXPECT_EQ(state_of(stays), "alive");
  EXPECT_EQ(table.nodes().size(), 1u);
  // The name's incarnation counter survives the forgetting: a comeback is never confused with
  // the forgotten incarnation.
  EXPECT_EQ(join("w1", "s-9").incarnation, 2u);
}

TEST_F(Membership, SuspectAfterDefaultsToTwoIntervalsAndNeverExceedsTheTimeout) {
  RegisterNode request;
  request.name = "w";
  MembershipConfig c;
  c.heartbeat_interval = 500ms;
  c.heartbeat_timeout = 3000ms;
  MembershipTable relaxed(c, 1);
  relaxed.register_node(request, "s", now);
  EXPECT_TRUE(relaxed.sweep(now + 999ms).empty());
  auto changes = relaxed.sweep(now + 1000ms);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].to, NodeState::kSuspect);

  c.heartbeat_timeout = 700ms;  // shorter than two intervals: no suspect phase at all
  MembershipTable tight(c, 1);
  tight.register_node(request, "s", now);
  EXPECT_TRUE(tight.sweep(now + 699ms).empty());
  changes = tight.sweep(now + 700ms);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].from, NodeState::kAlive);
  EXPECT_EQ(changes[0].to, NodeState::kDead);
}

TEST_F(Membership, NodeIdsAreReproducibleForASeed) {
  MembershipTable a(config(), 7), b(config(), 7);
  RegisterNode request;
  request.name = "w";
  EXPECT_EQ(a.register_node(request, "s", now).node_id, b.register_node(request, "s", now).node_id);
}

}  // namespace
}  // namespace omnilearn::actors

namespace omnilearn::actors {
namespace {

using namespace std::chrono_literals;

// A restarted head takes over the nodes the previous one knew: alive, with the same identity,
// and two heartbeat timeouts to be heard again (their agents first give up on the old head);
// a name's counter goes on from the stored one.
TEST(MembershipRestore, RestoredNodesHaveTwoTimeoutsToBeHeardAgain) {
  MembershipConfig config;
  config.heartbeat_interval = 100ms;
  config.heartbeat_timeout = 600ms;
  MembershipTable table(config, 1);
  const MembershipTable::TimePoint start{std::chrono::seconds(100)};
  NodeRecord heard, silent;
  heard.id = "n-1";
  heard.name = "w1";
  heard.system = "sys-1";
  heard.incarnation = 3;
  silent.id = "n-2";
  silent.name = "w2";
  silent.system = "sys-2";
  silent.incarnation = 1;
  table.restore({heard, silent}, {{"w1", 3}, {"w3", 7}}, start);
  ASSERT_EQ(table.live_count(), 2u);
  EXPECT_EQ(table.info(*table.find("n-1"), start).last_heartbeat_ms, 0);

  // After one timeout, both still alive: the agents may still be giving up on the old head.
  table.sweep(start + 700ms);
  EXPECT_NE(table.find("n-1")->state, NodeState::kDead);
  EXPECT_NE(table.find("n-2")->state, NodeState::kDead);
  Heartbeat beat;
  beat.node_id = "n-1";
  beat.incarnation = 3;
  EXPECT_TRUE(table.heartbeat(beat, start + 900ms));
  EXPECT_TRUE(table.heartbeat(beat, start + 1250ms));
  // Past two timeouts, the silent one is dead and the heard one alive.
  table.sweep(start + 1300ms);
  EXPECT_EQ(table.find("n-2")->state, NodeState::kDead);
  EXPECT_EQ(table.find("n-1")->state, NodeState::kAlive);

  // The counters go on: w1 registering again from a new process is incarnation 4, a new w3 is 8.
  RegisterNode again;
  again.name = "w1";
  EXPECT_EQ(table.register_node(again, "sys-9", start + 1400ms).incarnation, 4u);
  RegisterNode fresh;
  fresh.name = "w3";
  EXPECT_EQ(table.register_node(fresh, "sys-10", start + 1400ms).incarnation, 8u);
}

}  // namespace
}  // namespace omnilearn::actors
