#pragma once
// Taking a batch back from the parameter servers before it is dealt again.
//
// A worker pushes to every shard directly; the scheduler hears of the push only in the worker's
// next deal request. So when the scheduler gives a batch up, the shards may have taken it
// anyway:
// - a worker declared gone may still be running (its agent froze or lost the network) and push,
//   or it pushed and died before it asked again;
// - a push whose reply did not come within the worker's bound may be applied late.
// Dealing such a batch again at once would give a shard the gradient of the same samples twice.
// So the scheduler fences first. It asks every shard to refuse the batch from now on
// (asp::ServerCore::fence) and to say whether it took it already. Only when every asked shard
// has answered does it settle the batch with the dealer (EpochDealer::settle): accepted if every
// shard took it, dealt again for the others otherwise. A live shard silent past the ask's bound
// is asked again (it may still apply a late push before it reads the fence). A shard that died
// is asked again once it restarts (waiting_on): resumed from its checkpoint, it answers for what
// the checkpoint holds (ServerCheckpoint::taken), and a push it took after the checkpoint is
// lost with the restart, so "not taken" is then the truth for the shard that serves on. Taking
// the dead shard's silence for "not taken" instead deals a batch again to a shard whose
// checkpoint holds it.
//
// Pure: asp::AspJob (the scheduler's machine) orders the asks and feeds the answers in;
// asp_job_simulation_test drives both in virtual time against lost, late and zombie pushes and
// shards that die and resume from their checkpoints.
//
// Not thread-safe: one owner (an actor) calls it.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <vector>

#include "asp/epoch_dealer.hpp"
#include "asp/server_core.hpp"
#include "asp/worker_id.hpp"

namespace omnilearn::asp {

// Send a fence of `worker`'s batches with id <= `through` (kWholeWorker: all of them) to each of
// `shards`, and hand each answer, or its absence, to BatchFences::answer with `round`.
struct FenceAsk {
  std::uint64_t round = 0;
  WorkerId worker = 0;
  std::uint64_t through = 0;
  std::vector<std::int32_t> shards;
};

// A batch the fence settled.
struct SettledBatch {
  WorkerId worker = 0;
  std::uint64_t batch = 0;
  std::int64_t samples = 0;
  EpochDealer::Settled outcome = EpochDealer::Settled::kNotOutstanding;
  // kAccepted: no shard dropped it as too stale (the push is an update; otherwise a dropped push).
  bool applied = false;
  // Some shard was asked (false: settled at once, every shard having answered the push:
  // nothing was fenced).
  bool asked = false;
};

struct FenceStart {
  std::optional<FenceAsk> ask;        // send it
  std::vector<SettledBatch> settled;  // settled at once: there was no shard to ask
};

class BatchFences {
 public:
  // Throws std::invalid_argument unless shards >= 1.
  explicit BatchFences(std::int32_t shards);

  // `worker` was declared gone: every batch it holds (not already being fenced) is fenced on
  // every shard, and the worker as a whole (kWholeWorker), so that nothing it pushes later is
  // applied. A shard that is down is asked when it restarts (waiting_on).
  FenceStart worker_gone(EpochDealer& dealer, WorkerId worker);

  // `worker`'s push of `batch` failed: the shards in `taken` answered that they took it
  // (`dropped`: one of them dropped it as too stale); those in `ask` gave no answer and are
  // fenced through `batch` (the incarnation pushed to, or, if it died, the one that resumes the
  // shard). The others (answered, not taken) count as not having taken it.
  FenceStart push_failed(EpochDealer& dealer, WorkerId worker, std::uint64_t batch,
                         const std::vector<std::int32_t>& taken, bool dropped,
                         const std::vector<std::int32_t>& ask);

  // A shard's answer to `round`: the batches it took (ServerCore::fence's return), or nullopt
  // when it gave none. When the round's last shard has answered, its batches settle and are
  // returned; an unknown round, or a shard not asked, or asked already, returns nothing.
  std::vector<SettledBatch> answer(EpochDealer& dealer, std::uint64_t round, std::int32_t shard,
                                   const std::optional<std::vector<TakenBatch>>& taken);

  // The asks of every round still waiting for `shard` (one shard each): what to send again when
  // a shard restarts, since the incarnation that was asked cannot answer any more.
  std::vector<FenceAsk> waiting_on(std::int32_t shard) const;

  // Rounds still waiting for an answer.
  std::size_t pending() const { return rounds_.size(); }
  // Whether `batch` waits in some round (its samples are neither accepted nor dealt again yet).
  bool fencing(std::uint64_t batch) const { return fencing_.count(batch) > 0; }

  // The rounds still open, for a restarted scheduler (restore_state throws
  // std::invalid_argument on a state it cannot read).
  nlohmann::json state() const;
  void restore_state(const nlohmann::json& state);

 private:
  struct Round {
    WorkerId worker = 0;
    std::uint64_t through = 0;
    std::vector<std::uint64_t> batches;
    std::set<std::int32_t> waiting;
    std::map<std::uint64_t, std::vector<std::int32_t>> taken;  // by batch: the shards that did
    std::set<std::uint64_t> dropped;                           // batches some shard dropped
  };

  FenceStart start(EpochDealer& dealer, Round round, std::uint64_t through,
                   const std::vector<std::int32_t>& ask);
  std::vector<SettledBatch> settle(EpochDealer& dealer, const Round& round, bool asked);

  std::int32_t shards_;
  std::uint64_t next_round_ = 1;
  std::map<std::uint64_t, Round> rounds_;
  std::set<std::uint64_t> fencing_;
};

}  // namespace omnilearn::asp
