// ElasticJob, the scheduler's side of the elastic protocol, one rule at a time with a fake
// clock (plain numbers). The simulation (elastic_simulation_test.cpp) checks the rules together.
#include "elastic/elastic_job.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <set>
#include <string>

namespace omnilearn::scheduler {
namespace {

// A job of min..max workers and `total_steps` steps; the other options as by default.
ElasticJobOptions job_options(std::int32_t min_workers, std::int32_t max_workers,
                              std::int64_t total_steps) {
  ElasticJobOptions o;
  o.min_workers = min_workers;
  o.max_workers = max_workers;
  o.total_steps = total_steps;
  return o;
}

ElasticJob make_job(ElasticJobOptions o) {
  return ElasticJob(o, [](const std::vector<std::string>& members) {
    GenerationPlan plan;
    plan.batches.assign(members.size(), static_cast<std::int32_t>(64 / members.size()));
    plan.version = 1;
    return plan;
  });
}

// A job started on `nodes` live nodes n1 (w1), n2 (w2), ... at time 0.
ElasticJob started_job(ElasticJobOptions o, int nodes) {
  ElasticJob job = make_job(o);
  for (int i = 1; i <= nodes; ++i) {
    job.node_up("n" + std::to_string(i), "w" + std::to_string(i), 0);
  }
  job.start(0);
  return job;
}

template <class C>
std::vector<C> commands_of(ElasticJob& job) {
  std::vector<C> out;
  for (auto& command : job.take_commands()) {
    if (auto* c = std::get_if<C>(&command)) out.push_back(*c);
  }
  return out;
}

// A trainer that cannot start (a model file missing on the worker, say) is retried with a
// back-off, and a job whose trainers keep failing to start fails with the reason instead of
// staying pending.
TEST(ElasticJob, TrainersThatCannotStartAreRetriedWithBackOffThenFailTheJob) {
  ElasticJobOptions o = job_options(1, 1, 10);
  o.backoff_initial = 500;
  o.max_start_failures = 4;
  ElasticJob job = make_job(o);
  job.node_up("n1", "w1", 0);
  job.start(0);
  Millis now = 0;
  std::vector<Millis> spawned_at;
  for (int attempt = 0; attempt < 10 && !job.finished(); ++attempt) {
    auto spawns = commands_of<SpawnCommand>(job);
    if (spawns.empty()) {
      now += 100;
      job.tick(now);
      --attempt;
      continue;
    }
    ASSERT_EQ(spawns.size(), 1u);
    spawned_at.push_back(now);
    job.trainer_exited(spawns[0].trainer, 1, "cannot open model.pt: no such file", now + 10);
  }
  ASSERT_TRUE(job.finished());
  EXPECT_EQ(job.state(), "failed");
  EXPECT_NE(job.reason().find("trainers cannot start"), std::string::npos) << job.reason();
  EXPECT_NE(job.reason().find("cannot open model.pt"), std::string::npos) << job.reason();
  ASSERT_EQ(spawned_at.size(), 4u);
  // 500, 1000, 2000 ms between attempts (+ the tick granularity).
  EXPECT_GE(spawned_at[1] - spawned_at[0], 500);
  EXPECT_GE(spawned_at[2] - spawned_at[1], 1000);
  EXPECT_GE(spawned_at[3] - spawned_at[2], 2000);
}

// A node whose trainers keep dying after they synced (a broken device, a node slowed for good
// whose trainers are found hung): one loss is replaced at once; from the second within
// lost_memory the node is held back for backoff_initial, doubling, while the job trains
// elsewhere, and the hold never keeps the job below min_workers.
struct CrashingNode {
  ElasticJob job;
  Millis now = 0;
  std::int64_t step = 0;
  std::vector<SpawnCommand> spawns;  // since the last crash
  std::vector<JobEvent> held;        // node_held_back events since the last crash
  Millis crashed_at = 0;

  // The current generation's members sync, and its leader commits a step.
  void train() {
    const std::int64_t g = job.generation();
    const auto members = job.members();
    if (members.empty()) return;  // too few trainers to form one (min_workers)
    for (std::size_t r = 0; r < members.size(); ++r) {
      job.report(members[r],
                 {MemberReport::Kind::kSynced, g, static_cast<std::int32_t>(r), step, "", 0},
                 now += 10);
    }
    job.lease_request(members[0], {g, step + 1, 0}, now += 10);
    job.report(members[0], {MemberReport::Kind::kStep, g, 0, ++step, "", 0}, now += 10);
    job.take_commands();
  }
  // `trainer` joins, trains a step in a generation with the others, and crashes.
  void join_train_crash(const std::string& trainer) {
    job.hello(trainer, now += 10);
    train();
    ASSERT_GE(job.trainers().at(trainer).rank, 0) << trainer << " is a member";
    job.trainer_exited(trainer, 134, "aborted: device lost", crashed_at = now += 10);
    spawns.clear();
    held.clear();
    for (auto& command : job.take_commands()) {
      if (auto* s = std::get_if<SpawnCommand>(&command)) spawns.push_back(*s);
      if (auto* e = std::get_if<JobEvent>(&command); e && e->kind == "node_held_back") {
        held.push_back(*e);
      }
    }
    train();  // the others go on
  }
};

CrashingNode crashing_node(std::int32_t min_workers, std::string& on_n2) {
  ElasticJobOptions o = job_options(min_workers, 2, 1000);
  o.backoff_initial = 500;
  CrashingNode c{started_job(o, 2)};
  for (const auto& s : commands_of<SpawnCommand>(c.job)) {
    c.job.hello(s.trainer, c.now += 1);
    if (s.node == "n2") on_n2 = s.trainer;
  }
  c.train();
  return c;
}

TEST(ElasticJob, ANodeThatKeepsLosingTrainersIsHeldBackWhileTheJobTrainsElsewhere) {
  std::string on_n2;
  CrashingNode c = crashing_node(1, on_n2);
  ASSERT_FALSE(on_n2.empty());
  ASSERT_NO_FATAL_FAILURE(c.join_train_crash(on_n2));
  ASSERT_EQ(c.spawns.size(), 1u) << "one loss is replaced at once";
  EXPECT_EQ(c.spawns[0].node, "n2");
  EXPECT_TRUE(c.held.empty());

  Millis expected_hold = 500;
  for (int loss = 2; loss <= 4; ++loss, expected_hold *= 2) {
    const std::string trainer = c.spawns.at(0).trainer;
    ASSERT_NO_FATAL_FAILURE(c.join_train_crash(trainer));
    const Millis lost_at = c.crashed_at;
    ASSERT_EQ(c.held.size(), 1u) << "loss " << loss;
    EXPECT_EQ(c.held[0].trainer, trainer);
    EXPECT_EQ(c.held[0].losses, loss);
    EXPECT_DOUBLE_EQ(c.held[0].seconds, static_cast<double>(expected_hold) / 1000.0);
    EXPECT_NE(c.held[0].reason.find("device lost"), std::string::npos) << c.held[0].reason;
    EXPECT_TRUE(c.spawns.empty()) << "n2 is held back while the other trains (loss " << loss << ")";
    c.job.tick(lost_at + expected_hold - 1);
    EXPECT_TRUE(commands_of<SpawnCommand>(c.job).empty()) << "loss " << loss;
    c.now = lost_at + expected_hold;
    c.job.tick(c.now);
    c.spawns = commands_of<SpawnCommand>(c.job);
    ASSERT_EQ(c.spawns.size(), 1u)
        << "after the hold n2 gets a trainer again (loss " << loss << ")";
    EXPECT_EQ(c.spawns[0].node, "n2");
  }
  EXPECT_FALSE(c.job.finished());
}

TEST(ElasticJob, AHeldBackNodeStillGetsATrainerWhenTheJobNeedsIt) {
  std::string on_n2;
  CrashingNode c = crashing_node(2, on_n2);
  ASSERT_FALSE(on_n2.empty());
  ASSERT_NO_FATAL_FAILURE(c.join_train_crash(on_n2));
  ASSERT_EQ(c.spawns.size(), 1u);
  ASSERT_NO_FATAL_FAILURE(c.join_train_crash(c.spawns[0].trainer));
  EXPECT_TRUE(c.held.empty()) << "no hold, so no node_held_back event";
  ASSERT_EQ(c.spawns.size(), 1u) << "min_workers 2: the job cannot train without n2";
  EXPECT_EQ(c.spawns[0].node, "n2");
}

// The head died right after starting the trainers, and they gave their hellos up while it was
// down. Their exits reach the next head: no failed starts (neither the nodes nor the job's
// files are to blame), so the job starts new trainers instead of failing. A trainer that the
// restored head started and that fails to start counts as before.
TEST(ElasticJob, TrainersThatGaveUpOnADeadHeadAreNoFailedStarts) {
  ElasticJobOptions o = job_options(2, 3, 10);
  o.max_start_failures = 3;
  ElasticJob first = started_job(o, 3);
  const auto spawns = commands_of<SpawnCommand>(first);
  ASSERT_EQ(spawns.size(), 3u);
  const ElasticJobSnapshot snap = first.snapshot();

  ElasticJob second = make_job(o);
  for (int i = 1; i <= 3; ++i) second.node_up("n" + std::to_string(i), "w" + std::to_string(i), 5000);
  second.restore(snap, 5000);
  second.take_commands();
  for (const auto& spawn : spawns) {
    second.trainer_exited(spawn.trainer, 3, "no answer from the scheduler", 5100);
  }
  EXPECT_FALSE(second.finished()) << second.reason();
  std::vector<SpawnCommand> again;
  for (Millis now = 5100; now < 8000 && again.size() < 3; now += 100) {
    second.tick(now);
    for (const auto& c : commands_of<SpawnCommand>(second)) again.push_back(c);
  }
  ASSERT_EQ(again.size(), 3u) << "every node gets a new trainer";

  for (const auto& spawn : again) second.trainer_exited(spawn.trainer, 1, "cannot start", 8100);
  ASSERT_TRUE(second.finished());
  EXPECT_EQ(second.state(), "failed");
  EXPECT_NE(second.reason().find("trainers cannot start: 3"), std::string::npos) << second.reason();
}

// An error in the job's own input (exit code kTrainerExitBadInput) fails the job at once with
// the trainer's message: another start could not end differently.
TEST(ElasticJob, ATrainerThatFailsOnBadInputFailsTheJobWithoutRetrying) {
  ElasticJobOptions o = job_options(1, 1, 10);
  ElasticJob job = started_job(o, 1);
  auto spawns = commands_of<SpawnCommand>(job);
  ASSERT_EQ(spawns.size(), 1u);
  job.trainer_exited(spawns[0].trainer, kTrainerExitBadInput,
                     "train.pt: label 12 is out of range [0, 10)", 10);
  ASSERT_TRUE(job.finished());
  EXPECT_EQ(job.state(), "failed");
  EXPECT_NE(job.reason().find("label 12 is out of range"), std::string::npos) << job.reason();
  for (Millis now = 100; now < 5000; now += 100) job.tick(now);
  EXPECT_TRUE(commands_of<SpawnCommand>(job).empty()) << "retried";
}

// The same when a probe found the process gone before its agent's exit report came (a message
// to the trainer was refused at once): the report's bad input still fails the job, instead of
// the replacement failing the same way first.
TEST(ElasticJob, ABadInputExitFailsTheJobEvenAfterAProbeFoundTheProcessGone) {
  ElasticJobOptions o = job_options(1, 1, 10);
  ElasticJob job = started_job(o, 1);
  auto spawns = commands_of<SpawnCommand>(job);
  ASSERT_EQ(spawns.size(), 1u);
  ASSERT_TRUE(job.hello(spawns[0].trainer, 5));
  job.take_commands();
  job.probe_result(spawns[0].trainer, job.generation(), false, "peer unreachable", 10, true);
  EXPECT_EQ(job.trainers().at(spawns[0].trainer).phase, ElasticJob::Phase::kGone);
  EXPECT_FALSE(job.finished());
  job.take_commands();
  job.trainer_exited(spawns[0].trainer, kTrainerExitBadInput,
                     "train.pt: label 12 is out of range [0, 10)", 20);
  ASSERT_TRUE(job.finished());
  EXPECT_EQ(job.state(), "failed");
  EXPECT_NE(job.reason().find("label 12 is out of range"), std::string::npos) << job.reason();
}

// A node drained before it came up (`omnilearn node drain` holds for later jobs) gets no
// trainer until it is undrained; then it gets one.
TEST(ElasticJob, ANodeUpDrainedGetsTrainersOnlyOnceUndrained) {
  ElasticJobOptions o = job_options(1, 2, 10);
  ElasticJob job = make_job(o);
  job.node_up("n1", "w1", 0, /*draining=*/true);
  job.start(0);
  EXPECT_TRUE(commands_of<SpawnCommand>(job).empty());
  job.node_up("n1", "w1", 50);  // a later "alive" does not undo the drain
  EXPECT_TRUE(commands_of<SpawnCommand>(job).empty());
  job.undrain("w1", 100);
  const auto spawns = commands_of<SpawnCommand>(job);
  ASSERT_EQ(spawns.size(), 1u);
  EXPECT_EQ(spawns[0].node, "n1");
}

// A job that needs more workers than the cluster has fails within its bound, and the reason
// says how many nodes could take a trainer (a drained one cannot).
TEST(ElasticJob, TooFewNodesFailsTheJobSayingHowManyWereUsable) {
  ElasticJobOptions o = job_options(3, 3, 10);
  ElasticJob job = started_job(o, 3);
  job.drain("w3", 0);
  const Millis bound = o.grace_period + o.form_timeout + o.spawn_timeout;
  Millis now = 0;
  while (!job.finished() && now <= bound + 1000) {
    now += 100;
    job.tick(now);
  }
  ASSERT_TRUE(job.finished()) << "still pending after " << now << " ms";
  EXPECT_EQ(job.state(), "failed");
  std::printf("too few nodes: %s after %lld ms\n", job.reason().c_str(),
              static_cast<long long>(now));
  EXPECT_NE(job.reason().find("fewer than min_workers (3)"), std::string::npos) << job.reason();
  EXPECT_NE(job.reason().find("(2 usable nodes in the cluster)"), std::string::npos)
      << job.reason();
}

// Only the current generation's leader reporting its last step ends a job as succeeded: a
// drained leader's done is not the end (drain of rank 0 ended a job early).
TEST(ElasticJob, ADrainedLeadersDoneDoesNotEndTheJob) {
  ElasticJobOptions o = job_options(1, 2, 100);
  ElasticJob job = started_job(o, 2);
  auto spawns = commands_of<SpawnCommand>(job);
  ASSERT_EQ(spawns.size(), 2u);
  for (const auto& s : spawns) EXPECT_TRUE(job.hello(s.trainer, 1));
  auto rendezvous = commands_of<RendezvousCommand>(job);
  ASSERT_EQ(rendezvous.size(), 2u);
  const std::string leader = job.members()[0];
  MemberDone drained;
  drained.outcome = MemberDone::Outcome::kDrained;
  drained.generation = job.generation();
  drained.rank = 0;
  drained.step = 37;
  job.done(leader, drained, 10);
  EXPECT_FALSE(job.finished()) << job.state();
}

// A killed follower: the survivor's collective breaks, the scheduler probes both, the dead one
// fails at once and the survivor answers, all within one millisecond (loopback). The dead one
// is written off and a generation forms at once, without waiting for heartbeats. (Ordering the
// evidence by the clock missed this: the answer came in the millisecond the probe left.)
TEST(ElasticJob, AKilledMemberIsWrittenOffWhenTheSurvivorAnswersInTheSameMillisecond) {
  ElasticJobOptions o = job_options(1, 2, 100);
  ElasticJob job = make_job(o);
  job.node_up("n1", "w1", 0);
  job.node_up("n2", "w2", 0);
  job.start(0);
  for (const auto& s : commands_of<SpawnCommand>(job)) ASSERT_TRUE(job.hello(s.trainer, 1));
  const std::vector<std::string> members = job.members();
  ASSERT_EQ(members.size(), 2u);
  const std::int64_t g = job.generation();
  job.take_commands();
  for (std::int32_t r = 0; r < 2; ++r) {
    job.report(members[static_cast<size_t>(r)], {MemberReport::Kind::kSynced, g, r, 0, "", 0}, 2);
  }
  job.lease_request(members[0], {g, 1, 0}, 2);
  job.report(members[0], {MemberReport::Kind::kStep, g, 0, 5, "", 0}, 50);
  job.take_commands();
  const std::string survivor = members[0], dead = members[1];
  job.report(survivor, {MemberReport::Kind::kBroken, g, 0, 5, "peer closed", 0}, 100);
  ASSERT_EQ(commands_of<ProbeCommand>(job).size(), 2u);
  job.probe_result(dead, g, false, "peer unreachable", 100);
  job.probe_result(survivor, g, true, "", 100);
  EXPECT_EQ(job.trainers().at(dead).phase, ElasticJob::Phase::kGone);
  EXPECT_GT(job.generation(), g) << "a generation without the dead one forms at once";
  EXPECT_EQ(job.members(), std::vector<std::string>{survivor});
}

// A job started on `nodes` nodes whose first generation synced at step 0 (every member said
// so), its leader under a lease.
struct LeasedJob {
  ElasticJob job;
  std::vector<std::string> members;
  std::int64_t generation = 0;
};
LeasedJob synced_and_leased(ElasticJobOptions o, int nodes) {
  LeasedJob t{started_job(o, nodes), {}, 0};
  for (const auto& s : commands_of<SpawnCommand>(t.job)) t.job.hello(s.trainer, 1);
  t.members = t.job.members();
  t.generation = t.job.generation();
  t.job.take_commands();
  if (t.members.empty()) return t;  // the caller's ASSERT says so
  for (std::size_t r = 0; r < t.members.size(); ++r) {
    t.job.report(t.members[r],
                 {MemberReport::Kind::kSynced, t.generation, static_cast<std::int32_t>(r), 0, "",
                  0},
                 2);
  }
  t.job.lease_request(t.members[0], {t.generation, 1, 0}, 2);
  return t;
}

// Two trainers on w1 and w2 that synced in the first generation, the leader under a lease
// and past `steps` committed steps (the follower's heartbeats say the same).
LeasedJob leased_job(ElasticJobOptions o, std::int64_t steps) {
  LeasedJob t = synced_and_leased(o, 2);
  if (t.members.size() != 2) return t;  // the caller's ASSERT says so
  t.job.report(t.members[0], {MemberReport::Kind::kStep, t.generation, 0, steps, "", 0}, 50);
  t.job.progress(t.members[1], steps);
  t.job.take_commands();
  return t;
}

// The last step is committed and the leader evaluates and writes the final checkpoint, which
// may take long: quiet is no disruption then, and members that answer their probes change
// nothing. But a leader that died there while its agent's exit report was lost would keep the
// job waiting for its done until the job failed: quiet members are probed once every
// stall_probe_after(), and a leader found gone is written off, so that the job goes on without
// it.
TEST(ElasticJob, AJobFinishingProbesItsQuietMembers) {
  for (const bool leader_gone : {false, true}) {
    SCOPED_TRACE(leader_gone ? "the leader is gone" : "both answer");
    ElasticJobOptions o = job_options(1, 2, 20);
    LeasedJob t = leased_job(o, 20);
    ASSERT_EQ(t.members.size(), 2u);
    const std::string leader = t.members[0], follower = t.members[1];
    const Millis quiet = t.job.stall_probe_after();
    t.job.tick(50 + quiet);
    EXPECT_TRUE(commands_of<ProbeCommand>(t.job).empty()) << "not quiet for long yet";
    t.job.tick(51 + quiet);
    EXPECT_EQ(commands_of<ProbeCommand>(t.job).size(), 2u);
    t.job.tick(52 + quiet);
    EXPECT_TRUE(commands_of<ProbeCommand>(t.job).empty()) << "once per quiet period";
    const Millis now = 60 + quiet;
    t.job.probe_result(follower, t.generation, true, "", now);
    t.job.probe_result(leader, t.generation, !leader_gone, leader_gone ? "peer unreachable" : "",
                       now, leader_gone);
    EXPECT_FALSE(t.job.finished());
    if (!leader_gone) {
      EXPECT_EQ(t.job.generation(), t.generation) << "an answer changes nothing";
      t.job.tick(52 + 2 * quiet);
      EXPECT_EQ(commands_of<ProbeCommand>(t.job).size(), 2u) << "probed again while quiet";
      continue;
    }
    EXPECT_EQ(t.job.trainers().at(leader).phase, ElasticJob::Phase::kGone);
    EXPECT_GT(t.job.generation(), t.generation) << "the job goes on without it";
    EXPECT_EQ(t.job.members(), std::vector<std::string>{follower});
  }
}

// A trainer that hangs (SIGSTOP, a stuck call) while its agent keeps sending heartbeats holds
// its peers in their exchange and tells nobody. A generation without progress for
// stall_probe_after() has its members probed. Members that all answer change nothing (a long
// step or checkpoint: a probe is answered by the trainer's runtime, not its training loop). A
// member that misses its probe while the other holder answered is written off, and the
// generation re-forms without it, long before the 30 s a collective or a formation waits. It
// may hold the only copy of the state, so its stop waits until a generation without it trains.
TEST(ElasticJob, AHungMemberOfAQuietGenerationIsProbedAndLeftBehind) {
  for (const bool leader_hangs : {false, true}) {
    SCOPED_TRACE(leader_hangs ? "the leader hangs" : "the follower hangs");
    ElasticJobOptions o = job_options(1, 2, 100);
    LeasedJob t = leased_job(o, 10);  // the step report of step 10 at 50 ms
    ASSERT_EQ(t.members.size(), 2u);
    const std::string hung = t.members[leader_hangs ? 0 : 1];
    const std::string alive = t.members[leader_hangs ? 1 : 0];
    const Millis quiet = t.job.stall_probe_after();
    EXPECT_LT(quiet, o.form_timeout);

    // A quiet period in which both answer: nothing changes.
    t.job.tick(50 + quiet);
    EXPECT_TRUE(commands_of<ProbeCommand>(t.job).empty()) << "not quiet for long yet";
    t.job.tick(51 + quiet);
    ASSERT_EQ(commands_of<ProbeCommand>(t.job).size(), 2u);
    for (const auto& name : t.members) t.job.probe_result(name, t.generation, true, "", 60 + quiet);
    EXPECT_EQ(t.job.generation(), t.generation) << "answers change nothing";
    EXPECT_TRUE(commands_of<RendezvousCommand>(t.job).empty());

    // The next quiet period: the hung one's probe times out.
    t.job.tick(52 + 2 * quiet);
    ASSERT_EQ(commands_of<ProbeCommand>(t.job).size(), 2u) << "probed again while quiet";
    const Millis now = 60 + 2 * quiet;
    t.job.probe_result(alive, t.generation, true, "", now);
    t.job.probe_result(hung, t.generation, false, "no reply within 1000 ms", now + 1000);
    EXPECT_EQ(t.job.trainers().at(hung).phase, ElasticJob::Phase::kGone);
    EXPECT_GT(t.job.generation(), t.generation) << "re-formed without it";
    EXPECT_EQ(t.job.members(), std::vector<std::string>{alive});
    for (const auto& stop : commands_of<StopCommand>(t.job)) {
      EXPECT_NE(stop.trainer, hung) << "its stop waits: it may hold the only copy of the state";
    }
    EXPECT_FALSE(t.job.finished());
  }
}

// The head's own network goes down: every member of the generation misses its probe, none is
// written off (each may hold the state), and when the link returns the first one heard must not
// get the others written off for probes that went into the same outage. They are asked again;
// one that answers stays, one that misses this probe too goes as before.
TEST(ElasticJob, MissedProbesOfAGenerationNobodyAnsweredAreAskedAgain) {
  for (const bool follower_answers : {true, false}) {
    SCOPED_TRACE(follower_answers ? "the follower answers again" : "the follower is gone");
    LeasedJob t = leased_job(job_options(1, 2, 100), 10);
    ASSERT_EQ(t.members.size(), 2u);
    const std::string leader = t.members[0], follower = t.members[1];
    const Millis quiet = t.job.stall_probe_after();
    t.job.tick(51 + quiet);
    ASSERT_EQ(commands_of<ProbeCommand>(t.job).size(), 2u);
    Millis now = 1051 + quiet;
    t.job.probe_result(leader, t.generation, false, "no reply within 1000 ms", now);
    t.job.probe_result(follower, t.generation, false, "no reply within 1000 ms", now);
    EXPECT_EQ(t.job.members(), t.members) << "nobody answered: nobody is written off";
    EXPECT_EQ(t.job.generation(), t.generation);

    now += 500;  // the link is back: the leader's report of its next step arrives first
    t.job.report(leader, {MemberReport::Kind::kStep, t.generation, 0, 11, "", 0}, now);
    std::vector<std::string> probed;
    for (auto& c : t.job.take_commands()) {
      if (auto* p = std::get_if<ProbeCommand>(&c)) probed.push_back(p->trainer);
      if (auto* e = std::get_if<JobEvent>(&c)) {
        EXPECT_NE(e->kind, "trainer_gone") << e->trainer << ": " << e->reason;
      }
    }
    EXPECT_EQ(probed, std::vector<std::string>{follower}) << "asked again";
    EXPECT_EQ(t.job.trainers().at(follower).phase, ElasticJob::Phase::kMember);
    EXPECT_EQ(t.job.generation(), t.generation);

    now += follower_answers ? 5 : 1000;
    t.job.probe_result(follower, t.generation, follower_answers, "no reply within 1000 ms", now);
    if (follower_answers) {
      EXPECT_EQ(t.job.members(), t.members);
      EXPECT_EQ(t.job.generation(), t.generation);
    } else {
      EXPECT_EQ(t.job.trainers().at(follower).phase, ElasticJob::Phase::kGone)
          << "the leader answered since: the follower's miss counts";
      EXPECT_EQ(t.job.members(), std::vector<std::string>{leader});
    }
  }
}

// A generation formed because a member was lost tells its trainers they may give up their
// waits in the old one (abandon_previous), but not while the old lease may still be used: a
// follower that gives up leaves its data in flight, the leader's exchange completes with it,
// and the leader commits that step alone under its lease while the next generation to form
// syncs from the follower a step behind. Its leader named in the new generation does not make
// that safe: the new generation may never form with it. Told again once the lease is over (a
// late exchange then needs a renewal, which is refused).
TEST(ElasticJob, AbandoningTheOldGenerationWaitsForItsLease) {
  const auto abandons = [](const std::vector<RendezvousCommand>& orders, const std::string& to) {
    for (const auto& rv : orders) {
      if (rv.trainer == to) return std::optional<bool>(rv.order.abandon_previous);
    }
    return std::optional<bool>();
  };
  {
    SCOPED_TRACE("the leader's node declared dead while its lease holds");
    ElasticJobOptions o = job_options(1, 2, 100);
    LeasedJob t = leased_job(o, 10);  // the lease granted at 2 ms for lease_duration
    ASSERT_EQ(t.members.size(), 2u);
    const std::string leader = t.members[0], follower = t.members[1];
    const Millis lease_over = 2 + o.lease_duration + o.lease_margin;
    t.job.node_down(t.job.trainers().at(leader).node, "no heartbeat", 500);
    ASSERT_GT(t.job.generation(), t.generation);
    EXPECT_EQ(abandons(commands_of<RendezvousCommand>(t.job), follower), false)
        << "the cut-off leader may still commit under its lease";
    t.job.tick(lease_over);
    EXPECT_EQ(abandons(commands_of<RendezvousCommand>(t.job), follower), std::nullopt);
    t.job.tick(lease_over + 1);
    const auto again = commands_of<RendezvousCommand>(t.job);
    EXPECT_EQ(abandons(again, follower), true) << "told again once the lease is over";
    for (const auto& rv : again) EXPECT_EQ(rv.order.generation, t.job.generation());
    // The rendezvous said again to a member that has not synced says so too.
    t.job.tick(lease_over + 2000);
    EXPECT_EQ(abandons(commands_of<RendezvousCommand>(t.job), follower), true);
  }
  {
    SCOPED_TRACE("a follower lost, the lease holder in the new generation");
    ElasticJobOptions o = job_options(1, 2, 100);
    LeasedJob t = leased_job(o, 10);
    ASSERT_EQ(t.members.size(), 2u);
    const std::string leader = t.members[0], follower = t.members[1];
    const Millis lease_over = 2 + o.lease_duration + o.lease_margin;
    t.job.node_down(t.job.trainers().at(follower).node, "no heartbeat", 500);
    ASSERT_GT(t.job.generation(), t.generation);
    EXPECT_EQ(t.job.members(), std::vector<std::string>{leader});
    EXPECT_EQ(abandons(commands_of<RendezvousCommand>(t.job), leader), false);
    t.job.tick(lease_over + 1);
    EXPECT_EQ(abandons(commands_of<RendezvousCommand>(t.job), leader), true);
  }
  {
    SCOPED_TRACE("the leader's process gone: its lease released at once");
    ElasticJobOptions o = job_options(1, 2, 100);
    LeasedJob t = leased_job(o, 10);
    ASSERT_EQ(t.members.size(), 2u);
    const std::string leader = t.members[0], follower = t.members[1];
    t.job.trainer_exited(leader, 137, "killed by signal 9", 500);
    ASSERT_GT(t.job.generation(), t.generation);
    EXPECT_EQ(abandons(commands_of<RendezvousCommand>(t.job), follower), true);
  }
}

// The leader, frozen, is written off and a generation forms without it from step 10. Thawed, it
// completes its last exchange late and commits step 11 under a renewed lease before it dies,
// and its report of step 11 reaches the head after the new generation formed. That generation
// holds step 10 only: leased, it would commit another step 11 (a fork). Its leader's lease is
// refused for good.
TEST(ElasticJob, AGenerationBehindTheJobsCommittedStepGetsNoLease) {
  ElasticJobOptions o = job_options(1, 2, 100);
  LeasedJob t = leased_job(o, 10);
  ASSERT_EQ(t.members.size(), 2u);
  const std::string old_leader = t.members[0], follower = t.members[1];
  t.job.node_down(t.job.trainers().at(old_leader).node, "no heartbeat", 3000);
  t.job.take_commands();
  const std::int64_t g2 = t.job.generation();
  ASSERT_GT(g2, t.generation);
  ASSERT_EQ(t.job.members(), std::vector<std::string>{follower});
  t.job.report(follower, {MemberReport::Kind::kSynced, g2, 0, 10, "", 0}, 3010);
  t.job.report(old_leader, {MemberReport::Kind::kStep, t.generation, 0, 11, "", 0}, 3020);
  ASSERT_EQ(t.job.committed_step(), 11);
  t.job.take_commands();
  t.job.lease_request(follower, {g2, 1, 10}, 5000);  // the old lease long run out
  const auto leases = commands_of<LeaseCommand>(t.job);
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_FALSE(leases[0].answer.granted);
  EXPECT_TRUE(leases[0].answer.superseded);
  EXPECT_NE(leases[0].answer.reason.find("behind the job's committed step 11"), std::string::npos)
      << leases[0].answer.reason;
}

// A follower frozen in the middle of a step's exchange, its leader drained: the leader's
// collective times out and it reports step 30, the follower's node is declared dead, and a
// generation forms from the drained leader alone and is leased at step 30. Then the follower
// thaws: the exchange its leader gave up on completes for it from the data left in flight, so
// it commits step 31 alone, and it syncs alone in the stale generation it was last told of,
// as its rank 0. That generation can never be leased: what it reports is not the job's step
// (counted, the job believed a step 31 that the leased generation then commits differently),
// nor can its done end the job. [fix: elastic simulation seed 7310887]
TEST(ElasticJob, AGenerationOlderThanTheLeasedOneReportsNoStepOfTheJob) {
  ElasticJobOptions o = job_options(1, 2, 31);
  LeasedJob t = leased_job(o, 30);
  ASSERT_EQ(t.members.size(), 2u);
  const std::string leader = t.members[0], follower = t.members[1];
  const std::string leader_node = t.job.trainers().at(leader).node;
  const std::string follower_node = t.job.trainers().at(follower).node;
  ASSERT_EQ(t.job.drain(leader_node, 100), 1);
  // Every member stops to report its committed step; the follower, frozen, does not answer.
  t.job.report(leader, {MemberReport::Kind::kLeft, t.generation, 0, 30, "", 0, t.generation}, 110);
  std::int64_t stale = -1;
  for (Millis now = 200; now < 20000 && stale < 0; now += 100) {
    t.job.tick(now);
    for (const auto& rv : commands_of<RendezvousCommand>(t.job)) {
      if (rv.trainer == follower && rv.order.rank == 0) stale = rv.order.generation;
    }
  }
  ASSERT_GT(stale, t.generation) << "the follower is told to lead a generation of its own";
  t.job.node_down(follower_node, "no heartbeat", 20000);
  std::int64_t leased = -1;
  for (Millis now = 20000; now < 40000 && leased < 0; now += 100) {
    t.job.tick(now);
    for (const auto& rv : commands_of<RendezvousCommand>(t.job)) {
      if (rv.trainer != leader || rv.order.rank != 0) continue;
      t.job.report(leader, {MemberReport::Kind::kSynced, rv.order.generation, 0, 30, "", 0,
                            rv.order.generation}, now);
      t.job.lease_request(leader, {rv.order.generation, 2, 30}, now);
      for (const auto& l : commands_of<LeaseCommand>(t.job)) {
        if (l.answer.granted) leased = l.answer.generation;
      }
    }
  }
  ASSERT_GT(leased, stale) << "the drained leader's generation is leased at step 30";
  ASSERT_EQ(t.job.committed_step(), 30);
  // The follower thaws, commits step 31 alone and syncs in the stale generation as its rank 0.
  t.job.report(follower, {MemberReport::Kind::kBroken, t.generation, 1, 31, "timeout", 0,
                          t.generation}, 40100);
  t.job.report(follower, {MemberReport::Kind::kSynced, stale, 0, 31, "", 0, stale}, 40100);
  t.job.report(follower, {MemberReport::Kind::kLeft, stale, 0, 31, "", 0, stale}, 40110);
  EXPECT_EQ(t.job.committed_step(), 30);
  t.job.done(follower, {MemberDone::Outcome::kFinished, stale, 0, 31, "", true}, 40120);
  EXPECT_FALSE(t.job.finished()) << t.job.reason();
  EXPECT_EQ(t.job.committed_step(), 30);
  // The leased generation's own step 31 is the job's, and its done ends the job.
  t.job.report(leader, {MemberReport::Kind::kStep, leased, 0, 31, "", 0, leased}, 40200);
  EXPECT_EQ(t.job.committed_step(), 31);
  t.job.done(leader, {MemberDone::Outcome::kFinished, leased, 0, 31, "", true}, 40300);
  EXPECT_TRUE(t.job.finished());
  EXPECT_EQ(t.job.state(), "succeeded") << t.job.reason();
}

// A generation that did not form in time keeps the members holding the job's state for the
// retry, and asks whether they are still there: one killed while its exit report was lost (a
// partition) would otherwise be retried until the job failed.
TEST(ElasticJob, AHolderKeptAfterAFailedFormationIsProbed) {
  ElasticJobOptions o = job_options(1, 2, 100);
  LeasedJob t = leased_job(o, 7);
  ASSERT_EQ(t.members.size(), 2u);
  const std::string leader = t.members[0], follower = t.members[1];
  t.job.drain(t.job.trainers().at(follower).node, 60);  // the leader alone in the next one
  t.job.report(follower, {MemberReport::Kind::kLeft, t.generation, 1, 7, "", 0}, 70);
  t.job.report(leader, {MemberReport::Kind::kLeft, t.generation, 0, 7, "", 0}, 70);
  t.job.tick(80);
  const std::int64_t formed = t.job.generation();
  ASSERT_GT(formed, t.generation);
  ASSERT_EQ(t.job.members(), std::vector<std::string>{leader});
  t.job.take_commands();
  t.job.tick(81 + o.form_timeout);  // the leader never synced in it: killed, its exit lost
  const auto probes = commands_of<ProbeCommand>(t.job);
  ASSERT_EQ(probes.size(), 1u);
  EXPECT_EQ(probes[0].trainer, leader);
  t.job.probe_result(leader, formed, false, "peer unreachable", 90 + o.form_timeout, true);
  EXPECT_EQ(t.job.trainers().at(leader).phase, ElasticJob::Phase::kGone);
}

// The head died after the first generation was formed and before any lease was granted (a
// grant is written before it is sent): nothing was committed, so the restored job knows that
// every trainer holds the initial state and forms a generation, instead of waiting for reports
// that may never come (the trainers died, their exits lost) until it failed.
TEST(ElasticJob, ARestoredJobThatNeverCommittedStartsWithoutReports) {
  ElasticJobOptions o = job_options(2, 2, 100);
  ElasticJob first = started_job(o, 2);
  for (const auto& s : commands_of<SpawnCommand>(first)) first.hello(s.trainer, 1);
  const auto members = first.members();
  ASSERT_EQ(members.size(), 2u);
  const ElasticJobSnapshot snap = first.snapshot();
  ASSERT_EQ(snap.lease_generation, 0);

  ElasticJob second = make_job(o);
  second.node_up("n1", "w1", 5000);
  second.node_up("n2", "w2", 5000);
  second.restore(snap, 5000);
  second.take_commands();
  for (Millis now = 5000; now <= 5000 + o.form_timeout + 200; now += 100) second.tick(now);
  EXPECT_FALSE(second.members().empty()) << "a generation forms from the initial state";
  EXPECT_FALSE(second.finished()) << second.reason();
}

// A rendezvous is one message. Lost, its trainer would wait until the formation timed out and
// be written off, and the trainer started in its stead could lose its own: while a generation
// forms, each member that has not synced in it is told again, the same, every probe timeout.
TEST(ElasticJob, ARendezvousIsSaidAgainUntilItsMemberSynced) {
  ElasticJobOptions o = job_options(2, 2, 100);
  ElasticJob job = started_job(o, 2);
  for (const auto& s : commands_of<SpawnCommand>(job)) job.hello(s.trainer, 1);
  std::map<std::string, RendezvousOrder> first;
  for (const auto& rv : commands_of<RendezvousCommand>(job)) first[rv.trainer] = rv.order;
  const auto members = job.members();
  ASSERT_EQ(members.size(), 2u);
  ASSERT_EQ(first.size(), 2u);
  job.tick(1 + o.probe_timeout - 1);
  EXPECT_TRUE(commands_of<RendezvousCommand>(job).empty()) << "not yet";
  job.report(members[0], {MemberReport::Kind::kSynced, job.generation(), 0, 0, "", 0}, 500);
  job.tick(1 + o.probe_timeout);
  const auto again = commands_of<RendezvousCommand>(job);
  ASSERT_EQ(again.size(), 1u) << "only to the member that has not synced";
  EXPECT_EQ(again[0].trainer, members[1]);
  const RendezvousOrder& a = again[0].order;
  const RendezvousOrder& b = first.at(members[1]);
  EXPECT_EQ(a.generation, b.generation);
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.world, b.world);
  EXPECT_EQ(a.batches, b.batches);
  EXPECT_EQ(a.plan_version, b.plan_version);
  job.report(members[1], {MemberReport::Kind::kSynced, job.generation(), 1, 0, "", 0}, 1500);
  job.tick(1 + 2 * o.probe_timeout);
  EXPECT_TRUE(commands_of<RendezvousCommand>(job).empty()) << "both synced";
}

// A leader whose process is known to be gone commits nothing more, so its successor's lease is
// granted at once; a leader that merely did not answer (frozen, cut off) may still commit under
// its lease when it runs again, so its successor waits for the lease to run out (plus margin).
TEST(ElasticJob, ALeadersLeaseIsReleasedByProofOfItsExitNotBySilence) {
  for (const bool process_gone : {true, false}) {
    SCOPED_TRACE(process_gone ? "connection refused" : "probe timed out");
    ElasticJobOptions o = job_options(1, 2, 100);
    o.lease_duration = 1000;
    o.lease_margin = 200;
    ElasticJob job = make_job(o);
    job.node_up("n1", "w1", 0);
    job.node_up("n2", "w2", 0);
    job.start(0);
    for (const auto& s : commands_of<SpawnCommand>(job)) ASSERT_TRUE(job.hello(s.trainer, 1));
    const std::vector<std::string> members = job.members();
    ASSERT_EQ(members.size(), 2u);
    const std::int64_t g = job.generation();
    for (std::int32_t r = 0; r < 2; ++r) {
      job.report(members[static_cast<size_t>(r)], {MemberReport::Kind::kSynced, g, r, 0, "", 0}, 2);
    }
    job.lease_request(members[0], {g, 1, 0}, 2);
    job.report(members[0], {MemberReport::Kind::kStep, g, 0, 5, "", 0}, 50);
    job.take_commands();
    const std::string leader = members[0], survivor = members[1];
    job.report(survivor, {MemberReport::Kind::kBroken, g, 1, 5, "connection reset", 0}, 100);
    ASSERT_EQ(commands_of<ProbeCommand>(job).size(), 2u);
    job.probe_result(leader, g, false, process_gone ? "peer unreachable" : "probe timed out", 100,
                     process_gone);
    job.probe_result(survivor, g, true, "", 100);
    ASSERT_EQ(job.members(), std::vector<std::string>{survivor});
    const std::int64_t next = job.generation();
    job.take_commands();
    job.lease_request(survivor, {next, 1, 5}, 150);
    auto answers = commands_of<LeaseCommand>(job);
    ASSERT_EQ(answers.size(), 1u);
    EXPECT_EQ(answers[0].answer.granted, process_gone) << answers[0].answer.reason;
    if (!process_gone) {
      job.lease_request(survivor, {next, 2, 5}, 2 + 1000 + 200 + 1);
      answers = commands_of<LeaseCommand>(job);
      ASSERT_EQ(answers.size(), 1u);
      EXPECT_TRUE(answers[0].answer.granted) << answers[0].answer.reason;
    }
  }
}

// A restored job (a restarted head) takes its snapshot as it was written: the generation goes
// on from the next number, the trainers stay (none is started again), everyone is told to stop
// and report, a drained node stays drained but alive as the registry said, and a snapshot
// round-trips.
// Two trainers on w1 and w2 (of at most 2, 100 steps), synced in the first generation, the
// leader past step 1.
struct OneStepJob {
  ElasticJobOptions options;
  ElasticJob job;
  std::vector<std::string> members;
  std::int64_t generation = 0;
};
OneStepJob one_step_job() {
  ElasticJobOptions o = job_options(1, 2, 100);
  OneStepJob t{o, started_job(o, 2), {}, 0};
  for (const auto& spawn : commands_of<SpawnCommand>(t.job)) t.job.hello(spawn.trainer, 10);
  t.job.take_commands();
  t.members = t.job.members();
  t.generation = t.job.generation();
  const std::int64_t g = t.generation;
  if (t.members.size() != 2) return t;  // the caller's ASSERT says so
  t.job.report(t.members[0], {MemberReport::Kind::kSynced, g, 0, 0, "", 0}, 20);
  t.job.report(t.members[1], {MemberReport::Kind::kSynced, g, 1, 0, "", 0}, 20);
  t.job.report(t.members[0], {MemberReport::Kind::kStep, g, 0, 1, "", 0}, 30);
  return t;
}

TEST(ElasticJob, ARestoredJobGoesOnFromItsSnapshot) {
  OneStepJob t = one_step_job();
  ASSERT_EQ(t.members.size(), 2u);
  ElasticJob& first = t.job;
  const ElasticJobOptions o = t.options;
  const auto members = t.members;
  const std::int64_t g = t.generation;
  ElasticJobSnapshot snap = first.snapshot();
  EXPECT_EQ(snap.last_trained_members, members);
  EXPECT_EQ(snap.generation, g);
  EXPECT_EQ(snap.members, members);
  first.drain("w2", 10);
  EXPECT_EQ(first.snapshot().draining_nodes, std::vector<std::string>{"n2"});
  snap.draining_nodes = {"n2"};  // its trainer not yet leaving: a drain just before the kill

  ElasticJob second = make_job(o);
  second.node_up("n1", "w1", 1000);
  second.node_up("n2", "w2", 1000, true);
  second.restore(snap, 1000);
  const auto commands = second.take_commands();
  int spawns = 0, stops = 0;
  for (const auto& c : commands) {
    spawns += std::holds_alternative<SpawnCommand>(c);
    if (auto* rv = std::get_if<RendezvousCommand>(&c)) {
      EXPECT_GT(rv->order.generation, snap.generation);
      EXPECT_EQ(rv->order.rank, -1);
      ++stops;
    }
  }
  EXPECT_EQ(spawns, 0) << "its trainers are still there";
  EXPECT_EQ(stops, 2) << "every member is told to stop and report";
  EXPECT_GT(second.generation(), g);
  EXPECT_EQ(second.snapshot().trainer_counter, snap.trainer_counter);
  // The next generation waits until every member said where it stopped, the one on the
  // drained node too (the restore left that node alive, as the registry said).
  const std::int64_t stopped = second.generation();
  second.report(members[0], {MemberReport::Kind::kLeft, g, 0, 7, "", 0}, 1010);
  second.tick(1100);
  EXPECT_EQ(second.generation(), stopped) << "formed before every member reported";
  second.report(members[1], {MemberReport::Kind::kLeft, g, 1, 7, "", 0}, 1110);
  second.tick(1200);
  EXPECT_GT(second.generation(), stopped);
  EXPECT_EQ(second.members().size(), 2u);
  EXPECT_EQ(second.committed_step(), 7);
}

// A head told a drained trainer to stop and died before writing so: the next head restores it
// as it was (leaving, or a member on a draining node), and its clean exit, sent again by its
// agent, ends the drain. It is not written off: no trainer_gone, and the job goes on. An exit
// with a failure code on the same node is one.
TEST(ElasticJob, ADrainedTrainersCleanExitAfterARestoreIsNotAFailure) {
  for (const int code : {0, 1}) {
    OneStepJob t = one_step_job();
    ASSERT_EQ(t.members.size(), 2u);
    const auto& members = t.members;
    t.job.drain("w2", 40);
    const ElasticJobSnapshot snap = t.job.snapshot();

    ElasticJob second = make_job(t.options);
    second.node_up("n1", "w1", 1000);
    second.node_up("n2", "w2", 1000, true);
    second.restore(snap, 1000);
    second.take_commands();
    second.trainer_exited(members[1], code, "", 1010);
    int gone = 0;
    for (const auto& c : second.take_commands()) {
      if (auto* e = std::get_if<JobEvent>(&c); e && e->kind == "trainer_gone") ++gone;
    }
    EXPECT_EQ(gone, code == 0 ? 0 : 1) << "exit code " << code;
    EXPECT_EQ(second.state(), "running") << "exit code " << code;
  }
}

// StopCommands for `trainer` among `commands`.
int stops_of(const std::vector<JobCommand>& commands, const std::string& trainer) {
  int n = 0;
  for (const auto& c : commands) {
    if (auto* s = std::get_if<StopCommand>(&c); s && s->trainer == trainer) ++n;
  }
  return n;
}

// `t`'s job restored by a restarted head, which drains w2 before any trainer reported; returns
// that head with the drain's commands not yet taken.
ElasticJob drained_right_after_a_restart(const OneStepJob& t) {
  ElasticJob second = make_job(t.options);
  second.node_up("n1", "w1", 1000);
  second.node_up("n2", "w2", 1000);
  second.restore(t.job.snapshot(), 1000);
  second.take_commands();
  second.drain("w2", 1010);
  return second;
}

// A head restarted, and w2 was drained before its trainer reported where it stopped: the
// trainer is stopped at once, without a trainer_gone (the drain event says why it goes). A
// drained trainer that a restored head still holds as leaving and that says it left as
// drained is no failure either.
TEST(ElasticJob, ATrainerDrainedAfterARestoreIsNoFailure) {
  OneStepJob t = one_step_job();
  ASSERT_EQ(t.members.size(), 2u);
  const std::string drained = t.members[1];
  auto gone_events = [](const std::vector<JobCommand>& commands) {
    int n = 0;
    for (const auto& c : commands) {
      if (auto* e = std::get_if<JobEvent>(&c); e && e->kind == "trainer_gone") ++n;
    }
    return n;
  };
  {
    ElasticJob second = drained_right_after_a_restart(t);
    const auto commands = second.take_commands();
    EXPECT_EQ(stops_of(commands, drained), 1);
    EXPECT_EQ(gone_events(commands), 0);
  }
  {
    t.job.drain("w2", 40);  // leaving: it hands the state over in the next generation
    ElasticJob second = make_job(t.options);
    second.node_up("n1", "w1", 1000);
    second.node_up("n2", "w2", 1000, true);
    second.restore(t.job.snapshot(), 1000);
    second.take_commands();
    MemberDone left;
    left.outcome = MemberDone::Outcome::kDrained;
    left.ok = true;
    left.generation = t.generation;
    left.rank = 1;
    left.step = 1;
    second.done(drained, left, 1010);
    EXPECT_EQ(gone_events(second.take_commands()), 0);
    EXPECT_EQ(second.state(), "running");
  }
}

// The head that drained w2 right after a restart died before the stop left. The next head
// restores the trainer as gone and, when it speaks, tells it to stop again instead of leaving
// it idle on w2 to the job's end; once it exited, nothing more. A trainer written off for its
// silence was never told, and is not now: it may hold the only copy of the state.
TEST(ElasticJob, AStopLostWithTheHeadIsSaidAgain) {
  OneStepJob t = one_step_job();
  ASSERT_EQ(t.members.size(), 2u);
  const std::string drained = t.members[1];
  ElasticJob second = drained_right_after_a_restart(t);
  EXPECT_EQ(stops_of(second.take_commands(), drained), 1);  // lost with this head

  ElasticJob third = make_job(t.options);
  third.node_up("n1", "w1", 2000);
  third.node_up("n2", "w2", 2000, true);
  third.restore(second.snapshot(), 2000);
  EXPECT_EQ(stops_of(third.take_commands(), drained), 0) << "it may have exited meanwhile";
  third.report(drained, {MemberReport::Kind::kLeft, t.generation, 1, 1, "", 0}, 2010);
  EXPECT_EQ(stops_of(third.take_commands(), drained), 1);
  third.trainer_exited(drained, 0, "", 2020);
  third.report(drained, {MemberReport::Kind::kLeft, t.generation, 1, 1, "", 0}, 2030);
  EXPECT_EQ(stops_of(third.take_commands(), drained), 0) << "it exited";

  // Written off for silence (its node's heartbeats stopped): not told, then or now.
  OneStepJob u = one_step_job();
  ASSERT_EQ(u.members.size(), 2u);
  u.job.node_down("n2", "dead", 100);
  const auto down = u.job.take_commands();
  EXPECT_EQ(stops_of(down, u.members[1]), 0);
  int written_off = 0;
  for (const auto& c : down) {
    if (auto* e = std::get_if<JobEvent>(&c); e && e->kind == "trainer_gone") {
      written_off += e->trainer == u.members[1];
    }
  }
  ASSERT_EQ(written_off, 1);
  u.job.report(u.members[1], {MemberReport::Kind::kStep, u.generation, 1, 1, "", 0}, 110);
  EXPECT_EQ(stops_of(u.job.take_commands(), u.members[1]), 0);
}

// The leader was killed, the job waits for min_workers, and the follower, which trained in the
// last generation, is the only trainer left that may hold the state; the head has no report of
// its last steps (a lost done), so it cannot tell whether it holds them. Its node is drained:
// it leaves once a generation without it trained, instead of being stopped at once, which
// would lose every step if it was the last holder.
TEST(ElasticJob, ADrainedTrainerThatMayHoldTheStateLeavesInsteadOfStopping) {
  OneStepJob t = one_step_job();
  ASSERT_EQ(t.members.size(), 2u);
  const std::string leader = t.members[0], follower = t.members[1];
  t.job.lease_request(leader, {t.generation, 1, 1}, 31);
  for (std::int64_t step = 2; step <= 30; ++step) {
    t.job.report(leader, {MemberReport::Kind::kStep, t.generation, 0, step, "", 0}, 30 + step);
  }
  t.job.take_commands();
  t.job.trainer_exited(leader, 137, "killed by signal 9", 100);
  t.job.take_commands();
  ASSERT_EQ(t.job.trainers().at(follower).phase, ElasticJob::Phase::kReady);
  t.job.drain(t.job.trainers().at(follower).node, 110);
  EXPECT_EQ(stops_of(t.job.take_commands(), follower), 0);
  EXPECT_EQ(t.job.trainers().at(follower).phase, ElasticJob::Phase::kLeaving);
}

// A trainer stopped before it ever joined a generation is in no generation the snapshot keeps,
// so a restored head does not know it. If its stop went down with the head that sent it, it
// still speaks (its reports, its lease asks, its done) and is told to stop, not left idle on
// its node to the job's end.
TEST(ElasticJob, ATrainerTheSnapshotForgotIsToldToStopWhenItSpeaks) {
  ElasticJobOptions o = job_options(1, 2, 100);
  ElasticJob first = started_job(o, 2);
  const auto spawns = commands_of<SpawnCommand>(first);
  ASSERT_EQ(spawns.size(), 2u);
  const std::string drained = spawns[1].node;
  first.drain(drained, 5);  // before its trainer said hello
  const std::string forgotten = spawns[1].trainer;
  EXPECT_EQ(stops_of(first.take_commands(), forgotten), 1);  // lost with this head
  first.hello(spawns[0].trainer, 10);
  first.take_commands();
  const ElasticJobSnapshot snap = first.snapshot();
  for (const auto& r : snap.trainers) ASSERT_NE(r.name, forgotten) << "the snapshot keeps it";

  ElasticJob second = make_job(o);
  second.node_up("n1", "w1", 1000, drained == "n1");
  second.node_up("n2", "w2", 1000, drained == "n2");
  second.restore(snap, 1000);
  second.take_commands();
  second.report(forgotten, {MemberReport::Kind::kLeft, 0, -1, 0, "", 0}, 1010);
  EXPECT_EQ(stops_of(second.take_commands(), forgotten), 1);
  second.lease_request(forgotten, {1, 1, 0}, 1020);
  EXPECT_EQ(stops_of(second.take_commands(), forgotten), 1);
  MemberDone d;
  d.outcome = MemberDone::Outcome::kDrained;
  d.ok = true;
  second.done(forgotten, d, 1030);
  const auto after_done = second.take_commands();
  EXPECT_EQ(stops_of(after_done, forgotten), 1);
  for (const auto& c : after_done) {
    auto* e = std::get_if<JobEvent>(&c);
    EXPECT_FALSE(e && e->kind == "trainer_gone") << "a stranger's exit is no failure of the job";
  }
  EXPECT_EQ(second.state(), "running");
}

// A job of two trainers on w1 and w2 that trained to step 12 under a lease, with a checkpoint
// of step 10 (written on w1) on record.
struct TrainedJob {
  ElasticJob job;
  std::vector<std::string> members;
  std::int64_t generation = 0;
};
TrainedJob trained_job(bool shared) {
  ElasticJobOptions o = job_options(1, 2, 100);
  o.grace_period = 5000;
  TrainedJob t{started_job(o, 2), {}, 0};
  for (const auto& spawn : commands_of<SpawnCommand>(t.job)) t.job.hello(spawn.trainer, 10);
  t.members = t.job.members();
  t.generation = t.job.generation();
  for (std::int32_t r = 0; r < 2; ++r) {
    t.job.report(t.members[static_cast<std::size_t>(r)],
                 {MemberReport::Kind::kSynced, t.generation, r, 0, "", 0}, 20);
  }
  t.job.lease_request(t.members[0], {t.generation, 1, 0}, 20);
  t.job.report(t.members[0], {MemberReport::Kind::kStep, t.generation, 0, 10, "", 0}, 30);
  t.job.checkpoint_written({10, "ckpt/step-00000010.pt", "w1", shared}, 30);
  t.job.report(t.members[0], {MemberReport::Kind::kStep, t.generation, 0, 12, "", 0}, 40);
  t.job.take_commands();
  return t;
}

// Every trainer that held the job's state died (all killed at once): the job resumes from its
// newest checkpoint under a new generation, with the steps after it recorded as lost. The
// loaded step is the job's committed step; reports of the timeline given up count no more.
TEST(ElasticJob, WhenEveryHolderIsGoneTheJobResumesFromItsNewestCheckpoint) {
  TrainedJob t = trained_job(/*shared=*/true);
  ElasticJob& job = t.job;
  ASSERT_EQ(job.committed_step(), 12);
  for (const auto& m : t.members) job.trainer_exited(m, 137, "killed by signal 9", 100);
  auto spawns = commands_of<SpawnCommand>(job);
  ASSERT_EQ(spawns.size(), 2u) << "the dead are replaced";
  EXPECT_FALSE(job.finished());
  job.hello(spawns[1].trainer, 200);
  // One is still starting: the resume waits for it, as a first start does.
  EXPECT_TRUE(commands_of<RendezvousCommand>(job).empty());
  job.hello(spawns[0].trainer, 250);
  std::vector<JobEvent> resumed;
  std::vector<RendezvousCommand> rendezvous;
  for (auto& c : job.take_commands()) {
    if (auto* e = std::get_if<JobEvent>(&c); e && e->kind == "resumed_from_checkpoint") {
      resumed.push_back(*e);
    }
    if (auto* rv = std::get_if<RendezvousCommand>(&c)) rendezvous.push_back(*rv);
  }
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(resumed[0].step, 10);
  EXPECT_EQ(resumed[0].lost_steps, 2);
  EXPECT_EQ(resumed[0].reason, "ckpt/step-00000010.pt");
  ASSERT_EQ(rendezvous.size(), 2u);
  const std::int64_t g = job.generation();
  EXPECT_GT(g, t.generation);
  for (const auto& rv : rendezvous) {
    EXPECT_EQ(rv.order.generation, g);
    EXPECT_EQ(rv.order.checkpoint, "ckpt/step-00000010.pt");
    EXPECT_EQ(rv.order.checkpoint_step, 10);
  }
  EXPECT_EQ(job.committed_step(), 10);
  EXPECT_EQ(job.lost_steps(), 2);
  EXPECT_EQ(job.resumed_generation(), g);
  // The old leader's late report of step 13 is of the timeline given up.
  job.report(t.members[0], {MemberReport::Kind::kStep, t.generation, 0, 13, "", 0}, 300);
  EXPECT_EQ(job.committed_step(), 10);
  // The new generation syncs at the checkpoint's step and trains on from it.
  const auto members = job.members();
  for (std::int32_t r = 0; r < 2; ++r) {
    job.report(members[static_cast<std::size_t>(r)], {MemberReport::Kind::kSynced, g, r, 10, "", 0},
               400);
  }
  job.lease_request(members[0], {g, 1, 10}, 400);
  const auto leases = commands_of<LeaseCommand>(job);
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_TRUE(leases[0].answer.granted) << leases[0].answer.reason;
  job.report(members[0], {MemberReport::Kind::kStep, g, 0, 11, "", 0}, 450);
  EXPECT_EQ(job.committed_step(), 11);
  // What a restarted head needs to do the same: the checkpoints and the fence.
  const ElasticJobSnapshot snap = job.snapshot();
  ASSERT_EQ(snap.checkpoints.size(), 1u);
  EXPECT_EQ(snap.checkpoints[0].path, "ckpt/step-00000010.pt");
  EXPECT_EQ(snap.resumed_generation, g);
}

// A holder written off as unreachable (its stop deferred) does not answer in time, and the job
// goes back to its checkpoint: the written-off holder is told to stop then, since it holds a
// state of the timeline given up, and is not taken back into the new one when it speaks.
TEST(ElasticJob, AResumeFromACheckpointStopsAWrittenOffHolder) {
  TrainedJob t = trained_job(/*shared=*/true);
  ElasticJob& job = t.job;
  const std::string leader = t.members[0], follower = t.members[1];
  job.progress(follower, 12);
  job.report(follower, {MemberReport::Kind::kBroken, t.generation, 1, 12, "collective timeout", 0},
             50);
  job.probe_result(follower, t.generation, true, "", 60);
  job.probe_result(leader, t.generation, false, "probe timed out", 1050);
  for (auto& c : job.take_commands()) {
    EXPECT_FALSE(std::holds_alternative<StopCommand>(c)) << "the leader's stop is deferred";
    if (auto* spawn = std::get_if<SpawnCommand>(&c)) job.hello(spawn->trainer, 1060);
  }
  job.trainer_exited(follower, 137, "killed by signal 9", 1100);
  std::vector<StopCommand> stops;
  for (Millis now = 1100; now < 3000; now += 100) {
    job.tick(now);
    for (auto& c : job.take_commands()) {
      if (auto* spawn = std::get_if<SpawnCommand>(&c)) job.hello(spawn->trainer, now);
      if (auto* stop = std::get_if<StopCommand>(&c)) stops.push_back(*stop);
    }
  }
  ASSERT_EQ(job.resumed_generation(), job.generation()) << job.reason();
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].trainer, leader);
  EXPECT_NE(stops[0].reason.find("timeline given up"), std::string::npos) << stops[0].reason;
  job.report(leader, {MemberReport::Kind::kBroken, t.generation, 0, 12, "peer exited", 0}, 3100);
  for (auto& c : job.take_commands()) {
    if (auto* e = std::get_if<JobEvent>(&c)) EXPECT_NE(e->kind, "trainer_back");
  }
  EXPECT_EQ(job.trainers().at(leader).phase, ElasticJob::Phase::kGone);
  EXPECT_EQ(job.committed_step(), 10);
}

// A trainer taken for fresh when the job resumed (the head knew of no sync of it) may still
// have been joining an older generation whose group then formed: its report that it synced
// there comes after the resume. It holds a state of the timeline given up, so it is stopped
// and replaced, as the resume stops every trainer it knows synced; kept, it counted as a
// holder and led the next generation, whose sync adopted the given-up steps. [elastic
// simulation seed 7296869]
TEST(ElasticJob, ATrainerWhoseSyncBeforeAResumeIsLearnedLateIsStopped) {
  ElasticJobOptions o = job_options(2, 2, 100);
  ElasticJob job = started_job(o, 2);
  auto spawns = commands_of<SpawnCommand>(job);
  ASSERT_EQ(spawns.size(), 2u);
  for (const auto& s : spawns) job.hello(s.trainer, 10);
  const auto g1_members = job.members();
  ASSERT_EQ(g1_members.size(), 2u);
  const std::int64_t g1 = job.generation();
  for (std::int32_t r = 0; r < 2; ++r) {
    job.report(g1_members[static_cast<std::size_t>(r)],
               {MemberReport::Kind::kSynced, g1, r, 0, "", 0, g1}, 20);
  }
  job.lease_request(g1_members[0], {g1, 1, 0}, 20);
  job.report(g1_members[0], {MemberReport::Kind::kStep, g1, 0, 10, "", 0, g1}, 30);
  job.checkpoint_written({10, "ckpt/step-00000010.pt", "w1", true}, 30);
  job.report(g1_members[0], {MemberReport::Kind::kStep, g1, 0, 12, "", 0, g1}, 40);
  job.take_commands();
  // The follower dies; its replacement joins the leader in a new generation, which has not
  // synced when the leader's node goes too.
  const std::string leader = g1_members[0], follower = g1_members[1];
  job.trainer_exited(follower, 137, "killed by signal 9", 100);
  spawns = commands_of<SpawnCommand>(job);
  ASSERT_EQ(spawns.size(), 1u);
  const std::string joiner = spawns[0].trainer;
  job.hello(joiner, 200);
  const std::int64_t g_joined = job.generation();
  ASSERT_EQ(job.members(), (std::vector<std::string>{leader, joiner}));
  job.take_commands();
  job.trainer_exited(leader, 137, "killed by signal 9", 300);
  spawns = commands_of<SpawnCommand>(job);
  ASSERT_EQ(spawns.size(), 1u);
  job.hello(spawns[0].trainer, 400);
  job.take_commands();
  // No trainer the job knows of holds its state: it resumes, the joiner taken for fresh.
  ASSERT_EQ(job.resumed_generation(), job.generation()) << job.reason();
  ASSERT_EQ(job.committed_step(), 10);
  // The joiner's group formed after all (the leader, frozen, thawed and joined it) and synced
  // at the leader's step 12, of the timeline given up.
  job.report(joiner, {MemberReport::Kind::kSynced, g_joined, 1, 12, "", 0, g_joined}, 500);
  std::vector<StopCommand> stops;
  std::vector<std::string> replacements;
  for (auto& c : job.take_commands()) {
    if (auto* stop = std::get_if<StopCommand>(&c)) stops.push_back(*stop);
    if (auto* spawn = std::get_if<SpawnCommand>(&c)) replacements.push_back(spawn->trainer);
  }
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].trainer, joiner);
  EXPECT_EQ(replacements.size(), 1u) << "it is replaced";
  EXPECT_NE(stops[0].reason.find("timeline given up"), std::string::npos) << stops[0].reason;
  EXPECT_EQ(job.trainers().at(joiner).phase, ElasticJob::Phase::kGone);
  EXPECT_EQ(job.committed_step(), 10);
  // Its replacement and the other fresh trainer resume from the checkpoint again.
  for (const auto& name : replacements) job.hello(name, 600);
  int resumed_orders = 0;
  for (Millis now = 600; now < 3000; now += 100) {
    job.tick(now);
    for (auto& c : job.take_commands()) {
      if (auto* spawn = std::get_if<SpawnCommand>(&c)) job.hello(spawn->trainer, now);
      if (auto* rv = std::get_if<RendezvousCommand>(&c); rv && rv->order.rank >= 0) {
        EXPECT_NE(rv->trainer, joiner);
        EXPECT_EQ(rv->order.checkpoint_step, 10) << "generation " << rv->order.generation;
        ++resumed_orders;
      }
    }
  }
  EXPECT_GE(resumed_orders, 2);
  EXPECT_EQ(job.resumed_generation(), job.generation()) << job.reason();
  EXPECT_EQ(job.members().size(), 2u);
}

// A checkpoint on a node's own disk ([checkpoint] shared = false) can be loaded only by a
// trainer on that node: it leads the resumed generation, whoever said hello first.
// A member whose collective failed in the last generation that trained commits nothing more
// there: once it said so with fewer steps than the job's, it does not hold the job's state. The
// leader dies, so the job resumes from its checkpoint instead of waiting for the follower
// until it fails.
TEST(ElasticJob, AMemberThatBrokeBehindTheJobsStepHoldsNoState) {
  TrainedJob t = trained_job(/*shared=*/true);
  ElasticJob& job = t.job;
  ASSERT_EQ(job.committed_step(), 12);
  const std::string leader = t.members[0], follower = t.members[1];
  job.progress(follower, 11);
  job.report(follower, {MemberReport::Kind::kBroken, t.generation, 1, 11, "collective timeout", 0},
             50);
  job.take_commands();
  job.trainer_exited(leader, 137, "killed by signal 9", 100);
  const auto spawns = commands_of<SpawnCommand>(job);
  ASSERT_FALSE(spawns.empty()) << "the dead leader is replaced";
  for (const auto& spawn : spawns) job.hello(spawn.trainer, 200);
  int resumed = 0;
  for (auto& c : job.take_commands()) {
    if (auto* e = std::get_if<JobEvent>(&c); e && e->kind == "resumed_from_checkpoint") {
      ++resumed;
      EXPECT_EQ(e->step, 10);
    }
  }
  EXPECT_EQ(resumed, 1);
}

TEST(ElasticJob, ANodeLocalCheckpointIsLoadedByATrainerOnItsNode) {
  TrainedJob t = trained_job(/*shared=*/false);
  ElasticJob& job = t.job;
  for (const auto& m : t.members) job.trainer_exited(m, 137, "killed by signal 9", 100);
  auto spawns = commands_of<SpawnCommand>(job);
  ASSERT_EQ(spawns.size(), 2u);
  std::string on_w1;
  for (const auto& s : spawns) {
    if (s.node == "n1") on_w1 = s.trainer;
  }
  ASSERT_FALSE(on_w1.empty());
  for (auto it = spawns.rbegin(); it != spawns.rend(); ++it) job.hello(it->trainer, 200);
  ASSERT_FALSE(job.members().empty());
  EXPECT_EQ(job.members()[0], on_w1);
  EXPECT_EQ(job.committed_step(), 10);
}

// The leader froze and missed its probe while its follower answered, so it was written off;
// both held the job's step. Its stop waits: the follower died before a generation without the
// leader trained, and the thawed leader, the only holder left, is taken back and leads the
// next generation (the replacement placed on its node makes room). Told to stop at the
// write-off, it exited on thawing and the job lost every step. Had a generation without it
// trained, it would have been told then.
TEST(ElasticJob, AHolderWrittenOffAsUnreachableIsTakenBackWhenItIsTheLast) {
  for (const std::string then : {"the follower dies", "the follower dies, the leader is quiet",
                                  "the follower trains on", "the job stops"}) {
    SCOPED_TRACE(then);
    ElasticJob job = started_job(job_options(1, 2, 100), 2);
    for (const auto& spawn : commands_of<SpawnCommand>(job)) job.hello(spawn.trainer, 10);
    const auto members = job.members();
    const std::string leader = members[0], follower = members[1];
    const std::int64_t g = job.generation();
    for (std::int32_t r = 0; r < 2; ++r) {
      job.report(members[static_cast<std::size_t>(r)],
                 {MemberReport::Kind::kSynced, g, r, 0, "", 0}, 20);
    }
    job.lease_request(leader, {g, 1, 0}, 20);
    job.report(leader, {MemberReport::Kind::kStep, g, 0, 10, "", 0}, 30);
    job.progress(follower, 10);
    job.report(follower, {MemberReport::Kind::kBroken, g, 1, 10, "collective timeout", 0}, 40);
    job.take_commands();
    job.probe_result(follower, g, true, "", 50);
    job.probe_result(leader, g, false, "probe timed out", 1040);
    std::vector<std::string> stopped;
    std::string replacement;
    for (auto& c : job.take_commands()) {
      if (auto* stop = std::get_if<StopCommand>(&c)) stopped.push_back(stop->trainer);
      if (auto* spawn = std::get_if<SpawnCommand>(&c)) replacement = spawn->trainer;
    }
    EXPECT_TRUE(stopped.empty()) << "no stop for a written-off holder yet: " << stopped.front();
    const ElasticJobSnapshot snap = job.snapshot();
    const auto record = std::find_if(snap.trainers.begin(), snap.trainers.end(),
                                     [&](const auto& r) { return r.name == leader; });
    ASSERT_NE(record, snap.trainers.end());
    EXPECT_NE(record->deferred_stop.find("unreachable"), std::string::npos)
        << "a restarted head owes it the stop too";
    ASSERT_EQ(job.members(), std::vector<std::string>{follower});
    ASSERT_FALSE(replacement.empty()) << "the leader's node gets a new trainer";
    const std::int64_t g2 = job.generation();
    if (then.rfind("the follower dies", 0) == 0) {
      job.trainer_exited(follower, 137, "killed by signal 9", 1100);
      job.hello(replacement, 1150);
      const auto probes = commands_of<ProbeCommand>(job);
      ASSERT_TRUE(job.members().empty()) << "nobody holds step 10: the job waits";
      if (then == "the follower dies") {
        job.report(leader, {MemberReport::Kind::kBroken, g, 0, 10, "process group broken", 0},
                   1200);
      } else {
        // Idle since its group broke, it says nothing: it is asked, and its answer counts.
        ASSERT_EQ(probes.size(), 1u);
        EXPECT_EQ(probes[0].trainer, leader);
        job.probe_result(leader, probes[0].generation, true, "", 1200);
      }
      int back = 0;
      for (auto& c : job.take_commands()) {
        if (auto* e = std::get_if<JobEvent>(&c); e && e->kind == "trainer_back") ++back;
        if (auto* stop = std::get_if<StopCommand>(&c)) {
          EXPECT_EQ(stop->trainer, replacement) << "only the replacement makes room";
        }
      }
      EXPECT_EQ(back, 1);
      ASSERT_FALSE(job.members().empty());
      EXPECT_EQ(job.members()[0], leader);
      EXPECT_EQ(job.trainers().at(replacement).phase, ElasticJob::Phase::kGone);
      EXPECT_FALSE(job.finished()) << job.reason();
    } else if (then == "the job stops") {
      job.stop("stopped by the user", 1100);
      std::set<std::string> told;
      for (const auto& stop : commands_of<StopCommand>(job)) told.insert(stop.trainer);
      EXPECT_TRUE(told.count(leader)) << "the stop it was owed goes out with the job's end";
    } else {
      job.report(follower, {MemberReport::Kind::kSynced, g2, 0, 10, "", 0}, 1100);
      job.lease_request(follower, {g2, 1, 10}, 1100);
      job.take_commands();
      job.report(follower, {MemberReport::Kind::kStep, g2, 0, 11, "", 0}, 1150);
      const auto stops = commands_of<StopCommand>(job);
      ASSERT_EQ(stops.size(), 1u) << "a generation without it trained: it is told now";
      EXPECT_EQ(stops[0].trainer, leader);
      EXPECT_NE(stops[0].reason.find("unreachable"), std::string::npos) << stops[0].reason;
    }
  }
}

// A newcomer synced from the leader, but its synced report was lost; then the leader died.
// The newcomer's next report (its collective broke) says where it last synced, so the job
// counts it as holding the state and it leads, instead of the job waiting for a holder until it
// fails.
TEST(ElasticJob, AReportSaysWhereItsSenderLastSynced) {
  ElasticJob job = started_job(job_options(1, 2, 100), 3);
  for (const auto& spawn : commands_of<SpawnCommand>(job)) job.hello(spawn.trainer, 10);
  const auto first = job.members();
  const std::string leader = first[0], follower = first[1];
  std::int64_t g = job.generation();
  for (std::int32_t r = 0; r < 2; ++r) {
    job.report(first[static_cast<std::size_t>(r)], {MemberReport::Kind::kSynced, g, r, 0, "", 0, g},
               20);
  }
  job.lease_request(leader, {g, 1, 0}, 20);
  job.report(leader, {MemberReport::Kind::kStep, g, 0, 12, "", 0, g}, 30);
  job.trainer_exited(follower, 137, "killed by signal 9", 40);
  const auto spawns = commands_of<SpawnCommand>(job);
  ASSERT_EQ(spawns.size(), 1u);
  const std::string newcomer = spawns[0].trainer;
  g = job.generation();
  ASSERT_EQ(job.members(), std::vector<std::string>{leader});
  job.report(leader, {MemberReport::Kind::kSynced, g, 0, 12, "", 0, g}, 50);
  job.lease_request(leader, {g, 1, 12}, 50);
  job.report(leader, {MemberReport::Kind::kStep, g, 0, 13, "", 0, g}, 60);
  job.hello(newcomer, 70);
  g = job.generation();
  ASSERT_EQ(job.members(), (std::vector<std::string>{leader, newcomer}));
  job.report(leader, {MemberReport::Kind::kSynced, g, 0, 13, "", 0, g}, 80);
  // The newcomer's synced report is lost. The leader dies; the newcomer's collective breaks.
  job.trainer_exited(leader, 137, "killed by signal 9", 90);
  job.report(newcomer, {MemberReport::Kind::kBroken, g, 1, 13, "peer exited", 0, g}, 95);
  for (Millis now = 100; now < 3000; now += 100) job.tick(now);
  ASSERT_FALSE(job.members().empty()) << job.reason();
  EXPECT_EQ(job.members()[0], newcomer) << "it holds step 13 and leads";
  EXPECT_EQ(job.committed_step(), 13);
  EXPECT_FALSE(job.finished()) << job.reason();
}

// Both members missed their probes after the leader's collective failed: the leader died (its
// exit reported later), the follower was cut off from the head. The head knows the follower's
// steps only from heartbeats, a step behind the leader's reports, so the follower looked
// behind the job's step; it is still a trainer that may hold the state, and with no other
// holder answering it is kept, not stopped. Once it speaks again it leads with the job's step.
TEST(ElasticJob, AFollowerThatMayHoldTheStateIsNotWrittenOffWhenItIsTheLast) {
  TrainedJob t = trained_job(/*shared=*/true);
  ElasticJob& job = t.job;
  const std::string leader = t.members[0], follower = t.members[1];
  job.progress(follower, 11);  // its heartbeats lag the leader's step 12
  job.report(leader, {MemberReport::Kind::kBroken, t.generation, 0, 12, "collective timeout", 0,
                      t.generation},
             50);
  job.take_commands();
  job.probe_result(leader, t.generation, false, "probe timed out", 1050);
  job.probe_result(follower, t.generation, false, "probe timed out", 1050);
  for (auto& c : job.take_commands()) {
    if (auto* stop = std::get_if<StopCommand>(&c)) ADD_FAILURE() << stop->trainer << " stopped";
  }
  EXPECT_NE(job.trainers().at(follower).phase, ElasticJob::Phase::kGone);
  job.trainer_exited(leader, 137, "killed by signal 9", 1100);
  // The partition heals: the follower reports where it stopped, and leads.
  job.report(follower, {MemberReport::Kind::kBroken, t.generation, 1, 12, "peer exited", 0,
                        t.generation},
             1500);
  for (Millis now = 1500; now < 6000; now += 100) {
    job.tick(now);
    for (const auto& spawn : commands_of<SpawnCommand>(job)) job.hello(spawn.trainer, now);
    if (!job.members().empty() && job.members()[0] == follower) break;
  }
  ASSERT_FALSE(job.members().empty()) << job.reason();
  EXPECT_EQ(job.members()[0], follower);
  EXPECT_EQ(job.committed_step(), 12);
  EXPECT_EQ(job.resumed_generation(), 0) << "no step lost to the checkpoint";
}

// A follower frozen right after the first generation committed step 12 (its heartbeats last
// said 11) is a member of the next generation, which a dead leader keeps from forming. At the
// formation timeout it is kept like the leader, not stopped for not joining: should the leader
// be gone, the frozen follower that thaws holds the only copy of the state. Stopped, it took
// that copy with it and the job failed. [elastic simulation seed 8252338]
TEST(ElasticJob, AFollowerBehindInItsHeartbeatsIsKeptAfterAFailedFormation) {
  ElasticJobOptions o = job_options(3, 3, 100);
  LeasedJob t = synced_and_leased(o, 3);
  ElasticJob& job = t.job;
  const std::vector<std::string> first = t.members;
  ASSERT_EQ(first.size(), 3u);
  const std::int64_t g1 = t.generation;
  const std::string leader = first[0], killed = first[1], frozen = first[2];
  job.report(leader, {MemberReport::Kind::kStep, g1, 0, 12, "", 0}, 50);
  job.progress(killed, 12);
  job.progress(frozen, 11);  // its heartbeats stopped a step behind the leader's report
  job.take_commands();
  job.trainer_exited(killed, 137, "killed by signal 9", 100);
  const auto spawns = commands_of<SpawnCommand>(job);
  ASSERT_EQ(spawns.size(), 1u);
  ASSERT_TRUE(job.hello(spawns[0].trainer, 200));
  const std::int64_t formed = job.generation();
  ASSERT_EQ(job.members().size(), 3u) << job.reason();
  EXPECT_EQ(job.members()[0], leader);
  job.take_commands();
  // Nobody syncs: the leader died (its machine too: no exit report), the follower is frozen.
  job.tick(201 + o.form_timeout);
  std::set<std::string> stopped, probed, placed;
  for (auto& c : job.take_commands()) {
    if (auto* stop = std::get_if<StopCommand>(&c)) stopped.insert(stop->trainer);
    if (auto* probe = std::get_if<ProbeCommand>(&c)) probed.insert(probe->trainer);
    if (auto* spawn = std::get_if<SpawnCommand>(&c)) placed.insert(spawn->trainer);
  }
  EXPECT_FALSE(stopped.count(frozen)) << "it may hold step 12";
  EXPECT_NE(job.trainers().at(frozen).phase, ElasticJob::Phase::kGone);
  EXPECT_TRUE(probed.count(frozen));
  EXPECT_TRUE(stopped.count(spawns[0].trainer)) << "the newcomer never synced and holds nothing";
  // The leader's death is proven; the follower thaws and says where its group broke: it leads.
  job.probe_result(leader, formed, false, "peer unreachable", 300 + o.form_timeout, true);
  job.report(frozen, {MemberReport::Kind::kBroken, g1, 2, 12, "process group broken", 0, g1},
             400 + o.form_timeout);
  for (const auto& name : placed) job.hello(name, 400 + o.form_timeout);
  for (Millis now = 400 + o.form_timeout; now < 20000 + o.form_timeout; now += 100) {
    job.tick(now);
    for (const auto& spawn : commands_of<SpawnCommand>(job)) job.hello(spawn.trainer, now);
    if (job.generation() > formed && job.members().size() == 3u) break;
  }
  ASSERT_EQ(job.members().size(), 3u) << job.reason();
  ASSERT_GT(job.generation(), formed);
  EXPECT_EQ(job.members()[0], frozen);
  EXPECT_EQ(job.committed_step(), 12);
  EXPECT_FALSE(job.finished()) << job.reason();
}

// A follower cut off from the head (a partition) when its leader died: its broken report is
// lost and its heartbeats lag, so the head knows it only as a survivor of the last generation
// that trained with fewer steps than the job's. The next generation, led by the other
// survivor, does not form in time (that one's node died unseen, and the rendezvous to the cut
// off follower was lost). The follower may hold the state, and is the only one left that
// does: it is kept for the retry and asked whether it is there, not stopped as one that did
// not join; once the partition heals it reports the job's step and leads. Stopped, it took
// the job's only copy of the state with it and the job failed. [elastic simulation seed
// 8818504]
TEST(ElasticJob, AFollowerThatMayHoldTheStateIsKeptAfterAFailedFormation) {
  ElasticJobOptions o = job_options(3, 3, 100);
  LeasedJob t = synced_and_leased(o, 4);
  ElasticJob& job = t.job;
  const std::vector<std::string> g1_members = t.members;
  ASSERT_EQ(g1_members.size(), 3u);
  const std::int64_t g1 = t.generation;
  job.report(g1_members[0], {MemberReport::Kind::kStep, g1, 0, 9, "", 0}, 50);
  job.take_commands();
  const std::string leader = g1_members[0], survivor = g1_members[1], cut_off = g1_members[2];
  // The leader is killed; the survivor says so, the cut-off follower's report is lost.
  job.trainer_exited(leader, 137, "killed by signal 9", 100);
  job.report(survivor, {MemberReport::Kind::kBroken, g1, 1, 9, "peer exited", 0, g1}, 110);
  std::string replacement;
  for (const auto& s : commands_of<SpawnCommand>(job)) replacement = s.trainer;
  ASSERT_FALSE(replacement.empty());
  ASSERT_TRUE(job.hello(replacement, 300));
  job.tick(300);
  const std::int64_t formed = job.generation();
  ASSERT_EQ(job.members().size(), 3u) << job.reason();
  ASSERT_EQ(job.members()[0], survivor);
  // The survivor's node dies unseen; nobody syncs in the generation.
  job.take_commands();
  job.tick(301 + o.form_timeout);
  for (const auto& stop : commands_of<StopCommand>(job)) {
    EXPECT_NE(stop.trainer, cut_off) << "stopped: " << stop.reason;
  }
  ASSERT_NE(job.trainers().at(cut_off).phase, ElasticJob::Phase::kGone);
  // The survivor's node is declared dead; the partition heals and the follower reports where
  // it stopped (said again on the next rendezvous), and leads.
  job.node_down(job.trainers().at(survivor).node, "no heartbeat", 400 + o.form_timeout);
  job.report(cut_off, {MemberReport::Kind::kBroken, g1, 2, 9, "peer exited", 0, g1},
             500 + o.form_timeout);
  for (Millis now = 500 + o.form_timeout; now < 10000 + o.form_timeout; now += 100) {
    job.tick(now);
    std::vector<std::string> starting;
    for (const auto& [name, v] : job.trainers()) {
      if (v.phase == ElasticJob::Phase::kSpawning) starting.push_back(name);
    }
    for (const auto& name : starting) job.hello(name, now);
    job.take_commands();
    if (job.generation() > formed && !job.members().empty()) break;
  }
  ASSERT_FALSE(job.finished()) << job.reason();
  ASSERT_FALSE(job.members().empty()) << job.reason();
  EXPECT_EQ(job.members()[0], cut_off);
  EXPECT_EQ(job.committed_step(), 9);
}

// The checkpoint lies on a node that was down while the job replaced its dead trainers
// elsewhere, up to max_workers. Once that node is back, a replacement that holds nothing
// makes room for a trainer there, which loads the checkpoint and leads; the job does not wait
// for a trainer it would never place until its grace period fails it.
TEST(ElasticJob, ATrainerMakesRoomOnTheNodeThatHoldsTheCheckpoint) {
  ElasticJobOptions o = job_options(2, 2, 100);
  o.grace_period = 5000;
  ElasticJob job = started_job(o, 3);
  auto spawns = commands_of<SpawnCommand>(job);
  ASSERT_EQ(spawns.size(), 2u);
  ASSERT_EQ(spawns[0].node, "n1");
  for (const auto& spawn : spawns) job.hello(spawn.trainer, 10);
  const auto members = job.members();
  const std::int64_t g = job.generation();
  for (std::int32_t r = 0; r < 2; ++r) {
    job.report(members[static_cast<std::size_t>(r)], {MemberReport::Kind::kSynced, g, r, 0, "", 0},
               20);
  }
  job.lease_request(members[0], {g, 1, 0}, 20);
  job.report(members[0], {MemberReport::Kind::kStep, g, 0, 10, "", 0}, 30);
  job.checkpoint_written({10, "ckpt/step-00000010.pt", "w1", false}, 30);
  job.take_commands();
  job.node_down("n1", "no heartbeat", 100);  // w1's disk with it, for now
  for (const auto& m : members) job.trainer_exited(m, 137, "killed by signal 9", 100);
  std::vector<std::string> elsewhere;
  for (const auto& spawn : commands_of<SpawnCommand>(job)) {
    EXPECT_NE(spawn.node, "n1");
    elsewhere.push_back(spawn.trainer);
    job.hello(spawn.trainer, 200);
  }
  ASSERT_EQ(elsewhere.size(), 2u) << "two replacements on n2 and n3";
  job.take_commands();
  job.node_up("n1", "w1", 300);
  std::vector<StopCommand> stops;
  std::vector<SpawnCommand> on_w1;
  for (Millis now = 300; now < 1000 && on_w1.empty(); now += 100) {
    job.tick(now);
    for (auto& c : job.take_commands()) {
      if (auto* s = std::get_if<StopCommand>(&c)) stops.push_back(*s);
      if (auto* s = std::get_if<SpawnCommand>(&c)) on_w1.push_back(*s);
    }
  }
  ASSERT_EQ(on_w1.size(), 1u) << "a trainer is placed on the checkpoint's node";
  EXPECT_EQ(on_w1[0].node, "n1");
  ASSERT_EQ(stops.size(), 1u) << "one replacement makes room for it";
  EXPECT_NE(stops[0].reason.find("make room on node w1"), std::string::npos) << stops[0].reason;
  EXPECT_NE(std::find(elsewhere.begin(), elsewhere.end(), stops[0].trainer), elsewhere.end());
  job.hello(on_w1[0].trainer, 1100);
  ASSERT_EQ(job.members().size(), 2u);
  EXPECT_EQ(job.members()[0], on_w1[0].trainer) << "it loads the checkpoint and leads";
  EXPECT_EQ(job.committed_step(), 10);
  EXPECT_EQ(job.resumed_generation(), job.generation());
  EXPECT_FALSE(job.finished()) << job.reason();
}

// Without a checkpoint a new trainer can read, the job waits for a holder as before and fails
// after its grace period, saying why it could not resume.
TEST(ElasticJob, WithoutAReadableCheckpointTheJobFailsSayingWhy) {
  for (const bool any_checkpoint : {true, false}) {
    SCOPED_TRACE(any_checkpoint ? "checkpoint on a dead node" : "no checkpoint");
    ElasticJobOptions o = job_options(1, 2, 100);
    o.grace_period = 5000;
    ElasticJob job = started_job(o, 2);
    for (const auto& spawn : commands_of<SpawnCommand>(job)) job.hello(spawn.trainer, 10);
    const auto members = job.members();
    const std::int64_t g = job.generation();
    for (std::int32_t r = 0; r < 2; ++r) {
      job.report(members[static_cast<std::size_t>(r)],
                 {MemberReport::Kind::kSynced, g, r, 0, "", 0}, 20);
    }
    job.lease_request(members[0], {g, 1, 0}, 20);
    job.report(members[0], {MemberReport::Kind::kStep, g, 0, 10, "", 0}, 30);
    if (any_checkpoint) job.checkpoint_written({10, "ckpt/step-00000010.pt", "w1", false}, 30);
    job.take_commands();
    job.node_down("n1", "dead", 100);  // w1's disk with it
    for (const auto& m : members) job.trainer_exited(m, 137, "killed by signal 9", 100);
    for (const auto& spawn : commands_of<SpawnCommand>(job)) job.hello(spawn.trainer, 200);
    for (Millis now = 300; now < 60000 && !job.finished(); now += 100) job.tick(now);
    ASSERT_TRUE(job.finished());
    EXPECT_EQ(job.state(), "failed");
    EXPECT_NE(job.reason().find(any_checkpoint ? "lies on node w1's disk" : "wrote no checkpoint"),
              std::string::npos)
        << job.reason();
  }
}

// A head restarted after every trainer died (their exits, reported to the dead head, are
// reported again by their agents): the restored job resumes from the checkpoint it persisted.
TEST(ElasticJob, ARestoredJobWhoseTrainersAllDiedResumesFromItsCheckpoint) {
  TrainedJob t = trained_job(/*shared=*/true);
  const ElasticJobSnapshot snap = t.job.snapshot();
  ASSERT_EQ(snap.checkpoints.size(), 1u);
  ElasticJobOptions o = job_options(1, 2, 100);
  ElasticJob job = make_job(o);
  job.node_up("n1", "w1", 1000);
  job.node_up("n2", "w2", 1000);
  job.restore(snap, 1000);
  job.take_commands();
  for (const auto& m : t.members) job.trainer_exited(m, 137, "killed by signal 9", 1100);
  auto spawns = commands_of<SpawnCommand>(job);
  ASSERT_EQ(spawns.size(), 2u);
  for (const auto& s : spawns) job.hello(s.trainer, 1500);
  ASSERT_EQ(job.members().size(), 2u);
  EXPECT_EQ(job.committed_step(), 10);
  EXPECT_EQ(job.lost_steps(), 2);
}

// The probe's judgement of a step computed without reaching a wait: 20 times the trainer's
// measured step, and never under 10 s (a first step's warm-up, a throttled stretch).
TEST(HungInCompute, TwentyTimesTheTrainersStepAndAtLeastTenSeconds) {
  EXPECT_FALSE(hung_in_compute(0.0, 0.05));
  EXPECT_FALSE(hung_in_compute(9.9, 0.05)) << "the floor holds for a fast step";
  EXPECT_TRUE(hung_in_compute(10.1, 0.05));
  EXPECT_FALSE(hung_in_compute(39.0, 2.0)) << "a slow step gets twenty of its own";
  EXPECT_TRUE(hung_in_compute(40.1, 2.0));
}

}  // namespace
}  // namespace omnilearn::scheduler
