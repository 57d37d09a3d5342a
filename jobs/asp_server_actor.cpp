#include "jobs/asp_server_actor.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <utility>

#include "wire/frame_floats.hpp"
#include "wire/reply_envelope.hpp"
#include "asp/buffer_average.hpp"
#include "runtime/actor_system.hpp"
#include "runtime/system_messages.hpp"

namespace omnilearn::actors {
namespace {

asp::ServerCore make_core(const AspServerConfig& config, std::size_t storage, bool has_apply,
                          asp::ServerCore::ApplyFn apply) {
  if (config.slice.size < 1 || storage != static_cast<std::size_t>(config.slice.size)) {
    throw std::invalid_argument(fmt::format(
        "asp server shard {}: the storage holds {} floats, the slice {}: pass the slice's "
        "own parameters",
        config.shard, storage, config.slice.size));
  }
  if (!config.buffer_counters.empty() && config.buffer_counters.size() != config.buffers.size()) {
    throw std::invalid_argument(fmt::format(
        "asp server shard {}: {} buffer values but {} counter flags", config.shard,
        config.buffers.size(), config.buffer_counters.size()));
  }
  if (!has_apply) {
    throw std::invalid_argument(
        fmt::format("asp server shard {}: an apply callback is required", config.shard));
  }
  if (config.resume) {
    return asp::ServerCore::resume(*config.resume, config.slice.size, config.staleness,
                                   std::move(apply));
  }
  return asp::ServerCore(config.slice.size, config.staleness, std::move(apply));
}

}  // namespace

AspServerActor::AspServerActor(AspServerConfig config, std::span<float> parameters, ApplyFn apply,
                               AfterApplyFn after_apply, SaveFn save)
    : config_(std::move(config)),
      parameters_(parameters),
      apply_(std::move(apply)),
      after_apply_(std::move(after_apply)),
      save_(std::move(save)),
      core_(make_core(config_, parameters.size(), static_cast<bool>(apply_),
                      [this](double scale, std::span<const float> gradient) {
                        apply_(applying_version_, scale, gradient);
                      })) {}

void AspServerActor::on_message(const runtime::Envelope& message) {
  if (config_.last_message) {
    config_.last_message->store(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  if (message.kind == runtime::kind_of<AspPull>()) {
    on_pull(message);
  } else if (message.kind == runtime::kind_of<AspPush>()) {
    on_push(message);
  } else if (message.kind == runtime::kind_of<AspFence>()) {
    on_fence(message);
  } else if (message.kind == runtime::kind_of<AspHandOver>()) {
    on_hand_over(message);
  } else if (message.correlation != 0) {
    reply(message, runtime::ErrorReply{"bad-request", "a parameter server takes pulls and pushes"});
  }
}

void AspServerActor::on_pull(const runtime::Envelope& message) {
  AspPullReply r;
  r.shard = config_.shard;
  const auto pull = decode_or_count<AspPull>(message);
  if (!pull || pull->shard != config_.shard || pull->job_id != config_.job) {
    // A worker with a stale or wrong server list: its parameters would be cut wrongly.
    r.error = pull ? fmt::format("a pull for shard {} of job {} reached shard {} of job {}",
                                 pull->shard, pull->job_id, config_.shard, config_.job)
                   : fmt::format("a pull to shard {} did not decode as AspPull", config_.shard);
    reply(message, r);
    return;
  }
  const asp::Version v = core_.pull();
  r.ok = true;
  r.incarnation = v.incarnation;
  r.version = v.number;
  r.offset = config_.slice.offset;
  r.size = config_.slice.size;
  r.buffers = static_cast<std::int64_t>(config_.buffers.size());
  auto envelope =
      reply_envelope(system(), message, runtime::kind_of<AspPullReply>(), runtime::pack_payload(r));
  // The one copy on this side: the shard into the frame ZeroMQ sends as is (built from the
  // bytes directly: no zero fill first).
  envelope.attachments.emplace_back(
      std::string(reinterpret_cast<const char*>(parameters_.data()), parameters_.size_bytes()));
  if (!config_.buffers.empty()) {
    envelope.attachments.emplace_back(std::string(
        reinterpret_cast<const char*>(config_.buffers.data()), config_.buffers.size_bytes()));
  }
  system().send(std::move(envelope));
}

void AspServerActor::on_push(const runtime::Envelope& message) {
  AspPushReply r;
  auto push = decode_or_count<AspPush>(message);
  const std::size_t want = parameters_.size_bytes();
  if (!push) {
    r.error = fmt::format("a push to shard {} did not decode as AspPush", config_.shard);
    reply(message, r);
    return;
  }
  if (push->shard != config_.shard || push->job_id != config_.job) {
    r.error = fmt::format(
        "a push for shard {} of job {} reached shard {} of job {}: nothing applied", push->shard,
        push->job_id, config_.shard, config_.job);
    reply(message, r);
    return;
  }
  const std::size_t most = config_.buffers.empty() ? 1 : 2;
  if (message.attachments.empty() || message.attachments.size() > most ||
      message.attachments[0].size() != want ||
      (message.attachments.size() == 2 &&
       message.attachments[1].size() != config_.buffers.size_bytes())) {
    r.error = fmt::format(
        "a push to shard {} needs one attachment of {} bytes (its {} float32 gradients){}; it "
        "had {} attachment(s){}: nothing applied",
        config_.shard, want, config_.slice.size,
        config_.buffers.empty()
            ? ""
            : fmt::format(", then at most one of {} bytes (its buffers' difference)",
                          config_.buffers.size_bytes()),
        message.attachments.size(),
        message.attachments.empty()
            ? ""
            : fmt::format(", the first {} bytes", message.attachments[0].size()));
    reply(message, r);
    return;
  }
  if (handed_over_) {
    r.error = fmt::format(
        "shard {} is moving to another node (its node is drained) and took its last checkpoint: "
        "nothing applied; the batch is dealt again for this shard",
        config_.shard);
    reply(message, r);
    return;
  }
  try {
    if (push->global_batch >= 1 && push->workers >= 1) {
      core_.set_batch_plan(push->global_batch, push->workers);
      if (config_.on_workers) config_.on_workers(push->workers);
    }
    applying_version_ = core_.pull().number;
    const asp::PushOutcome outcome =
        core_.push(push->worker, asp::Version{push->incarnation, push->version}, push->batch,
                   frame_floats(message.attachments[0], unaligned_), push->batch_id);
    r.status = outcome.status == asp::PushStatus::kApplied   ? AspPushReply::kApplied
               : outcome.status == asp::PushStatus::kDropped ? AspPushReply::kDropped
               : outcome.status == asp::PushStatus::kFenced  ? AspPushReply::kFenced
                                                             : AspPushReply::kRejected;
    if (r.status == AspPushReply::kFenced) {
      r.error = fmt::format(
          "shard {}: the scheduler took batch {} of worker {} back (the worker was declared gone, "
          "or the push given up and its samples dealt again): nothing applied",
          config_.shard, push->batch_id, push->worker);
    }
    if (r.status == AspPushReply::kApplied && message.attachments.size() == 2) {
      // Where the worker's forward moved them from what it pulled, added to what they are now
      // (a statistic's damped by 1 / (1 + s): asp/buffer_average.hpp says why).
      asp::add_buffer_difference(config_.buffers,
                                 frame_floats(message.attachments[1], unaligned_),
                                 config_.buffer_counters, outcome.staleness);
    }
    r.staleness = outcome.staleness;
    r.scale = outcome.scale;
    r.incarnation = outcome.version.incarnation;
    r.version = outcome.version.number;
  } catch (const std::exception& e) {
    r.status = AspPushReply::kRejected;
    r.error = e.what();
  }
  reply(message, r);  // before the hook: a checkpoint write does not delay the worker
  std::string checkpoint;
  if (r.status == AspPushReply::kApplied && after_apply_) {
    try {
      checkpoint = after_apply_(core_);
    } catch (const std::exception& e) {
      spdlog::error("server {}: after version {}: {}", config_.trainer, r.version, e.what());
    }
  }
  // A push pulled from a dead incarnation (applied or dropped) can raise updates_lost.
  if (!checkpoint.empty() || core_.updates_lost() != reported_lost_ ||
      core_.fenced_pushes() != reported_fenced_) {
    report(checkpoint);
  }
}

void AspServerActor::on_fence(const runtime::Envelope& message) {
  AspFenceReply r;
  r.shard = config_.shard;
  const auto fence = decode_or_count<AspFence>(message);
  if (!fence || fence->shard != config_.shard || fence->job_id != config_.job) {
    r.error = fence ? fmt::format("a fence for shard {} of job {} reached shard {} of job {}",
                                  fence->shard, fence->job_id, config_.shard, config_.job)
                    : fmt::format("a fence to shard {} did not decode as AspFence", config_.shard);
  } else {
    for (const asp::TakenBatch& t : core_.fence(fence->worker, fence->through)) {
      r.taken.push_back(t.batch);
      r.applied.push_back(t.applied);
    }
    r.ok = true;
  }
  const asp::Version v = core_.pull();
  r.incarnation = v.incarnation;
  r.version = v.number;
  if (message.correlation != 0) reply(message, r);
}

void AspServerActor::on_hand_over(const runtime::Envelope& message) {
  AspHandOverReply r;
  r.shard = config_.shard;
  const auto hand_over = decode_or_count<AspHandOver>(message);
  if (!hand_over || hand_over->shard != config_.shard || hand_over->job_id != config_.job) {
    r.error = hand_over ? fmt::format("a hand-over of shard {} of job {} reached shard {} of job {}",
                                      hand_over->shard, hand_over->job_id, config_.shard,
                                      config_.job)
                        : fmt::format("a hand-over to shard {} did not decode", config_.shard);
    if (message.correlation != 0) reply(message, r);
    return;
  }
  // First closed, then saved: nothing the checkpoint misses is applied (pushes and this message
  // run in the actor's turns, one at a time).
  handed_over_ = true;
  const asp::Version v = core_.pull();
  r.incarnation = v.incarnation;
  r.version = v.number;
  for (const auto& [worker, batches] : core_.taken()) {
    for (const asp::TakenBatch& t : batches) {
      r.taken_workers.push_back(worker);
      r.taken_batches.push_back(t.batch);
      r.taken_applied.push_back(t.applied);
    }
  }
  if (!save_) {
    r.error = "this server cannot write a checkpoint";
  } else {
    try {
      r.checkpoint = save_(core_);
      r.ok = true;
    } catch (const std::exception& e) {
      r.error = fmt::format("the hand-over checkpoint failed: {}", e.what());
      spdlog::error("server {}: {}", config_.trainer, r.error);
    }
  }
  if (r.ok) report(r.checkpoint);  // its bytes to the head before the answer
  if (message.correlation != 0) reply(message, r);
}

void AspServerActor::report(const std::string& checkpoint) {
  reported_lost_ = core_.updates_lost();
  reported_fenced_ = core_.fenced_pushes();
  if (!config_.scheduler) return;
  const runtime::ActorAddress scheduler = config_.scheduler();
  if (scheduler.actor.empty()) return;
  const auto c = core_.checkpoint();
  auto envelope = system().make_envelope(
      scheduler, runtime::kind_of<AspServerReport>(),
      runtime::pack_payload(AspServerReport{config_.job, config_.trainer, config_.shard,
                                            c.incarnation, c.version, c.applied, c.dropped,
                                            c.rejected, reported_lost_, checkpoint,
                                            reported_fenced_}),
      self());
  if (!checkpoint.empty()) {
    // The file's bytes go to the head, which keeps the newest copy: a restart on another node
    // cannot read this node's disk.
    std::ifstream in(checkpoint, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad() || bytes.empty()) {
      spdlog::warn("server {}: cannot read back checkpoint {} for the head's copy",
                   config_.trainer, checkpoint);
    } else {
      envelope.attachments.emplace_back(std::move(bytes));
    }
  }
  system().send(std::move(envelope));
}

}  // namespace omnilearn::actors
