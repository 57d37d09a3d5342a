#pragma once
// A seeded, deterministic simulation of an asynchronous job around the real asp::AspJob: the
// machine decides everything the head decides (placement, dealing, fencing, hand-over, restarts,
// the evaluator and the finisher), and this file plays the rest of the world in virtual time,
// as the adapter (jobs/asp_scheduler_actor.cpp) and the trainers would: nodes, worker and
// server processes, real asp::ServerCore shards with their checkpoints, pushes, fences and
// hand-overs with delays, and faults:
// - a push that arrives after the worker's bound (reported unanswered, applied late) or never;
// - a pull from a dead or hung server: no reply within the worker's bound, the batch abandoned
//   before any push and the silent shard named in the next deal request;
// - a node declared dead while its trainers keep running (its agent froze): its workers push on
//   (zombies) and its server keeps serving the workers that still know its endpoint;
// - a fence slow to reach its shard (past the fence's bound), so that a late push gets there
//   first;
// - a server killed (at random, and just as a fence reaches it) that restarts from its last
//   reported checkpoint, pushes and fences in flight to it lost; a worker killed;
// - a server process hung for a while (SIGSTOP, a stuck call) while its agent runs on:
//   everything sent to it waits until it runs again, its pings go unanswered meanwhile;
// - a node drained (`omnilearn drain`) while its server serves: the hand-over;
// - the head killed (kill -9; in half of them just after it wrote a deal down and before the
//   answer left) and restarted 0.2-5 s later from the last snapshot the machine asked to write
//   (PersistCommand): messages to the dead head are lost (tells, answers to its asks), those a
//   sender repeats (hellos, a server's ready, deal requests, a finished worker's report, a
//   drain, the registry's verdicts) reach the restarted one; the restored machine's live
//   trainers are checked as the adapter pings them.
//
// Invariants checked on every run: the job succeeds; in the state each shard serves with at the
// end, every (epoch, shard, sample) was taken exactly once, or not at all where an update was
// lost with a dead or cut-off incarnation (at most once); the updates the machine counts as lost
// never exceed the updates really lost, and those never exceed its `updates_lost_at_most` plus
// the pushes no deal request reported (their worker died or stopped first, or the job ended); a
// drained server's restart resumes at the version its predecessor last reached (a drain loses
// nothing).

#include <cstdint>
#include <string>
#include <vector>

#include "asp/asp_job.hpp"

namespace omnilearn::asp::sim {

struct SimConfig {
  std::uint64_t seed = 1;
  int nodes = 4;  // one worker slot each; servers go round robin
  int shards = 2;
  std::int64_t dataset = 768;
  std::int64_t epochs = 2;
  std::int64_t eval_every = 25;       // updates
  double late = 0.03;                 // a push arrives after the worker's bound
  double lost = 0.01;                 // a push never arrives
  int frozen_nodes = 1;               // nodes declared dead while their trainers run on
  double slow_fences = 0.1;           // a fence reaches its shard after the fence's bound
  int server_kills = 0;               // servers killed at random times
  double kill_on_fence = 0;           // a server killed just as a fence reaches it
  int worker_kills = 0;               // worker processes killed
  int drains = 0;                     // nodes drained (their servers hand over)
  int hung_servers = 0;               // server processes hung for 3-20 s (SIGSTOP), their
                                      // agents fine: the head must tell hung from slow
  int head_restarts = 0;              // head kills, each restarted from its last snapshot
  std::int64_t checkpoint_every = 3;  // applied updates between a server's checkpoints
  AspMutation mutation = AspMutation::kNone;
  bool trace = false;  // print the machine's events as they happen (a replayed seed)
};

struct SimResult {
  std::vector<std::string> violations;  // empty: every invariant held
  std::string state;                    // the job's end state
  std::int64_t updates = 0;
  std::int64_t late_pushes = 0;
  std::int64_t abandoned_pulls = 0;  // batches given up on before a push: a pull got no reply
  std::int64_t zombie_pushes = 0;   // pushes from workers the machine declared gone
  std::int64_t fenced_pushes = 0;   // refused by a fence
  std::int64_t fence_timeouts = 0;  // fence asks past their bound
  std::int64_t server_restarts = 0;
  std::int64_t hand_overs = 0;    // drained servers that handed over
  std::int64_t lost_samples = 0;  // (epoch, shard, sample) lost with an incarnation
  std::int64_t evaluations = 0;
  std::int64_t partial_pushes = 0;
  std::int64_t head_restarts = 0;
  std::int64_t lost_deals = 0;  // deal answers lost with a head that had written them down
  std::int64_t hung_servers = 0;   // server processes hung (hung_servers faults that hit one)
  std::int64_t hung_restarts = 0;  // of those, restarted by the head as hung
  bool ok() const { return violations.empty(); }
};

// The seeded configuration of `seed`: 1-3 shards, 3-5 nodes, and the faults each seed draws.
SimConfig random_config(std::uint64_t seed);
SimResult run_simulation(const SimConfig& config);
// The command that replays `config`'s seed (under its mutation, if any).
std::string replay_line(const SimConfig& config);
// A mutation by its name (to_string); kNone for "" or "none". Throws std::invalid_argument on
// an unknown name.
AspMutation mutation_named(const std::string& name);

}  // namespace omnilearn::asp::sim
