#include "actors/trainer/asp_roles.hpp"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "actors/asp_protocol.hpp"
#include "actors/asp_server_actor.hpp"
#include "actors/frame_floats.hpp"
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
constexpr int kSchedulerAttempts = 6;  // consecutive unanswered asks before giving up

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// ---------------------------------------------------------------------------------------------
// Server

// What LibTorch holds of one shard: its parameters, their optimizer, where it checkpoints. The
// server actor (actors/asp_server_actor, torch-free) owns the messaging and the ServerCore and
// reaches this only through the callbacks run_asp_server gives it, which keep it alive; they
// run in the actor's turns (the training thread only waits).
struct ShardState {
  std::int32_t shard = 0;
  asp::ShardSlice slice;
  std::int64_t parameters = 0;
  training::OptimizerSpec optimizer_spec;
  at::Tensor params;  // float32 [slice.size], its grad preallocated; the actor's storage
  std::unique_ptr<training::Optimizer> optimizer;
  std::int64_t checkpoint_every = 0;
  std::string checkpoint_path;
};

// {"shard": {"params": T}, "optimizer": {...}, "optimizer_kind": s, "asp": {offset, size, ...},
// "core": uint8 T}: torch.load()-able; "core" is asp::encode_checkpoint's bytes.
void save_shard(const ShardState& s, const asp::ServerCheckpoint& checkpoint) {
  c10::Dict<std::string, at::Tensor> shard;
  shard.insert("params", s.params.detach().clone());
  c10::Dict<std::string, at::Tensor> optimizer;
  for (const auto& [name, t] : s.optimizer->state()) optimizer.insert(name, t.clone());
  c10::Dict<std::string, int64_t> meta;
  meta.insert("shard", s.shard);
  meta.insert("offset", s.slice.offset);
  meta.insert("size", s.slice.size);
  meta.insert("parameters", s.parameters);
  meta.insert("version", checkpoint.version);
  meta.insert("incarnation", checkpoint.incarnation);
  const std::vector<std::uint8_t> core = asp::encode_checkpoint(checkpoint);
  at::Tensor core_bytes =
      at::from_blob(const_cast<std::uint8_t*>(core.data()), {static_cast<int64_t>(core.size())},
                    at::TensorOptions().dtype(at::kByte))
          .clone();
  c10::impl::GenericDict top(c10::StringType::get(), c10::AnyType::get());
  top.insert("shard", shard);
  top.insert("optimizer", optimizer);
  top.insert("optimizer_kind", s.optimizer_spec.kind);
  top.insert("asp", meta);
  top.insert("core", core_bytes);
  training::write_file_atomically(s.checkpoint_path, torch::jit::pickle_save(top));
}

// Restores parameters and optimizer state from `path` into `s`; returns the core's checkpoint.
// Throws std::runtime_error, changing nothing, when the file is not this shard's or, with
// `version` >= 0, holds another version.
asp::ServerCheckpoint load_shard(ShardState& s, const std::vector<char>& bytes,
                                 const std::string& path, std::int64_t version = -1) {
  const c10::IValue value = torch::jit::pickle_load(bytes);
  auto fail = [&](const std::string& what) {
    throw std::runtime_error("server checkpoint " + path + ": " + what);
  };
  if (!value.isGenericDict()) fail("top level is not a dict");
  const auto top = value.toGenericDict();
  for (const char* key : {"shard", "optimizer", "asp", "core"}) {
    if (!top.contains(key)) fail(std::string("missing \"") + key + "\"");
  }
  std::map<std::string, int64_t> meta;
  for (const auto& e : top.at("asp").toGenericDict())
    meta[e.key().toStringRef()] = e.value().toInt();
  if (meta["offset"] != s.slice.offset || meta["size"] != s.slice.size ||
      meta["parameters"] != s.parameters) {
    fail("written for another shard layout");
  }
  const at::Tensor core = top.at("core").toTensor().contiguous();
  auto checkpoint = asp::decode_checkpoint(std::span<const std::uint8_t>(
      core.data_ptr<std::uint8_t>(), static_cast<std::size_t>(core.numel())));
  if (!checkpoint) fail("its server state does not decode");
  if (version >= 0 && checkpoint->version != version) {
    // Rewritten after the report the scheduler recorded: by an incarnation declared gone that
    // still runs (cut off, on a shared disk). No fence answered for that state.
    fail(fmt::format("holds version {}, the scheduler recorded version {} for it", checkpoint->version,
                     version));
  }
  const at::Tensor params = top.at("shard").toGenericDict().at("params").toTensor();
  if (params.numel() != s.slice.size) fail("its parameters have the wrong size");
  const auto saved = top.at("optimizer").toGenericDict();
  for (const auto& [name, t] : s.optimizer->state()) {
    if (!saved.contains(name) || saved.at(name).toTensor().numel() != t.numel()) {
      fail("its optimizer state does not match (" + name + ")");
    }
  }
  c10::NoGradGuard no_grad;
  s.params.copy_(params.reshape({-1}));
  for (const auto& [name, t] : s.optimizer->state()) {
    const_cast<at::Tensor&>(t).copy_(saved.at(name).toTensor().reshape(t.sizes()));
  }
  return *checkpoint;
}

// ---------------------------------------------------------------------------------------------
// Worker

struct PulledShard {
  std::int64_t incarnation = 0;
  std::int64_t version = 0;
  std::int64_t offset = 0;
  std::int64_t size = 0;
};

runtime::Envelope server_envelope(runtime::ActorSystem& system, const std::string& endpoint,
                                  runtime::MessageKind kind, std::string payload) {
  return system.make_envelope(runtime::ActorAddress{endpoint, kAspServerActor}, kind,
                              std::move(payload), {});
}

// Pulls every shard into the replica; returns what each said, or nullopt with *error set.
std::optional<std::vector<PulledShard>> pull_all(AspRoleContext& c,
                                                 const std::vector<std::string>& servers,
                                                 std::string* error) {
  std::vector<std::future<runtime::AskResult>> asks;
  for (std::size_t s = 0; s < servers.size(); ++s) {
    asks.push_back(c.system.ask_envelope(
        server_envelope(c.system, servers[s], runtime::kind_of<AspPull>(),
                        runtime::pack_payload(AspPull{c.job, static_cast<std::int32_t>(s)})),
        kServerAskTimeout));
  }
  std::vector<PulledShard> out(servers.size());
  const std::int64_t total = c.replica.flat_parameter_count();
  bool ok = true;
  for (std::size_t s = 0; s < asks.size(); ++s) {
    const runtime::AskResult result = asks[s].get();  // every ask completes (timeout at most)
    if (!ok) continue;
    auto r = result.as<AspPullReply>();
    if (!r || !r->ok) {
      *error = fmt::format("pull from shard {} ({}) failed: {}", s, servers[s],
                           r ? r->error : result.error);
      ok = false;
      continue;
    }
    const auto& frames = result.reply.attachments;
    if (frames.size() != 1 || r->offset < 0 || r->size < 1 || r->offset + r->size > total ||
        frames[0].size() != static_cast<std::size_t>(r->size) * sizeof(float)) {
      *error = fmt::format("shard {} sent a malformed pull ({} frames)", s, frames.size());
      ok = false;
      continue;
    }
    // The one copy on this side: from the received frame into the parameters (two when the
    // frame is not float-aligned in ZeroMQ's buffer).
    std::vector<float> unaligned;
    c.replica.set_flat_parameters(frame_floats(frames[0], unaligned).data(), r->offset, r->size);
    out[s] = PulledShard{r->incarnation, r->version, r->offset, r->size};
  }
  if (!ok) return std::nullopt;
  return out;
}

}  // namespace

int run_asp_server(AspRoleContext& c) {
  auto state = std::make_shared<ShardState>();
  auto& s = *state;
  s.shard = c.hello.shard;
  s.parameters = c.replica.flat_parameter_count();
  const asp::ShardLayout layout(s.parameters, std::max(1, c.hello.shards));
  s.slice = layout.slice(s.shard);
  s.optimizer_spec = c.spec.optimizer;
  if (s.optimizer_spec.schedule.kind == "cosine" && s.optimizer_spec.schedule.total_steps == 0) {
    s.optimizer_spec.schedule.total_steps = c.total_steps;
  }
  // The initial parameters are the model's for its seed, as every BSP replica's.
  std::vector<float> flat(static_cast<std::size_t>(s.parameters));
  c.replica.copy_flat_parameters(flat.data());
  s.params = at::from_blob(flat.data() + s.slice.offset, {s.slice.size},
                           at::TensorOptions().dtype(at::kFloat))
                 .clone();
  s.params.mutable_grad() = at::zeros_like(s.params);
  s.optimizer = std::make_unique<training::Optimizer>(
      s.optimizer_spec, std::vector<training::NamedTensor>{{"shard", s.params}});
  s.checkpoint_every = c.spec.checkpoint.every;
  std::error_code ec;
  std::filesystem::create_directories(c.hello.checkpoint_dir, ec);
  // One file per incarnation: a server declared dead that still runs (its agent froze) and
  // writes a checkpoint must not overwrite its successor's, which a later restart resumes from.
  s.checkpoint_path = (std::filesystem::path(c.hello.checkpoint_dir) /
                       fmt::format("server-shard{}-i{}.pt", s.shard, c.hello.incarnation))
                          .string();
  const runtime::ActorAddress scheduler{c.head, c.scheduler};

  AspServerConfig server;
  server.job = c.job;
  server.trainer = c.trainer;
  server.shard = s.shard;
  server.slice = s.slice;
  server.scheduler = scheduler;
  auto& config = server.staleness;
  config.mode = asp::parse_staleness_mode(c.spec.asp.staleness).value_or(asp::StalenessMode::kNone);
  config.max_staleness = config.mode == asp::StalenessMode::kBound ? c.spec.asp.max_staleness : 0;
  config.lr_scaling =
      asp::parse_lr_scaling(c.spec.asp.lr_scaling).value_or(asp::LrScaling::kLinear);
  // steady_clock ticks of the last pull or push (the idle limit below reads it).
  server.last_message =
      std::make_shared<std::atomic<std::int64_t>>(Clock::now().time_since_epoch().count());
  // The job's optimizer and LR schedule on the slice; the state it captures lives as long as
  // the actor holding this.
  auto apply = [state](std::int64_t from_version, double scale, std::span<const float> gradient) {
    c10::NoGradGuard no_grad;
    state->params.mutable_grad().copy_(at::from_blob(const_cast<float*>(gradient.data()),
                                                     {static_cast<int64_t>(gradient.size())},
                                                     at::TensorOptions().dtype(at::kFloat)));
    const double lr = training::scheduled_lr(state->optimizer_spec, from_version) * scale;
    state->optimizer->step(lr, from_version + 1);
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
    asp::ServerCheckpoint from;
    resumed_from = "initial";
    auto try_load = [&](const std::vector<char>& bytes, const std::string& what,
                        const char* source, std::int64_t version) {
      try {
        from = load_shard(s, bytes, what, version);
        resumed_from = source;
      } catch (const std::exception& e) {
        spdlog::warn("server {}: {}", c.trainer, e.what());
      }
    };
    if (!c.hello.resume_checkpoint.empty()) {
      std::ifstream in(c.hello.resume_checkpoint, std::ios::binary);
      std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
      if (in && !bytes.empty()) {
        try_load(bytes, c.hello.resume_checkpoint, "local", c.hello.resume_version);
      }
    }
    const runtime::AskResult fetched =
        c.system.ask(scheduler, AspFetchCheckpoint{c.job, c.trainer, s.shard}, kSchedulerAskTimeout)
            .get();
    const auto copy = fetched.as<AspCheckpointReply>();
    if (copy && copy->ok && fetched.reply.attachments.size() == 1) {
      if (copy->version > from.version) {
        const auto& frame = fetched.reply.attachments[0];
        try_load(std::vector<char>(frame.data(), frame.data() + frame.size()),
                 "(the head's copy)", "head", -1);
      }
    } else {
      spdlog::info("server {}: no checkpoint copy from the head: {}", c.trainer,
                   copy ? copy->error : fetched.error);
    }
    if (resumed_from == "initial") {
      spdlog::warn("server {}: starting shard {} from its initial parameters", c.trainer, s.shard);
    }
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
  for (int attempt = 0; attempt < kSchedulerAttempts && !told; ++attempt) {
    if (c.wait_stop(0ms)) break;
    told = c.system.ask(scheduler, ready, kSchedulerAskTimeout).get().ok();
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
  const runtime::ActorAddress scheduler{c.head, c.scheduler};
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
  std::int64_t batches = 0;
  while (true) {
    if (c.wait_stop(0ms)) return 0;
    c.apply_slowdown();
    const runtime::AskResult result = c.system.ask(scheduler, request, kSchedulerAskTimeout).get();
    auto deal = result.as<AspDealReply>();
    if (!deal) {
      // The outcome goes again with the next ask: the dealer takes a push once.
      if (++unanswered >= kSchedulerAttempts) {
        spdlog::error("worker {}: the scheduler did not answer {} asks ({})", c.trainer, unanswered,
                      result.error);
        return 1;
      }
      if (c.wait_stop(500ms)) return 0;
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
        pulled = pull_all(c, deal->servers, &error);
        if (!pulled && c.wait_stop(500ms)) return 0;
      }
      if (!pulled) {
        // A server is down (it restarts from its checkpoint): ask again; the scheduler tells
        // this worker to finish once every shard is back.
        spdlog::warn("worker {}: cannot pull the final parameters yet: {}", c.trainer, error);
        continue;
      }
      {
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
      for (int attempt = 0; attempt < kSchedulerAttempts; ++attempt) {
        if (c.system.ask(scheduler, finished, kSchedulerAskTimeout).get().ok()) break;
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
      auto pulled = pull_all(c, deal->servers, &error);
      if (pulled) {
        try {
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
    auto pulled = pull_all(c, deal->servers, &error);
    if (!pulled) {
      spdlog::warn("worker {}: batch {} abandoned: {}", c.trainer, deal->batch_id, error);
      request.failed_batch = deal->batch_id;
      if (c.wait_stop(200ms)) return 0;
      continue;
    }
    // Gradient into a buffer the push frames point into (no further copy on this side).
    auto gradient = std::make_shared<std::vector<float>>(static_cast<std::size_t>(total));
    const auto g = c.replica.flat_gradient(deal->indices, gradient->data());
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
