// The elastic protocol under a deterministic fault simulation (tests/elastic/elastic_sim.hpp):
// thousands of seeded fault schedules per run, each checked against the protocol's invariants,
// plus hand-written scenarios for the failures users have hit.
//
//   ELASTIC_SIM_SEEDS=n   how many seeds the seeded test runs (default 10000)
//   ELASTIC_SIM_FIRST_SEED=k  the first of them (default 1)
//   ELASTIC_SIM_SEED=n    run only seed n, with its event log
//   SIM_LOG=1             print the event log of every hand-written scenario, passing or not

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <system_error>

#include "tests/elastic/elastic_sim.hpp"

namespace omnilearn::scheduler::sim {
namespace {

std::optional<std::uint64_t> env_number(const char* name) {
  const char* value = std::getenv(name);
  if (!value || !*value) return std::nullopt;
  return std::strtoull(value, nullptr, 10);
}

std::string binary_path() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "build/tests/elastic/elastic_simulation_test";
  auto rel = std::filesystem::relative(exe, std::filesystem::current_path(), ec);
  return (ec || rel.empty() || rel.native().rfind("../../", 0) == 0) ? exe.string() : rel.string();
}

std::string repro_line(std::uint64_t seed) {
  return "ELASTIC_SIM_SEED=" + std::to_string(seed) + " " + binary_path() +
         " --gtest_filter=ElasticSimulation.SeededFaultSchedules";
}

std::string describe_config(const SimConfig& c) {
  std::string s =
      "nodes " + std::to_string(c.nodes) + ", workers " + std::to_string(c.job.min_workers) + ".." +
      std::to_string(c.job.max_workers) + ", steps " + std::to_string(c.job.total_steps) +
      ", drop " + std::to_string(c.drop_p) + ", dup " + std::to_string(c.dup_p) +
      (c.skew_clocks ? ", skewed clocks" : "") + (c.propose_plans ? ", replans" : "") +
      (c.checkpoint_every > 0 ? ", checkpoints every " + std::to_string(c.checkpoint_every) +
                                    (c.checkpoint_shared ? " (shared)" : " (node-local)")
                              : "") +
      ", faults:";
  for (const auto& f : c.faults) {
    s += std::string(" ") + to_string(f.kind) +
         (f.at_ms ? "@" + std::to_string(*f.at_ms) + "ms" : "@step" + std::to_string(*f.at_step)) +
         (f.leader ? "[leader]" : "");
  }
  return s;
}

void print_result(const SimResult& r) {
  std::cout << "seed " << r.seed << ": " << (r.state.empty() ? "unfinished" : r.state) << " '"
            << r.reason << "' at " << r.finished_at_ms << " ms, " << r.committed << " steps";
  if (!r.unavoidable.empty()) std::cout << " (unavoidable: " << r.unavoidable << ")";
  std::cout << "\n";
  for (const auto& v : r.violations) std::cout << "  VIOLATION " << v << "\n";
}

// Digits out, so that outcomes group by kind of reason.
std::string reason_class(const std::string& reason) {
  std::string out;
  bool digits = false;
  for (char ch : reason) {
    if (ch >= '0' && ch <= '9') {
      if (!digits) out += '#';
      digits = true;
    } else {
      out += ch;
      digits = false;
    }
  }
  return out.size() > 90 ? out.substr(0, 90) + "..." : out;
}

TEST(ElasticSimulation, SeededFaultSchedules) {
  if (auto one = env_number("ELASTIC_SIM_SEED")) {
    SimConfig config = random_config(*one);
    config.verbose = true;
    SimResult r = run_simulation(config);
    std::cout << "config: " << describe_config(config) << "\n";
    for (const auto& line : r.log) std::cout << line << "\n";
    print_result(r);
    EXPECT_TRUE(r.ok()) << repro_line(*one);
    return;
  }
  const std::uint64_t first = env_number("ELASTIC_SIM_FIRST_SEED").value_or(1);
  const std::uint64_t seeds = env_number("ELASTIC_SIM_SEEDS").value_or(10000);
  SimStats total;
  std::map<std::string, int> outcomes;
  std::map<std::string, int> unavoidable;  // failures, by why the harness accepted them
  std::vector<std::uint64_t> failing;
  std::int64_t sim_ms = 0;
  const auto started = std::chrono::steady_clock::now();
  for (std::uint64_t seed = first; seed < first + seeds; ++seed) {
    SimResult r = run_simulation(random_config(seed));
    for (int k = 0; k < kFaultKinds; ++k) {
      total.injected[k] += r.stats.injected[k];
      total.at_leader[k] += r.stats.at_leader[k];
    }
    total.messages += r.stats.messages;
    total.dropped += r.stats.dropped;
    total.duplicated += r.stats.duplicated;
    total.spiked += r.stats.spiked;
    total.events += r.stats.events;
    total.commits += r.stats.commits;
    total.generations += r.stats.generations;
    total.collective_failures += r.stats.collective_failures;
    total.probes += r.stats.probes;
    total.spawns += r.stats.spawns;
    total.double_hosted += r.stats.double_hosted;
    total.plans_proposed += r.stats.plans_proposed;
    total.lost_dones += r.stats.lost_dones;
    total.store_drops += r.stats.store_drops;
    total.job_events += r.stats.job_events;
    total.gate_waits += r.stats.gate_waits;
    total.gate_drops += r.stats.gate_drops;
    total.late_exchanges += r.stats.late_exchanges;
    total.abandoned_waits += r.stats.abandoned_waits;
    total.follower_only += r.stats.follower_only;
    total.sync_ties += r.stats.sync_ties;
    total.checkpoints += r.stats.checkpoints;
    total.resumes += r.stats.resumes;
    total.rolled_back += r.stats.rolled_back;
    total.given_up_commits += r.stats.given_up_commits;
    total.takebacks += r.stats.takebacks;
    total.lease_wait_ms = std::max(total.lease_wait_ms, r.stats.lease_wait_ms);
    sim_ms += std::max<std::int64_t>(r.finished_at_ms, 0);
    std::string outcome = r.state.empty() ? "unfinished" : r.state;
    if (r.state == "failed") {
      outcome += ": " + reason_class(r.reason);
      ++unavoidable[r.unavoidable.substr(0, r.unavoidable.find_first_of(":(0123456789"))];
    }
    ++outcomes[outcome];
    if (!r.ok()) failing.push_back(seed);
  }
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  // Failing seeds first: the reproduction, then the event log of the first few.
  int shown = 0;
  for (std::uint64_t seed : failing) {
    SimConfig config = random_config(seed);
    config.verbose = true;
    SimResult r = run_simulation(config);
    std::cout << "\nFAILED seed " << seed << ": reproduce with\n  " << repro_line(seed) << "\n"
              << "config: " << describe_config(config) << "\n";
    print_result(r);
    if (shown++ < 3) {
      const auto path = std::filesystem::temp_directory_path() /
                        ("elastic_sim_seed_" + std::to_string(seed) + ".log");
      std::ofstream out(path);
      for (const auto& line : r.log) out << line << "\n";
      const std::size_t tail = 300;
      std::cout << "event log (last " << std::min(tail, r.log.size()) << " of " << r.log.size()
                << " lines; all in " << path.string() << "):\n";
      for (std::size_t i = r.log.size() > tail ? r.log.size() - tail : 0; i < r.log.size(); ++i) {
        std::cout << "  " << r.log[i] << "\n";
      }
    }
  }

  std::cout << "\nelastic simulation: " << seeds << " seeds in " << wall_s << " s ("
            << static_cast<double>(seeds) / std::max(wall_s, 1e-9) << " seeds/s), " << sim_ms / 1000
            << " simulated s, " << total.events << " events, " << failing.size() << " failing\n";
  std::cout << "faults injected (against the rank-0 leader's node):\n";
  for (int k = 0; k < kFaultKinds; ++k) {
    std::cout << "  " << to_string(static_cast<FaultKind>(k)) << ": " << total.injected[k] << " ("
              << total.at_leader[k] << ")\n";
  }
  std::cout << "network: " << total.messages << " messages, " << total.dropped << " dropped, "
            << total.duplicated << " duplicated, " << total.spiked << " delayed 5..200 ms; "
            << total.lost_dones << " MemberDone lost\n";
  std::cout << "protocol: " << total.commits << " steps committed, " << total.generations
            << " generations joined, " << total.collective_failures << " failed collectives, "
            << total.probes << " probes, " << total.spawns << " spawns (" << total.double_hosted
            << " on a node still running a trainer), " << total.plans_proposed
            << " plans proposed, " << total.store_drops << " store key drops, " << total.job_events
            << " job events\n";
  std::cout << "fused step: " << total.gate_waits << " commit-gate waits for a renewal, "
            << total.gate_drops << " steps dropped at the gate, " << total.late_exchanges
            << " exchanges completed by a late post, " << total.abandoned_waits
            << " waits given up for a newer rendezvous, " << total.follower_only
            << " steps committed by followers alone, " << total.sync_ties
            << " syncs decided by the tie-break; the longest wait for a lease "
            << total.lease_wait_ms << " ms\n";
  std::cout << "checkpoints: " << total.checkpoints << " written, " << total.resumes
            << " resumes from one (" << total.rolled_back << " committed steps given up), "
            << total.given_up_commits << " commits of a given-up timeline after a resume\n";
  std::cout << "written-off holders taken back: " << total.takebacks << "\n";
  std::cout << "outcomes:\n";
  for (const auto& [outcome, count] : outcomes)
    std::cout << "  " << count << "  " << outcome << "\n";
  std::cout << "failures accepted as unavoidable, because:\n";
  for (const auto& [why, count] : unavoidable) {
    std::cout << "  " << count << "  " << (why.empty() ? "(not accepted)" : why) << "\n";
  }

  std::string list;
  for (std::uint64_t seed : failing) list += " " + std::to_string(seed);
  EXPECT_TRUE(failing.empty()) << failing.size() << " failing seeds:" << list;
}

// ------------------------------------------------------------------ hand-written scenarios
// No randomness: every range is a constant, the network neither drops nor doubles.

SimConfig scenario(int nodes, int min_workers, int max_workers, std::int64_t steps) {
  SimConfig c;
  c.seed = 7;
  c.nodes = nodes;
  c.job.min_workers = min_workers;
  c.job.max_workers = max_workers;
  c.job.slots = 1;
  c.job.total_steps = steps;
  c.job.spawn_timeout = 5000;
  c.job.form_timeout = 8000;
  c.job.grace_period = 20000;
  c.job.lease_duration = 1000;
  c.job.lease_margin = 200;
  c.job.probe_timeout = 1000;
  c.member.total_steps = steps;
  c.member.lease_wait = 2000;
  c.member.done_resend = 1000;
  c.member.idle_limit = 60000;
  c.startup_min_ms = c.startup_max_ms = 300;
  c.speed_min_ms = c.speed_max_ms = 20;
  c.step_noise = 0;
  c.finish_min_ms = c.finish_max_ms = 50;
  c.reap_max_ms = 0;
  c.delay_min_us = c.delay_max_us = 1000;
  c.fault_jitter_us = 0;
  c.verbose = true;
  return c;
}

Fault at_step(FaultKind kind, std::int64_t step, bool leader) {
  Fault f;
  f.kind = kind;
  f.at_step = step;
  f.leader = leader;
  return f;
}

void expect_ok(const SimResult& r) {
  if (!r.ok() || ::testing::Test::HasFailure() || std::getenv("SIM_LOG")) {
    for (const auto& line : r.log) std::cout << line << "\n";
  }
  print_result(r);
  EXPECT_TRUE(r.ok());
}

void expect_succeeded(const SimResult& r, const SimConfig& c) {
  EXPECT_EQ(r.state, "succeeded") << r.reason;
  EXPECT_EQ(r.committed, c.job.total_steps);
  expect_ok(r);
}

TEST(ElasticScenario, NoFaults) {
  SimConfig c = scenario(3, 1, 3, 60);
  expect_succeeded(run_simulation(c), c);
}

// A drain of the node running rank 0 hands its state over and leaves; it must not end the job
// early as succeeded: the others finish every step.
TEST(ElasticScenario, DrainOfRankZeroMidJobFinishesAllSteps) {
  SimConfig c = scenario(3, 1, 3, 100);
  c.faults.push_back(at_step(FaultKind::kDrain, 50, true));
  SimResult r = run_simulation(c);
  EXPECT_EQ(r.stats.at_leader[static_cast<int>(FaultKind::kDrain)], 1);
  // The handover takes a bounded number of generations (the first, the drain's, and at most
  // a pause and the one without the drained node), not one every few steps until the end.
  EXPECT_LE(r.stats.generations, 5);
  expect_succeeded(r, c);
}

// The head is killed mid-job and comes back 1.5 s later from what it persisted: the
// trainers keep their state, report where they stopped, and the job goes on from the newest
// committed step under a new generation, with every step committed once.
TEST(ElasticScenario, HeadRestartMidJobResumesFromTheTrainersState) {
  SimConfig c = scenario(3, 1, 3, 120);
  Fault f = at_step(FaultKind::kRestartHead, 50, false);
  f.duration_ms = 1500;
  c.faults.push_back(f);
  SimResult r = run_simulation(c);
  EXPECT_EQ(r.stats.injected[static_cast<int>(FaultKind::kRestartHead)], 1);
  EXPECT_GT(r.stats.persists, 0);
  // The first generation, the restored head's stop, and the one that resumes.
  EXPECT_LE(r.stats.generations, 4);
  expect_succeeded(r, c);
}

// The same while the first generation is still forming, and during a drain's hand-over.
TEST(ElasticScenario, HeadRestartWhileTheFirstGenerationForms) {
  SimConfig c = scenario(3, 2, 3, 60);
  Fault f;
  f.kind = FaultKind::kRestartHead;
  f.at_ms = 320;
  f.duration_ms = 800;
  c.faults.push_back(f);
  SimResult r = run_simulation(c);
  EXPECT_EQ(r.stats.injected[static_cast<int>(FaultKind::kRestartHead)], 1);
  expect_succeeded(r, c);
}

TEST(ElasticScenario, HeadRestartDuringADrainOfTheLeader) {
  SimConfig c = scenario(3, 1, 3, 100);
  c.faults.push_back(at_step(FaultKind::kDrain, 40, true));
  Fault f = at_step(FaultKind::kRestartHead, 40, false);
  f.duration_ms = 300;
  c.faults.push_back(f);
  SimResult r = run_simulation(c);
  EXPECT_EQ(r.stats.injected[static_cast<int>(FaultKind::kRestartHead)], 1);
  expect_succeeded(r, c);
}

// Every trainer is killed at once (kill -9 of each, their agents report the exits): no live
// trainer holds the job's state. The job goes back to its newest checkpoint, written on a disk
// every node sees, under a new generation: the steps after it are given up and trained again,
// and the job ends with every step committed (the rolled-back ones twice, recorded as lost).
TEST(ElasticScenario, EveryTrainerKilledResumesFromTheNewestCheckpoint) {
  SimConfig c = scenario(3, 1, 3, 120);
  c.checkpoint_every = 10;
  c.faults.push_back(at_step(FaultKind::kKillAllTrainers, 55, false));
  SimResult r = run_simulation(c);
  EXPECT_EQ(r.stats.injected[static_cast<int>(FaultKind::kKillAllTrainers)], 1);
  EXPECT_EQ(r.stats.resumes, 1);
  EXPECT_GE(r.stats.rolled_back, 5);  // steps 51..55 at least
  EXPECT_LT(r.stats.rolled_back, 10);
  expect_succeeded(r, c);
}

// The same with the head killed with them and back 1.5 s later: the exits its agents reported
// to the dead head are reported again, and the restored job resumes from the checkpoint it
// persisted.
TEST(ElasticScenario, EveryTrainerAndTheHeadKilledResumesFromTheCheckpoint) {
  for (const bool head_first : {false, true}) {
    SCOPED_TRACE(head_first ? "head first" : "trainers first");
    SimConfig c = scenario(3, 1, 3, 120);
    c.checkpoint_every = 10;
    Fault head = at_step(FaultKind::kRestartHead, 55, false);
    head.duration_ms = 1500;
    const Fault kill = at_step(FaultKind::kKillAllTrainers, 55, false);
    c.faults = head_first ? std::vector<Fault>{head, kill} : std::vector<Fault>{kill, head};
    SimResult r = run_simulation(c);
    EXPECT_EQ(r.stats.injected[static_cast<int>(FaultKind::kRestartHead)], 1);
    EXPECT_EQ(r.stats.resumes, 1);
    expect_succeeded(r, c);
  }
}

// The leader freezes as a follower's node dies: its probe times out while the other follower
// answers, so it is written off, and that follower crashes before a generation without the
// leader trains. No checkpoint: the frozen leader is the only holder left. Thawed, it is taken
// back and leads, and the job finishes every step. (The shape of elastic simulation seed
// 742600, one of a million; told to stop at the write-off, the leader exited on thawing and
// the job failed.)
TEST(ElasticScenario, AFrozenLeaderWrittenOffIsTakenBackWhenTheLastHolderDies) {
  SimConfig c = scenario(3, 2, 3, 120);
  Fault freeze;
  freeze.kind = FaultKind::kFreezeTrainer;
  freeze.at_ms = 1000;
  freeze.leader = true;
  freeze.duration_ms = 2500;
  Fault kill;
  kill.kind = FaultKind::kKillNode;
  kill.at_ms = 1010;
  kill.node = 1;
  Fault crash;
  crash.kind = FaultKind::kCrashTrainer;
  crash.at_ms = 2150;
  crash.node = 2;
  c.faults = {freeze, kill, crash};
  SimResult r = run_simulation(c);
  EXPECT_EQ(r.stats.at_leader[static_cast<int>(FaultKind::kFreezeTrainer)], 1);
  EXPECT_EQ(r.stats.takebacks, 1);
  expect_succeeded(r, c);
}

// Checkpoints on each node's own disk: the trainer that loads the checkpoint is the one placed
// on the node that wrote it.
TEST(ElasticScenario, ANodeLocalCheckpointIsLoadedOnItsNode) {
  SimConfig c = scenario(3, 1, 3, 120);
  c.checkpoint_every = 10;
  c.checkpoint_shared = false;
  c.faults.push_back(at_step(FaultKind::kKillAllTrainers, 55, false));
  SimResult r = run_simulation(c);
  EXPECT_EQ(r.stats.resumes, 1);
  expect_succeeded(r, c);
}

// Without checkpoints the job cannot resume: it fails after its grace period, saying so.
TEST(ElasticScenario, EveryTrainerKilledWithoutACheckpointFailsSayingWhy) {
  SimConfig c = scenario(3, 1, 3, 120);
  c.faults.push_back(at_step(FaultKind::kKillAllTrainers, 55, false));
  SimResult r = run_simulation(c);
  EXPECT_EQ(r.state, "failed");
  EXPECT_NE(r.reason.find("wrote no checkpoint"), std::string::npos) << r.reason;
  EXPECT_EQ(r.stats.resumes, 0);
  expect_ok(r);
}

// The rank-0 node's agent hangs for 4 s while its trainer keeps training: the head declares the
// node down and re-forms, and the old leader must stop committing (no split brain).
TEST(ElasticScenario, LeaderAgentFrozenWhileItsTrainerRuns) {
  SimConfig c = scenario(3, 1, 3, 120);
  Fault f = at_step(FaultKind::kFreezeAgent, 30, true);
  f.duration_ms = 4000;
  c.faults.push_back(f);
  SimResult r = run_simulation(c);
  EXPECT_EQ(r.stats.at_leader[static_cast<int>(FaultKind::kFreezeAgent)], 1);
  expect_succeeded(r, c);
}

// The head's own network goes down for four heartbeat timeouts mid-job while the trainers
// still reach each other: the head hears no node, declares none dead (the full-disruption
// rule), writes off no trainer for the probes that went into the outage, and the same three
// trainers finish the job. With the rule off every node is declared dead, every trainer is
// written off with the state it held, and the job, which writes no checkpoint, fails.
TEST(ElasticScenario, AHeadCutOffFromEveryNodeLosesNoTrainer) {
  for (const bool rule : {true, false}) {
    SCOPED_TRACE(rule ? "with the full-disruption rule" : "without it");
    SimConfig c = scenario(3, 1, 3, 120);
    if (!rule) c.full_disruption_hold_ms = 0;
    Fault f = at_step(FaultKind::kIsolateHead, 50, false);
    f.duration_ms = 4 * c.heartbeat_timeout_ms;
    c.faults.push_back(f);
    SimResult r = run_simulation(c);
    EXPECT_EQ(r.stats.injected[static_cast<int>(FaultKind::kIsolateHead)], 1);
    if (rule) {
      expect_succeeded(r, c);
      EXPECT_EQ(r.stats.spawns, 3) << "a trainer was written off and replaced";
    } else {
      expect_ok(r);
      EXPECT_EQ(r.state, "failed");
      EXPECT_GT(r.stats.spawns, 3);
    }
  }
}

// The leader's report that it finished is lost: it resends, and the job still succeeds.
// The leader's node loses its agent and trainer together, so no agent reports the exit. When
// the machine stays up (kill -9 of the worker), its kernel resets the connections, the probe
// that the survivors' broken collective triggers fails at once, and the next leader's lease is
// granted without waiting for the dead one's to run out. When the machine itself is dead the
// probe times out, which proves nothing (a frozen machine looks the same): the next leader
// waits for the lease. (Probes time out here well before the lease runs out, as they may when
// leases are lengthened for slow steps; at equal lengths the lease is out by then anyway.)
TEST(ElasticScenario, LeaderKnownDeadIsNotWaitedFor) {
  std::map<bool, std::int64_t> lease_wait;
  for (const bool machine_up : {true, false}) {
    SCOPED_TRACE(machine_up ? "machine up" : "machine dead");
    SimConfig c = scenario(3, 1, 3, 100);
    c.job.probe_timeout = 300;
    Fault f = at_step(FaultKind::kKillNode, 40, true);
    f.machine_up = machine_up;
    c.faults.push_back(f);
    SimResult r = run_simulation(c);
    EXPECT_EQ(r.stats.at_leader[static_cast<int>(FaultKind::kKillNode)], 1);
    expect_succeeded(r, c);
    lease_wait[machine_up] = r.stats.lease_wait_ms;
    std::cout << (machine_up ? "machine up" : "machine dead") << ": the next leader waited "
              << r.stats.lease_wait_ms << " ms (simulated) for its lease\n";
  }
  EXPECT_EQ(lease_wait[true], 0) << "the dead leader's process was known to be gone";
  EXPECT_GT(lease_wait[false], 0) << "a probe that timed out must not release the lease";
}

TEST(ElasticScenario, LostTrainerDone) {
  SimConfig c = scenario(3, 1, 3, 40);
  Fault f;
  f.kind = FaultKind::kLoseDone;
  f.at_ms = 0;
  c.faults.push_back(f);
  SimResult r = run_simulation(c);
  EXPECT_EQ(r.stats.lost_dones, 1);
  expect_succeeded(r, c);
}

// A trainer dies with exit code 1 and never says done: the others go on and finish.
TEST(ElasticScenario, TrainerExitsWithCodeOneWithoutDone) {
  for (bool leader : {true, false}) {
    SCOPED_TRACE(leader ? "rank 0" : "a follower");
    SimConfig c = scenario(3, 2, 3, 80);
    c.faults.push_back(at_step(FaultKind::kCrashTrainer, 40, leader));
    SimResult r = run_simulation(c);
    EXPECT_EQ(r.stats.injected[static_cast<int>(FaultKind::kCrashTrainer)], 1);
    expect_succeeded(r, c);
  }
}

// The only trainer exits with code 1: nobody holds the committed state any more, so the job
// cannot go on; it fails with a reason (after its grace period) instead of starting over.
TEST(ElasticScenario, OnlyTrainerExitsWithCodeOneFailsTheJob) {
  SimConfig c = scenario(1, 1, 1, 80);
  c.faults.push_back(at_step(FaultKind::kCrashTrainer, 40, true));
  SimResult r = run_simulation(c);
  EXPECT_EQ(r.state, "failed");
  EXPECT_FALSE(r.reason.empty());
  EXPECT_GE(r.committed, 40);
  EXPECT_LT(r.committed, 80);
  expect_ok(r);
}

// min_workers is never reached: the job fails after its grace period, with the reason. Before
// its first generation the job also allows for slow starts and formation (ElasticJob::tick), so
// the bound is grace + form_timeout + spawn_timeout of simulated time.
TEST(ElasticScenario, MinWorkersNeverReachedFailsAfterGrace) {
  SimConfig c = scenario(2, 3, 3, 50);
  SimResult r = run_simulation(c);
  EXPECT_EQ(r.state, "failed");
  EXPECT_FALSE(r.reason.empty());
  EXPECT_NE(r.reason.find("min_workers"), std::string::npos) << r.reason;
  EXPECT_GE(r.finished_at_ms, c.job.grace_period);
  EXPECT_LE(r.finished_at_ms, c.job.grace_period + c.job.form_timeout + c.job.spawn_timeout + 1000);
  EXPECT_EQ(r.committed, 0);
  expect_ok(r);
}

// The final checkpoint cannot be written: the job fails, it does not report success.
TEST(ElasticScenario, FailedFinalCheckpointFailsTheJob) {
  SimConfig c = scenario(3, 1, 3, 40);
  Fault f;
  f.kind = FaultKind::kFailCheckpoint;
  f.at_ms = 0;
  c.faults.push_back(f);
  SimResult r = run_simulation(c);
  EXPECT_EQ(r.state, "failed");
  EXPECT_FALSE(r.reason.empty());
  expect_ok(r);
}

// The same seed gives the same run, event for event.
TEST(ElasticSimulation, SeedsReproduce) {
  for (std::uint64_t seed : {3u, 17u, 99u}) {
    SimConfig c = random_config(seed);
    c.verbose = true;
    SimResult a = run_simulation(c);
    SimResult b = run_simulation(c);
    EXPECT_EQ(a.log, b.log) << "seed " << seed;
    EXPECT_EQ(a.stats.events, b.stats.events) << "seed " << seed;
  }
}

}  // namespace
}  // namespace omnilearn::scheduler::sim
