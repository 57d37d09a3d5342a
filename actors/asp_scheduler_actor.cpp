#include "actors/asp_scheduler_actor.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>

#include "actors/reply_envelope.hpp"
#include "runtime/atomic_file.hpp"
#include "runtime/system_messages.hpp"
#include "scheduler/elastic_protocol.hpp"

namespace omnilearn::actors {
namespace {

using Json = nlohmann::json;

double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

constexpr std::chrono::milliseconds kTick{100};
constexpr std::chrono::milliseconds kInterval{1000};  // staleness statistics per interval
constexpr int kMaxServerRestarts = 8;                 // per shard, then the job fails
// A fence's answer: a live server answers in microseconds; past this it counts as dead.
constexpr std::chrono::milliseconds kFenceTimeout{5000};
// A drained server's hand-over: one checkpoint write (the shard and its optimizer state); past
// this it is stopped anyway and restarts from its last periodic checkpoint.
constexpr std::chrono::milliseconds kHandOverTimeout{20000};

}  // namespace

AspSchedulerActor::AspSchedulerActor(SchedulerOptions options)
    : options_(std::move(options)), controller_(options_.spec.controller.config) {
  shards_.resize(static_cast<std::size_t>(options_.spec.asp.servers));
}

void AspSchedulerActor::on_start() {
  started_at_ = Clock::now();
  last_progress_ = started_at_;
  interval_started_ = started_at_;
  next_eval_ = options_.spec.train.eval_every;
  std::error_code ec;
  std::filesystem::create_directories(options_.run_dir, ec);
  events_file_.open(std::filesystem::path(options_.run_dir) / "events.jsonl", std::ios::app);
  if (!events_file_) {
    spdlog::warn("job {}: cannot write {}/events.jsonl", options_.job_id, options_.run_dir);
  }
  const auto& asp = options_.spec.asp;
  emit(Json{{"event", "submitted"},
            {"job_id", options_.job_id},
            {"name", options_.spec.name},
            {"mode", "asp"},
            {"policy", std::string(scheduler::to_string(options_.spec.controller.config.policy))},
            {"global_batch", options_.spec.train.global_batch},
            {"min_workers", options_.spec.elastic.min_workers},
            {"max_workers", options_.spec.elastic.max_workers},
            {"servers", asp.servers},
            {"staleness", asp.staleness},
            {"max_staleness", asp.max_staleness},
            {"lr_scaling", asp.lr_scaling},
            {"scale_lr_by_workers", asp.scale_lr_by_workers}});
  ask(runtime::ActorAddress{"", kRegistryActor}, SubscribeNodes{}, std::chrono::seconds(5),
      [this](runtime::AskResult result) {
        auto snapshot = result.as<StatusReply>();
        if (!snapshot) {
          fail("cannot subscribe to the node registry: " + result.error);
          return;
        }
        for (const auto& node : snapshot->nodes) {
          if (node.state == "alive" || node.state == "suspect") {
            nodes_[node.id] = Node{node.name, node.system, true, node.drained};
          }
        }
        place();
      });
  tick_timer_ = after(kTick, [this] { tick(); });
  publish_info();
}

void AspSchedulerActor::on_stop() {
  if (!finished_) {
    for (const auto& [name, t] : trainers_) {
      if (!t.system.empty() && !t.gone) {
        tell(runtime::ActorAddress{t.system, "trainer"},
             StopTrainer{options_.job_id, "head shutting down"});
      }
    }
  }
  tell(runtime::ActorAddress{"", kRegistryActor}, UnsubscribeNodes{});
}

void AspSchedulerActor::emit(const Json& event) {
  Json line = event;
  if (!line.contains("time")) line["time"] = unix_time();
  events_.push_back(line.dump());
  if (events_file_) {
    events_file_ << events_.back() << '\n';
    events_file_.flush();
  }
}

// ---------------------------------------------------------------------------------------------
// Placement

std::int64_t AspSchedulerActor::live_workers() const {
  std::int64_t n = 0;
  for (const auto& [name, t] : trainers_) n += (!t.server && !t.gone) ? 1 : 0;
  return n;
}

bool AspSchedulerActor::servers_ready() const {
  return std::all_of(shards_.begin(), shards_.end(),
                     [](const Shard& s) { return s.ready && !s.handing_over; });
}

void AspSchedulerActor::spawn(const std::string& node_id, bool server, std::int32_t shard) {
  const auto& node = nodes_.at(node_id);
  const std::string name =
      fmt::format("{}-{}-{}{}", options_.job_id, node.name, server ? "s" : "t", next_trainer_++);
  Trainer t;
  t.node = node_id;
  t.server = server;
  t.shard = shard;
  t.spawned_at = Clock::now();
  if (server) {
    auto& s = shards_[static_cast<std::size_t>(shard)];
    t.incarnation = s.trainer.empty() && s.restarts == 0 ? 0 : s.incarnation;
    s.trainer = name;
    s.ready = false;
  }
  trainers_[name] = t;
  spdlog::info("job {}: starting {} {} on node {}", options_.job_id,
               server ? fmt::format("server (shard {})", shard) : std::string("worker"), name,
               node.name);
  emit(Json{{"event", "spawn"},
            {"trainer", name},
            {"node", node.name},
            {"role", server ? "server" : "worker"},
            {"shard", server ? Json(shard) : Json()}});
  tell(runtime::ActorAddress{node.system, kAgentActor},
       SpawnTrainer{options_.job_id, name, scheduler_actor_name(options_.job_id)});
}

void AspSchedulerActor::place() {
  if (finished_) return;
  std::vector<std::string> live;
  for (const auto& [id, node] : nodes_) {
    if (node.alive && !node.drained) live.push_back(id);
  }
  if (live.empty()) return;
  // Servers first, spread over the nodes (shard s on the s-th live node, round robin); a server
  // that died is restarted on a live node other than its last one when there is one.
  for (std::size_t s = 0; s < shards_.size(); ++s) {
    auto& shard = shards_[s];
    if (!shard.trainer.empty()) continue;
    std::string node = live[s % live.size()];
    spawn(node, true, static_cast<std::int32_t>(s));
  }
  // Workers: `slots` per node, up to max_workers.
  std::map<std::string, int> per_node;
  for (const auto& [name, t] : trainers_) {
    if (!t.server && !t.gone) ++per_node[t.node];
  }
  for (const auto& id : live) {
    while (live_workers() < options_.spec.elastic.max_workers &&
           per_node[id] < options_.spec.elastic.slots) {
      spawn(id, false, -1);
      ++per_node[id];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The batch plan

void AspSchedulerActor::replan(const std::string& why) {
  std::vector<std::string> workers;
  for (const auto& [name, t] : trainers_) {
    if (!t.server && !t.gone && t.ready) workers.push_back(name);
  }
  for (const auto& e : controller_.estimates()) {
    if (std::find(workers.begin(), workers.end(), e.key) == workers.end()) {
      controller_.remove_worker(e.key);
    }
  }
  for (const auto& name : workers) {
    if (!controller_.contains(name)) controller_.add_worker(name);
  }
  if (workers.empty()) {
    plan_.clear();
    return;
  }
  scheduler::BatchPlan plan;
  try {
    plan = controller_.plan();
  } catch (const std::exception& e) {
    fail(std::string("no feasible batch plan: ") + e.what());
    return;
  }
  last_plan_update_ = updates_;
  if (!plan.changed && !plan_.empty()) return;
  plan_.clear();
  // As BSP's plan events: arrays in worker order (`workers` names them).
  Json batches = Json::array();
  Json times = Json::array();
  for (const auto& name : workers) {
    plan_[name] = plan.batch_of(name);
    batches.push_back(plan_[name]);
    times.push_back(trainers_[name].compute_time_s);
    trainers_[name].since_plan = 0;
  }
  plan_version_ = plan.version;
  emit(Json{{"event", "plan"},
            {"step", updates_},
            {"version", plan.version},
            {"reason", why},
            {"workers", workers},
            {"batches", batches},
            {"compute_times", times},
            {"predicted_step_time", plan.predicted_step_time},
            {"persisted", plan.persisted}});
}

// ---------------------------------------------------------------------------------------------
// Inputs

void AspSchedulerActor::on_node_event(const NodeEvent& event) {
  if (finished_) return;
  const auto& info = event.node;
  if (event.event == "joined" || event.event == "alive") {
    auto& node = nodes_[info.id];
    const bool was_alive = node.alive;
    node = Node{info.name, info.system, true, node.drained || info.drained};
    if (!was_alive) place();
    return;
  }
  // `omnilearn node drain` for every job: a running job is also told directly (DrainNode),
  // which moves its trainers off; this keeps later placements off the node. `undrain`: usable
  // again.
  if (event.event == "drained" || event.event == "undrained") {
    auto& node = nodes_[info.id];
    node.name = info.name;
    node.system = info.system;
    node.alive = info.state == "alive" || info.state == "suspect";
    node.drained = event.event == "drained";
    if (!node.drained) place();
    return;
  }
  if (event.event == "dead" || event.event == "left") {
    auto it = nodes_.find(info.id);
    if (it == nodes_.end()) return;
    it->second.alive = false;
    std::vector<std::string> lost;
    for (const auto& [name, t] : trainers_) {
      if (t.node == info.id && !t.gone) lost.push_back(name);
    }
    for (const auto& name : lost) trainer_gone(name, "node " + info.name + " " + event.event);
    place();
  }
}

void AspSchedulerActor::on_hello(const runtime::Envelope& message, const TrainerHello& hello) {
  TrainerHelloReply reply;
  auto it = trainers_.find(hello.trainer);
  if (finished_ || it == trainers_.end() || it->second.gone) {
    reply.error = finished_ ? "the job has finished" : "unknown trainer";
    this->reply(message, reply);
    return;
  }
  auto& t = it->second;
  t.system = message.from.system;
  t.hello_at = Clock::now();
  reply.accepted = true;
  reply.job_toml = options_.job_toml;
  reply.source_name = options_.source_name;
  reply.checkpoint_dir = options_.spec.checkpoint.dir.empty()
                             ? (std::filesystem::path(options_.run_dir) / "checkpoints").string()
                             : options_.spec.checkpoint.dir;
  reply.collective_timeout_ms = static_cast<std::int32_t>(options_.heartbeat_timeout.count());
  reply.shards = static_cast<std::int32_t>(shards_.size());
  if (t.server) {
    const auto& shard = shards_[static_cast<std::size_t>(t.shard)];
    reply.role = "server";
    reply.shard = t.shard;
    reply.incarnation = t.incarnation;
    reply.resume_checkpoint = t.incarnation > 0 ? shard.checkpoint : "";
    reply.resume_version = reply.resume_checkpoint.empty() ? -1 : shard.checkpoint_version;
  } else {
    reply.role = "worker";
    if (t.worker_id == 0) t.worker_id = next_worker_id_++;
    reply.worker_id = t.worker_id;
    if (!t.ready) {
      t.ready = true;
      membership_log_.push_back("+" + hello.trainer);
      emit(Json{{"event", "worker_joined"},
                {"trainer", hello.trainer},
                {"node", nodes_[t.node].name},
                {"worker", t.worker_id}});
      replan("worker joined");
    }
  }
  this->reply(message, reply);
}

void AspSchedulerActor::on_server_ready(const runtime::Envelope& message,
                                        const AspServerReady& ready) {
  if (message.correlation) reply(message, SimpleReply{true, ""});
  auto it = trainers_.find(ready.trainer);
  if (finished_ || it == trainers_.end() || it->second.gone || !it->second.server) return;
  if (ready.shard < 0 || ready.shard >= static_cast<std::int32_t>(shards_.size())) return;
  auto& shard = shards_[static_cast<std::size_t>(ready.shard)];
  if (shard.trainer != ready.trainer) return;
  it->second.ready = true;
  shard.ready = true;
  shard.endpoint = ready.endpoint;
  shard.incarnation = ready.incarnation;
  shard.version = ready.version;
  if (ready.parameters > 0) parameters_ = ready.parameters;
  if (!dealer_ && ready.dataset_size > 0) {
    const std::int64_t epochs = options_.spec.train.steps > 0 ? 0 : options_.spec.train.epochs;
    dealer_.emplace(ready.dataset_size, options_.spec.data.seed, epochs);
    fences_.emplace(static_cast<std::int32_t>(shards_.size()));
  }
  // A restarted server knows no fences: every gone worker is fenced off it again before any
  // worker learns its endpoint (deals name it only after this turn).
  for (const asp::WorkerId worker : gone_workers_) {
    tell(runtime::ActorAddress{message.from.system, kAspServerActor},
         AspFence{options_.job_id, ready.shard, worker, asp::kWholeWorker});
  }
  // Fence rounds its dead predecessor never answered (or that found the shard down) are asked
  // of it: resumed from a checkpoint, it answers for the batches the checkpoint holds.
  if (fences_ && dealer_) {
    for (const asp::FenceAsk& again : fences_->waiting_on(ready.shard)) {
      fence_shard(again.round, ready.shard, again.worker, again.through);
    }
  }
  emit(Json{{"event", "server_ready"},
            {"trainer", ready.trainer},
            {"node", nodes_[it->second.node].name},
            {"shard", ready.shard},
            {"endpoint", ready.endpoint},
            {"incarnation", ready.incarnation},
            {"version", ready.version},
            {"parameters", ready.parameters}});
  if (ready.incarnation > 0) {
    // Updates the dead incarnation applied past the checkpoint this one resumed from, as far
    // as the workers' push replies told so far (the summary counts replies that come later,
    // and bounds the pushes that got none).
    shard.ledger.resumed(ready.incarnation, ready.version);
    emit(Json{{"event", "server_recovered"},
              {"updates_lost", shard.ledger.lost_at(ready.incarnation)},
              {"shard", ready.shard},
              {"trainer", ready.trainer},
              {"incarnation", ready.incarnation},
              {"resumed_at", ready.version},
              {"resumed_from", ready.resumed_from},
              {"checkpoint", shard.checkpoint}});
  }
  if (state_ == "pending" && servers_ready()) state_ = "running";
  publish_info();
}

std::string AspSchedulerActor::head_copy_path(std::int32_t shard) const {
  return (std::filesystem::path(options_.run_dir) / "checkpoints" /
          fmt::format("server-shard{}.head-copy.pt", shard))
      .string();
}

void AspSchedulerActor::on_server_report(const runtime::Envelope& message,
                                         const AspServerReport& report) {
  if (report.shard < 0 || report.shard >= static_cast<std::int32_t>(shards_.size())) return;
  auto& shard = shards_[static_cast<std::size_t>(report.shard)];
  if (shard.trainer != report.trainer) return;
  if (!report.checkpoint.empty() && message.attachments.size() == 1 &&
      report.version > shard.head_copy_version) {
    // Kept on the head, so that a server restarted on any node finds its state.
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(head_copy_path(report.shard)).parent_path(), ec);
    const auto& bytes = message.attachments[0];
    try {
      runtime::write_file_atomically(head_copy_path(report.shard),
                                     std::string_view(bytes.data(), bytes.size()));
      shard.head_copy_version = report.version;
    } catch (const runtime::AtomicWriteError& e) {
      spdlog::warn("job {}: cannot keep shard {}'s checkpoint: {}", options_.job_id, report.shard,
                   e.what());
    }
  }
  shard.version = std::max(shard.version, report.version);
  shard.ledger.replied(shard.incarnation, report.version);
  // The server's own count (pushes computed on its dead predecessor's later versions) is a
  // lower bound of what the scheduler counted at the restart; kept for the summary.
  shard.lost_this = std::max(shard.lost_this, report.updates_lost);
  if (report.fenced > shard.fenced_this) {
    shard.pushes_fenced += report.fenced - shard.fenced_this;
    shard.fenced_this = report.fenced;
  }
  if (!report.checkpoint.empty() && report.version >= shard.checkpoint_version) {
    shard.checkpoint = report.checkpoint;
    shard.checkpoint_version = report.version;
    emit(Json{{"event", "checkpoint"},
              {"shard", report.shard},
              {"trainer", report.trainer},
              {"version", report.version},
              {"step", updates_},
              {"path", report.checkpoint}});
  }
}

std::int64_t AspSchedulerActor::outstanding_batches() const {
  if (!dealer_) return 0;
  std::int64_t n = 0;
  for (const auto& [name, t] : trainers_) {
    if (!t.server && t.worker_id > 0) n += dealer_->outstanding_batches(t.worker_id);
  }
  return n;
}

std::int64_t AspSchedulerActor::total_steps() const {
  if (options_.spec.train.steps > 0) return options_.spec.train.steps;
  if (!dealer_) return 0;
  // Epochs: an estimate at the mean batch of the plan in force (B / n per update).
  const double n = std::max<double>(1.0, static_cast<double>(plan_.size()));
  const double per_update = static_cast<double>(options_.spec.train.global_batch) / n;
  return static_cast<std::int64_t>(std::ceil(
      static_cast<double>(options_.spec.train.epochs * dealer_->dataset_size()) / per_update));
}

bool AspSchedulerActor::training_done() const {
  if (!dealer_) return false;
  if (options_.spec.train.steps > 0) return updates_ >= options_.spec.train.steps;
  return dealer_->finished();
}

void AspSchedulerActor::on_deal(const runtime::Envelope& message, const AspDealRequest& request) {
  AspDealReply reply;
  auto it = trainers_.find(request.trainer);
  if (finished_) {
    reply.action = AspDealReply::kDone;
    this->reply(message, reply);
    return;
  }
  // How far each server got (its push replies), even from a worker declared gone: a restart
  // loses what lies past its checkpoint. A maximum: a request sent again counts once.
  for (std::size_t s = 0;
       s < shards_.size() && s < request.versions.size() && s < request.incarnations.size(); ++s) {
    if (request.incarnations[s] >= 0) {
      shards_[s].ledger.replied(request.incarnations[s], request.versions[s]);
    }
    if (request.incarnations[s] == shards_[s].incarnation) {
      shards_[s].version = std::max(shards_[s].version, request.versions[s]);
    }
  }
  if (it == trainers_.end() || it->second.gone || it->second.server || !it->second.ready) {
    reply.action = AspDealReply::kDone;
    reply.error = "unknown worker";
    this->reply(message, reply);
    return;
  }
  auto& t = it->second;
  const asp::WorkerId worker = t.worker_id;
  if (dealer_ && request.failed_batch != 0) {
    // A server did not answer: the batch's samples are dealt again, for the shards that did not
    // take its push (a shard that applied or dropped it answered with its incarnation), so
    // that no shard gets two gradients of the same samples. Counted once: a request sent again
    // (its reply was lost) finds the batch no longer outstanding.
    // A shard that gave no answer may still apply the push late: the live incarnations among
    // them are fenced first, and the batch settles once they answered (on_settled).
    std::vector<std::int32_t> taken, ask;
    bool dropped = request.dropped;
    for (std::size_t s = 0; s < request.incarnations.size() && s < shards_.size(); ++s) {
      if (request.incarnations[s] >= 0) taken.push_back(static_cast<std::int32_t>(s));
    }
    const auto held = dealer_->outstanding_ids(worker);
    const bool first_report =
        !fences_->fencing(request.failed_batch) &&
        std::find(held.begin(), held.end(), request.failed_batch) != held.end();
    if (first_report) {
      ++failed_batches_;
      for (std::size_t s = 0; s < shards_.size() && s < request.unanswered.size(); ++s) {
        if (request.unanswered[s] < 0) continue;
        if (request.unanswered[s] == shards_[s].incarnation && shards_[s].ready) {
          // Counted even though it lives: if it dies before answering and its restart resumes
          // from a checkpoint without the push, the push may have been an update lost with it
          // (the ledger counts only incarnations since restarted).
          shards_[s].ledger.unanswered(request.unanswered[s]);
          ask.push_back(static_cast<std::int32_t>(s));
          continue;
        }
        // Its incarnation is gone; if it was drained, it handed over what it took. Otherwise
        // the incarnation that resumes the shard is asked (at once, or when it listens): its
        // checkpoint may hold the push.
        bool inherited = false;
        for (const asp::TakenBatch& b :
             with_inherited(static_cast<std::int32_t>(s), worker, {})) {
          if (b.batch != request.failed_batch) continue;
          inherited = true;
          taken.push_back(static_cast<std::int32_t>(s));
          dropped = dropped || !b.applied;
        }
        if (!inherited) {
          shards_[s].ledger.unanswered(request.unanswered[s]);
          ask.push_back(static_cast<std::int32_t>(s));
        }
      }
      const asp::FenceStart fence = fences_->push_failed(*dealer_, worker, request.failed_batch,
                                                         taken, dropped, ask);
      if (fence.ask) send_fence(*fence.ask);
      on_settled(fence.settled);
      if (finished_) return;
    }
  }
  if (dealer_ && request.pushed_batch != 0) {
    const asp::Receipt receipt = dealer_->push(worker, request.pushed_batch);
    if (receipt == asp::Receipt::kAccepted) {
      ++pushes_;
      stats_.record(worker, request.staleness, request.applied);
      if (request.applied) {
        ++updates_;
        ++interval_updates_;
        ++t.updates;
        last_progress_ = Clock::now();
        loss_ = request.loss;
      }
      if (request.dropped) ++dropped_stale_;
      t.batch = request.batch;
      t.compute_time_s = request.compute_time_s;
      t.update_time_s = request.update_time_s;
      if (!t.first_push_at) {
        t.first_push_at = Clock::now();
        emit(Json{
            {"event", "first_push"},
            {"trainer", request.trainer},
            {"worker", worker},
            {"step", updates_},
            {"since_hello_s", t.hello_at ? seconds_between(*t.hello_at, *t.first_push_at) : -1.0}});
      }
      // The controller balances time per update (after the plan's cool-down pushes).
      if (++t.since_plan > options_.spec.controller.cooldown_steps && request.compute_time_s > 0 &&
          plan_.count(request.trainer) && request.batch == plan_[request.trainer]) {
        controller_.observe(request.trainer, request.batch, request.compute_time_s);
      }
      if (updates_ - last_plan_update_ >=
          options_.spec.controller.interval_steps * std::max<std::int64_t>(1, plan_.size())) {
        replan("interval");
        if (finished_) return;
      }
    } else {
      ++duplicates_;
    }
  }

  if (request.trainer == evaluator_ && (request.evaluated || !request.eval_error.empty())) {
    on_evaluated(request);
  }

  if (training_done()) {
    if (finisher_.empty() || trainers_[finisher_].gone || finisher_ == request.trainer) {
      finisher_ = request.trainer;
      reply.action = AspDealReply::kFinish;
      for (const auto& s : shards_) reply.servers.push_back(s.endpoint);
      if (!servers_ready()) {
        finisher_.clear();
        reply.action = AspDealReply::kWait;
        reply.wait_ms = 200;
      } else if (!finishing_announced_) {
        finishing_announced_ = true;
        last_progress_ = Clock::now();  // the finish has as long as an update would
        emit(Json{{"event", "finishing"}, {"trainer", request.trainer}, {"step", updates_}});
      }
    } else {
      reply.action = AspDealReply::kWait;
      reply.wait_ms = 500;
    }
    this->reply(message, reply);
    return;
  }
  if (!dealer_ || !servers_ready() || !plan_.count(request.trainer)) {
    reply.action = AspDealReply::kWait;
    reply.wait_ms = 100;
    this->reply(message, reply);
    return;
  }
  if (next_eval_ > 0 && evaluator_.empty() && updates_ >= next_eval_) {
    // The next worker to ask evaluates (in ASP the fast ones ask most often); one at a time,
    // and a count passed while one ran is not made up for.
    const std::int64_t every = options_.spec.train.eval_every;
    evaluator_ = request.trainer;
    eval_dealt_at_ = updates_;
    next_eval_ = (updates_ / every + 1) * every;
    reply.action = AspDealReply::kEvaluate;
    for (const auto& s : shards_) reply.servers.push_back(s.endpoint);
    this->reply(message, reply);
    return;
  }
  if (options_.spec.train.steps > 0 &&
      updates_ + outstanding_batches() >= options_.spec.train.steps) {
    reply.action = AspDealReply::kWait;  // the last updates are out; wait for their pushes
    reply.wait_ms = 50;
    this->reply(message, reply);
    return;
  }
  asp::DealtBatch batch = dealer_->pull(worker, plan_[request.trainer]);
  if (batch.empty()) {
    reply.action = AspDealReply::kWait;  // the last epoch is dealt; its pushes are out
    reply.wait_ms = 50;
    this->reply(message, reply);
    return;
  }
  reply.action = AspDealReply::kBatch;
  reply.batch_id = batch.id;
  reply.epoch = batch.epoch;
  reply.indices = std::move(batch.indices);
  reply.shards_done = std::move(batch.shards_done);
  for (const auto& s : shards_) reply.servers.push_back(s.endpoint);
  reply.global_batch = options_.spec.train.global_batch;
  reply.workers = static_cast<std::int32_t>(plan_.size());
  this->reply(message, reply);
}

void AspSchedulerActor::on_evaluated(const AspDealRequest& request) {
  evaluator_.clear();
  if (!request.evaluated) {
    emit(Json{{"event", "eval_skipped"},
              {"trainer", request.trainer},
              {"step", updates_},
              {"reason", request.eval_error}});
    return;
  }
  ++evaluations_;
  last_eval_accuracy_ = request.eval_accuracy;
  write_interval(true, Json{{"test_accuracy", request.eval_accuracy},
                            {"test_loss", request.eval_loss},
                            {"eval_version", request.eval_version},
                            {"eval_dealt_at", eval_dealt_at_},
                            {"eval_time_s", request.eval_time_s},
                            {"eval_trainer", request.trainer}});
}

void AspSchedulerActor::on_fetch_checkpoint(const runtime::Envelope& message,
                                            const AspFetchCheckpoint& fetch) {
  AspCheckpointReply r;
  auto it = trainers_.find(fetch.trainer);
  if (it == trainers_.end() || !it->second.server || it->second.shard != fetch.shard ||
      fetch.shard < 0 || fetch.shard >= static_cast<std::int32_t>(shards_.size())) {
    r.error = "not a server of this job";
    reply(message, r);
    return;
  }
  const auto& shard = shards_[static_cast<std::size_t>(fetch.shard)];
  if (shard.head_copy_version == 0) {
    r.error = "no checkpoint of this shard reached the head";
    reply(message, r);
    return;
  }
  std::ifstream in(head_copy_path(fetch.shard), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad() || bytes.empty()) {
    r.error = "cannot read " + head_copy_path(fetch.shard);
    reply(message, r);
    return;
  }
  r.ok = true;
  r.version = shard.head_copy_version;
  auto envelope = reply_envelope(system(), message, runtime::kind_of<AspCheckpointReply>(),
                                 runtime::pack_payload(r));
  envelope.attachments.emplace_back(std::move(bytes));
  system().send(std::move(envelope));
}

void AspSchedulerActor::on_finished(const runtime::Envelope& message, const AspFinished& done) {
  if (message.correlation) reply(message, SimpleReply{true, ""});
  if (finished_ || done.trainer != finisher_) return;
  if (!done.ok) {
    last_trainer_error_ = done.trainer + ": " + done.error;
    fail("the final evaluation failed: " + done.error);
    return;
  }
  final_accuracy_ = done.test_accuracy;
  final_loss_ = done.test_loss;
  final_checkpoint_ = done.checkpoint;
  auto it = trainers_.find(done.trainer);
  if (it != trainers_.end()) final_checkpoint_node_ = nodes_[it->second.node].name;
  finish("succeeded", "");
}

void AspSchedulerActor::on_trainer_exited(const TrainerExited& exited) {
  if (finished_) return;
  auto it = trainers_.find(exited.trainer);
  if (it == trainers_.end()) return;
  if (exited.exit_code != 0 && !exited.last_error.empty()) {
    last_trainer_error_ = exited.trainer + ": " + exited.last_error;
  }
  emit(Json{{"event", "trainer_exited"},
            {"trainer", exited.trainer},
            {"node", nodes_[it->second.node].name},
            {"exit_code", exited.exit_code},
            {"reason", exited.reason},
            {"last_error", exited.last_error}});
  if (exited.exit_code == scheduler::kTrainerExitBadInput) {
    // The job's own files or model are wrong: every retry would fail the same way.
    fail(fmt::format("trainer {}: {}", exited.trainer,
                     exited.last_error.empty() ? exited.reason : exited.last_error));
    return;
  }
  trainer_gone(exited.trainer, exited.reason.empty() ? "exited" : exited.reason);
  place();
}

void AspSchedulerActor::trainer_gone(const std::string& name, const std::string& why) {
  auto it = trainers_.find(name);
  if (it == trainers_.end() || it->second.gone) return;
  auto& t = it->second;
  t.gone = true;
  const bool started = t.server ? t.ready : t.first_push_at.has_value();
  if (!started && !finished_) {
    // A trainer that cannot start (bad data on its node, a model too big for the shards, ...)
    // would otherwise be restarted forever. Twice the trainers the job can have now: its
    // max_workers may be far above the workers the cluster holds (by default it is all of them).
    int live_nodes = 0;
    for (const auto& [id, node] : nodes_) live_nodes += node.alive && !node.drained;
    const int workers =
        std::min(options_.spec.elastic.max_workers, live_nodes * options_.spec.elastic.slots);
    const int limit = std::max<int>(5, 2 * (static_cast<int>(shards_.size()) + workers));
    if (++start_failures_ >= limit) {
      fail(
          fmt::format("trainers cannot start: {} ended before they served or pushed (last: {}: "
                      "{})",
                      start_failures_, name, why));
      return;
    }
  }
  if (t.server) {
    auto& shard = shards_[static_cast<std::size_t>(t.shard)];
    if (shard.trainer == name) {
      shard.trainer.clear();
      shard.ready = false;
      shard.handing_over = false;
      shard.endpoint.clear();
      ++shard.restarts;
      shard.incarnation = t.incarnation + 1;
      shard.lost_this = 0;
      shard.fenced_this = 0;
      emit(Json{{"event", "server_gone"},
                {"shard", t.shard},
                {"trainer", name},
                {"reason", why},
                {"version", shard.version},
                {"checkpoint_version", shard.checkpoint_version}});
      if (shard.restarts > kMaxServerRestarts) {
        fail(fmt::format("parameter server shard {} died {} times (last: {})", t.shard,
                         shard.restarts, why));
        return;
      }
      // Fences it was asked and did not answer stay open: its restart, resumed from a
      // checkpoint, answers them for what that checkpoint holds (on_server_ready asks again).
      // Its silence is not "not taken": a batch it took before the checkpoint it resumes from
      // would be dealt to it twice.
    }
    return;
  }
  // Its batches are fenced off the servers before they are dealt again: it may still be
  // running (a frozen agent, a lost network) or have pushed just before it died.
  std::int64_t held = 0;
  asp::FenceStart fence;
  if (dealer_ && t.worker_id > 0) {
    held = dealer_->outstanding_samples(t.worker_id);
    gone_workers_.insert(t.worker_id);
    fence = fences_->worker_gone(*dealer_, t.worker_id);
  }
  if (t.ready) membership_log_.push_back("-" + name);
  emit(Json{{"event", "trainer_gone"},
            {"trainer", name},
            {"reason", why},
            {"samples_held", held}});
  if (fence.ask) send_fence(*fence.ask);
  on_settled(fence.settled);
  if (finished_) return;
  if (finisher_ == name) {
    finisher_.clear();
    finishing_announced_ = false;
  }
  if (evaluator_ == name) evaluator_.clear();  // the next deal request evaluates instead
  if (t.ready) replan("worker left");
}

void AspSchedulerActor::hand_over(const std::string& name) {
  const Trainer& t = trainers_.at(name);
  const std::int32_t s = t.shard;
  const std::int64_t incarnation = t.incarnation;
  const std::string system = t.system;
  const auto asked_at = Clock::now();
  // Deals wait until the shard serves again elsewhere: every push to it would be refused.
  shards_[static_cast<std::size_t>(s)].handing_over = true;
  ask(runtime::ActorAddress{system, kAspServerActor}, AspHandOver{options_.job_id, s},
      kHandOverTimeout,
      [this, name, s, incarnation, system, asked_at](runtime::AskResult result) {
        if (finished_) return;
        const auto r = result.as<AspHandOverReply>();
        auto& shard = shards_[static_cast<std::size_t>(s)];
        // Only while it is still the shard's live incarnation: if its node died meanwhile, a
        // successor already resumed from an older checkpoint, and this one's file must not be
        // taken for the shard's newest.
        const bool current = shard.trainer == name && shard.incarnation == incarnation;
        if (r && r->ok) {
          shard.ledger.replied(r->incarnation, r->version);
          if (current && r->incarnation == incarnation) {
            const std::size_t n = std::min({r->taken_workers.size(), r->taken_batches.size(),
                                            r->taken_applied.size()});
            for (std::size_t i = 0; i < n; ++i) {
              shard.inherited[r->taken_workers[i]].push_back(
                  asp::TakenBatch{r->taken_batches[i], r->taken_applied[i]});
            }
            shard.version = std::max(shard.version, r->version);
            if (r->version >= shard.checkpoint_version) {  // its report usually came first
              shard.checkpoint = r->checkpoint;
              shard.checkpoint_version = r->version;
            }
          }
        } else {
          spdlog::warn("job {}: shard {} did not hand over ({}): it restarts from its last "
                       "checkpoint", options_.job_id, s, r ? r->error : result.error);
        }
        emit(Json{{"event", "server_handed_over"},
                  {"shard", s},
                  {"trainer", name},
                  {"ok", r && r->ok},
                  {"version", r ? r->version : -1},
                  {"error", r ? r->error : result.error},
                  {"seconds", seconds_between(asked_at, Clock::now())}});
        const auto t = trainers_.find(name);
        // Gone meanwhile (its node died): trainer_gone already restarted the shard.
        if (t == trainers_.end() || t->second.gone || t->second.incarnation != incarnation) return;
        tell(runtime::ActorAddress{system, "trainer"}, StopTrainer{options_.job_id, "drained"});
        trainer_gone(name, "drained");
        if (!finished_) place();  // its restart, now rather than at its exit
      });
}

void AspSchedulerActor::send_fence(const asp::FenceAsk& fence) {
  ++fence_counters_.rounds;
  for (const std::int32_t s : fence.shards) fence_shard(fence.round, s, fence.worker, fence.through);
}

void AspSchedulerActor::fence_shard(std::uint64_t round, std::int32_t s, asp::WorkerId worker,
                                    std::uint64_t through) {
  const auto& shard = shards_[static_cast<std::size_t>(s)];
  const auto server = trainers_.find(shard.trainer);
  const std::int64_t incarnation = shard.incarnation;
  if (!shard.ready || server == trainers_.end() || server->second.system.empty()) {
    return;  // down: on_server_ready asks the incarnation that resumes it
  }
  ask(runtime::ActorAddress{server->second.system, kAspServerActor},
      AspFence{options_.job_id, s, worker, through}, kFenceTimeout,
      [this, round, s, worker, through, incarnation](runtime::AskResult result) {
        if (finished_ || !fences_ || !dealer_) return;
        auto& shard = shards_[static_cast<std::size_t>(s)];
        const auto r = result.as<AspFenceReply>();
        if (r && r->ok && r->taken.size() == r->applied.size()) {
          std::vector<asp::TakenBatch> taken;
          for (std::size_t i = 0; i < r->taken.size(); ++i) {
            taken.push_back(asp::TakenBatch{r->taken[i], r->applied[i]});
          }
          shard.ledger.replied(r->incarnation, r->version);
          // An incarnation declared gone since (dead, or cut off and still serving) answers for
          // a state the shard no longer serves with: the one that resumes it is asked instead
          // (on_server_ready), and answers for its checkpoint.
          if (r->incarnation != shard.incarnation) return;
          on_settled(fences_->answer(*dealer_, round, s, with_inherited(s, worker, taken)));
          return;
        }
        ++fence_counters_.no_answer;
        spdlog::warn("job {}: shard {} did not answer a fence: {}", options_.job_id, s,
                     r ? r->error : result.error);
        if (!r) {
          // Slow, not gone (a long checkpoint write, a loaded machine): its turns run in order,
          // so a push of the batch it still holds would be applied before the fence and said
          // taken in the answer. Counting it as not taken now could deal the samples twice:
          // ask again. Gone: the incarnation that resumes it is asked when it listens
          // (on_server_ready), or was asked already if it listens now.
          if (shard.incarnation == incarnation && shard.ready) fence_shard(round, s, worker, through);
          return;
        }
        // Answered with an error (a misaddressed fence): not taken.
        on_settled(fences_->answer(*dealer_, round, s, with_inherited(s, worker, {})));
      });
}

std::vector<asp::TakenBatch> AspSchedulerActor::with_inherited(
    std::int32_t s, asp::WorkerId worker, std::vector<asp::TakenBatch> taken) const {
  const auto& inherited = shards_[static_cast<std::size_t>(s)].inherited;
  if (const auto it = inherited.find(worker); it != inherited.end()) {
    taken.insert(taken.end(), it->second.begin(), it->second.end());
  }
  return taken;
}

AspSchedulerActor::Trainer* AspSchedulerActor::worker_trainer(asp::WorkerId worker) {
  for (auto& [name, t] : trainers_) {
    if (!t.server && t.worker_id == worker) return &t;
  }
  return nullptr;
}

void AspSchedulerActor::on_settled(const std::vector<asp::SettledBatch>& settled) {
  for (const auto& b : settled) {
    if (b.outcome == asp::EpochDealer::Settled::kNotOutstanding) continue;
    const bool taken = b.outcome == asp::EpochDealer::Settled::kAccepted;
    if (taken) {
      // Every shard took it before its fence: the push counts, as if its worker had said so.
      if (b.asked) ++fence_counters_.taken;
      ++pushes_;
      if (b.applied) {
        ++updates_;
        ++interval_updates_;
        last_progress_ = Clock::now();
        if (Trainer* t = worker_trainer(b.worker)) ++t->updates;
      } else {
        ++dropped_stale_;
      }
    } else if (b.asked) {
      ++fence_counters_.dealt_again;
    }
    if (!b.asked) continue;  // nothing was fenced: every shard had answered, or was gone
    emit(Json{{"event", "batch_fenced"},
              {"worker", b.worker},
              {"batch", b.batch},
              {"samples", b.samples},
              {"outcome", taken ? "taken" : "dealt_again"},
              {"step", updates_}});
  }
}

void AspSchedulerActor::tick() {
  if (finished_) return;
  const auto now = Clock::now();
  // Trainers that never said hello (or servers that never listened) within the spawn timeout.
  std::vector<std::string> late;
  for (const auto& [name, t] : trainers_) {
    if (t.gone) continue;
    const bool started = t.server ? t.ready : t.hello_at.has_value();
    if (!started && now - t.spawned_at > options_.spawn_timeout) late.push_back(name);
  }
  for (const auto& name : late) {
    const auto& t = trainers_[name];
    if (!t.system.empty()) {
      tell(runtime::ActorAddress{t.system, "trainer"}, StopTrainer{options_.job_id, "too late"});
    }
    trainer_gone(name, "did not start within the spawn timeout");
  }
  if (!late.empty()) place();
  if (finished_) return;
  // Bounded: too few workers for the grace period, or no update for long, fails the job.
  std::int64_t ready = 0;
  for (const auto& [name, t] : trainers_) ready += (!t.server && !t.gone && t.ready) ? 1 : 0;
  const auto grace = std::chrono::duration<double>(options_.spec.elastic.grace_period_s);
  if (state_ == "running" && ready < options_.spec.elastic.min_workers) {
    if (!too_few_since_) too_few_since_ = now;
    if (now - *too_few_since_ > grace) {
      fail(fmt::format("fewer than min_workers = {} workers for more than {} s",
                       options_.spec.elastic.min_workers, options_.spec.elastic.grace_period_s));
      return;
    }
  } else {
    too_few_since_.reset();
  }
  if (finisher_.empty() &&
      now - last_progress_ >
          options_.spawn_timeout + std::chrono::duration_cast<std::chrono::milliseconds>(grace)) {
    fail(fmt::format("no update for {:.0f} s", seconds_between(last_progress_, now)));
    return;
  }
  if (now - interval_started_ >= kInterval) write_interval(false);
  tick_timer_ = after(kTick, [this] { tick(); });
}

void AspSchedulerActor::write_interval(bool force, const Json& eval) {
  const auto now = Clock::now();
  const double seconds = seconds_between(interval_started_, now);
  asp::StalenessSummary s = stats_.take_interval();
  interval_started_ = now;
  const std::int64_t updates = interval_updates_;
  interval_updates_ = 0;
  if (s.pushes == 0 && !force) return;
  Json workers = Json::object();
  for (const auto& [name, t] : trainers_) {
    if (t.server || t.worker_id == 0) continue;
    auto n = s.updates.find(t.worker_id);
    workers[name] = Json{{"worker", t.worker_id},
                         {"updates", n == s.updates.end() ? 0 : n->second},
                         {"batch", t.batch},
                         {"compute_time_s", t.compute_time_s},
                         {"update_time_s", t.update_time_s},
                         {"live", !t.gone}};
  }
  Json event{{"event", "asp_interval"},
            {"step", updates_},
            {"total", total_steps()},
            {"epoch", dealer_ ? dealer_->epochs_completed() : 0},
            {"loss", loss_},
            {"interval_s", seconds},
            {"updates", updates},
            {"updates_per_s", seconds > 0 ? static_cast<double>(updates) / seconds : 0.0},
            {"staleness", Json{{"mean", s.mean}, {"p95", s.p95}, {"max", s.max}}},
            {"dropped_stale", s.dropped},
            {"workers", workers}};
  if (eval.is_object()) event.update(eval);
  emit(event);
  if (updates_ > 0) publish_info();
}

// ---------------------------------------------------------------------------------------------
// The end

void AspSchedulerActor::finish(const std::string& state, const std::string& reason) {
  if (finished_) return;
  write_interval(false);
  finished_ = true;
  state_ = state;
  cancel_timer(tick_timer_);
  std::string why = reason;
  if (state == "failed" && !last_trainer_error_.empty() &&
      why.find(last_trainer_error_) == std::string::npos) {
    why += " (last trainer error: " + last_trainer_error_ + ")";
  }
  reason_ = why;
  if (state == "failed") {
    spdlog::error("job {} failed: {}", options_.job_id, why);
  } else {
    spdlog::info("job {} {} {}", options_.job_id, state, why);
  }
  // Every trainer goes: the job's resources are its processes.
  for (auto& [name, t] : trainers_) {
    if (!t.system.empty() && !t.gone) {
      tell(runtime::ActorAddress{t.system, "trainer"},
           StopTrainer{options_.job_id, "job " + state});
    }
  }
  emit(Json{{"event", "finished"}, {"status", state}, {"reason", why}, {"step", updates_}});
  events_file_.close();
  try {
    runtime::write_file_atomically(std::filesystem::path(options_.run_dir) / "summary.json",
                                   summary_json() + "\n");
  } catch (const runtime::AtomicWriteError& e) {
    spdlog::warn("job {}: {}", options_.job_id, e.what());
  }
  tell(runtime::ActorAddress{"", kRegistryActor}, UnsubscribeNodes{});
  publish_info();
}

JobInfo AspSchedulerActor::info() const {
  JobInfo info;
  info.id = options_.job_id;
  info.name = options_.spec.name;
  info.state = state_;
  info.reason = reason_;
  info.step = updates_;
  info.total_steps = total_steps();
  info.loss = loss_;
  info.checkpoint = final_checkpoint_;
  info.checkpoint_node = final_checkpoint_node_;
  std::int32_t rank = 0;
  for (const auto& [name, t] : trainers_) {
    if (t.server || t.gone || !t.ready) continue;
    JobWorkerInfo w;
    auto node = nodes_.find(t.node);
    w.node = node == nodes_.end() ? "" : node->second.name;
    w.actor = name;
    w.rank = rank++;
    auto b = plan_.find(name);
    w.batch = b == plan_.end() ? 0 : b->second;
    w.samples_per_s = t.compute_time_s > 0 ? t.batch / t.compute_time_s : 0;
    w.step_time_s = t.update_time_s;
    info.workers.push_back(w);
  }
  return info;
}

void AspSchedulerActor::publish_info() {
  if (options_.jobs.empty()) return;
  tell(options_.jobs,
       JobStatusReply{true, info(), {}, 0, finished_, finished_ ? summary_json() : std::string()});
}

std::string AspSchedulerActor::summary_json() const {
  const asp::StalenessSummary total = stats_.total();
  Json workers = Json::array();
  for (const auto& [name, t] : trainers_) {
    if (t.server || t.worker_id == 0) continue;
    auto node = nodes_.find(t.node);
    auto b = plan_.find(name);
    workers.push_back({{"name", name},
                       {"node", node == nodes_.end() ? "" : node->second.name},
                       {"worker", t.worker_id},
                       {"updates", t.updates},
                       {"final_batch", b == plan_.end() ? t.batch : b->second},
                       {"compute_time_s", t.compute_time_s},
                       {"update_time_s", t.update_time_s},
                       {"samples_per_s", t.compute_time_s > 0 ? t.batch / t.compute_time_s : 0.0},
                       {"live", !t.gone}});
  }
  Json servers = Json::array();
  std::int64_t lost = 0, lost_at_most = 0;
  for (std::size_t s = 0; s < shards_.size(); ++s) {
    const auto& shard = shards_[s];
    lost += shard.ledger.lost();
    lost_at_most += shard.ledger.lost_at_most();
    servers.push_back({{"shard", s},
                       {"trainer", shard.trainer},
                       {"incarnation", shard.incarnation},
                       {"version", shard.version},
                       {"restarts", shard.restarts},
                       {"updates_lost", shard.ledger.lost()},
                       {"updates_lost_at_most", shard.ledger.lost_at_most()},
                       {"pushes_unanswered", shard.ledger.unanswered_before_restarts()},
                       {"pushes_fenced", shard.pushes_fenced},
                       {"checkpoint", shard.checkpoint},
                       {"checkpoint_version", shard.checkpoint_version},
                       {"head_copy", shard.head_copy_version > 0
                                         ? Json(head_copy_path(static_cast<std::int32_t>(s)))
                                         : Json()},
                       {"head_copy_version", shard.head_copy_version}});
  }
  Json dealer = nullptr;
  if (dealer_) {
    const auto& c = dealer_->counters();
    dealer = {{"dataset_size", dealer_->dataset_size()},
              {"epochs_completed", dealer_->epochs_completed()},
              {"batches_dealt", c.batches_dealt},
              {"samples_dealt", c.samples_dealt},
              {"samples_reissued", c.samples_reissued},
              {"batches_accepted", c.batches_accepted},
              {"samples_accepted", c.samples_accepted},
              {"duplicates", c.duplicates},
              {"unknown", c.unknown},
              {"partial_pushes", c.partial_pushes}};
  }
  Json checkpoints = Json::array();
  if (!final_checkpoint_.empty()) {
    checkpoints.push_back(
        {{"step", updates_}, {"path", final_checkpoint_}, {"node", final_checkpoint_node_}});
  }
  const auto now = Clock::now();
  return Json{{"job_id", options_.job_id},
              {"name", options_.spec.name},
              {"mode", "asp"},
              {"status", state_},
              {"reason", reason_},
              {"steps", updates_},
              {"updates", updates_},
              {"total_steps", total_steps()},
              {"epochs", dealer_ ? dealer_->epochs_completed() : 0},
              {"wall_time_s", seconds_between(started_at_, now)},
              {"final_test_accuracy", final_accuracy_ >= 0 ? Json(final_accuracy_) : Json()},
              {"final_test_loss", final_loss_ >= 0 ? Json(final_loss_) : Json()},
              {"final_train_loss", loss_},
              {"checkpoint", final_checkpoint_},
              {"checkpoint_node", final_checkpoint_node_},
              {"checkpoints", checkpoints},
              {"policy", std::string(scheduler::to_string(options_.spec.controller.config.policy))},
              {"global_batch", options_.spec.train.global_batch},
              {"staleness", Json{{"mean", total.mean},
                                 {"p95", total.p95},
                                 {"max", total.max},
                                 {"mode", options_.spec.asp.staleness},
                                 {"max_staleness", options_.spec.asp.max_staleness},
                                 {"lr_scaling", options_.spec.asp.lr_scaling}}},
              {"pushes", pushes_},
              {"dropped_stale", dropped_stale_},
              {"duplicate_pushes", duplicates_},
              {"failed_batches", failed_batches_},
              {"fences", Json{{"rounds", fence_counters_.rounds},
                              {"no_answer", fence_counters_.no_answer},
                              {"batches_taken", fence_counters_.taken},
                              {"batches_dealt_again", fence_counters_.dealt_again}}},
              {"evaluations", evaluations_},
              {"last_eval_accuracy", last_eval_accuracy_ >= 0 ? Json(last_eval_accuracy_) : Json()},
              {"updates_lost", lost},
              {"updates_lost_at_most", lost_at_most},
              {"parameters", parameters_},
              {"servers", servers},
              {"sampling", dealer},
              {"workers", workers},
              {"membership", membership_log_},
              {"plan_version", plan_version_}}
      .dump(2);
}

void AspSchedulerActor::on_message(const runtime::Envelope& message) {
  if (message.kind == runtime::kind_of<AspDealRequest>()) {
    if (auto request = decode<AspDealRequest>(message)) {
      on_deal(message, *request);
    }
    return;
  }
  if (message.kind == runtime::kind_of<AspServerReady>()) {
    if (auto ready = decode<AspServerReady>(message)) {
      on_server_ready(message, *ready);
    }
    return;
  }
  if (message.kind == runtime::kind_of<AspServerReport>()) {
    if (auto report = decode<AspServerReport>(message)) {
      on_server_report(message, *report);
    }
    return;
  }
  if (message.kind == runtime::kind_of<AspFetchCheckpoint>()) {
    if (auto fetch = decode<AspFetchCheckpoint>(message)) {
      on_fetch_checkpoint(message, *fetch);
    }
    return;
  }
  if (message.kind == runtime::kind_of<AspFinished>()) {
    if (auto done = decode<AspFinished>(message))
      on_finished(message, *done);
    return;
  }
  switch (message.kind) {
    case MessageKind::kNodeEvent:
      if (auto event = decode<NodeEvent>(message)) on_node_event(*event);
      return;
    case MessageKind::kTrainerHello:
      if (auto hello = decode<TrainerHello>(message)) {
        on_hello(message, *hello);
      }
      return;
    case MessageKind::kTrainerDone: {
      // A trainer that failed before it knew its role (bad data, say) says so this way.
      auto done = decode_or_count<TrainerDone>(message);
      if (message.correlation) reply(message, SimpleReply{true, ""});
      if (done && !done->ok && !done->error.empty()) {
        last_trainer_error_ = done->trainer + ": " + done->error;
      }
      return;
    }
    case MessageKind::kTrainerExited:
      if (auto exited = decode<TrainerExited>(message)) {
        on_trainer_exited(*exited);
      }
      return;
    case MessageKind::kDrainNode: {
      auto drain = decode_or_count<DrainNode>(message);
      int leaving = 0;
      if (drain && !finished_) {
        // Workers just go (their batches fenced and dealt again); a server first hands its
        // shard over (a checkpoint at its last version), then restarts elsewhere from it.
        std::vector<std::string> names;
        for (const auto& [name, t] : trainers_) {
          if (t.node == drain->node && !t.gone) names.push_back(name);
        }
        for (const auto& name : names) {
          const auto& t = trainers_[name];
          ++leaving;
          if (t.server && t.ready && !t.system.empty()) {
            hand_over(name);
            continue;
          }
          if (!t.system.empty()) {
            tell(runtime::ActorAddress{t.system, "trainer"},
                 StopTrainer{options_.job_id, "drained"});
          }
          trainer_gone(name, "drained");
          if (finished_) break;
        }
        auto node = nodes_.find(drain->node);
        if (node != nodes_.end()) node->second.drained = true;  // place nothing more there
        place();
      }
      if (message.correlation) {
        reply(message, SimpleReply{true, fmt::format("{} trainers leaving", leaving)});
      }
      return;
    }
    case MessageKind::kStopJob: {
      auto stop = decode_or_count<StopJob>(message);
      finish("stopped", stop && !stop->reason.empty() ? stop->reason : "stopped by user");
      if (message.correlation) reply(message, SimpleReply{true, "stopped"});
      return;
    }
    case MessageKind::kJobStatusRequest: {
      auto request = decode_or_count<JobStatusRequest>(message);
      reply(message, job_status_page(info(), events_, request ? request->since : 0, finished_,
                                     [&] { return summary_json(); }));
      return;
    }
    default:
      if (message.correlation != 0) {
        reply(message, runtime::ErrorReply{"bad-request",
                                           "the asp scheduler does not handle " +
                                               std::string(runtime::kind_name(message.kind))});
      }
  }
}

}  // namespace omnilearn::actors
