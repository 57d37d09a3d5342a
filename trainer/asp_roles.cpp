#include "trainer/asp_roles.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "wire/asp_protocol.hpp"
#include "jobs/asp_server_actor.hpp"
#include "wire/frame_floats.hpp"
#include "trainer/shard_checkpoint.hpp"
#include "asp/server_core.hpp"
#include "asp/shard_layout.hpp"
#include "asp/staleness.hpp"
#include "runtime/system_messages.hpp"
#include "training/optimizer.hpp"
#include "training/specs.hpp"

namespace omnilearn::actors {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kServerAskTimeout = 5s;  // a pull or a push to a server
constexpr auto kSchedulerAskTimeout = 10s;
// A deal request's bound. Short: a request that reaches a head while it restarts (before the
// job's scheduler is back) is dropped, and only this bound ends the wait for its answer. Asking
// again is harmless: the dealer takes a push once, and a batch whose answer was dropped is dealt
// again because the next request does not name it.
constexpr auto kDealAskTimeout = 2s;
// How long a trainer keeps asking a scheduler that does not answer (a head restarting, or a
// standby taking over: its scheduler resumes the job from its snapshot) before it gives up. An
// ask to a head that is down can fail at once: asks go again every kSchedulerRetry until then,
// each to the head followed at that moment (scheduler_of), so they reach a standby that took
// over as soon as the agent says so.
constexpr auto kSchedulerPatience = 60s;
constexpr auto kSchedulerRetry = 500ms;

// The job's scheduler on the head followed now (it moves when a standby takes over).
runtime::ActorAddress scheduler_of(const AspRoleContext& c) {
  return runtime::ActorAddress{c.head(), c.scheduler};
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// ---------------------------------------------------------------------------------------------
// Worker

struct PulledShard {
  std::int64_t incarnation = 0;
  std::int64_t version = 0;
  std::int64_t offset = 0;
  std::int64_t size = 0;
  bool buffers = false;  // the shard sent the model's buffers (shard 0 of a model with them)
};

runtime::Envelope server_envelope(runtime::ActorSystem& system, const std::string& endpoint,
                                  runtime::MessageKind kind, std::string payload) {
  return system.make_envelope(runtime::ActorAddress{endpoint, kAspServerActor}, kind,
                              std::move(payload), {});
}

// Pulls every shard into the replica; returns what each said, or nullopt with *error set and
// the shards that gave no reply at all added to *unreachable (once each): a server that
// answers with an error is alive, one that does not may be hung, which only the scheduler can
// tell (it pings the process).
std::optional<std::vector<PulledShard>> pull_all(AspRoleContext& c,
                                                 const std::vector<std::string>& servers,
                                                 std::string* error,
                                                 std::vector<std::int32_t>* unreachable) {
  std::vector<std::future<runtime::AskResult>> asks;
  for (std::size_t s = 0; s < servers.size(); ++s) {
    asks.push_back(c.system.ask_envelope(
        server_envelope(c.system, servers[s], runtime::kind_of<AspPull>(),
                        runtime::pack_payload(AspPull{c.job, static_cast<std::int32_t>(s)})),
        kServerAskTimeout));
  }
  std::vector<PulledShard> out(servers.size());
  const std::int64_t total = c.replica.flat_parameter_count();
  const std::int64_t buffer_count = c.replica.flat_buffer_count();
  bool ok = true;
  for (std::size_t s = 0; s < asks.size(); ++s) {
    const runtime::AskResult result = asks[s].get();  // every ask completes (timeout at most)
    const bool silent = result.status == runtime::AskResult::Status::kTimeout ||
                        result.status == runtime::AskResult::Status::kUnreachable;
    const auto shard = static_cast<std::int32_t>(s);
    if (silent &&
        std::find(unreachable->begin(), unreachable->end(), shard) == unreachable->end()) {
      unreachable->push_back(shard);
    }
    if (!ok) continue;
    auto r = result.as<AspPullReply>();
    if (!r || !r->ok) {
      *error = fmt::format("pull from shard {} ({}) failed: {}", s, servers[s],
                           r ? r->error : result.error);
      ok = false;
      continue;
    }
    const auto& frames = result.reply.attachments;
    const std::size_t with_buffers = r->buffers > 0 ? 2 : 1;
    if (frames.size() != with_buffers || r->offset < 0 || r->size < 1 ||
        r->offset + r->size > total ||
        frames[0].size() != static_cast<std::size_t>(r->size) * sizeof(float) ||
        (r->buffers > 0 && (r->buffers != buffer_count ||
                            frames[1].size() != static_cast<std::size_t>(r->buffers) * sizeof(float)))) {
      *error = fmt::format("shard {} sent a malformed pull ({} frames, {} buffer values for a "
                           "model of {})",
                           s, frames.size(), r->buffers, buffer_count);
      ok = false;
      continue;
    }
    // The one copy on this side: from the received frame into the parameters (two when the
    // frame is not float-aligned in ZeroMQ's buffer).
    std::vector<float> unaligned;
    c.replica.set_flat_parameters(frame_floats(frames[0], unaligned).data(), r->offset, r->size);
    if (r->buffers > 0) c.replica.set_flat_buffers(frame_floats(frames[1], unaligned).data());
    out[s] = PulledShard{r->incarnation, r->version, r->offset, r->size, r->buffers > 0};
  }
  if (!ok) return std::nullopt;
  return out;
}

// Before an evaluation or the final model: running statistics the pulled parameters' own (the
// servers' running average lags them; Trainer::refresh_statistics says by how much). Seeded
// by the job's seed and the version evaluated, so an evaluation is repeatable.
void refresh_statistics(AspRoleContext& c, const std::vector<PulledShard>& pulled) {
  const bool pulled_buffers =
      std::any_of(pulled.begin(), pulled.end(), [](const PulledShard& p) { return p.buffers; });
  if (!pulled_buffers || c.spec.asp.refresh_statistics <= 0) return;
  constexpr std::int64_t kSamplesPerPass = 64;
  const std::uint64_t version = pulled.empty() ? 0 : static_cast<std::uint64_t>(pulled[0].version);
  c.replica.refresh_statistics(c.spec.asp.refresh_statistics, kSamplesPerPass,
                               c.spec.train.seed * 1000003ULL + version);
}

}  // namespace

int run_asp_server(AspRoleContext& c) {
  const std::int64_t parameters = c.replica.flat_parameter_count();
  const asp::ShardLayout layout(parameters, std::max(1, c.hello.shards));
  training::OptimizerSpec optimizer_spec = c.spec.optimizer;
  if (optimizer_spec.schedule.kind == "cosine" && optimizer_spec.schedule.total_steps == 0) {
    optimizer_spec.schedule.total_steps = c.total_steps;
  }
  // The initial parameters are the model's for its seed, as every BSP replica's.
  std::vector<float> flat(static_cast<std::size_t>(parameters));
  c.replica.copy_flat_parameters(flat.data());
  // Shared: the actor's callbacks keep it alive (the actor's storage is its tensor's).
  // Shard 0 keeps the model's buffers (BatchNorm statistics) for every worker.
  std::vector<float> buffers;
  if (c.hello.shard == 0) {
    buffers.resize(static_cast<std::size_t>(c.replica.flat_buffer_count()));
    c.replica.copy_flat_buffers(buffers.data());
  }
  std::shared_ptr<ShardState> state =
      make_shard_state(layout, c.hello.shard, flat, optimizer_spec, buffers);
  auto& s = *state;
  s.checkpoint_every = c.spec.checkpoint.every;
  std::error_code ec;
  std::filesystem::create_directories(c.hello.checkpoint_dir, ec);
  // One file per incarnation: a server declared dead that still runs (its agent froze) and
  // writes a checkpoint must not overwrite its successor's, which a later restart resumes from.
  s.checkpoint_path = (std::filesystem::path(c.hello.checkpoint_dir) /
                       fmt::format("server-shard{}-i{}.pt", s.shard, c.hello.incarnation))
                          .string();
  AspServerConfig server;
  server.job = c.job;
  server.trainer = c.trainer;
  server.shard = s.shard;
  server.slice = s.slice;
  server.scheduler = [head = c.head, actor = c.scheduler] {
    return runtime::ActorAddress{head(), actor};
  };
  if (s.buffers.defined()) {
    // Like the parameters, written in place by load_shard and only in the actor's turns.
    server.buffers = std::span<float>(s.buffers.data_ptr<float>(), s.buffers.numel());
    server.buffer_counters = c.replica.flat_buffer_counters();
  }
  auto& config = server.staleness;
  config.mode = asp::parse_staleness_mode(c.spec.asp.staleness).value_or(asp::StalenessMode::kNone);
  config.max_staleness = config.mode == asp::StalenessMode::kBound ? c.spec.asp.max_staleness : 0;
  config.lr_scaling =
      asp::parse_lr_scaling(c.spec.asp.lr_scaling).value_or(asp::LrScaling::kLinear);
  if (c.spec.asp.scale_lr_by_workers) {
    // Each push is a whole optimizer step: n workers at BSP's rate take n steps where BSP takes
    // one, and diverge; at lr / n they move as far per round of pushes as BSP per step.
    server.on_workers = [state](int workers) { state->lr_factor = 1.0 / std::max(1, workers); };
  }
  // steady_clock ticks of the last pull or push (the idle limit below reads it).
  server.last_message =
      std::make_shared<std::atomic<std::int64_t>>(Clock::now().time_since_epoch().count());
  // The job's optimizer and LR schedule on the slice; the state it captures lives as long as
  // the actor holding this.
  auto apply = [state](std::int64_t from_version, double scale, std::span<const float> gradient) {
    apply_push(*state, from_version, scale, gradient);
  };
  // Every `[checkpoint] every` updates; a failed write is logged and the shard goes on serving.
  auto checkpoint = [state, trainer = c.trainer](const asp::ServerCore& core) -> std::string {
    if (state->checkpoint_every <= 0 || core.pull().number % state->checkpoint_every != 0) {
      return "";
    }
    try {
      save_shard(*state, core.checkpoint());
      return state->checkpoint_path;
    } catch (const std::exception& e) {
      spdlog::error("server {}: checkpoint failed: {}", trainer, e.what());
      return "";
    }
  };
  // A hand-over (the node drained): now, whatever the version; a failure throws to the actor,
  // whose reply says why.
  auto save = [state](const asp::ServerCore& core) -> std::string {
    save_shard(*state, core.checkpoint());
    return state->checkpoint_path;
  };
  std::string resumed_from;
  if (c.hello.incarnation > 0) {
    // A restart: from the newer of the head's copy of the shard's last checkpoint and this
    // node's own file (there when the shard ran here, or the disk is shared; only at the
    // version the scheduler recorded for it), or from the initial parameters (version 0) when
    // neither loads; either way as incarnation hello.incarnation. load_shard checks everything
    // before it changes anything.
    ResumeSources sources;
    if (!c.hello.resume_checkpoint.empty()) {
      std::ifstream in(c.hello.resume_checkpoint, std::ios::binary);
      std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
      if (in && !bytes.empty()) sources.local = std::move(bytes);
      sources.local_path = c.hello.resume_checkpoint;
      sources.local_version = c.hello.resume_version;
    }
    const runtime::AskResult fetched =
        c.system
            .ask(scheduler_of(c), AspFetchCheckpoint{c.job, c.trainer, s.shard},
                 kSchedulerAskTimeout)
            .get();
    const auto copy = fetched.as<AspCheckpointReply>();
    if (copy && copy->ok && fetched.reply.attachments.size() == 1) {
      const auto& frame = fetched.reply.attachments[0];
      sources.head_copy = std::vector<char>(frame.data(), frame.data() + frame.size());
      sources.head_version = copy->version;
    } else {
      spdlog::info("server {}: no checkpoint copy from the head: {}", c.trainer,
                   copy ? copy->error : fetched.error);
    }
    ResumedShard resumed = resume_shard(s, sources);
    for (const auto& why : resumed.refused) spdlog::warn("server {}: {}", c.trainer, why);
    resumed_from = resumed.resumed_from;
    if (resumed_from == "initial") {
      spdlog::warn("server {}: starting shard {} from its initial parameters", c.trainer, s.shard);
    }
    asp::ServerCheckpoint from = resumed.from;
    from.incarnation = c.hello.incarnation - 1;
    server.resume = from;
  }
  const auto last_message = server.last_message;
  // The actor's storage is the tensor's: the optimizer and load_shard write it in place, so
  // the pointer stays valid for as long as `state` (held by the callbacks) lives.
  auto actor = std::make_unique<AspServerActor>(
      std::move(server), std::span<float>(s.params.data_ptr<float>(), s.slice.size), apply,
      checkpoint, save);
  const asp::Version version = actor->version();
  const std::int64_t updates_lost = actor->updates_lost();

  const std::string host = c.advertise_host.empty() ? "127.0.0.1" : c.advertise_host;
  const std::string endpoint = c.system.listen(
      host.find(':') != std::string::npos ? "tcp://[" + host + "]:0" : "tcp://" + host + ":0");
  c.system.spawn(kAspServerActor, std::move(actor));
  spdlog::info("server {}: shard {} = [{}, {}) of {} parameters at {} (incarnation {}, version {})",
               c.trainer, s.shard, s.slice.offset, s.slice.offset + s.slice.size, s.parameters,
               endpoint, c.hello.incarnation, version.number);

  AspServerReady ready{c.job,
                       c.trainer,
                       s.shard,
                       endpoint,
                       c.hello.incarnation,
                       version.number,
                       updates_lost,
                       s.parameters,
                       c.replica.data().train->size(),
                       resumed_from};
  bool told = false;
  for (const auto since = Clock::now(); !told && Clock::now() - since < kSchedulerPatience;) {
    if (c.wait_stop(0ms)) break;
    told = c.system.ask(scheduler_of(c), ready, kSchedulerAskTimeout).get().ok();
    if (!told && c.wait_stop(kSchedulerRetry)) break;
  }
  int code = 0;
  if (!told) {
    spdlog::error("server {}: the scheduler did not answer", c.trainer);
    code = 1;
  } else {
    // Serve until told to stop; the actor does the work. A server nobody has asked anything
    // for this long has lost its job (the head and its scheduler are gone): it exits.
    const auto idle_limit = std::chrono::seconds(120) +
                            std::chrono::seconds(static_cast<int>(c.spec.elastic.grace_period_s));
    while (!c.wait_stop(1s)) {
      const auto idle = Clock::now().time_since_epoch() -
                        std::chrono::steady_clock::duration(last_message->load());
      if (idle > idle_limit) {
        spdlog::error("server {}: no pull or push for {} s; exiting", c.trainer,
                      std::chrono::duration_cast<std::chrono::seconds>(idle).count());
        code = 1;
        break;
      }
    }
  }
  c.system.stop(kAspServerActor, "stopping");
  return code;
}

int run_asp_worker(AspRoleContext& c) {
  const std::int64_t worker = c.hello.worker_id;
  const std::int64_t total = c.replica.flat_parameter_count();
  auto fresh_request = [&c] {
    AspDealRequest r;
    r.job_id = c.job;
    r.trainer = c.trainer;
    return r;
  };
  AspDealRequest request = fresh_request();
  int unanswered = 0;
  Clock::time_point unanswered_since;
  std::int64_t batches = 0;
  while (true) {
    if (c.wait_stop(0ms)) return 0;
    c.apply_slowdown();
    const runtime::AskResult result = c.system.ask(scheduler_of(c), request, kDealAskTimeout).get();
    auto deal = result.as<AspDealReply>();
    if (!deal) {
      // The outcome goes again with the next ask: the dealer takes a push once, and deals
      // again a batch whose answer never arrived (the request does not name it).
      if (unanswered++ == 0) unanswered_since = Clock::now();
      if (Clock::now() - unanswered_since >= kSchedulerPatience) {
        spdlog::error("worker {}: the scheduler did not answer {} asks in {} s ({})", c.trainer,
                      unanswered, kSchedulerPatience.count(), result.error);
        return 1;
      }
      if (c.wait_stop(kSchedulerRetry)) return 0;
      continue;
    }
    unanswered = 0;
    request = fresh_request();
    if (deal->action == AspDealReply::kDone) {
      spdlog::info("worker {}: done after {} batches{}", c.trainer, batches,
                   deal->error.empty() ? "" : ": " + deal->error);
      return 0;
    }
    if (deal->action == AspDealReply::kWait) {
      if (c.wait_stop(std::chrono::milliseconds(std::clamp(deal->wait_ms, 10, 2000)))) return 0;
      continue;
    }
    if (deal->action == AspDealReply::kFinish) {
      AspFinished finished;
      finished.job_id = c.job;
      finished.trainer = c.trainer;
      std::string error;
      std::optional<std::vector<PulledShard>> pulled;
      for (int attempt = 0; attempt < 5 && !pulled; ++attempt) {
        pulled = pull_all(c, deal->servers, &error, &request.unreachable);
        if (!pulled && c.wait_stop(500ms)) return 0;
      }
      if (!pulled) {
        // A server is down (it restarts from its checkpoint): ask again; the scheduler tells
        // this worker to finish once every shard is back.
        spdlog::warn("worker {}: cannot pull the final parameters yet: {}", c.trainer, error);
        continue;
      }
      {
        refresh_statistics(c, *pulled);
        const auto eval = c.replica.evaluate();
        finished.test_accuracy = eval.accuracy;
        finished.test_loss = eval.loss;
        std::error_code ec;
        std::filesystem::create_directories(c.hello.checkpoint_dir, ec);
        const std::string path =
            (std::filesystem::path(c.hello.checkpoint_dir) / "asp-final.pt").string();
        try {
          c.replica.save_checkpoint(path);
          finished.ok = true;
          finished.checkpoint = path;
        } catch (const std::exception& e) {
          finished.error = std::string("final checkpoint failed: ") + e.what();
        }
        spdlog::info("worker {}: final model: test accuracy {:.4f}, loss {:.4f}", c.trainer,
                     eval.accuracy, eval.loss);
      }
      for (const auto since = Clock::now(); Clock::now() - since < kSchedulerPatience;) {
        if (c.system.ask(scheduler_of(c), finished, kSchedulerAskTimeout).get().ok()) break;
        if (c.wait_stop(kSchedulerRetry)) return 0;
      }
      // The scheduler ends the job and stops every trainer; bounded in case it never does.
      c.wait_stop(60s);
      return 0;
    }
    if (deal->action == AspDealReply::kEvaluate) {
      // The parameters as they are now, on the whole test set; the other workers go on
      // training meanwhile. The figures go with the next ask.
      const Clock::time_point started = Clock::now();
      std::string error;
      auto pulled = pull_all(c, deal->servers, &error, &request.unreachable);
      if (pulled) {
        try {
          refresh_statistics(c, *pulled);
          const auto eval = c.replica.evaluate();
          request.evaluated = true;
          request.eval_accuracy = eval.accuracy;
          request.eval_loss = eval.loss;
          request.eval_version = pulled->empty() ? 0 : (*pulled)[0].version;
        } catch (const std::exception& e) {
          error = e.what();
        }
      }
      if (!request.evaluated) {
        request.eval_error = error;
        spdlog::warn("worker {}: evaluation skipped: {}", c.trainer, error);
      }
      request.eval_time_s = seconds_since(started);
      continue;
    }
    // A batch.
    const Clock::time_point started = Clock::now();
    std::string error;
    auto pulled = pull_all(c, deal->servers, &error, &request.unreachable);
    if (!pulled) {
      spdlog::warn("worker {}: batch {} abandoned: {}", c.trainer, deal->batch_id, error);
      request.failed_batch = deal->batch_id;
      if (c.wait_stop(200ms)) return 0;
      continue;
    }
    // Gradient into a buffer the push frames point into (no further copy on this side).
    auto gradient = std::make_shared<std::vector<float>>(static_cast<std::size_t>(total));
    // The buffers as pulled, then how this batch's forward moved them (for the shard that
    // keeps them).
    std::shared_ptr<std::vector<float>> moved;
    if (std::any_of(pulled->begin(), pulled->end(), [](const PulledShard& p) { return p.buffers; })) {
      moved = std::make_shared<std::vector<float>>(
          static_cast<std::size_t>(c.replica.flat_buffer_count()));
      c.replica.copy_flat_buffers(moved->data());
    }
    const auto g = c.replica.flat_gradient(deal->indices, gradient->data());
    if (moved) {
      std::vector<float> after(moved->size());
      c.replica.copy_flat_buffers(after.data());
      for (std::size_t i = 0; i < after.size(); ++i) (*moved)[i] = after[i] - (*moved)[i];
    }
    // A batch dealt again after a push that reached only some shards goes to the others only.
    auto taken_already = [&](std::size_t s) {
      return std::find(deal->shards_done.begin(), deal->shards_done.end(),
                       static_cast<std::int32_t>(s)) != deal->shards_done.end();
    };
    std::vector<std::future<runtime::AskResult>> pushes(pulled->size());
    for (std::size_t s = 0; s < pulled->size(); ++s) {
      if (taken_already(s)) continue;
      const auto& p = (*pulled)[s];
      AspPush push{c.job,
                   static_cast<std::int32_t>(s),
                   worker,
                   p.incarnation,
                   p.version,
                   static_cast<std::int64_t>(deal->indices.size()),
                   deal->global_batch,
                   deal->workers,
                   deal->batch_id};
      auto envelope = server_envelope(c.system, deal->servers[s], runtime::kind_of<AspPush>(),
                                      runtime::pack_payload(push));
      envelope.attachments.push_back(
          runtime::Bytes::view(gradient, reinterpret_cast<const char*>(gradient->data() + p.offset),
                               static_cast<std::size_t>(p.size) * sizeof(float)));
      if (p.buffers && moved) {
        envelope.attachments.push_back(
            runtime::Bytes::view(moved, reinterpret_cast<const char*>(moved->data()),
                                 moved->size() * sizeof(float)));
      }
      pushes[s] = c.system.ask_envelope(std::move(envelope), kServerAskTimeout);
    }
    request.incarnations.assign(pushes.size(), -1);
    request.versions.assign(pushes.size(), -1);
    std::vector<std::int64_t> unanswered(pushes.size(), -1);
    bool all_applied = true, any_dropped = false, failed = false;
    std::int64_t staleness = 0, version_seen = pulled->empty() ? 0 : (*pulled)[0].version;
    for (std::size_t s = 0; s < pushes.size(); ++s) {
      if (!pushes[s].valid()) continue;  // taken already
      const runtime::AskResult result = pushes[s].get();
      auto r = result.as<AspPushReply>();
      // Rejected, or fenced (the scheduler took the batch back: this worker was declared gone,
      // and its next ask ends it): answered, not taken.
      if (!r || r->status == AspPushReply::kRejected || r->status == AspPushReply::kFenced) {
        spdlog::warn("worker {}: push of batch {} to shard {} failed: {}", c.trainer,
                     deal->batch_id, s, r ? r->error : result.error);
        failed = true;
        if (!r) unanswered[s] = (*pulled)[s].incarnation;  // a rejection was answered
        continue;
      }
      request.incarnations[s] = r->incarnation;
      request.versions[s] = r->version;
      staleness = std::max(staleness, r->staleness);
      all_applied = all_applied && r->status == AspPushReply::kApplied;
      any_dropped = any_dropped || r->status == AspPushReply::kDropped;
      if (s == 0) version_seen = r->version;
    }
    ++batches;
    if (failed) {
      // The shards that did answer still tell how far they got.
      const auto incarnations = std::move(request.incarnations);
      const auto versions = std::move(request.versions);
      request = fresh_request();
      request.incarnations = incarnations;
      request.versions = versions;
      request.unanswered = std::move(unanswered);
      request.failed_batch = deal->batch_id;
      // A shard that dropped it as too stale took it without an update: if the batch is then
      // accepted (the others took it too), it counts as a dropped push, not an update.
      request.dropped = any_dropped;
      continue;
    }
    // As a BSP trainer reports each step: the agent's heartbeats carry this worker's timings
    // (status, /metrics), and the agent learns where to send a `node set` speed change.
    TrainerReport report;
    report.job_id = c.job;
    report.trainer = c.trainer;
    report.rank = 0;
    report.step = batches;
    report.total_steps = c.total_steps;
    report.epoch = deal->epoch;
    report.loss = g.loss;
    report.batch = static_cast<std::int32_t>(deal->indices.size());
    report.compute_time_s = g.compute_time_s;
    report.step_time_s = seconds_since(started);
    c.system.tell(runtime::ActorAddress{c.agent, kAgentActor}, report);
    request.pushed_batch = deal->batch_id;
    request.staleness = staleness;
    request.applied = all_applied;
    request.dropped = any_dropped;
    request.batch = static_cast<std::int32_t>(deal->indices.size());
    request.compute_time_s = g.compute_time_s;
    request.update_time_s = seconds_since(started);
    request.loss = g.loss;
    request.version_seen = version_seen;
  }
}

}  // namespace omnilearn::actors
