#pragma once
// A parameter-server shard as a pure state machine: it holds the shard's version,
// weighs each push with the staleness policy, hands accepted steps to an injected `apply`
// callback (the optimizer and the parameters live elsewhere), and records staleness. No I/O,
// clock or thread; an actor will own one per shard.
//
// Versions carry the server's incarnation: a server restarted from a checkpoint resumes at the
// checkpoint's version with incarnation + 1, so a push computed on a version the dead server
// reached after its checkpoint (lost) is told apart from one computed on the same number after
// the restart. Such a push counts as pulled at the version the restart resumed from (its
// parameters are the lost line's; the newest state both lines share is the checkpoint), and
// shows how many updates were lost.

#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "asp/staleness.hpp"
#include "asp/worker_id.hpp"

namespace omnilearn::asp {

// What a pull returns and a push names.
struct Version {
  std::int64_t incarnation = 0;
  std::int64_t number = 0;
  friend bool operator==(const Version&, const Version&) = default;
};

enum class PushStatus {
  kApplied,   // apply() was called and the version moved on
  kDropped,   // too stale under "bound": counted, not applied
  kRejected,  // names a version this server never issued (a later incarnation, or a number
              // ahead of it): a misaddressed or corrupt push, counted, not applied
  kFenced,    // its batch was fenced off (the scheduler took it back): counted, not applied
};

// Fencing every batch of a worker (one declared gone), those with no id included.
inline constexpr std::uint64_t kWholeWorker = std::numeric_limits<std::uint64_t>::max();

// A batch whose push this shard took (applied or dropped), as a fence reports it.
struct TakenBatch {
  std::uint64_t batch = 0;
  bool applied = false;
  friend bool operator==(const TakenBatch&, const TakenBatch&) = default;
};

struct PushOutcome {
  PushStatus status = PushStatus::kRejected;
  std::int64_t staleness = 0;  // 0 when rejected
  double scale = 0;            // what apply() got; 0 unless applied
  Version version;             // the server's version after the push
};

// What a restarted server needs to resume: small and plain.
struct ServerCheckpoint {
  std::int64_t incarnation = 0;
  std::int64_t version = 0;
  std::int64_t pushes = 0;  // weighed (applied + dropped)
  std::int64_t applied = 0;
  std::int64_t dropped = 0;
  std::int64_t rejected = 0;
  std::map<WorkerId, std::int64_t> updates;  // applied per worker
  // The batches this state took, per worker (the newest ServerCore::kTakenKept each, for the
  // newest kTakenWorkersKept workers), so that a shard restarted from the checkpoint answers a
  // fence for what the checkpoint holds: a batch taken before the checkpoint and never
  // confirmed to the scheduler must not be dealt again to it.
  std::map<WorkerId, std::deque<TakenBatch>> taken;
  friend bool operator==(const ServerCheckpoint&, const ServerCheckpoint&) = default;
};

// A fixed little-endian layout of 64-bit words: "OLASPCK2", the six counters, the count of
// (worker, updates) pairs and the pairs, then the count of workers with taken batches and per
// worker its id, its count and one (batch, applied) pair per batch. "OLASPCK1" (no taken
// batches, written before they were kept) still decodes. Decoding is total: anything else gives
// nullopt.
std::vector<std::uint8_t> encode_checkpoint(const ServerCheckpoint& checkpoint);
std::optional<ServerCheckpoint> decode_checkpoint(std::span<const std::uint8_t> bytes);

class ServerCore {
 public:
  // Called once per applied push with the step's scale (staleness and lr scaling) and the
  // worker's gradient for this shard. If it throws, the push is not counted and the version
  // stays.
  using ApplyFn = std::function<void(double scale, std::span<const float> gradient)>;

  // A fresh shard of `shard_size` floats at version 0, incarnation 0. Throws
  // std::invalid_argument on shard_size < 1, an invalid config or an empty apply.
  ServerCore(std::int64_t shard_size, StalenessConfig config, ApplyFn apply);
  // A restarted shard: the checkpoint's version and counters, incarnation + 1.
  static ServerCore resume(const ServerCheckpoint& checkpoint, std::int64_t shard_size,
                           StalenessConfig config, ApplyFn apply);

  // The plan in force (B = the sum of the workers' batches, n = the workers): linear
  // lr_scaling divides by B / n. Throws std::invalid_argument unless both are >= 1.
  void set_batch_plan(std::int64_t global_batch, int workers);

  Version pull() const { return Version{state_.incarnation, state_.version}; }

  // One push of `worker`'s gradient computed on `pulled` with `batch_size` samples of the
  // dealt batch `batch_id` (0: not named; only a kWholeWorker fence stops it). Throws
  // std::invalid_argument when the gradient is not shard_size floats or batch_size < 1, and
  // std::logic_error under linear lr_scaling before any set_batch_plan.
  PushOutcome push(WorkerId worker, Version pulled, std::int64_t batch_size,
                   std::span<const float> gradient, std::uint64_t batch_id = 0);

  // Fencing, so that a batch the scheduler deals again is never applied twice: from now on a
  // push of `worker`'s batch with id <= `through` is answered kFenced and changes nothing
  // (kWholeWorker: every push of the worker). Returns the batches <= `through` of `worker` this
  // state took (see taken()), among the last kTakenKept: a push that arrived before the fence
  // counts as made, and the scheduler deals its samples again only for the shards that did not
  // take it. Fences only rise. Taken batches are checkpointed (a restarted shard answers for
  // what its checkpoint holds: the scheduler waits for it rather than count a dead shard's
  // silence as "not taken"); fences are not: the scheduler fences a restarted server's gone
  // workers again when it listens.
  std::vector<TakenBatch> fence(WorkerId worker, std::uint64_t through);
  bool fenced(WorkerId worker, std::uint64_t batch_id) const;
  // Every batch this state took (this incarnation, and those in the checkpoint it resumed
  // from), per worker (the newest kTakenKept each), fencing nothing: what a drained server
  // hands over with its checkpoint.
  const std::map<WorkerId, std::deque<TakenBatch>>& taken() const { return state_.taken; }
  std::int64_t fenced_pushes() const { return fenced_pushes_; }
  // Per worker (16 bytes each). A fence concerns a batch the worker pushed before the fence
  // reached this shard; the worker goes on pushing meanwhile (a push given up on does not stop
  // it), and a fence to a slow shard is asked again until it is answered, so the history must
  // outlast many pushes: with 16, a seeded fault simulation found samples taken twice.
  static constexpr std::size_t kTakenKept = 1024;
  // Workers whose taken batches are kept (and checkpointed): past it, the worker whose newest
  // push is oldest is forgotten. Its fences would then report nothing taken, so this must be
  // far more workers than come and go while a fence is pending (seconds, or a shard's restart);
  // it bounds the checkpoint's record at 256 x 1,024 x 16 bytes = 4 MiB (16 KiB per worker).
  static constexpr std::size_t kTakenWorkersKept = 256;

  ServerCheckpoint checkpoint() const { return state_; }

  // Updates the previous incarnation made after the checkpoint this one resumed from, as far
  // as known: the highest version heard of (note_version_seen, or pushes pulled from it) minus
  // the checkpoint's. 0 for a server never restarted.
  std::int64_t updates_lost() const { return lost_; }
  // A version the previous incarnation was known to reach (a worker's or a heartbeat's word).
  void note_version_seen(std::int64_t number);

  // Staleness since this incarnation started (the histogram is not checkpointed).
  const StalenessStats& stats() const { return stats_; }
  StalenessStats& stats() { return stats_; }
  const StalenessConfig& config() const { return config_; }

 private:
  std::int64_t shard_size_;
  StalenessConfig config_;
  ApplyFn apply_;
  ServerCheckpoint state_;
  std::optional<double> reference_batch_;  // B / n
  std::int64_t resumed_from_ = 0;          // the checkpoint's version (0 when fresh)
  std::int64_t lost_ = 0;
  StalenessStats stats_;
  std::map<WorkerId, std::uint64_t> fenced_through_;
  std::int64_t fenced_pushes_ = 0;
};

}  // namespace omnilearn::asp
