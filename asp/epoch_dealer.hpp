#pragma once
// Exactly-once sampling for asynchronous training. Workers do not own shards of the
// data: each pull hands out the next b indices of the epoch's global permutation (the same
// seeded permutation as BSP's training::EpochSampler), so every sample is used once per epoch
// however fast each worker is.
//
// Rules:
// - A batch never spans two epochs: the pull that reaches the end of an epoch gets what is
//   left (a partial batch), and the next fresh pull starts the next epoch.
// - A batch is outstanding from its pull until its push. When a worker is declared gone, its
//   outstanding batches are retired and their indices are handed out again, before any fresh
//   index, to whoever pulls next (in the order they were dealt; a reissued batch also
//   stays within one epoch, oldest epoch first, and may be shorter than asked for).
// - A push of a retired batch (the "gone" worker was only late) or of a batch already pushed is
//   a duplicate: reported and counted, never accepted twice.
// - An epoch is complete when every one of its samples has been pushed (accepted) once.
// - With the parameters sharded across servers, a push goes to every shard, and one can reach
//   some shards and not others (a server died, or did not answer in time). The batch is then
//   dealt again with the shards that took it (applied or dropped it) named in `shards_done`,
//   and its next holder pushes to the other shards only: each shard's slice of the parameters
//   gets one gradient for those samples, not two. Indices with different `shards_done` are
//   never dealt in one batch.
//
// Not thread-safe: one owner (an actor) calls it.

#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "asp/worker_id.hpp"
#include "training/sampler.hpp"

namespace omnilearn::asp {

// What one pull hands out. id 0 with no indices: nothing left (the last epoch is dealt).
struct DealtBatch {
  std::uint64_t id = 0;
  std::int64_t epoch = 0;
  std::vector<std::int64_t> indices;
  bool reissued = false;  // dealt before: to a worker since declared gone, or whose push failed
  // Shards (ascending) that already took these samples' gradient: push to the others only.
  // Empty for a fresh batch.
  std::vector<std::int32_t> shards_done;
  bool empty() const { return indices.empty(); }
};

// What a push of a batch id means.
enum class Receipt {
  kAccepted,   // first push of an outstanding batch by the worker holding it: apply it
  kDuplicate,  // the batch was retired (reissued) or already pushed: do not apply
  kUnknown,    // never dealt, or held by another worker: do not apply
};

struct DealerCounters {
  std::int64_t batches_dealt = 0;
  std::int64_t samples_dealt = 0;     // fresh and reissued
  std::int64_t samples_reissued = 0;  // dealt again after their worker was declared gone
  std::int64_t batches_accepted = 0;
  std::int64_t samples_accepted = 0;
  std::int64_t duplicates = 0;
  std::int64_t unknown = 0;
  // Failed pushes that some shard had taken: dealt again for the other shards only.
  std::int64_t partial_pushes = 0;
};

class EpochDealer {
 public:
  // max_epochs 0: endless. Throws std::invalid_argument if dataset_size <= 0 or max_epochs < 0.
  EpochDealer(std::int64_t dataset_size, std::uint64_t seed, std::int64_t max_epochs = 0);

  // The next batch of at most `batch` indices for `worker` (reissued indices first). Empty when
  // every epoch has been dealt. Throws std::invalid_argument if batch < 1.
  DealtBatch pull(WorkerId worker, std::int64_t batch);

  // `worker` pushes the batch `batch_id` it pulled.
  Receipt push(WorkerId worker, std::uint64_t batch_id);

  // Retires `worker`'s outstanding batches and queues their indices to be dealt again first.
  // Returns how many samples were queued.
  std::int64_t worker_gone(WorkerId worker);

  // `worker`'s push of `batch_id` reached only the shards in `shards_taken` (those that applied
  // or dropped it): the batch is retired and its indices queued to be dealt again, for the
  // shards not in `shards_taken` nor in the batch's own shards_done. Returns how many samples
  // were queued (0 if the batch is not outstanding for `worker`).
  std::int64_t push_failed(WorkerId worker, std::uint64_t batch_id,
                           const std::vector<std::int32_t>& shards_taken);

  // A push whose outcome the scheduler learnt from the shards themselves (a fence's answers,
  // asp::BatchFences): `shards_taken` took it. If they and the batch's shards_done are all
  // `shards` shards, the push is accepted as push() would accept it; otherwise the batch is
  // dealt again for the others as push_failed() does. kNotOutstanding: the batch is not
  // outstanding for `worker` (nothing changes).
  enum class Settled { kAccepted, kDealtAgain, kNotOutstanding };
  Settled settle(WorkerId worker, std::uint64_t batch_id,
                 const std::vector<std::int32_t>& shards_taken, std::int32_t shards);

  std::int64_t outstanding_batches(WorkerId worker) const;
  // The ids of `worker`'s outstanding batches, ascending.
  std::vector<std::uint64_t> outstanding_ids(WorkerId worker) const;
  // The samples of an outstanding batch (0 if it is not outstanding).
  std::int64_t batch_samples(std::uint64_t batch_id) const;
  std::int64_t outstanding_samples(WorkerId worker) const;
  // Samples waiting to be dealt again.
  std::int64_t reissue_backlog() const;

  std::int64_t dataset_size() const { return sampler_.dataset_size(); }
  // The epoch fresh indices come from now (max_epochs once all are dealt).
  std::int64_t epoch() const { return cursor_.epoch; }
  // Epochs whose every sample has been accepted once.
  std::int64_t epochs_completed() const { return epochs_completed_; }
  // max_epochs > 0 and all of them are complete.
  bool finished() const { return max_epochs_ > 0 && epochs_completed_ == max_epochs_; }
  const DealerCounters& counters() const { return counters_; }

  // Everything but the permutation (the seed and dataset size the constructor took): the
  // cursor, the outstanding and reissued batches, the accepted counts and the counters. A
  // dealer constructed with the same arguments and given this state deals on exactly as this
  // one would. restore_state throws std::invalid_argument on a state it cannot read.
  nlohmann::json state() const;
  void restore_state(const nlohmann::json& state);

 private:
  struct Holding {
    WorkerId worker = 0;
    std::int64_t epoch = 0;
    std::vector<std::int64_t> indices;
    std::vector<std::int32_t> shards_done;
  };
  struct Chunk {
    std::int64_t epoch = 0;
    std::vector<std::int64_t> indices;
    std::vector<std::int32_t> shards_done;
  };

  DealtBatch deal(WorkerId worker, std::int64_t epoch, std::vector<std::int64_t> indices,
                  bool reissued, std::vector<std::int32_t> shards_done = {});
  // Queues a retired holding's indices to be dealt again (oldest epoch first).
  std::int64_t queue_again(Holding holding);

  training::EpochSampler sampler_;
  std::int64_t max_epochs_;
  training::Cursor cursor_;
  std::uint64_t next_id_ = 1;
  std::map<std::uint64_t, Holding> outstanding_;    // by batch id (dealing order)
  std::deque<Chunk> reissue_;                       // dealt first, front first
  std::map<std::int64_t, std::int64_t> accepted_;   // per unfinished epoch: samples accepted
  std::int64_t epochs_completed_ = 0;
  DealerCounters counters_;
};

}  // namespace omnilearn::asp
