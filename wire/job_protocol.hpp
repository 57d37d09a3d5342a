#pragma once
// What clients, the head's job actors, node agents and trainers say about jobs (kinds 200..299).
// The elastic protocol (docs/ARCHITECTURE.md, "Jobs and the elastic protocol"): the scheduler
// owns the generation number and the rank order; trainers only ever train in the generation
// they were told, and a new generation is adopted at a step boundary announced by the rank-0
// leader.

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <msgpack.hpp>

#include "wire/membership_protocol.hpp"
#include "runtime/message_types.hpp"

namespace omnilearn::actors {

inline constexpr const char* kJobsActor = "jobs";
inline constexpr const char* kStoreActor = "store";
inline std::string scheduler_actor_name(const std::string& job_id) { return "job-" + job_id; }

// client -> jobs. The head parses and validates the TOML itself (the client did too).
struct SubmitJob {
  static constexpr MessageKind kKind = MessageKind::kSubmitJob;
  std::string toml;         // the job file's text
  std::string source_name;  // its path, for error locations
  std::string run_dir;      // on the head's filesystem; empty: runs/<job-id>
  MSGPACK_DEFINE(toml, source_name, run_dir);
};

struct SubmitJobReply {
  static constexpr MessageKind kKind = MessageKind::kSubmitJobReply;
  bool accepted = false;
  std::string job_id;
  std::string run_dir;
  std::string error;
  MSGPACK_DEFINE(accepted, job_id, run_dir, error);
};

// client -> jobs; answered with SimpleReply.
struct StopJob {
  static constexpr MessageKind kKind = MessageKind::kStopJob;
  std::string job_id;
  std::string reason;
  MSGPACK_DEFINE(job_id, reason);
};

// client -> jobs; the node's trainers leave their jobs at a step boundary, and no job (running
// or later) places trainers on it until an UndrainNode; answered with SimpleReply.
struct DrainNode {
  static constexpr MessageKind kKind = MessageKind::kDrainNode;
  std::string node;  // name or id
  MSGPACK_DEFINE(node);
};

// client -> jobs; a drained node usable again by every job; answered with SimpleReply.
struct UndrainNode {
  static constexpr MessageKind kKind = MessageKind::kUndrainNode;
  std::string node;  // name or id
  MSGPACK_DEFINE(node);
};

// client -> jobs -> agent: change a node's emulated resources while it runs.
struct SetNodeResources {
  static constexpr MessageKind kKind = MessageKind::kSetNodeResources;
  std::string node;        // name or id
  double slowdown = 0;     // > 0: new slowdown factor; 0: unchanged
  double cpu_quota = -1;   // >= 0: new CPU quota (0 removes it); < 0: unchanged
  MSGPACK_DEFINE(node, slowdown, cpu_quota);
};

// client -> jobs: state of a job plus the events since `since` (for --follow).
struct JobStatusRequest {
  static constexpr MessageKind kKind = MessageKind::kJobStatusRequest;
  std::string job_id;
  std::uint64_t since = 0;
  MSGPACK_DEFINE(job_id, since);
};

struct JobStatusReply {
  static constexpr MessageKind kKind = MessageKind::kJobStatusReply;
  bool found = false;
  JobInfo job;
  std::vector<std::string> events;  // JSON objects, one per line of events.jsonl
  std::uint64_t next = 0;           // pass as `since` next time
  bool finished = false;
  std::string summary_json;         // set once finished
  // Events between `since` and the first of `events` that the head no longer holds (its
  // memory keeps the recent ones; older ones come from events.jsonl unless that file could not
  // be written): the reader goes on, told of the gap. 0 almost always.
  std::uint64_t dropped = 0;
  MSGPACK_DEFINE(found, job, events, next, finished, summary_json, dropped);
};

// scheduler -> agent: start a trainer process for a job.
struct SpawnTrainer {
  static constexpr MessageKind kKind = MessageKind::kSpawnTrainer;
  std::string job_id;
  std::string trainer;    // unique name of the trainer within the job
  std::string scheduler;  // the scheduler actor's name on the head
  // The node record (registry id) the head placed it on: an agent that no longer is that node
  // (the head declared it dead while its registration reply was lost) does not keep it.
  std::string node_id;
  MSGPACK_DEFINE(job_id, trainer, scheduler, node_id);
};

// trainer -> scheduler, first thing after it starts; answered with TrainerHelloReply.
struct TrainerHello {
  static constexpr MessageKind kKind = MessageKind::kTrainerHello;
  std::string job_id;
  std::string trainer;
  std::string node_id;
  std::int32_t pid = 0;
  std::string gloo_host;  // interface its collectives bind to
  MSGPACK_DEFINE(job_id, trainer, node_id, pid, gloo_host);
};

struct TrainerHelloReply {
  static constexpr MessageKind kKind = MessageKind::kTrainerHelloReply;
  bool accepted = false;
  std::string error;
  std::string job_toml;        // the job spec, parsed by the trainer with the same parser
  std::string source_name;
  std::string checkpoint_dir;  // resolved: where rank 0 writes checkpoints
  std::int32_t collective_timeout_ms = 10000;
  // Asynchronous training (mode = "asp"): "server" (shard `shard` of `shards`, resumed from
  // `resume_checkpoint` when not empty, as incarnation `incarnation`) or "worker" (number
  // `worker_id`); "" for a BSP trainer.
  std::string role;
  std::int32_t shard = 0;
  std::int32_t shards = 0;
  std::int64_t incarnation = 0;
  std::string resume_checkpoint;
  std::int64_t worker_id = 0;
  // The version the scheduler recorded for `resume_checkpoint` (-1: none): a file that holds
  // another one was rewritten since, by an incarnation declared gone, and is not loaded.
  std::int64_t resume_version = -1;
  MSGPACK_DEFINE(accepted, error, job_toml, source_name, checkpoint_dir, collective_timeout_ms,
                 role, shard, shards, incarnation, resume_checkpoint, worker_id, resume_version);
};

// scheduler -> every trainer of a generation, and to those of the previous one that are not
// in it (rank < 0): they stop training in the old generation at its next step boundary and
// either leave (`leave`: drained) or wait for a later generation (too few workers).
struct Rendezvous {
  static constexpr MessageKind kKind = MessageKind::kRendezvous;
  std::string job_id;
  std::int64_t generation = 0;
  std::int32_t rank = -1;
  std::int32_t world = 0;
  std::vector<std::int32_t> batches;  // the plan the generation starts with, by rank
  std::uint64_t plan_version = 0;
  bool leave = false;
  bool abandon_previous = false;  // a member was lost: stop waiting in the old group's collective
  // The generation resumes from this checkpoint (rank 0 loads it; checkpoint_step < 0: none).
  std::string checkpoint;
  std::int64_t checkpoint_step = -1;
  MSGPACK_DEFINE(job_id, generation, rank, world, batches, plan_version, leave, abandon_previous,
                 checkpoint, checkpoint_step);
};

// scheduler -> the rank-0 leader: use these batches from the next step boundary on.
struct PlanUpdate {
  static constexpr MessageKind kKind = MessageKind::kPlanUpdate;
  std::int64_t generation = 0;
  std::uint64_t version = 0;
  std::vector<std::int32_t> batches;
  MSGPACK_DEFINE(generation, version, batches);
};

// trainer -> scheduler (rank 0 after every committed step; any rank when a collective failed)
// and trainer -> its node agent (every rank, every step: the counters heartbeats carry).
struct TrainerReport {
  static constexpr MessageKind kKind = MessageKind::kTrainerReport;
  std::string job_id;
  std::string trainer;
  std::int64_t generation = 0;
  std::int32_t rank = -1;
  std::int64_t step = 0;          // committed steps so far
  std::int64_t total_steps = 0;
  std::int64_t epoch = 0;
  double loss = 0;                // global loss of the last step (rank 0)
  std::int32_t batch = 0;         // this rank's batch in the last step
  std::vector<std::int32_t> batches;  // the whole plan of the last step
  double compute_time_s = 0;      // forward + backward (+ emulated slowdown) of the last step
  double step_time_s = 0;         // wall time of the last step, all-reduce included
  double allreduce_time_s = 0;
  bool collective_failed = false; // the generation broke; waiting for the next rendezvous
  std::string error;
  double eval_accuracy = -1;      // >= 0 when this step ran an evaluation
  double eval_loss = -1;
  bool synced = false;            // sent once per generation, right after the state sync
  double parameter_checksum = 0;  // with synced: sum of all parameters (equal on every rank)
  bool left = false;              // the leader stopped leading `generation` (regroup, abandon)
  std::string checkpoint;         // a checkpoint this step wrote (rank 0), on its node's disk
  std::int64_t synced_generation = -1;  // the newest generation it synced in (-1: none)
  // Rank 0's step report: every rank's compute of the step, by rank, carried in the gradient
  // exchange (training::StepResult::rank_compute_times_s); empty when not measured.
  std::vector<double> rank_compute_times_s;
  MSGPACK_DEFINE(job_id, trainer, generation, rank, step, total_steps, epoch, loss, batch, batches,
                 compute_time_s, step_time_s, allreduce_time_s, collective_failed, error,
                 eval_accuracy, eval_loss, synced, parameter_checksum, left, checkpoint,
                 synced_generation, rank_compute_times_s);
};

// trainer -> scheduler: what this trainer did at the end of its part (a report, never a
// decision: only the scheduler ends a job). `outcome`: "finished" (all steps done; rank 0 adds
// evaluation and final checkpoint), "drained" (left at a step boundary), "error" (a training
// error; `error` says which). Ignored when `generation` is superseded. Resent until the
// scheduler answers with StopTrainer or a Rendezvous, so a lost one cannot hang the job.
struct TrainerDone {
  static constexpr MessageKind kKind = MessageKind::kTrainerDone;
  std::string job_id;
  std::string trainer;
  std::int32_t rank = -1;
  std::int64_t step = 0;
  bool ok = true;
  std::string error;
  double test_accuracy = -1;
  double test_loss = -1;
  std::string checkpoint;  // path of the final checkpoint (rank 0)
  std::int64_t generation = 0;
  std::string outcome = "finished";
  MSGPACK_DEFINE(job_id, trainer, rank, step, ok, error, test_accuracy, test_loss, checkpoint,
                 generation, outcome);
};

// leader (rank 0 of `generation`) -> scheduler: may I commit steps of this generation? Sent when
// a generation starts and again before the lease runs out; `seq` matches the grant to the
// request (the leader counts its lease from when it sent the request).
struct LeaseRequest {
  static constexpr MessageKind kKind = MessageKind::kLeaseRequest;
  std::string job_id;
  std::string trainer;
  std::int64_t generation = 0;
  std::uint64_t seq = 0;
  std::int64_t step = 0;  // the leader's committed steps when it asked
  MSGPACK_DEFINE(job_id, trainer, generation, seq, step);
};

// scheduler -> leader: the answer. `granted` with `duration_ms` lets the leader commit until
// (its send time of request `seq`) + duration; refused when the generation is superseded or
// another leader's lease has not yet run out (`reason`).
struct LeaseGrant {
  static constexpr MessageKind kKind = MessageKind::kLeaseGrant;
  std::int64_t generation = 0;
  std::uint64_t seq = 0;
  bool granted = false;
  std::int64_t duration_ms = 0;
  std::string reason;
  bool superseded = false;  // refused for good (generation superseded, job ended): abandon now
  MSGPACK_DEFINE(generation, seq, granted, duration_ms, reason, superseded);
};

// scheduler or agent -> trainer: leave now (job stopped, node leaving).
struct StopTrainer {
  static constexpr MessageKind kKind = MessageKind::kStopTrainer;
  std::string job_id;
  std::string reason;
  MSGPACK_DEFINE(job_id, reason);
};

// scheduler -> trainer (ask): the probe of a synchronous job's member. Answered by the trainer's
// actor, not its training thread, so a trainer busy with a long step answers; the answer says
// for how long its training thread has been computing without reaching a wait, which tells a
// step that takes long from one that will not end (a call stuck in a device, a node slowed a
// thousandfold).
struct TrainerActivity {
  static constexpr MessageKind kKind = MessageKind::kTrainerActivity;
  std::string job_id;
  MSGPACK_DEFINE(job_id);
};

struct TrainerActivityReply {
  static constexpr MessageKind kKind = MessageKind::kTrainerActivityReply;
  // Milliseconds since the training thread began the step it computes, or last waited in it
  // (a collective, the commit gate); 0 when it is not computing a step (waiting, joining,
  // evaluating, writing a checkpoint).
  std::int64_t computing_ms = 0;
  MSGPACK_DEFINE(computing_ms);
};

// agent -> trainer: after a head restart or a standby's takeover, the job goes on under the
// head at `head` (an endpoint), which started as `head_epoch` (heads started over the shared
// state, so a later head has a larger one): the trainer sends to it from now on, and says hello
// there so that the head learns its route (a standby never heard from it). A trainer never
// follows a HeadMoved of an older epoch than one it followed (a deposed head).
struct HeadMoved {
  static constexpr MessageKind kKind = MessageKind::kHeadMoved;
  std::string job_id;
  std::string head;
  std::uint64_t head_epoch = 0;
  MSGPACK_DEFINE(job_id, head, head_epoch);
};

// trainer -> its agent, once the trainer's actor runs: where the trainer process is (its system
// id), so that the agent can point it to a new head (HeadMoved) and change its speed before it
// has reported a step; a parameter server never reports one. An open message type (below).
struct TrainerStarted {
  std::string job_id;
  std::string trainer;
  MSGPACK_DEFINE(job_id, trainer);
};

// agent -> trainer: the emulated slowdown changed.
struct SetTrainerSpeed {
  static constexpr MessageKind kKind = MessageKind::kSetTrainerSpeed;
  double slowdown = 1.0;
  MSGPACK_DEFINE(slowdown);
};

// agent -> scheduler: a trainer process exited (every exit, whatever its code), so that no
// member can vanish unseen. exit_code: the process's code, or 128 + signal when a signal ended
// it, or -1 when it never started (fork/exec failed). last_error: its last error lines.
struct TrainerExited {
  static constexpr MessageKind kKind = MessageKind::kTrainerExited;
  std::string job_id;
  std::string trainer;
  std::string node_id;
  std::string reason;
  std::int32_t exit_code = -1;
  std::string last_error;
  MSGPACK_DEFINE(job_id, trainer, node_id, reason, exit_code, last_error);
};

// trainer -> store: the key-value operations c10d needs for rendezvous (over the authenticated
// runtime, so the collective rendezvous is no open door).
struct StoreRequest {
  static constexpr MessageKind kKind = MessageKind::kStoreRequest;
  // kDeletePrefix (head-local, from schedulers): deletes every key starting with keys[0]; the
  // reply's number is how many went.
  enum Op : std::int32_t {
    kSet = 0, kGet, kAdd, kCheck, kWait, kDelete, kNumKeys, kCompareSet, kDeletePrefix
  };
  std::int32_t op = kSet;
  std::vector<std::string> keys;
  std::string value;     // kSet: the value; kCompareSet: the desired value
  std::string expected;  // kCompareSet
  std::int64_t delta = 0;
  std::int64_t timeout_ms = 0;  // kGet/kWait: how long to wait for missing keys
  MSGPACK_DEFINE(op, keys, value, expected, delta, timeout_ms);
};

struct StoreReply {
  static constexpr MessageKind kKind = MessageKind::kStoreReply;
  bool ok = false;
  std::string value;
  std::int64_t number = 0;
  std::string error;  // "timeout" when a wait ran out
  MSGPACK_DEFINE(ok, value, number, error);
};

}  // namespace omnilearn::actors

OMNILEARN_MESSAGE(omnilearn::actors::TrainerStarted, "omnilearn.job.TrainerStarted");
