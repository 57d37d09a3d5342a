// omnilearn-trainer: one data-parallel replica of a job, started by a node agent. Its actor
// ("trainer") receives rendezvous, plans and stop requests; its training thread runs the step
// loop of the elastic protocol (DESIGN.md "The elastic protocol"):
//
//   wait for Rendezvous{g, rank, world, plan} -> join group g -> adopt rank 0's state ->
//   loop { rank 0 broadcasts [command, generation, plan version, batches...]; step; report }
//
// The leader's broadcast is the only place a new plan, a new generation or a stop takes
// effect, so every rank changes at the same step boundary (DESIGN invariant 4). A collective
// that fails leaves the replica at its last committed step; the trainer reports it and waits
// for the next generation.
#include <CLI/CLI.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/torch.h>

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "actors/cluster_file.hpp"
#include "actors/job_protocol.hpp"
#include "actors/job_spec.hpp"
#include "actors/trainer/runtime_store.hpp"
#include "runtime/actor_system.hpp"
#include "runtime/shutdown.hpp"
#include "training/trainer.hpp"

namespace omnilearn::actors {
namespace {

using Clock = std::chrono::steady_clock;

struct TrainerArgs {
  std::string head;
  std::string agent;
  std::string job;
  std::string scheduler;
  std::string trainer;
  std::string node;
  std::string gloo_host;
  double slowdown = 1.0;
  std::string cluster_file;  // the agent's credentials; empty only with --insecure
  bool insecure = false;
};

// What the actor thread hands the training thread; guarded by `mutex`.
struct Control {
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::int64_t, Rendezvous> rendezvous;  // by generation
  std::optional<PlanUpdate> plan;
  bool stop = false;
  std::string stop_reason;
  std::atomic<double> slowdown{1.0};
  std::atomic<bool> slowdown_changed{false};
};

class TrainerActor : public runtime::Actor {
 public:
  explicit TrainerActor(Control& control) : control_(control) {}
  void on_message(const runtime::Envelope& message) override {
    std::lock_guard lock(control_.mutex);
    switch (message.kind) {
      case MessageKind::kRendezvous:
        if (auto rv = runtime::unpack_payload<Rendezvous>(message.payload)) {
          control_.rendezvous[rv->generation] = *rv;
        }
        break;
      case MessageKind::kPlanUpdate:
        if (auto plan = runtime::unpack_payload<PlanUpdate>(message.payload)) control_.plan = *plan;
        break;
      case MessageKind::kStopTrainer: {
        auto stop = runtime::unpack_payload<StopTrainer>(message.payload);
        control_.stop = true;
        control_.stop_reason = stop ? stop->reason : "stopped";
        break;
      }
      case MessageKind::kSetTrainerSpeed:
        if (auto speed = runtime::unpack_payload<SetTrainerSpeed>(message.payload)) {
          control_.slowdown = speed->slowdown;
          control_.slowdown_changed = true;
        }
        break;
      default:
        break;
    }
    control_.changed.notify_all();
  }

 private:
  Control& control_;
};

enum Command : std::int64_t { kContinue = 0, kRegroup = 1, kStop = 2 };

class TrainingLoop {
 public:
  TrainingLoop(const TrainerArgs& args, runtime::ActorSystem& system, Control& control)
      : args_(args), system_(system), control_(control) {}

  // Returns the process exit code: 0 when the job finished, was stopped or drained this trainer.
  int run() {
    auto hello = say_hello();
    if (!hello) return 3;
    JobSpec spec = parse_job_spec(hello->job_toml, hello->source_name);
    checkpoint_dir_ = hello->checkpoint_dir;
    collective_timeout_ = std::chrono::milliseconds(std::max(1000, hello->collective_timeout_ms));
    torch::set_num_threads(spec.train.threads);
    eval_every_ = spec.train.eval_every;
    checkpoint_every_ = spec.checkpoint.every;

    training::TrainerConfig config;
    config.model = spec.model;
    config.optimizer = spec.optimizer;
    config.data = spec.data;
    auto data = training::load_datasets(config.data);
    const std::int64_t N = data.train->size();
    const std::int64_t B = spec.train.global_batch;
    total_steps_ = spec.train.steps > 0 ? spec.train.steps : (spec.train.epochs * N + B - 1) / B;
    if (config.optimizer.schedule.kind == "cosine" && config.optimizer.schedule.total_steps == 0) {
      config.optimizer.schedule.total_steps = total_steps_;
    }
    trainer_ = std::make_unique<training::Trainer>(config, data);
    trainer_->set_slowdown(control_.slowdown.load());
    auto store = c10::make_intrusive<c10d::PrefixStore>(
        "job/" + args_.job,
        c10::make_intrusive<RuntimeStore>(system_, runtime::ActorAddress{args_.head, kStoreActor},
                                          std::chrono::milliseconds(60000)));
    spdlog::info("trainer {}: ready ({} samples, {} steps)", args_.trainer, N, total_steps_);

    std::int64_t min_generation = 1;
    while (true) {
      auto rv = wait_for_rendezvous(min_generation, spec);
      if (!rv) return stop_exit_code_;
      generation_ = rv->generation;
      min_generation = generation_ + 1;
      if (rv->rank < 0) {
        if (rv->leave) {
          spdlog::info("trainer {}: drained at step {}; leaving", args_.trainer,
                       trainer_->step_count());
          send_done(true, "drained");
          return 0;
        }
        continue;  // not in this generation: wait for a later one
      }
      rank_ = rv->rank;
      world_ = rv->world;
      batches_ = rv->batches;
      plan_version_ = rv->plan_version;
      training::GroupOptions group;
      group.gloo_hostname = args_.gloo_host;
      auto status = trainer_->join_group(store, static_cast<int>(generation_), rank_, world_,
                                         std::max(collective_timeout_, std::chrono::milliseconds(30000)),
                                         group);
      if (status) status = trainer_->sync_state_from_rank0();
      if (!status) {
        report_failure(status.error);
        continue;
      }
      spdlog::info("trainer {}: generation {} rank {}/{} at step {}", args_.trainer, generation_,
                   rank_, world_, trainer_->step_count());
      report_synced();
      auto outcome = train_generation(min_generation);
      if (outcome == Outcome::kFinished) return finish();
      if (outcome == Outcome::kStopped) return 0;
    }
  }

 private:
  enum class Outcome { kFinished, kStopped, kRegroup, kBroken };

  std::optional<TrainerHelloReply> say_hello() {
    TrainerHello hello{args_.job, args_.trainer, args_.node, static_cast<std::int32_t>(getpid()),
                       args_.gloo_host};
    for (int attempt = 0; attempt < 5; ++attempt) {
      auto result = system_.ask(runtime::ActorAddress{args_.head, args_.scheduler}, hello,
                                std::chrono::seconds(5))
                        .get();
      if (auto reply = result.as<TrainerHelloReply>()) {
        if (!reply->accepted) {
          spdlog::warn("trainer {}: the scheduler turned it away: {}", args_.trainer, reply->error);
          return std::nullopt;
        }
        return reply;
      }
      spdlog::warn("trainer {}: no answer from the scheduler ({}); retrying", args_.trainer,
                   result.error);
    }
    return std::nullopt;
  }

  // Waits for a rendezvous of generation >= min_generation (the newest one wins) or a stop.
  std::optional<Rendezvous> wait_for_rendezvous(std::int64_t min_generation, const JobSpec& spec) {
    auto limit = std::chrono::seconds(120) +
                 std::chrono::seconds(static_cast<long>(spec.elastic.grace_period_s));
    std::unique_lock lock(control_.mutex);
    bool got = control_.changed.wait_for(lock, limit, [&] {
      if (control_.stop) return true;
      auto it = control_.rendezvous.lower_bound(min_generation);
      return it != control_.rendezvous.end();
    });
    if (control_.stop) {
      spdlog::info("trainer {}: stopping ({})", args_.trainer, control_.stop_reason);
      stop_exit_code_ = 0;
      return std::nullopt;
    }
    if (!got) {
      spdlog::error("trainer {}: no new generation for {} s; giving up", args_.trainer,
                    limit.count());
      stop_exit_code_ = 4;
      return std::nullopt;
    }
    auto rv = control_.rendezvous.rbegin()->second;  // the newest
    control_.rendezvous.erase(control_.rendezvous.begin(), control_.rendezvous.upper_bound(rv.generation));
    return rv;
  }

  // The leader's view of what should happen at this boundary.
  std::vector<std::int64_t> leader_words() {
    std::vector<std::int64_t> words(3 + world_, 0);
    std::lock_guard lock(control_.mutex);
    words[1] = generation_;
    words[2] = static_cast<std::int64_t>(plan_version_);
    if (control_.stop) {
      words[0] = kStop;
    } else if (!control_.rendezvous.empty() && control_.rendezvous.rbegin()->first > generation_) {
      words[0] = kRegroup;
      words[1] = control_.rendezvous.rbegin()->first;
    } else if (control_.plan && control_.plan->generation == generation_ &&
               control_.plan->version > plan_version_ &&
               static_cast<int>(control_.plan->batches.size()) == world_) {
      batches_ = control_.plan->batches;
      plan_version_ = control_.plan->version;
      words[2] = static_cast<std::int64_t>(plan_version_);
    }
    for (int r = 0; r < world_; ++r) words[3 + r] = batches_[r];
    return words;
  }

  Outcome train_generation(std::int64_t& min_generation) {
    while (trainer_->step_count() < total_steps_) {
      if (control_.slowdown_changed.exchange(false)) trainer_->set_slowdown(control_.slowdown);
      auto started = Clock::now();
      std::vector<std::int64_t> words =
          rank_ == 0 ? leader_words() : std::vector<std::int64_t>(3 + world_, 0);
      auto status = trainer_->broadcast_control(words);
      if (!status) {
        report_failure(status.error);
        return Outcome::kBroken;
      }
      if (words[0] == kStop) {
        spdlog::info("trainer {}: stopped by the leader at step {}", args_.trainer,
                     trainer_->step_count());
        return Outcome::kStopped;
      }
      if (words[0] == kRegroup) {
        min_generation = words[1];
        return Outcome::kRegroup;
      }
      std::vector<int> batches(world_);
      for (int r = 0; r < world_; ++r) batches[r] = static_cast<int>(words[3 + r]);
      batches_.assign(batches.begin(), batches.end());
      plan_version_ = static_cast<std::uint64_t>(words[2]);
      auto result = trainer_->step(batches);
      if (!result.committed) {
        report_failure(result.error);
        return Outcome::kBroken;
      }
      double step_time = std::chrono::duration<double>(Clock::now() - started).count();
      report_step(result, batches, step_time);
    }
    return Outcome::kFinished;
  }

  void report_step(const training::StepResult& result, const std::vector<int>& batches,
                   double step_time) {
    TrainerReport report;
    report.job_id = args_.job;
    report.trainer = args_.trainer;
    report.generation = generation_;
    report.rank = rank_;
    report.step = result.step;
    report.total_steps = total_steps_;
    report.epoch = result.cursor.epoch;
    report.loss = result.loss;
    report.batch = static_cast<std::int32_t>(result.samples);
    report.batches.assign(batches.begin(), batches.end());
    report.compute_time_s = result.compute_time_s;
    report.step_time_s = step_time;
    report.allreduce_time_s = result.allreduce_time_s;
    if (rank_ == 0) {
      if (eval_every_ > 0 && result.step % eval_every_ == 0 && result.step < total_steps_) {
        auto eval = trainer_->evaluate();
        report.eval_accuracy = eval.accuracy;
        report.eval_loss = eval.loss;
      }
      if (checkpoint_every_ > 0 && result.step % checkpoint_every_ == 0) save_checkpoint();
    }
    // Every step to the agent (heartbeat counters); the leader's to the scheduler (progress).
    system_.tell(runtime::ActorAddress{args_.agent, kAgentActor}, report);
    if (rank_ == 0) system_.tell(runtime::ActorAddress{args_.head, args_.scheduler}, report);
  }

  // Lets the scheduler (and tests) see that every rank of a generation starts from one state.
  void report_synced() {
    TrainerReport report;
    report.job_id = args_.job;
    report.trainer = args_.trainer;
    report.generation = generation_;
    report.rank = rank_;
    report.step = trainer_->step_count();
    report.total_steps = total_steps_;
    report.synced = true;
    double sum = 0;
    for (const auto& named : trainer_->named_parameters()) {
      sum += named.second.to(torch::kDouble).sum().item<double>();
    }
    report.parameter_checksum = sum;
    system_.tell(runtime::ActorAddress{args_.head, args_.scheduler}, report);
  }

  void report_failure(const std::string& error) {
    spdlog::warn("trainer {}: generation {} broke at step {}: {}", args_.trainer, generation_,
                 trainer_->step_count(), error);
    TrainerReport report;
    report.job_id = args_.job;
    report.trainer = args_.trainer;
    report.generation = generation_;
    report.rank = rank_;
    report.step = trainer_->step_count();
    report.total_steps = total_steps_;
    report.collective_failed = true;
    report.error = error;
    system_.tell(runtime::ActorAddress{args_.head, args_.scheduler}, report);
  }

  std::string save_checkpoint() {
    std::error_code ec;
    std::filesystem::create_directories(checkpoint_dir_, ec);
    auto path = (std::filesystem::path(checkpoint_dir_) /
                 fmt::format("step-{:08d}.pt", trainer_->step_count()))
                    .string();
    try {
      trainer_->save_checkpoint(path);
      return path;
    } catch (const std::exception& e) {
      spdlog::error("trainer {}: checkpoint failed: {}", args_.trainer, e.what());
      return "";
    }
  }

  int finish() {
    double accuracy = -1, loss = -1;
    std::string checkpoint;
    if (rank_ == 0) {
      auto eval = trainer_->evaluate();
      accuracy = eval.accuracy;
      loss = eval.loss;
      checkpoint = save_checkpoint();
      spdlog::info("trainer {}: done at step {}: test accuracy {:.4f}, loss {:.4f}", args_.trainer,
                   trainer_->step_count(), accuracy, loss);
    }
    send_done(true, "", accuracy, loss, checkpoint);
    return 0;
  }

  void send_done(bool ok, const std::string& error, double accuracy = -1, double loss = -1,
                 const std::string& checkpoint = "") {
    TrainerDone done{args_.job, args_.trainer, rank_, trainer_ ? trainer_->step_count() : 0,
                     ok, error, accuracy, loss, checkpoint};
    // Asked, not told: the process exits right after, and the message must leave first.
    system_.ask(runtime::ActorAddress{args_.head, args_.scheduler}, done, std::chrono::seconds(2))
        .wait_for(std::chrono::seconds(2));
  }

  const TrainerArgs& args_;
  runtime::ActorSystem& system_;
  Control& control_;
  std::unique_ptr<training::Trainer> trainer_;
  std::string checkpoint_dir_;
  std::chrono::milliseconds collective_timeout_{10000};
  std::int64_t total_steps_ = 0;
  std::int64_t eval_every_ = 0;
  std::int64_t checkpoint_every_ = 0;
  std::int64_t generation_ = 0;
  int rank_ = -1;
  int world_ = 0;
  std::vector<std::int32_t> batches_;
  std::uint64_t plan_version_ = 0;
  int stop_exit_code_ = 0;
};

}  // namespace
}  // namespace omnilearn::actors

int main(int argc, char** argv) {
  using namespace omnilearn;
  actors::TrainerArgs args;
  CLI::App app{"OmniLearn trainer process (started by `omnilearn worker`, not by hand)"};
  app.add_option("--head", args.head)->required();
  app.add_option("--agent", args.agent)->required();
  app.add_option("--job", args.job)->required();
  app.add_option("--scheduler", args.scheduler)->required();
  app.add_option("--trainer", args.trainer)->required();
  app.add_option("--node", args.node);
  app.add_option("--gloo-host", args.gloo_host);
  app.add_option("--slowdown", args.slowdown)->check(CLI::Range(1.0, 1000.0));
  auto* file_option = app.add_option("--cluster-file", args.cluster_file);
  app.add_flag("--insecure", args.insecure)->excludes(file_option);
  CLI11_PARSE(app, argc, argv);
  runtime::SystemOptions system_options;
  if (!args.insecure) {
    if (args.cluster_file.empty()) {
      std::fprintf(stderr, "omnilearn-trainer: --cluster-file F or --insecure is required\n");
      return 2;
    }
    try {
      system_options.credentials = actors::read_cluster_file(args.cluster_file).credentials;
    } catch (const actors::ClusterFileError& e) {
      std::fprintf(stderr, "omnilearn-trainer: %s\n", e.what());
      return 2;
    }
  }

  runtime::block_shutdown_signals();
  // Gloo writes to its peers' sockets: a peer that died must fail the collective (and lead to a
  // new generation), not kill this survivor with SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  auto logger = spdlog::stderr_color_mt("trainer");
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ [%P] %v");
  spdlog::set_default_logger(logger);
  const char* level = std::getenv("OMNILEARN_LOG");
  spdlog::set_level(level ? spdlog::level::from_str(level) : spdlog::level::info);

  runtime::ActorSystem system(system_options);
  actors::Control control;
  control.slowdown = args.slowdown;
  system.spawn<actors::TrainerActor>("trainer", control);

  std::atomic<int> exit_code{-1};
  std::thread loop([&] {
    try {
      actors::TrainingLoop training(args, system, control);
      exit_code = training.run();
    } catch (const std::exception& e) {
      spdlog::error("trainer {}: {}", args.trainer, e.what());
      actors::TrainerDone done{args.job, args.trainer, -1, 0, false, e.what(), -1, -1, ""};
      system.ask(runtime::ActorAddress{args.head, args.scheduler}, done, std::chrono::seconds(2))
          .wait_for(std::chrono::seconds(2));
      exit_code = 1;
    }
  });
  while (exit_code.load() < 0) {
    if (int signal = runtime::wait_for_shutdown_signal(std::chrono::milliseconds(100))) {
      spdlog::info("trainer {}: signal {}; stopping", args.trainer, signal);
      {
        std::lock_guard lock(control.mutex);
        control.stop = true;
        control.stop_reason = "signal";
      }
      control.changed.notify_all();
      // A blocked collective cannot be interrupted; give the loop a moment, then leave anyway.
      for (int i = 0; i < 20 && exit_code.load() < 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (exit_code.load() < 0) std::_Exit(0);
    }
  }
  loop.join();
  system.shutdown();
  return exit_code.load();
}
