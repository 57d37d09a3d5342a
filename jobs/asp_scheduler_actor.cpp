#include "jobs/asp_scheduler_actor.hpp"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "cluster/head_state.hpp"
#include "wire/reply_envelope.hpp"
#include "runtime/atomic_file.hpp"
#include "runtime/system_messages.hpp"
#include "elastic/elastic_protocol.hpp"

namespace omnilearn::actors {
namespace {

using Json = nlohmann::json;

constexpr std::chrono::milliseconds kTick{100};
// A gap between two readings of the clock longer than this (five ticks) means the scheduler did
// not run: what exceeds it is left out of the job's deadlines (runtime/running_clock.hpp).
constexpr std::chrono::milliseconds kMaxRunGap{500};
constexpr std::chrono::milliseconds kRestoreProbeTimeout{3000};
// A server whose fence went unanswered is pinged: no answer within this is a hung process. A
// restart loses the updates since the shard's last checkpoint, so the bound is generous (a ping
// is answered by the trainer's runtime, whatever its training loop does).
constexpr std::chrono::milliseconds kServerProbeTimeout{3000};
// How long a restarted head waits to hear from a trainer it counts as live before it takes the
// trainer for gone (a worker asks at least once per batch; a slower one is fenced and replaced,
// which loses nothing).
constexpr std::chrono::seconds kRestoreProbeWindow{30};

template <class... Fns>
struct Overloaded : Fns... {
  using Fns::operator()...;
};
template <class... Fns>
Overloaded(Fns...) -> Overloaded<Fns...>;

asp::DealAsk deal_ask(const AspDealRequest& r) {
  asp::DealAsk a;
  a.trainer = r.trainer;
  a.pushed_batch = r.pushed_batch;
  a.failed_batch = r.failed_batch;
  a.staleness = r.staleness;
  a.applied = r.applied;
  a.dropped = r.dropped;
  a.batch = r.batch;
  a.compute_time_s = r.compute_time_s;
  a.update_time_s = r.update_time_s;
  a.loss = r.loss;
  a.incarnations = r.incarnations;
  a.versions = r.versions;
  a.unanswered = r.unanswered;
  a.unreachable = r.unreachable;
  a.evaluated = r.evaluated;
  a.eval_error = r.eval_error;
  a.eval_accuracy = r.eval_accuracy;
  a.eval_loss = r.eval_loss;
  a.eval_version = r.eval_version;
  a.eval_time_s = r.eval_time_s;
  return a;
}

AspDealReply deal_reply(asp::DealAnswer a) {
  AspDealReply r;
  switch (a.action) {
    case asp::DealAnswer::Action::kBatch:
      r.action = AspDealReply::kBatch;
      break;
    case asp::DealAnswer::Action::kWait:
      r.action = AspDealReply::kWait;
      break;
    case asp::DealAnswer::Action::kFinish:
      r.action = AspDealReply::kFinish;
      break;
    case asp::DealAnswer::Action::kDone:
      r.action = AspDealReply::kDone;
      break;
    case asp::DealAnswer::Action::kEvaluate:
      r.action = AspDealReply::kEvaluate;
      break;
  }
  r.error = std::move(a.error);
  r.wait_ms = static_cast<std::int32_t>(a.wait);
  r.batch_id = a.batch_id;
  r.epoch = a.epoch;
  r.indices = std::move(a.indices);
  r.shards_done = std::move(a.shards_done);
  r.servers = std::move(a.servers);
  r.global_batch = a.global_batch;
  r.workers = a.workers;
  return r;
}

}  // namespace

asp::AspJobOptions asp_job_options(const SchedulerOptions& options) {
  const auto& spec = options.spec;
  asp::AspJobOptions o;
  o.job_id = options.job_id;
  o.name = spec.name;
  o.run_dir = options.run_dir;
  o.servers = spec.asp.servers;
  o.min_workers = spec.elastic.min_workers;
  o.max_workers = spec.elastic.max_workers;
  o.slots = spec.elastic.slots;
  o.steps = spec.train.steps;
  o.epochs = spec.train.epochs;
  o.global_batch = spec.train.global_batch;
  o.eval_every = spec.train.eval_every;
  o.data_seed = spec.data.seed;
  o.cooldown_steps = spec.controller.cooldown_steps;
  o.interval_steps = spec.controller.interval_steps;
  o.grace_period = static_cast<asp::Millis>(spec.elastic.grace_period_s * 1000.0);
  o.spawn_timeout = options.spawn_timeout.count();
  o.controller = spec.controller.config;
  o.staleness = spec.asp.staleness;
  o.max_staleness = spec.asp.max_staleness;
  o.lr_scaling = spec.asp.lr_scaling;
  o.scale_lr_by_workers = spec.asp.scale_lr_by_workers;
  return o;
}

std::string encode_asp_run_state(const Json& machine,
                                 const std::map<std::string, std::string>& trainer_systems) {
  return Json{
      {"version", 1}, {"mode", "asp"}, {"machine", machine}, {"trainer_systems", trainer_systems}}
      .dump();
}

AspRunState decode_asp_run_state(const std::string& text) {
  AspRunState run;
  try {
    Json json = Json::parse(text);
    if (json.at("version").get<int>() != 1 || json.at("mode").get<std::string>() != "asp") {
      throw std::invalid_argument("not an asynchronous job's state of version 1");
    }
    run.machine = std::move(json.at("machine"));
    run.trainer_systems = json.at("trainer_systems").get<std::map<std::string, std::string>>();
  } catch (const Json::exception& e) {
    throw std::invalid_argument(e.what());
  }
  return run;
}

AspSchedulerActor::AspSchedulerActor(SchedulerOptions options)
    : options_(std::move(options)),
      job_(asp_job_options(options_)),
      recorder_(recorder_options(options_.job_id, options_.run_dir, options_.events_skipped,
                                 options_.store)),
      clock_(kMaxRunGap),
      clock_subject_("job " + options_.job_id + ": the scheduler") {}

asp::Millis AspSchedulerActor::now() const {
  const auto running = clock_.now();
  runtime::log_found_gap(clock_, clock_subject_,
                         "no process is held to what it could not hear meanwhile");
  return std::chrono::duration_cast<std::chrono::milliseconds>(running - started_at_).count();
}

void AspSchedulerActor::on_start() {
  started_at_ = clock_.now();
  recorder_.open();
  if (!options_.restore_state.empty()) {
    restore_run();
  } else {
    if (options_.head_epoch > 0) {
      // Resumed by a restarted head before its scheduler wrote anything: it starts now.
      auto restarted = head_restarted_event(options_.head_epoch, options_.head_outage_s, 0);
      restarted.fields["resumed"] = true;
      recorder_.record(std::move(restarted));
    }
    job_.start(now(), options_.head_epoch == 0);
  }
  run_commands();
  ask(runtime::ActorAddress{"", kRegistryActor}, SubscribeNodes{}, std::chrono::seconds(5),
      [this](runtime::AskResult result) {
        auto snapshot = result.as<StatusReply>();
        if (!snapshot) {
          job_.fail("cannot subscribe to the node registry: " + result.error, now());
          run_commands();
          return;
        }
        on_nodes(*snapshot);
        run_commands();
      });
  tick_timer_ = after(kTick, [this] { tick(); });
}

void AspSchedulerActor::on_nodes(const StatusReply& snapshot) {
  std::vector<asp::AspJob::NodeView> nodes;
  for (const auto& node : snapshot.nodes) {
    if (node.state == "alive" || node.state == "suspect") {
      node_systems_[node.id] = node.system;
      nodes.push_back({node.id, node.name, node.drained});
    }
  }
  if (options_.restore_state.empty()) {
    job_.nodes(nodes, now());
    return;
  }
  // Restored: the machine knows its nodes; one that joined meanwhile may take trainers.
  for (const auto& node : nodes) job_.node_up(node.id, node.name, node.drained, now());
}

void AspSchedulerActor::restore_run() {
  AspRunState run;
  try {
    run = decode_asp_run_state(options_.restore_state);
    job_.restore(run.machine, now());
  } catch (const std::exception& e) {
    // Nothing the previous head did not write is guessed.
    job_.start(now());
    job_.fail(std::string("the head restarted and cannot read the job's saved state: ") + e.what() +
                  "; submit it again",
              now());
    return;
  }
  trainer_systems_ = run.trainer_systems;
  // A restarted head has no route to a process until it sends something; a server may send
  // nothing for long (workers push to it directly), so it is reached at its endpoint instead,
  // as the workers reach it.
  for (const auto& shard : job_.shards()) {
    if (shard.ready && !shard.trainer.empty() && !shard.endpoint.empty()) {
      trainer_systems_[shard.trainer] = shard.endpoint;
    }
  }
  auto restarted =
      head_restarted_event(options_.head_epoch, options_.head_outage_s, job_.updates());
  restarted.fields["resumed"] = true;
  recorder_.record(std::move(restarted));
  spdlog::info("job {}: resuming at update {} after a head restart", options_.job_id,
               job_.updates());
  // A trainer that exited during the outage was reported to the dead head: each one the
  // machine counts as live is pinged and reported gone if it does not answer. A worker is
  // reachable once it asks for its next batch (within one batch's time), a server at once.
  const auto deadline = Clock::now() + kRestoreProbeWindow;
  for (const auto& name : job_.live_trainers()) probe(name, deadline);
}

void AspSchedulerActor::ping(const std::string& system, std::chrono::milliseconds timeout,
                             std::function<void(runtime::AskResult)> done) {
  this->system().ask_envelope(
      this->system().make_envelope(runtime::ActorAddress{system, "$system"},
                                   runtime::MessageKind::kPing,
                                   runtime::pack_payload(runtime::Ping{0}), self()),
      timeout, std::move(done));
}

void AspSchedulerActor::probe(const std::string& trainer, Clock::time_point deadline) {
  const auto system = trainer_systems_.find(trainer);
  if (system == trainer_systems_.end() || system->second.empty() || job_.finished()) return;
  ping(system->second, kRestoreProbeTimeout, [this, trainer, deadline](runtime::AskResult result) {
    if (result.ok() || job_.finished()) return;
    if (result.error.rfind("no route", 0) == 0 && Clock::now() < deadline) {
      // Not heard from yet: asked again until the window closes.
      after(std::chrono::seconds(1), [this, trainer, deadline] { probe(trainer, deadline); });
      return;
    }
    spdlog::warn("job {}: trainer {} did not answer after the head restarted: {}", options_.job_id,
                 trainer, result.error);
    job_.trainer_exited(trainer, 1, false, "did not answer after the head restarted", "", now());
    run_commands();
  });
}

bool AspSchedulerActor::persist_run() {
  if (!options_.store) return true;
  try {
    options_.store->put(run_key(options_.job_id),
                        encode_asp_run_state(job_.snapshot(now()), trainer_systems_));
    return true;
  } catch (const state::StateStoreError& e) {
    spdlog::error("job {}: cannot write its state: {}", options_.job_id, e.what());
    return false;
  }
}

void AspSchedulerActor::on_stop() {
  if (!job_.finished() && options_.head_stop && options_.head_stop->jobs_outlive_head) {
    // The head stops with the machine's snapshot in its store: servers and workers keep
    // running and go on under the next head, as through a kill -9 (restore_run).
    spdlog::info("job {}: left running for the next head", options_.job_id);
  } else if (!job_.finished()) {
    for (const auto& name : job_.live_trainers()) {
      tell_trainer(name, StopTrainer{options_.job_id, "head shutting down"});
    }
  }
  tell(runtime::ActorAddress{"", kRegistryActor}, UnsubscribeNodes{});
}

void AspSchedulerActor::tick() {
  job_.tick(now());
  run_commands();
  if (!job_.finished()) tick_timer_ = after(kTick, [this] { tick(); });
}

void AspSchedulerActor::tell_trainer(const std::string& trainer, StopTrainer stop) {
  const auto it = trainer_systems_.find(trainer);
  if (it == trainer_systems_.end() || it->second.empty()) return;
  tell(runtime::ActorAddress{it->second, "trainer"}, std::move(stop));
}

void AspSchedulerActor::run_commands() {
  // Carrying one out may give the machine an input at once (a hand-over to a server whose
  // address is unknown), hence the loop.
  for (auto commands = job_.take_commands(); !commands.empty(); commands = job_.take_commands()) {
    // A PersistCommand comes first in its batch: nothing after it goes out unless the store has
    // a snapshot that covers it (once the job has ended, its end goes out regardless). Group
    // commit: the batch waits, with every reply and batch after it, for one write at the end of
    // the messages already queued (flush), so that deals arriving together cost one fsync.
    if (std::holds_alternative<asp::PersistCommand>(commands.front()) && !job_.finished()) {
      persist_due_ = true;
    }
    if (persist_due_) {
      held_.push_back([this, batch = std::move(commands)]() mutable { carry_out(batch); });
      if (!flush_scheduled_) {
        flush_scheduled_ = true;
        after(std::chrono::milliseconds(0), [this] { flush(); });
      }
      continue;
    }
    carry_out(commands);
  }
}

void AspSchedulerActor::respond(std::function<void()> answer) {
  if (persist_due_) {
    held_.push_back(std::move(answer));
  } else {
    answer();
  }
}

void AspSchedulerActor::flush() {
  flush_scheduled_ = false;
  if (!persist_due_) return;
  persist_due_ = false;
  auto held = std::move(held_);
  held_.clear();
  if (!persist_run()) {
    // Nothing that depends on the write goes out; the job's end does.
    job_.fail(
        "the head cannot write the job's state to its store (see the head's log): a restarted "
        "head could not resume it safely",
        now());
    run_commands();
    return;
  }
  for (auto& out : held) out();
}

void AspSchedulerActor::carry_out(std::vector<asp::AspCommand>& commands) {
  for (auto& command : commands) {
    std::visit(
        Overloaded{
            [&](asp::PersistCommand&) {},
            [&](asp::SpawnCommand& c) {
              const auto node = node_systems_.find(c.node);
              if (node == node_systems_.end()) return;
              spdlog::info("job {}: starting {}", options_.job_id, c.trainer);
              tell(runtime::ActorAddress{node->second, kAgentActor},
                   SpawnTrainer{options_.job_id, c.trainer, scheduler_actor_name(options_.job_id),
                                c.node});
            },
            [&](asp::StopCommand& c) {
              tell_trainer(c.trainer, StopTrainer{options_.job_id, c.reason});
            },
            [&](asp::FenceCommand& c) { fence(c); },
            [&](asp::HandOverCommand& c) { hand_over(c); },
            [&](asp::ProbeCommand& c) { probe_server(c); },
            // The machine's events are JSON objects with their kind in `event`; one of no kind
            // is a broken invariant (it throws, and the job fails with the reason).
            [&](asp::EventCommand& c) { recorder_.record(RunEvent::from_json(std::move(c.event))); },
            [&](asp::PublishCommand&) { publish_info(); },
            [&](asp::FinishCommand& c) { finished(c); },
        },
        command);
  }
}

void AspSchedulerActor::finished(const asp::FinishCommand& command) {
  if (command.state == "failed") {
    spdlog::error("job {} failed: {}", options_.job_id, command.reason);
  } else {
    spdlog::info("job {} {} {}", options_.job_id, command.state, command.reason);
  }
  cancel_timer(tick_timer_);
  recorder_.finish(Json::parse(job_.summary_json(now())));
  tell(runtime::ActorAddress{"", kRegistryActor}, UnsubscribeNodes{});
}

// ---------------------------------------------------------------------------------------------
// Asks the machine ordered: their answers are its inputs.

void AspSchedulerActor::fence(const asp::FenceCommand& command) {
  const auto system = trainer_systems_.find(command.server);
  if (system == trainer_systems_.end()) return;
  const AspFence fence{options_.job_id, command.shard, command.worker, command.through};
  if (!command.round) {
    tell(runtime::ActorAddress{system->second, kAspServerActor}, fence);
    return;
  }
  ask(runtime::ActorAddress{system->second, kAspServerActor}, fence,
      std::chrono::milliseconds(job_.options().fence_timeout),
      [this, command](runtime::AskResult result) {
        const auto r = result.as<AspFenceReply>();
        std::optional<asp::FenceReply> answer;
        if (r) {
          answer.emplace();
          answer->ok = r->ok && r->taken.size() == r->applied.size();
          answer->error = r->ok && !answer->ok ? "taken and applied differ in size" : r->error;
          answer->incarnation = r->incarnation;
          answer->version = r->version;
          for (std::size_t i = 0; answer->ok && i < r->taken.size(); ++i) {
            answer->taken.push_back(asp::TakenBatch{r->taken[i], r->applied[i]});
          }
        }
        if (!answer || !answer->ok) {
          spdlog::warn("job {}: shard {} did not answer a fence: {}", options_.job_id,
                       command.shard, answer ? answer->error : result.error);
        }
        job_.fence_answered(command, answer, result.error, now());
        run_commands();
      });
}

void AspSchedulerActor::probe_server(const asp::ProbeCommand& command) {
  const auto system = trainer_systems_.find(command.server);
  if (system == trainer_systems_.end() || system->second.empty()) {
    // Never listened here: nothing to ask; its fences are asked again as before.
    job_.probe_answered(command, true, "", now());
    return;
  }
  // The trainer's runtime answers a ping, not its training loop: a server busy with a long
  // checkpoint write answers, a hung process (SIGSTOP, a stuck call) does not.
  ping(system->second, kServerProbeTimeout, [this, command](runtime::AskResult result) {
    if (!result.ok()) {
      spdlog::warn("job {}: server {} did not answer a probe: {}", options_.job_id, command.server,
                   result.error);
    }
    job_.probe_answered(command, result.ok(), result.error, now());
    run_commands();
  });
}

void AspSchedulerActor::hand_over(const asp::HandOverCommand& command) {
  const auto system = trainer_systems_.find(command.server);
  if (system == trainer_systems_.end()) {
    job_.handed_over(command, std::nullopt, "the server's address is unknown", now());
    return;
  }
  ask(runtime::ActorAddress{system->second, kAspServerActor},
      AspHandOver{options_.job_id, command.shard},
      std::chrono::milliseconds(job_.options().hand_over_timeout),
      [this, command](runtime::AskResult result) {
        const auto r = result.as<AspHandOverReply>();
        std::optional<asp::HandOverReply> answer;
        if (r) {
          answer.emplace();
          answer->ok = r->ok;
          answer->error = r->error;
          answer->incarnation = r->incarnation;
          answer->version = r->version;
          answer->checkpoint = r->checkpoint;
          const std::size_t n =
              std::min({r->taken_workers.size(), r->taken_batches.size(), r->taken_applied.size()});
          for (std::size_t i = 0; i < n; ++i) {
            answer->taken[r->taken_workers[i]].push_back(
                asp::TakenBatch{r->taken_batches[i], r->taken_applied[i]});
          }
        }
        if (!answer || !answer->ok) {
          spdlog::warn(
              "job {}: shard {} did not hand over ({}): it restarts from its last "
              "checkpoint",
              options_.job_id, command.shard, answer ? answer->error : result.error);
        }
        job_.handed_over(command, answer, result.error, now());
        run_commands();
      });
}

// ---------------------------------------------------------------------------------------------
// Messages

void AspSchedulerActor::on_node_event(const NodeEvent& event) {
  const auto& node = event.node;
  if (!node.system.empty()) node_systems_[node.id] = node.system;
  if (event.event == "joined" || event.event == "alive") {
    job_.node_up(node.id, node.name, node.drained, now());
  } else if (event.event == "drained" || event.event == "undrained") {
    job_.node_drained(node.id, node.name, node.state == "alive" || node.state == "suspect",
                      event.event == "drained", now());
  } else if (event.event == "dead" || event.event == "left") {
    job_.node_down(node.id, event.event, now());
  }
}

void AspSchedulerActor::on_deal(const runtime::Envelope& message, const AspDealRequest& request) {
  asp::DealAnswer answer = job_.deal(deal_ask(request), now());
  run_commands();  // written down before the worker learns of it
  respond([this, message, reply = deal_reply(std::move(answer))] { this->reply(message, reply); });
}

void AspSchedulerActor::on_server_report(const runtime::Envelope& message,
                                         const AspServerReport& report) {
  asp::ServerReport r{report.trainer,      report.shard,      report.version,
                      report.updates_lost, report.checkpoint, report.fenced};
  if (!job_.server_report(r, message.attachments.size() == 1, now())) return;
  // Kept on the head, so that a server restarted on any node finds its state.
  const std::string path = job_.head_copy_path(report.shard);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const auto& bytes = message.attachments[0];
  try {
    runtime::write_file_atomically(path, std::string_view(bytes.data(), bytes.size()));
    job_.head_copy_kept(report.shard, report.version);
  } catch (const runtime::AtomicWriteError& e) {
    spdlog::warn("job {}: cannot keep shard {}'s checkpoint: {}", options_.job_id, report.shard,
                 e.what());
  }
}

void AspSchedulerActor::on_fetch_checkpoint(const runtime::Envelope& message,
                                            const AspFetchCheckpoint& fetch) {
  AspCheckpointReply r;
  const auto copy = job_.head_copy(fetch.trainer, fetch.shard);
  if (!copy.error.empty()) {
    r.error = copy.error;
    reply(message, r);
    return;
  }
  const std::string path = job_.head_copy_path(fetch.shard);
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad() || bytes.empty()) {
    r.error = "cannot read " + path;
    reply(message, r);
    return;
  }
  r.ok = true;
  r.version = copy.version;
  auto envelope = reply_envelope(system(), message, runtime::kind_of<AspCheckpointReply>(),
                                 runtime::pack_payload(r));
  envelope.attachments.emplace_back(std::move(bytes));
  system().send(std::move(envelope));
}

void AspSchedulerActor::on_drain(const runtime::Envelope& message) {
  auto drain = decode_or_count<DrainNode>(message);
  const int leaving = drain ? job_.drain(drain->node, now()) : 0;
  run_commands();
  if (message.correlation) {
    reply(message, SimpleReply{true, std::to_string(leaving) + " trainers leaving"});
  }
}

JobInfo AspSchedulerActor::info() const {
  JobInfo info;
  info.id = options_.job_id;
  info.name = options_.spec.name;
  info.state = job_.state();
  info.reason = job_.reason();
  info.step = job_.updates();
  info.total_steps = job_.total_steps();
  info.loss = job_.loss();
  info.checkpoint = job_.final_checkpoint();
  info.checkpoint_node = job_.final_checkpoint_node();
  std::int32_t rank = 0;
  for (const auto& worker : job_.workers()) {
    JobWorkerInfo w;
    w.node = worker.node;
    w.actor = worker.trainer;
    w.rank = rank++;
    w.batch = worker.batch;
    w.samples_per_s = worker.samples_per_s;
    w.step_time_s = worker.step_time_s;
    info.workers.push_back(w);
  }
  return info;
}

void AspSchedulerActor::publish_info() {
  if (options_.jobs.empty()) return;
  tell(options_.jobs, recorder_.update(info()));
}

void AspSchedulerActor::on_message(const runtime::Envelope& message) {
  if (message.kind == runtime::kind_of<AspDealRequest>()) {
    if (auto request = decode<AspDealRequest>(message)) on_deal(message, *request);
  } else if (message.kind == runtime::kind_of<AspServerReady>()) {
    auto ready = decode<AspServerReady>(message);
    if (ready) {
      // The fences sent to a restarted server go where its ready came from.
      if (!message.from.system.empty()) trainer_systems_[ready->trainer] = message.from.system;
      job_.server_ready(asp::ServerReady{ready->trainer, ready->shard, ready->endpoint,
                                         ready->incarnation, ready->version, ready->parameters,
                                         ready->dataset_size, ready->resumed_from},
                        now());
      run_commands();
    }
    if (ready && message.correlation) {
      respond([this, message] { reply(message, SimpleReply{true, ""}); });
    }
  } else if (message.kind == runtime::kind_of<AspServerReport>()) {
    if (auto report = decode<AspServerReport>(message)) on_server_report(message, *report);
  } else if (message.kind == runtime::kind_of<AspFetchCheckpoint>()) {
    if (auto fetch = decode<AspFetchCheckpoint>(message)) on_fetch_checkpoint(message, *fetch);
  } else if (message.kind == runtime::kind_of<AspFinished>()) {
    auto done = decode<AspFinished>(message);
    if (done) {
      job_.finished(asp::FinishReport{done->trainer, done->ok, done->error, done->test_accuracy,
                                      done->test_loss, done->checkpoint},
                    now());
      run_commands();
    }
    if (done && message.correlation) {
      respond([this, message] { reply(message, SimpleReply{true, ""}); });
    }
  } else {
    switch (message.kind) {
      case MessageKind::kNodeEvent:
        if (auto event = decode<NodeEvent>(message)) on_node_event(*event);
        break;
      case MessageKind::kTrainerHello:
        if (auto hello = decode<TrainerHello>(message)) {
          const asp::HelloAnswer a = job_.hello(hello->trainer, now());
          TrainerHelloReply reply = a.accepted ? accepted_hello(options_) : TrainerHelloReply{};
          reply.error = a.error;
          if (a.accepted) {
            trainer_systems_[hello->trainer] = message.from.system;
            reply.shards = options_.spec.asp.servers;
            reply.role = a.server ? "server" : "worker";
            reply.shard = a.shard;
            reply.incarnation = a.incarnation;
            reply.resume_checkpoint = a.resume_checkpoint;
            reply.resume_version = a.resume_version;
            reply.worker_id = a.worker;
          }
          run_commands();  // its role and worker id are written down before it learns them
          respond([this, message, reply] { this->reply(message, reply); });
        }
        break;
      case MessageKind::kTrainerDone: {
        // A trainer that failed before it knew its role (bad data, say) says so this way.
        auto done = decode_or_count<TrainerDone>(message);
        if (message.correlation) reply(message, SimpleReply{true, ""});
        if (done && !done->ok) job_.trainer_error(done->trainer, done->error);
        break;
      }
      case MessageKind::kTrainerExited:
        if (auto exited = decode<TrainerExited>(message)) {
          job_.trainer_exited(exited->trainer, exited->exit_code,
                              exited->exit_code == scheduler::kTrainerExitBadInput, exited->reason,
                              exited->last_error, now());
        }
        break;
      case MessageKind::kDrainNode:
        on_drain(message);
        break;
      case MessageKind::kStopJob: {
        auto stop = decode_or_count<StopJob>(message);
        job_.stop(stop ? stop->reason : "", now());
        if (message.correlation) reply(message, SimpleReply{true, "stopped"});
        break;
      }
      case MessageKind::kJobStatusRequest: {
        auto request = decode_or_count<JobStatusRequest>(message);
        reply(message, recorder_.page(info(), request ? request->since : 0));
        break;
      }
      default:
        if (message.correlation != 0) {
          reply(message, runtime::ErrorReply{"bad-request",
                                             "the asp scheduler does not handle " +
                                                 std::string(runtime::kind_name(message.kind))});
        }
    }
  }
  run_commands();
}

}  // namespace omnilearn::actors
