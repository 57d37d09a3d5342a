#pragma once
// The parameter server's actor (ASP): actor "server" (kAspServerActor), one shard of
// the flat parameter vector. It owns the messaging and nothing of LibTorch, so the trainer's
// server role and the benchmarks run the same handlers:
// - AspPull: AspPullReply (version, slice) with the shard's float32 bytes as the one attachment
//   (copied once, shard -> frame: a later push may change the shard while ZeroMQ still sends),
//   then the buffers as a second one where the shard keeps them (AspServerConfig::buffers);
// - AspPush + one attachment of the shard's size (+ the buffers' difference, optional, where
//   the shard keeps them): weighed and applied through asp::ServerCore, answered AspPushReply
//   (kFenced for a batch fenced off); anything else is answered kRejected with what was
//   wrong, and changes nothing;
// - AspFence (from the scheduler): the worker's batches through an id refused from now on,
//   answered AspFenceReply with those of them the shard took (asp::ServerCore::fence);
// - AspHandOver (from the scheduler, its node drained): every later push refused (kRejected),
//   a checkpoint written now through `save` and reported, then AspHandOverReply;
// - after the reply: the after-apply hook (the trainer checkpoints there), then an
//   AspServerReport to the scheduler when a checkpoint was written, updates_lost moved or a
//   push was refused as fenced.
// What the optimizer does comes in through the constructor: the shard's storage, the apply
// callback (it writes the storage) and the hook.
//
// Threads: the handlers run in the actor's turns, which own the ServerCore and are the only
// place the storage is written (through `apply`) or read (pulls), so neither needs a lock.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "wire/asp_protocol.hpp"
#include "asp/server_core.hpp"
#include "asp/shard_layout.hpp"
#include "asp/staleness.hpp"
#include "runtime/actor.hpp"

namespace omnilearn::actors {

struct AspServerConfig {
  std::string job;      // named in reports
  std::string trainer;  // named in reports and log lines
  std::int32_t shard = 0;
  asp::ShardSlice slice;  // where the shard sits in the flat vector (pull replies say so)
  asp::StalenessConfig staleness;
  // Set: a restarted shard (asp::ServerCore::resume: its version and counters, incarnation + 1).
  std::optional<asp::ServerCheckpoint> resume;
  // Where AspServerReports go, asked at each report (the trainer follows the active head: a
  // standby that took over gets them); unset, or an empty actor name: nowhere.
  std::function<runtime::ActorAddress()> scheduler;
  // Shard 0 of a model with buffers (BatchNorm statistics, counters as floats): their storage,
  // which must outlive the actor; empty otherwise. Pulls send them, and an applied push adds
  // the difference its worker's forward made to them (the buffers' analogue of a gradient),
  // a statistic's damped by 1 / (1 + the push's staleness), a counter's whole.
  std::span<float> buffers;
  // Per element of `buffers`: true for a counter (Trainer::flat_buffer_counters); empty: none.
  std::vector<bool> buffer_counters;
  // Set: steady_clock ticks of the last pull or push, stored on every message (any thread may
  // read it: the trainer's idle limit).
  std::shared_ptr<std::atomic<std::int64_t>> last_message;
  // Set: told the worker count n of each push's batch plan, before the push is applied (on the
  // actor's thread): [asp] scale_lr_by_workers divides the learning rate by it.
  std::function<void(int workers)> on_workers;
};

class AspServerActor : public runtime::Actor {
 public:
  // One applied step: `from_version` is the version the step moves on from (the LR schedule's
  // step), `scale` the staleness and lr scaling, `gradient` slice.size floats (the received
  // frame: valid for the call only). It writes the parameters; if it throws, the push is
  // answered kRejected and the version stays.
  using ApplyFn =
      std::function<void(std::int64_t from_version, double scale, std::span<const float> gradient)>;
  // Called after each applied push, once its reply has gone: returns the path of a checkpoint
  // it wrote at core.pull() (reported to the scheduler), or "" for none. Must not throw on a
  // failed write (the trainer logs it and goes on serving); a throw is logged the same way.
  using AfterApplyFn = std::function<std::string(const asp::ServerCore& core)>;
  // Writes a checkpoint at core.pull() whatever the version (a hand-over); returns its path.
  // Throws when it cannot (the hand-over reply says why).
  using SaveFn = std::function<std::string(const asp::ServerCore& core)>;

  // `parameters` is the shard's storage, slice.size floats; it must outlive the actor (the
  // caller usually keeps its owner alive through `apply`). Throws std::invalid_argument when
  // the sizes disagree or `apply` is empty (and what asp::ServerCore throws).
  AspServerActor(AspServerConfig config, std::span<float> parameters, ApplyFn apply,
                 AfterApplyFn after_apply = {}, SaveFn save = {});

  // Before spawn only (afterwards the actor's turns own the core): what the trainer tells the
  // scheduler in AspServerReady.
  asp::Version version() const { return core_.pull(); }
  std::int64_t updates_lost() const { return core_.updates_lost(); }

  void on_message(const runtime::Envelope& message) override;

 private:
  void on_pull(const runtime::Envelope& message);
  void on_push(const runtime::Envelope& message);
  void on_fence(const runtime::Envelope& message);
  void on_hand_over(const runtime::Envelope& message);
  void report(const std::string& checkpoint);

  AspServerConfig config_;
  std::span<float> parameters_;
  ApplyFn apply_;
  AfterApplyFn after_apply_;
  SaveFn save_;
  bool handed_over_ = false;  // drained: no push is applied any more
  std::int64_t applying_version_ = 0;  // the version the push being applied moves on from
  asp::ServerCore core_;               // after apply_ and applying_version_: its callback uses them
  std::int64_t reported_lost_ = 0;
  std::int64_t reported_fenced_ = 0;
  std::vector<float> unaligned_;  // a push's gradient when its frame is not float-aligned
};

}  // namespace omnilearn::actors
