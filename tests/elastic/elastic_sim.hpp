#pragma once
// A deterministic discrete-event simulation of the elastic protocol (FoundationDB / TigerBeetle
// style): one ElasticJob on a simulated head, simulated nodes (an agent that starts the trainer
// processes the job asks for: one per node with slots = 1; a spawn on a node whose previous
// trainer has not exited yet is counted), trainer processes that drive an ElasticMember over a
// fake replica and a fake process group, and a simulated network, all on one simulated clock and
// one seeded std::mt19937_64. A seed reproduces a run exactly. Faults (kills, freezes, partitions,
// drains, joins, message loss) come from a seeded schedule; every run is checked against the
// protocol's invariants (no step committed twice, none lost, bounded end, replicas consistent, no
// trainer left running). The step is the fused one that runs in omnilearn-trainer: one exchange
// per step carrying rank 0's words, a commit gate per rank (the leader's renews its lease when
// the step outlasted it), and an exchange whose waits timed out still completing in the
// background for a rank that posts late. Used by tests/elastic/elastic_simulation_test.cpp; a
// benchmark may reuse it.

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "elastic/elastic_job.hpp"
#include "elastic/elastic_member.hpp"

namespace omnilearn::scheduler::sim {

enum class FaultKind {
  kKillTrainer,      // SIGKILL the trainer process on a node (its agent reports the exit)
  kCrashTrainer,     // the trainer exits with code 1 without saying done (an exception)
  kKillNode,         // agent and trainer die (the node is silent); maybe restarted later
  kFreezeNode,       // agent and trainer SIGSTOPped for a while, then thawed
  kFreezeAgent,      // only the agent hangs; its trainer keeps running (partial failure)
  kFreezeTrainer,    // only the trainer hangs (a GC pause, a stuck kernel); the agent is fine
  kPartitionHead,    // head <-> node messages dropped both ways for a while
  kPartitionNodes,   // node <-> node: collectives across the cut hang, then time out
  kDrain,            // drain(node) by the user
  kJoinNode,         // a new node joins the cluster
  kDelaySpike,       // messages on a node's link take 50..200 ms for a while
  kLoseDone,         // the next MemberDone sent is lost
  kFailCheckpoint,   // the next final checkpoint (FinishAction) fails
  kSlowNode,         // a node computes each step in 300..2000 ms for a while (steps outlast leases)
  kLeaseChange,      // the scheduler changes the lease length (as it does for slow steps)
  kRestartHead,      // the head dies (kill -9) and starts again after duration_ms from what it
                     // had persisted: the job is restored (ElasticJob::restore), the
                     // rendezvous store is empty, messages to the old process are lost
  kKillAllTrainers,  // SIGKILL every trainer process at once (their agents report the exits):
                     // no trainer holds the job's state, which must resume from a checkpoint
  kIsolateHead,      // the head's own network is down for a while: head <-> every node cut,
                     // the nodes and their trainers still reach each other
  kCount
};
const char* to_string(FaultKind kind);
constexpr int kFaultKinds = static_cast<int>(FaultKind::kCount);

// One scheduled fault. It fires at `at_ms`, or once the ledger reaches `at_step` (plus a small
// offset), whichever is set; a fault whose step is never reached never fires.
struct Fault {
  FaultKind kind = FaultKind::kKillTrainer;
  std::optional<std::int64_t> at_ms;
  std::optional<std::int64_t> at_step;
  bool leader = false;           // the victim is the node of the current rank-0 leader (if any)
  int node = -1;                 // otherwise this node (index in creation order); -1: a random one
  int other_node = -1;           // kPartitionNodes: the other side; -1: a random other node
  std::int64_t duration_ms = 0;  // freezes, partitions, delay spikes
  std::int64_t restart_after_ms = -1;  // kKillNode: a new incarnation after this (< 0: never)
  // kKillNode: only the node's processes die (kill -9 of the agent, its trainers with it); the
  // machine stays up, so its kernel closes their connections and a probe fails at once ("peer
  // unreachable"). Otherwise the machine is dead and every probe of it times out.
  bool machine_up = false;
};

// Ranges are inclusive; equal ends make a choice constant (the hand-written scenarios).
struct SimConfig {
  std::uint64_t seed = 1;
  bool verbose = false;  // keep an event log (SimResult::log)

  int nodes = 3;
  ElasticJobOptions job;
  ElasticMemberOptions member;
  std::int32_t global_batch = 64;
  bool propose_plans = false;  // the controller proposes new splits now and then

  // Cluster.
  std::int64_t heartbeat_interval_ms = 500;
  std::int64_t heartbeat_timeout_ms = 3000;
  // The head's full-disruption rule (MembershipConfig::full_disruption_hold), run by the
  // simulated registry as by the head's: no node declared dead while none is heard.
  std::int64_t full_disruption_hold_ms = 5 * 60 * 1000;
  std::int64_t tick_ms = 100;
  // The trainer's process-group timeout (max(heartbeat timeout, 30 s)): how long a wait in a
  // collective lasts unless a newer rendezvous gives it up first.
  std::int64_t collective_timeout_ms = 30000;
  std::int64_t startup_min_ms = 50, startup_max_ms = 800;  // SpawnTrainer -> process runs
  std::int64_t speed_min_ms = 5, speed_max_ms = 40;        // compute per step, per node
  double step_noise = 0.2;                                 // +0..20% per step
  std::int64_t finish_min_ms = 10, finish_max_ms = 200;    // final checkpoint
  std::int64_t hello_retry_ms = 1000;                      // the trainer's hello ask timeout
  int hello_attempts = 5;
  std::int64_t reap_max_ms = 100;  // agent's waitpid poll
  // Per-process clocks: offset and rate against the simulated clock (rate 1 +- clock_drift).
  bool skew_clocks = false;
  double clock_drift = 0.0;

  // Network (each direction of each connection is FIFO; a message may be dropped or doubled).
  std::int64_t delay_min_us = 100, delay_max_us = 5000;
  double spike_p = 0.0;  // a 5..200 ms delay instead
  double drop_p = 0.0;
  double dup_p = 0.0;

  // Checkpoints: the leader writes one after every `checkpoint_every`-th committed step (0:
  // none), on its node's disk, or in a directory every node sees (`checkpoint_shared`).
  std::int64_t checkpoint_every = 0;
  bool checkpoint_shared = true;

  std::vector<Fault> faults;
  // A rule broken on purpose (elastic_mutation_test.cpp): given to both machines, and used by
  // the simulated sync (kSyncTieLowestRank).
  Mutation mutation = Mutation::kNone;
  std::int64_t fault_jitter_us = 30000;  // a step-triggered fault fires 0..this after the commit

  std::int64_t max_job_ms = 20 * 60 * 1000;  // the job must end by then (invariant c)
  std::int64_t exit_bound_ms = 0;            // all trainers gone this long after the end (e);
                                             // 0: member.idle_limit + 15 s
};

// A seeded configuration with a seeded fault schedule: 2..6 nodes, 0..6 faults, message chaos
// in some seeds, every node-targeted fault aimed at the leader's node about half the time;
// checkpoints in some, and in some of those every trainer killed at once (with the head, too,
// in half of them).
SimConfig random_config(std::uint64_t seed);

struct SimStats {
  std::array<int, kFaultKinds> injected{};   // faults that fired
  std::array<int, kFaultKinds> at_leader{};  // ... against the rank-0 leader's node
  std::int64_t messages = 0, dropped = 0, duplicated = 0, spiked = 0;
  std::int64_t events = 0;
  std::int64_t commits = 0;      // steps committed (ledger entries)
  std::int64_t generations = 0;  // generations that joined
  std::int64_t collective_failures = 0;
  std::int64_t probes = 0;
  std::int64_t spawns = 0;
  std::int64_t double_hosted = 0;  // a spawn landed on a node still running another trainer
  std::int64_t plans_proposed = 0;
  std::int64_t lost_dones = 0;   // MemberDone messages lost by a kLoseDone fault
  std::int64_t store_drops = 0;  // DropStoreKeysCommands
  std::int64_t job_events = 0;   // JobEvents (the events.jsonl lines)
  std::int64_t gate_waits = 0;   // a leader's commit gate waited for a renewal
  std::int64_t gate_drops = 0;   // ... and dropped the step (no renewal)
  std::int64_t late_exchanges = 0;  // an exchange completed by a late post (background)
  std::int64_t abandoned_waits = 0;  // a wait given up for a newer rendezvous
  std::int64_t follower_only = 0;   // steps committed by followers whose leader did not
  std::int64_t persists = 0;        // snapshots the job asked to be written (PersistCommand)
  // The longest a generation's leader waited for its lease because the previous leader's had
  // not run out: the head's time from its first such refusal to the grant.
  std::int64_t lease_wait_ms = 0;
  // Syncs whose ranks with the most steps differ in the generation of their last step: the
  // sync's tie-break decides which state goes on.
  std::int64_t sync_ties = 0;
  std::int64_t checkpoints = 0;       // checkpoints written (files)
  std::int64_t resumes = 0;           // generations resumed from a checkpoint
  std::int64_t rolled_back = 0;       // committed steps given up by those resumes
  std::int64_t given_up_commits = 0;  // commits of a given-up timeline's leader after a resume
  std::int64_t takebacks = 0;  // holders written off as unreachable and taken back (trainer_back)
};

struct SimResult {
  std::uint64_t seed = 0;
  std::string state;  // succeeded | failed | stopped | "" (never finished)
  std::string reason;
  std::int64_t finished_at_ms = -1;
  std::int64_t committed = 0;  // highest step in the ledger
  std::string unavoidable;     // failed: why the schedule made it unavoidable ("" if not)
  std::vector<std::string> violations;
  SimStats stats;
  std::vector<std::string> log;  // with SimConfig::verbose
  bool ok() const { return violations.empty(); }
};

SimResult run_simulation(const SimConfig& config);

// The digest of a replica's state: folded per committed step with the generation that
// committed it, so that two generations' versions of one step differ.
std::uint64_t initial_checksum();
std::uint64_t fold_checksum(std::uint64_t checksum, std::int64_t step, std::int64_t generation);

}  // namespace omnilearn::scheduler::sim
