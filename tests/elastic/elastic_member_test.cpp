// ElasticMember, the trainer's side of the elastic protocol, one rule at a time with a fake
// clock (plain numbers): leases gate commits, only the scheduler ends a job, orders are checked
// before use. The simulation (elastic_simulation_test.cpp) checks the rules together.
#include "elastic/elastic_member.hpp"

#include <gtest/gtest.h>

#include <map>

namespace omnilearn::scheduler {
namespace {

ElasticMemberOptions options() {
  ElasticMemberOptions o;
  o.total_steps = 3;
  o.lease_wait = 500;
  o.done_resend = 1000;
  o.idle_limit = 60000;
  return o;
}

template <class A>
bool is(const MemberAction& action) {
  return std::holds_alternative<A>(action);
}

template <class M>
std::vector<M> sent(ElasticMember& m) {
  std::vector<M> out;
  for (auto& message : m.take_outbox()) {
    if (auto* x = std::get_if<M>(&message)) out.push_back(*x);
  }
  return out;
}

// Brings a member to training as `rank` of `world` in `generation` at time `now`.
void start(ElasticMember& m, std::int32_t rank, std::int32_t world, Millis now = 0,
           std::int64_t generation = 1) {
  std::vector<std::int32_t> batches(static_cast<std::size_t>(world), 8);
  m.on_rendezvous({generation, rank, world, batches, 1, false}, now);
  ASSERT_TRUE(is<JoinAction>(m.next(now)));
  m.joined(true, "", now);
  ASSERT_TRUE(is<SyncAction>(m.next(now)));
  m.synced(true, "", 0, 0, now);
  ASSERT_EQ(m.phase(), ElasticMember::Phase::kTraining);
}

// A follower trains steps 1..last at times 1..last, rank 0's `words` confirming each, and
// commits each.
void commit_steps(ElasticMember& m, const std::vector<std::int64_t>& words, int last) {
  for (int s = 1; s <= last; ++s) {
    ASSERT_TRUE(is<StepAction>(m.next(s)));
    m.exchanged(true, "", words, s);
    ASSERT_TRUE(is<CommitAction>(m.next(s)));
    m.step_done(true, "", s, s);
  }
}

TEST(ElasticMember, LeaderCommitsOnlyUnderALease) {
  ElasticMember m(options(), 0);
  start(m, 0, 2);
  const auto asks = sent<LeaseAsk>(m);
  ASSERT_EQ(asks.size(), 1u) << "the leader asks for its lease once synced";
  // No lease yet: it waits at the boundary instead of broadcasting continue.
  EXPECT_TRUE(is<WaitAction>(m.next(10)));
  m.on_lease({1, asks[0].seq, true, 1000, ""}, 20);
  auto action = m.next(20);
  ASSERT_TRUE(is<ControlAction>(action));
  const auto words = std::get<ControlAction>(action).words;
  EXPECT_EQ(words[0], kContinue);
  m.control_done(true, "", {}, 20);
  // The lease counts from when the request was sent (time 0), not from when it arrived.
  EXPECT_TRUE(m.lease_valid(999));
  EXPECT_FALSE(m.lease_valid(1000));
  // A step exchanged while the lease holds is committed.
  action = m.next(20);
  ASSERT_TRUE(is<StepAction>(action));
  EXPECT_EQ(std::get<StepAction>(action).words, words) << "the words ride in the exchange";
  EXPECT_TRUE(m.confirms(words));
  m.exchanged(true, "", words, 999);
  EXPECT_TRUE(is<CommitAction>(m.next(999)));
  m.step_done(true, "", 1, 999);
  EXPECT_EQ(m.step(), 1);
}

// The commit gate: a step that outlasted the lease commits only once a renewal is granted,
// and is dropped (the group broken) when none comes within lease_wait.
TEST(ElasticMember, CommitGateRenewsAStepThatOutlastedTheLease) {
  for (bool granted : {true, false}) {
    SCOPED_TRACE(granted ? "renewal granted" : "no renewal");
    ElasticMember m(options(), 0);
    start(m, 0, 2);
    auto asks = sent<LeaseAsk>(m);
    m.on_lease({1, asks[0].seq, true, 1000, ""}, 5);
    auto control = m.next(10);
    ASSERT_TRUE(is<ControlAction>(control));
    m.control_done(true, "", {}, 10);
    auto action = m.next(10);
    ASSERT_TRUE(is<StepAction>(action));
    m.take_outbox();
    // The exchange completes after the lease ran out (a leader frozen mid-step).
    m.exchanged(true, "", std::get<StepAction>(action).words, 1500);
    EXPECT_EQ(m.phase(), ElasticMember::Phase::kCommitting);
    EXPECT_TRUE(is<WaitAction>(m.next(1500)));
    asks = sent<LeaseAsk>(m);
    ASSERT_EQ(asks.size(), 1u) << "the gate asks for a renewal";
    // A stop arriving meanwhile waits for the step to settle.
    m.on_stop("job ended");
    if (granted) {
      m.on_lease({1, asks[0].seq, true, 1000, ""}, 1520);
      ASSERT_TRUE(is<CommitAction>(m.next(1520)));
      m.step_done(true, "", 1, 1520);
      EXPECT_EQ(m.step(), 1);
      ASSERT_EQ(sent<MemberReport>(m).back().kind, MemberReport::Kind::kStep);
    } else {
      EXPECT_TRUE(is<WaitAction>(m.next(1999)));
      auto drop = m.next(2000);
      ASSERT_TRUE(is<DropAction>(drop));
      EXPECT_EQ(m.step(), 0);
      EXPECT_EQ(m.phase(), ElasticMember::Phase::kIdle);
      const MemberReport broken = sent<MemberReport>(m).back();
      ASSERT_EQ(broken.kind, MemberReport::Kind::kBroken);
      EXPECT_EQ(broken.synced_generation, 1) << "every report says where it last synced";
    }
    // Then the stop: a leader still in its group releases its followers first.
    auto after = m.next(2100);
    if (granted) {
      ASSERT_TRUE(is<StepAction>(after));
      EXPECT_EQ(std::get<StepAction>(after).words[0], kAbandon);
    } else {
      EXPECT_TRUE(is<ExitAction>(after));
    }
  }
}

// Words that do not repeat the plan in force (a new plan, regroup, abandon) make every rank
// drop the step: it never reaches the gate.
TEST(ElasticMember, UnconfirmedWordsDropTheStepOnEveryRank) {
  ElasticMember f(options(), 0);
  start(f, 1, 2);
  ASSERT_TRUE(is<ControlAction>(f.next(1)));
  const std::vector<std::int64_t> plan{kContinue, 1, 1, 8, 8};
  f.control_done(true, "", plan, 1);
  auto action = f.next(2);
  ASSERT_TRUE(is<StepAction>(action));
  EXPECT_TRUE(std::get<StepAction>(action).words.empty()) << "followers carry no words";
  const std::vector<std::int64_t> replan{kContinue, 1, 2, 4, 12};
  EXPECT_FALSE(f.confirms(replan));
  f.exchanged(true, "", replan, 3);
  EXPECT_EQ(f.phase(), ElasticMember::Phase::kTraining) << "dropped, the group goes on";
  EXPECT_EQ(f.batches(), (std::vector<std::int32_t>{4, 12})) << "the new plan is in force";
  EXPECT_EQ(f.step(), 0);
  action = f.next(4);
  ASSERT_TRUE(is<StepAction>(action));
  EXPECT_EQ(std::get<StepAction>(action).batches, (std::vector<std::int32_t>{4, 12}));
  f.exchanged(true, "", replan, 5);
  EXPECT_TRUE(is<CommitAction>(f.next(5)));
  f.step_done(true, "", 1, 5);
  EXPECT_EQ(f.step(), 1);
  ASSERT_TRUE(is<StepAction>(f.next(6)));
  f.exchanged(true, "", {kAbandon, 1}, 7);
  EXPECT_EQ(f.phase(), ElasticMember::Phase::kIdle);
  EXPECT_EQ(f.step(), 1);
}

TEST(ElasticMember, LeaderThatCannotRenewAbandonsTheGenerationWithoutEndingIt) {
  ElasticMember m(options(), 0);
  start(m, 0, 2);
  const auto asks = sent<LeaseAsk>(m);
  m.on_lease({1, asks[0].seq, true, 1000, ""}, 5);
  ASSERT_TRUE(is<ControlAction>(m.next(10)));
  m.control_done(true, "", {}, 10);
  auto step = m.next(10);
  ASSERT_TRUE(is<StepAction>(step));
  m.exchanged(true, "", std::get<StepAction>(step).words, 50);
  ASSERT_TRUE(is<CommitAction>(m.next(50)));
  m.step_done(true, "", 1, 50);
  // Past the lease, renewals unanswered (cut off from the scheduler): wait, then abandon.
  EXPECT_TRUE(is<WaitAction>(m.next(1200)));
  auto action = m.next(1200 + 500);
  ASSERT_TRUE(is<StepAction>(action));
  EXPECT_EQ(std::get<StepAction>(action).words[0], kAbandon);
  m.exchanged(true, "", {}, 1700);
  EXPECT_EQ(m.phase(), ElasticMember::Phase::kIdle) << "it waits for a rendezvous; no exit";
  EXPECT_TRUE(is<WaitAction>(m.next(1800)));
}

TEST(ElasticMember, LeaderOfASupersededGenerationAbandonsAtOnce) {
  ElasticMember m(options(), 0);
  start(m, 0, 2);
  const auto asks = sent<LeaseAsk>(m);
  // "Not the current generation": no lease will come; waiting would only delay the followers.
  m.on_lease({1, asks[0].seq, false, 0, "superseded", /*superseded=*/true}, 5);
  auto action = m.next(10);
  ASSERT_TRUE(is<ControlAction>(action));
  EXPECT_EQ(std::get<ControlAction>(action).words[0], kAbandon);
}

TEST(ElasticMember, StoppedLeaderReleasesItsFollowersInsteadOfStoppingThem) {
  ElasticMember leader(options(), 0);
  start(leader, 0, 2);
  leader.on_stop("node forgotten");
  auto action = leader.next(10);
  ASSERT_TRUE(is<ControlAction>(action));
  EXPECT_EQ(std::get<ControlAction>(action).words[0], kAbandon);
  leader.control_done(true, "", {}, 10);
  EXPECT_TRUE(is<ExitAction>(leader.next(10)));

  ElasticMember follower(options(), 0);
  start(follower, 1, 2);
  ASSERT_TRUE(is<ControlAction>(follower.next(10)));
  follower.control_done(true, "", {kAbandon, 1}, 10);
  EXPECT_EQ(follower.phase(), ElasticMember::Phase::kIdle);
  EXPECT_TRUE(is<WaitAction>(follower.next(20))) << "a follower exits only when told to";
}

TEST(ElasticMember, OrdersThatDoNotFitTheirWorldAreRefused) {
  ElasticMember m(options(), 0);
  m.on_rendezvous({1, 0, 3, {8, 8}, 1, false}, 0);  // 2 batches for a world of 3
  EXPECT_TRUE(is<WaitAction>(m.next(0)));
  const auto reports = sent<MemberReport>(m);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].kind, MemberReport::Kind::kBroken);
  // A follower's control words with the wrong length break the group instead of indexing.
  start(m, 1, 2, 10, 2);
  ASSERT_TRUE(is<ControlAction>(m.next(10)));
  m.control_done(true, "", {kContinue, 2, 1, 8, 8, 8}, 10);
  EXPECT_EQ(m.phase(), ElasticMember::Phase::kIdle);
  m.on_rendezvous({3, 1, 2, {8, 8}, 1, false}, 20);
  ASSERT_TRUE(is<JoinAction>(m.next(20)));
  m.joined(true, "", 20);
  ASSERT_TRUE(is<SyncAction>(m.next(20)));
  m.synced(true, "", 0, 0, 20);
  ASSERT_TRUE(is<ControlAction>(m.next(20)));
  m.control_done(true, "", {kContinue, 3, 1, 8, -1}, 20);  // a negative batch
  EXPECT_EQ(m.phase(), ElasticMember::Phase::kIdle);
}

// The scheduler repeats a rendezvous to members it has not seen sync in its generation. A
// member whose part there already ended answers with that report again (the first may have
// been lost to a partition): it says the member synced, so the scheduler keeps it as a holder
// of the job's state instead of stopping it as one that never joined. A member still training
// in the generation, or one that never reported its end, sends nothing.
TEST(ElasticMember, ARepeatedRendezvousOfAGenerationItLeftGetsItsEndReportedAgain) {
  ElasticMember m(options(), 0);
  start(m, 1, 2, 0, 3);
  const RendezvousOrder again{3, 1, 2, {8, 8}, 1, false};
  m.take_outbox();
  m.on_rendezvous(again, 5);
  EXPECT_TRUE(sent<MemberReport>(m).empty()) << "training: nothing to say again";
  ASSERT_TRUE(is<ControlAction>(m.next(10)));
  m.control_done(false, "rank 0 process exited", {}, 10);
  ASSERT_EQ(m.phase(), ElasticMember::Phase::kIdle);
  const auto first = sent<MemberReport>(m);
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(first[0].kind, MemberReport::Kind::kBroken);
  for (Millis now : {1000, 2000}) {
    m.on_rendezvous(again, now);
    EXPECT_TRUE(is<WaitAction>(m.next(now)));
    const auto repeated = sent<MemberReport>(m);
    ASSERT_EQ(repeated.size(), 1u) << "at " << now;
    EXPECT_EQ(repeated[0].kind, MemberReport::Kind::kBroken);
    EXPECT_EQ(repeated[0].generation, 3);
    EXPECT_EQ(repeated[0].synced_generation, 3) << "the report says it synced there";
    EXPECT_EQ(repeated[0].error, first[0].error);
  }
  // An older generation's rendezvous, arriving late, is not answered.
  m.on_rendezvous({2, 0, 2, {8, 8}, 1, false}, 3000);
  EXPECT_TRUE(sent<MemberReport>(m).empty());
  // Nor is a repeat once a newer generation is pending.
  m.on_rendezvous({4, 0, 1, {16}, 1, false}, 3100);
  m.on_rendezvous(again, 3200);
  EXPECT_TRUE(sent<MemberReport>(m).empty());
}

// A restarted head asks every trainer for its committed step with a generation that leaves
// them all out. A trainer whose generation broke while the old head was down sent its report
// into the void; it answers with that report again, which says it synced there and at which
// step. A drain (leave) or a generation it takes part in asks nothing of the kind.
TEST(ElasticMember, AGenerationThatLeavesItOutGetsTheEndOfItsLastOneReportedAgain) {
  auto broken_in_4 = [](ElasticMember& m) {
    start(m, 1, 2, 0, 4);
    m.take_outbox();
    ASSERT_TRUE(is<ControlAction>(m.next(10)));
    m.control_done(false, "rank 0 process exited", {}, 10);
    ASSERT_EQ(sent<MemberReport>(m).size(), 1u);
  };
  ElasticMember drained(options(), 0);
  broken_in_4(drained);
  drained.on_rendezvous({5, -1, 0, {}, 0, true}, 2000);
  EXPECT_TRUE(sent<MemberReport>(drained).empty()) << "a drain: its done says where it stopped";

  ElasticMember m(options(), 0);
  broken_in_4(m);
  m.on_rendezvous({5, -1, 0, {}, 0, false}, 2000);
  const auto repeated = sent<MemberReport>(m);
  ASSERT_EQ(repeated.size(), 1u);
  EXPECT_EQ(repeated[0].kind, MemberReport::Kind::kBroken);
  EXPECT_EQ(repeated[0].generation, 4);
  EXPECT_EQ(repeated[0].synced_generation, 4);
  EXPECT_TRUE(is<WaitAction>(m.next(2000)));
  EXPECT_TRUE(sent<MemberReport>(m).empty());
  // A generation it is in: it joins, nothing is said again.
  m.on_rendezvous({6, 0, 1, {16}, 1, false}, 3000);
  EXPECT_TRUE(sent<MemberReport>(m).empty());
  ASSERT_TRUE(is<JoinAction>(m.next(3000)));

  // A trainer still training reports when it leaves at the step boundary, once.
  ElasticMember leader(options(), 0);
  start(leader, 0, 1, 0, 4);
  leader.take_outbox();
  leader.on_rendezvous({5, -1, 0, {}, 0, false}, 100);
  EXPECT_TRUE(sent<MemberReport>(leader).empty()) << "training: it reports when it leaves";
}

// A follower that finished (its done sent, waiting for the verdict) and is then left out of a
// newer generation says where it stopped, as a training member leaving does: a restarted head
// asks that way, its done may have gone to the dead head, and a done names no sync. Silent, it
// was not counted as holding the job's state although it was the last trainer that did, and
// the job failed. [elastic simulation seed 8979270]
TEST(ElasticMember, AFinishedMemberLeftOutOfANewerGenerationReportsWhereItStopped) {
  auto finished_in_4 = [](ElasticMember& m) {
    start(m, 1, 2, 0, 4);
    ASSERT_TRUE(is<ControlAction>(m.next(0)));
    m.control_done(true, "", {kContinue, 4, 1, 8, 8}, 0);
    ASSERT_NO_FATAL_FAILURE(commit_steps(m, {kContinue, 4, 1, 8, 8}, 3));
    ASSERT_TRUE(is<WaitAction>(m.next(10)));
    m.take_outbox();
    ASSERT_EQ(m.phase(), ElasticMember::Phase::kFinished);
  };
  ElasticMember m(options(), 0);
  finished_in_4(m);
  m.on_rendezvous({5, -1, 0, {}, 0, false}, 2000);
  EXPECT_TRUE(is<WaitAction>(m.next(2000)));
  const auto left = sent<MemberReport>(m);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].kind, MemberReport::Kind::kLeft);
  EXPECT_EQ(left[0].generation, 4);
  EXPECT_EQ(left[0].rank, 1);
  EXPECT_EQ(left[0].step, 3);
  EXPECT_EQ(left[0].synced_generation, 4);
  EXPECT_EQ(m.phase(), ElasticMember::Phase::kIdle);
  EXPECT_TRUE(is<WaitAction>(m.next(5000)));
  EXPECT_TRUE(m.take_outbox().empty()) << "its done means nothing now: not resent";
  // Asked again by a later restarted head: said again.
  m.on_rendezvous({6, -1, 0, {}, 0, false}, 6000);
  const auto again = sent<MemberReport>(m);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].kind, MemberReport::Kind::kLeft);
  EXPECT_EQ(again[0].step, 3);

  // Drained instead: its done says where it stopped.
  ElasticMember drained(options(), 0);
  finished_in_4(drained);
  drained.on_rendezvous({5, -1, 0, {}, 0, true}, 2000);
  EXPECT_TRUE(is<ExitAction>(drained.next(2000)));
  EXPECT_TRUE(sent<MemberReport>(drained).empty());
}

TEST(ElasticMember, DoneIsAReportResentUntilTheVerdict) {
  ElasticMember m(options(), 0);
  start(m, 1, 2);
  ASSERT_TRUE(is<ControlAction>(m.next(0)));
  m.control_done(true, "", {kContinue, 1, 1, 8, 8}, 0);
  ASSERT_NO_FATAL_FAILURE(commit_steps(m, {kContinue, 1, 1, 8, 8}, 3));
  m.take_outbox();
  EXPECT_TRUE(is<WaitAction>(m.next(10)));
  auto done = sent<MemberDone>(m);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].outcome, MemberDone::Outcome::kFinished);
  EXPECT_TRUE(is<WaitAction>(m.next(500)));
  EXPECT_TRUE(sent<MemberDone>(m).empty());
  EXPECT_TRUE(is<WaitAction>(m.next(1010)));
  EXPECT_EQ(sent<MemberDone>(m).size(), 1u) << "resent: the first may have been lost";
  // A newer rendezvous (the leader died at the end): it joins again and can finish the job.
  m.on_rendezvous({2, 0, 1, {16}, 2, false}, 1100);
  EXPECT_TRUE(is<JoinAction>(m.next(1100)));
  m.joined(true, "", 1100);
  m.next(1100);
  m.synced(true, "", 3, 0, 1100);
  EXPECT_TRUE(is<FinishAction>(m.next(1100)));
  m.finish_done(false, "final checkpoint failed: disk full", 1200);
  done = sent<MemberDone>(m);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_FALSE(done[0].ok);
  EXPECT_EQ(done[0].generation, 2);
  m.on_stop("job failed");
  EXPECT_TRUE(is<ExitAction>(m.next(1300)));
}

TEST(ElasticMember, DrainedLeaderReportsDrainedNotFinished) {
  ElasticMember m(options(), 0);
  start(m, 0, 2);
  m.take_outbox();
  m.on_rendezvous({2, -1, 1, {16}, 2, true}, 10);
  auto action = m.next(10);
  ASSERT_TRUE(is<ControlAction>(action));
  EXPECT_EQ(std::get<ControlAction>(action).words[0], kRegroup);
  m.control_done(true, "", {}, 10);
  ASSERT_TRUE(is<ExitAction>(m.next(10)));
  const auto done = sent<MemberDone>(m);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].outcome, MemberDone::Outcome::kDrained);
  EXPECT_EQ(done[0].generation, 1) << "its own generation, not the one it was left out of";
}

TEST(ElasticMember, AnIdleTrainerWhoseSchedulerIsGoneExits) {
  ElasticMember m(options(), 0);
  EXPECT_TRUE(is<WaitAction>(m.next(59999)));
  auto action = m.next(60000);
  ASSERT_TRUE(is<ExitAction>(action));
  EXPECT_EQ(std::get<ExitAction>(action).code, 4);
}

// A LibTorch-free replica of a world of one: the state is the step count and a checksum folded
// per committed step.
class FakeReplica : public Replica {
 public:
  Outcome join(std::int64_t, std::int32_t, std::int32_t world) override {
    if (world != 1) return {false, "the fake is a world of one"};
    return {};
  }
  Outcome sync(const SyncAction& action, std::int64_t* step, std::uint64_t* checksum) override {
    if (action.checkpoint_step >= 0) {
      // The fake's checkpoints: path -> the step it holds.
      auto file = checkpoints_.find(action.checkpoint);
      if (file == checkpoints_.end()) {
        return {false, "cannot open checkpoint " + action.checkpoint, true};
      }
      step_ = file->second;
      checksum_ = 0;
      for (std::int64_t s = 1; s <= step_; ++s) checksum_ = checksum_ * 1099511628211u + s;
    }
    *step = step_;
    *checksum = checksum_;
    return {};
  }
  std::map<std::string, std::int64_t> checkpoints_;
  Outcome control(std::vector<std::int64_t>&) override { return {}; }
  Outcome step(const std::vector<std::int32_t>& batches, std::vector<std::int64_t>& words,
               const WordsCheck& confirms, const WordsCheck& gate, std::int64_t* step) override {
    if (batches.size() != 1) return {false, "wrong batch vector"};
    if (!confirms(words)) return {};  // dropped
    if (!gate(words)) return {false, "commit refused"};
    ++step_;
    checksum_ = checksum_ * 1099511628211u + static_cast<std::uint64_t>(step_);
    *step = step_;
    return {};
  }
  Outcome finish() override {
    ++finishes_;
    return {};
  }
  std::int64_t step_ = 0;
  std::uint64_t checksum_ = 14695981039346656037u;
  int finishes_ = 0;
};

TEST(ElasticMember, DrivesAReplicaThroughAWholeJob) {
  ElasticMember m(options(), 0);
  FakeReplica replica;
  Millis now = 0;
  m.on_rendezvous({1, 0, 1, {16}, 1, false}, now);
  int exits = 0, leases = 0;
  for (int guard = 0; guard < 1000 && exits == 0; ++guard) {
    const MemberAction action = m.next(now);
    for (auto& message : m.take_outbox()) {
      if (auto* ask = std::get_if<LeaseAsk>(&message)) {
        ++leases;
        m.on_lease({ask->generation, ask->seq, true, 1000, ""}, now);
      } else if (auto* done = std::get_if<MemberDone>(&message)) {
        EXPECT_EQ(done->outcome, MemberDone::Outcome::kFinished);
        EXPECT_EQ(done->step, 3);
        m.on_stop("job succeeded");  // the scheduler's verdict
      }
    }
    if (std::holds_alternative<ExitAction>(action)) ++exits;
    if (!carry_out(
            action, replica, m, [&] { return now; }, [&](Millis) { now += 10; }))
      now += 10;
    now += 1;
  }
  EXPECT_EQ(exits, 1);
  EXPECT_EQ(replica.step_, 3);
  EXPECT_EQ(replica.finishes_, 1);
  EXPECT_GE(leases, 1);
}

// A generation that resumes from a checkpoint: rank 0 loads it in its sync, reports the loaded
// step as its committed step, and trains on from there to the end.
TEST(ElasticMember, ResumesFromTheCheckpointTheRendezvousNames) {
  ElasticMember m(options(), 0);
  FakeReplica replica;
  replica.checkpoints_["ckpt/step-2.pt"] = 2;
  Millis now = 0;
  RendezvousOrder order{4, 0, 1, {16}, 1, false};
  order.checkpoint = "ckpt/step-2.pt";
  order.checkpoint_step = 2;
  m.on_rendezvous(order, now);
  ASSERT_TRUE(is<JoinAction>(m.next(now)));
  m.joined(true, "", now);
  const MemberAction sync = m.next(now);
  ASSERT_TRUE(is<SyncAction>(sync));
  EXPECT_EQ(std::get<SyncAction>(sync).checkpoint, "ckpt/step-2.pt");
  EXPECT_EQ(std::get<SyncAction>(sync).checkpoint_step, 2);
  ASSERT_TRUE(carry_out(
      sync, replica, m, [&] { return now; }, [&](Millis) {}));
  const auto reports = sent<MemberReport>(m);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].kind, MemberReport::Kind::kSynced);
  EXPECT_EQ(reports[0].step, 2);
  EXPECT_EQ(m.step(), 2);
  int steps = 0;
  for (int guard = 0; guard < 1000 && m.phase() != ElasticMember::Phase::kFinished; ++guard) {
    const MemberAction action = m.next(now);
    for (auto& message : m.take_outbox()) {
      if (auto* ask = std::get_if<LeaseAsk>(&message)) {
        m.on_lease({ask->generation, ask->seq, true, 1000, ""}, now);
      }
    }
    steps += is<StepAction>(action) ? 1 : 0;
    if (!carry_out(
            action, replica, m, [&] { return now; }, [&](Millis) { now += 10; }))
      now += 10;
    now += 1;
  }
  EXPECT_EQ(steps, 1) << "only step 3 is left after the checkpoint at step 2";
  EXPECT_EQ(replica.step_, 3);
}

// A checkpoint that cannot be loaded is not a broken group to re-form: the member reports an
// error done, on which the scheduler fails the job with the reason.
TEST(ElasticMember, ACheckpointThatCannotBeLoadedEndsInAnErrorDone) {
  ElasticMember m(options(), 0);
  FakeReplica replica;
  Millis now = 0;
  RendezvousOrder order{4, 0, 1, {16}, 1, false};
  order.checkpoint = "ckpt/missing.pt";
  order.checkpoint_step = 2;
  m.on_rendezvous(order, now);
  ASSERT_TRUE(is<JoinAction>(m.next(now)));
  m.joined(true, "", now);
  ASSERT_TRUE(carry_out(
      m.next(now), replica, m, [&] { return now; }, [&](Millis) {}));
  const auto dones = sent<MemberDone>(m);
  ASSERT_EQ(dones.size(), 1u);
  EXPECT_EQ(dones[0].outcome, MemberDone::Outcome::kError);
  EXPECT_FALSE(dones[0].ok);
  EXPECT_NE(dones[0].error.find("ckpt/missing.pt"), std::string::npos) << dones[0].error;
  EXPECT_EQ(m.phase(), ElasticMember::Phase::kFinished);
}

}  // namespace
}  // namespace omnilearn::scheduler
