#pragma once
// What the asynchronous-training (ASP) scheduler, its parameter servers and its
// workers say. Open message types (runtime/message_types.hpp: kinds derived from the names), so
// no runtime kind is taken. Parameters and gradients never travel in these payloads: they are
// the envelope's one attachment (float32, little-endian, the shard's slice), handed to and taken
// from the socket without a copy.
//
//   worker --AspDealRequest--> scheduler   (its last push's outcome; asks for the next batch)
//          <--AspDealReply---             (indices, the servers' endpoints, the plan)
//   worker --AspPull--> server            reply AspPullReply + attachment (parameters)
//   worker --AspPush + attachment--> server   reply AspPushReply (staleness, applied/dropped)
//   server --AspServerReady / AspServerReport--> scheduler  (endpoint; checkpoints)
//   restarted server --AspFetchCheckpoint--> scheduler  reply AspCheckpointReply + attachment
//
// Checkpoints: a server writes its shard's checkpoint on its own node and sends the file's
// bytes with its AspServerReport; the scheduler keeps the newest copy in the run directory on
// the head. A server restarted on another node (the dead one's disk gone with it) fetches
// that copy.
//   worker --AspFinished--> scheduler     (the finishing worker: test figures, final checkpoint)
//   scheduler --AspFence--> server   reply AspFenceReply (the worker's batches it took): before a
//                                    batch is dealt again (asp/batch_fences.hpp)
//   scheduler --AspHandOver--> server   reply AspHandOverReply: its node is drained; it refuses
//                                    every later push, checkpoints at its last version (and
//                                    reports it), so that its restart elsewhere loses nothing
//
// Evaluation during the job (`[train] eval_every` updates): the scheduler answers one deal
// request with kEvaluate instead of a batch; that worker pulls every shard, evaluates the test
// set and carries the figures in its next AspDealRequest (the other workers go on training).

#include <cstdint>
#include <msgpack.hpp>
#include <string>
#include <vector>

#include "runtime/message_types.hpp"

namespace omnilearn::actors {

inline constexpr const char* kAspServerActor = "server";

// worker -> scheduler (ask). Carries the outcome of the worker's previous batch, if any.
struct AspDealRequest {
  std::string job_id;
  std::string trainer;
  std::uint64_t pushed_batch = 0;  // the batch pushed to every shard since the last deal; 0: none
  // A batch abandoned (a server did not answer): deal it again, to the shards whose entry in
  // `incarnations` is -1 (those that took it have theirs set).
  std::uint64_t failed_batch = 0;
  std::int64_t staleness = 0;      // the largest staleness any shard weighed the push with
  bool applied = false;            // every shard applied it
  bool dropped = false;            // some shard dropped it as too stale
  std::int32_t batch = 0;          // its size
  double compute_time_s = 0;  // gradient compute (with emulated slowdown): the controller's t_i
  double update_time_s = 0;   // pull + compute + push
  double loss = 0;
  std::int64_t version_seen = 0;  // shard 0's version after the push
  // Per shard, what its push reply said: the server's incarnation and version after the push
  // (how the scheduler knows how far a server got before it died: the updates a restart loses).
  std::vector<std::int64_t> incarnations;
  std::vector<std::int64_t> versions;
  // The outcome of a kEvaluate, if the previous reply was one: `evaluated` false with
  // eval_error set when the pull or the evaluation failed (the scheduler deals it again later).
  bool evaluated = false;
  std::string eval_error;
  double eval_accuracy = -1;
  double eval_loss = -1;
  std::int64_t eval_version = 0;  // shard 0's version the evaluated parameters were pulled at
  double eval_time_s = 0;         // pull + evaluation
  // With failed_batch, per shard: the incarnation whose push got no reply (the ask failed or
  // timed out: it may have been applied before the server died), -1 otherwise.
  std::vector<std::int64_t> unanswered;
  // Shards whose pull got no reply since the last deal: a server that answers
  // nothing while its agent still heartbeats is found only this way when no push was out.
  std::vector<std::int32_t> unreachable;
  MSGPACK_DEFINE(job_id, trainer, pushed_batch, failed_batch, staleness, applied, dropped, batch,
                 compute_time_s, update_time_s, loss, version_seen, incarnations, versions,
                 evaluated, eval_error, eval_accuracy, eval_loss, eval_version, eval_time_s,
                 unanswered, unreachable);
};

struct AspDealReply {
  enum Action : std::int32_t { kBatch = 0, kWait = 1, kFinish = 2, kDone = 3, kEvaluate = 4 };
  std::int32_t action = kWait;
  std::string error;
  std::uint64_t batch_id = 0;
  std::int64_t epoch = 0;
  std::vector<std::int64_t> indices;
  std::vector<std::string> servers;  // shard s's endpoint (tcp://...), in shard order
  std::int64_t global_batch = 0;     // B of the plan in force (linear lr scaling)
  std::int32_t workers = 0;          // n of the plan in force
  std::int32_t wait_ms = 0;          // kWait: ask again after this long
  // kBatch dealt again after a push that reached only some shards: those shards (ascending)
  // already took these samples' gradient; push to the others only.
  std::vector<std::int32_t> shards_done;
  MSGPACK_DEFINE(action, error, batch_id, epoch, indices, servers, global_batch, workers, wait_ms,
                 shards_done);
};

// worker -> server (ask); answered with AspPullReply and the shard's parameters attached.
struct AspPull {
  std::string job_id;
  std::int32_t shard = 0;
  MSGPACK_DEFINE(job_id, shard);
};

struct AspPullReply {
  bool ok = false;
  std::string error;
  std::int32_t shard = 0;
  std::int64_t incarnation = 0;
  std::int64_t version = 0;
  std::int64_t offset = 0;  // the slice of the flat vector
  std::int64_t size = 0;
  // Shard 0 of a model with buffers (BatchNorm statistics): their count, sent as a second
  // attachment after the slice; 0: none.
  std::int64_t buffers = 0;
  MSGPACK_DEFINE(ok, error, shard, incarnation, version, offset, size, buffers);
};

// worker -> server (ask), with the gradient for the shard attached; to shard 0 of a model with
// buffers also how the batch's forward moved them (after - pulled), as a second attachment.
struct AspPush {
  std::string job_id;
  std::int32_t shard = 0;
  std::int64_t worker = 0;       // the job's number for the worker (asp::WorkerId)
  std::int64_t incarnation = 0;  // the version pulled
  std::int64_t version = 0;
  std::int64_t batch = 0;
  std::int64_t global_batch = 0;  // B and n of the plan the batch was dealt under
  std::int32_t workers = 0;
  std::uint64_t batch_id = 0;  // the dealt batch (what a fence names); 0: none
  MSGPACK_DEFINE(job_id, shard, worker, incarnation, version, batch, global_batch, workers,
                 batch_id);
};

struct AspPushReply {
  // kFenced: the scheduler took the batch back (its worker was declared gone, or the push was
  // given up and its samples dealt again): not applied.
  enum Status : std::int32_t { kApplied = 0, kDropped = 1, kRejected = 2, kFenced = 3 };
  std::int32_t status = kRejected;
  std::string error;
  std::int64_t staleness = 0;
  double scale = 0;
  std::int64_t incarnation = 0;
  std::int64_t version = 0;
  MSGPACK_DEFINE(status, error, staleness, scale, incarnation, version);
};

// server -> scheduler (ask), once it listens: where workers reach it.
struct AspServerReady {
  std::string job_id;
  std::string trainer;
  std::int32_t shard = 0;
  std::string endpoint;
  std::int64_t incarnation = 0;
  std::int64_t version = 0;       // resumed at
  std::int64_t updates_lost = 0;  // known so far (more may be learnt from late pushes)
  std::int64_t parameters = 0;    // the whole flat vector's size
  std::int64_t dataset_size = 0;  // training samples: what the scheduler's dealer deals
  // A restart: where its state came from: "head" (the scheduler's copy), "local" (the
  // checkpoint file on this node) or "initial" (no checkpoint: version 0).
  std::string resumed_from;
  MSGPACK_DEFINE(job_id, trainer, shard, endpoint, incarnation, version, updates_lost, parameters,
                 dataset_size, resumed_from);
};

// server -> scheduler (tell), after each checkpoint, when it learns of lost updates and when it
// refuses a fenced push; with a
// checkpoint, the file's bytes are the one attachment.
struct AspServerReport {
  std::string job_id;
  std::string trainer;
  std::int32_t shard = 0;
  std::int64_t incarnation = 0;
  std::int64_t version = 0;
  std::int64_t applied = 0;
  std::int64_t dropped = 0;
  std::int64_t rejected = 0;
  std::int64_t updates_lost = 0;
  std::string checkpoint;  // written at `version`; "" if this report has none
  std::int64_t fenced = 0;  // pushes refused as fenced off, by this incarnation
  MSGPACK_DEFINE(job_id, trainer, shard, incarnation, version, applied, dropped, rejected,
                 updates_lost, checkpoint, fenced);
};

// scheduler -> server (ask; a tell when no answer is needed): refuse `worker`'s batches with id
// <= `through` from now on (asp::kWholeWorker: all of them) and say which of them this shard took.
struct AspFence {
  std::string job_id;
  std::int32_t shard = 0;
  std::int64_t worker = 0;
  std::uint64_t through = 0;
  MSGPACK_DEFINE(job_id, shard, worker, through);
};

struct AspFenceReply {
  bool ok = false;
  std::string error;
  std::int32_t shard = 0;
  std::int64_t incarnation = 0;
  std::int64_t version = 0;
  std::vector<std::uint64_t> taken;  // batch ids this incarnation took (applied or dropped) ...
  std::vector<bool> applied;         // ... and whether it applied each
  MSGPACK_DEFINE(ok, error, shard, incarnation, version, taken, applied);
};

// scheduler -> server (ask): the server's node is drained. From now on the server applies no
// push (each is answered kRejected, so its batch is dealt again for this shard); it writes a
// checkpoint at its current version, sends it to the scheduler in an AspServerReport (the
// head's copy), then answers. Its restart on another node resumes there: no update is lost.
struct AspHandOver {
  std::string job_id;
  std::int32_t shard = 0;
  MSGPACK_DEFINE(job_id, shard);
};

struct AspHandOverReply {
  bool ok = false;
  std::string error;  // !ok: why no checkpoint was written (the restart resumes from an older one)
  std::int32_t shard = 0;
  std::int64_t incarnation = 0;
  std::int64_t version = 0;  // the checkpoint's: the last version this incarnation made
  std::string checkpoint;    // its path on the server's node
  // Every batch it took (applied or dropped), all in the checkpoint: its successor inherits
  // them, so a batch whose push this incarnation took is never dealt to the shard again.
  std::vector<std::int64_t> taken_workers;
  std::vector<std::uint64_t> taken_batches;
  std::vector<bool> taken_applied;
  MSGPACK_DEFINE(ok, error, shard, incarnation, version, checkpoint, taken_workers,
                 taken_batches, taken_applied);
};

// a restarted server -> scheduler (ask): the newest copy of the shard's checkpoint.
struct AspFetchCheckpoint {
  std::string job_id;
  std::string trainer;
  std::int32_t shard = 0;
  MSGPACK_DEFINE(job_id, trainer, shard);
};

// With ok, the checkpoint file's bytes are the one attachment.
struct AspCheckpointReply {
  bool ok = false;
  std::string error;
  std::int64_t version = 0;  // the version it was written at
  MSGPACK_DEFINE(ok, error, version);
};

// the finishing worker -> scheduler (ask): it pulled every shard, evaluated, wrote the model.
struct AspFinished {
  std::string job_id;
  std::string trainer;
  bool ok = false;
  std::string error;
  double test_accuracy = -1;
  double test_loss = -1;
  std::string checkpoint;
  MSGPACK_DEFINE(job_id, trainer, ok, error, test_accuracy, test_loss, checkpoint);
};

}  // namespace omnilearn::actors

OMNILEARN_MESSAGE(omnilearn::actors::AspDealRequest, "omnilearn.asp.DealRequest");
OMNILEARN_MESSAGE(omnilearn::actors::AspDealReply, "omnilearn.asp.DealReply");
OMNILEARN_MESSAGE(omnilearn::actors::AspPull, "omnilearn.asp.Pull");
OMNILEARN_MESSAGE(omnilearn::actors::AspPullReply, "omnilearn.asp.PullReply");
OMNILEARN_MESSAGE(omnilearn::actors::AspPush, "omnilearn.asp.Push");
OMNILEARN_MESSAGE(omnilearn::actors::AspPushReply, "omnilearn.asp.PushReply");
OMNILEARN_MESSAGE(omnilearn::actors::AspServerReady, "omnilearn.asp.ServerReady");
OMNILEARN_MESSAGE(omnilearn::actors::AspServerReport, "omnilearn.asp.ServerReport");
OMNILEARN_MESSAGE(omnilearn::actors::AspFinished, "omnilearn.asp.Finished");
OMNILEARN_MESSAGE(omnilearn::actors::AspFence, "omnilearn.asp.Fence");
OMNILEARN_MESSAGE(omnilearn::actors::AspFenceReply, "omnilearn.asp.FenceReply");
OMNILEARN_MESSAGE(omnilearn::actors::AspHandOver, "omnilearn.asp.HandOver");
OMNILEARN_MESSAGE(omnilearn::actors::AspHandOverReply, "omnilearn.asp.HandOverReply");
OMNILEARN_MESSAGE(omnilearn::actors::AspFetchCheckpoint, "omnilearn.asp.FetchCheckpoint");
OMNILEARN_MESSAGE(omnilearn::actors::AspCheckpointReply, "omnilearn.asp.CheckpointReply");
