// omnilearn-trainer: one data-parallel replica of a job, started by a node agent. Its actor
// ("trainer") receives rendezvous, plans, leases and stop requests and queues them for the
// training thread; the training thread is a thin driver of scheduler::ElasticMember, the
// trainer's side of the elastic protocol as a pure state machine (elastic/elastic_member.hpp):
// it asks the machine what to do (join a group, sync, broadcast the group's first control
// words, train a step, finish, wait, exit), does it on the training::Trainer, and feeds the
// outcome back. A step is one gradient exchange that carries rank 0's control words; whether
// the words confirm it and whether it may be committed (the commit gate, with its lease
// renewal) are the machine's answers, which the trainer asks for inside the step.
// What the protocol decides lives in the machine, where the deterministic simulation
// (tests/elastic/elastic_simulation_test.cpp) checks it; this file only carries it out.
#include <CLI/CLI.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/torch.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <variant>

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "wire/job_protocol.hpp"
#include "jobs/job_spec.hpp"
#include "trainer/asp_roles.hpp"
#include "trainer/runtime_store.hpp"
#include "trainer/trainer_config.hpp"
#include "cluster/head_follower.hpp"
#include "runtime/actor_system.hpp"
#include "runtime/cluster_file.hpp"
#include "runtime/shutdown.hpp"
#include "elastic/elastic_member.hpp"
#include "training/trainer.hpp"
#include "training/user_files.hpp"

namespace omnilearn::actors {
namespace {

using Clock = std::chrono::steady_clock;
namespace proto = scheduler;

struct TrainerArgs {
  std::string head;
  std::string agent;
  std::string job;
  std::string scheduler;
  std::string trainer;
  std::string node;
  std::string gloo_host;
  double slowdown = 1.0;
  bool slowdown_spins = false;  // --slowdown-spin: burn the CPU instead of sleeping
  std::string cluster_file;  // the agent's credentials; empty only with --insecure
  bool insecure = false;
};

struct StopRequest {
  std::string reason;
  int signal = 0;  // set when a signal asked for it: the exit code is then 128 + signal
};
using Inbound = std::variant<proto::RendezvousOrder, proto::PlanOrder, proto::LeaseAnswer,
                             StopRequest>;

std::int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// What the actor thread hands the training thread; guarded by `mutex`.
struct Control {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Inbound> inbox;
  std::atomic<double> slowdown{1.0};
  std::atomic<bool> slowdown_changed{false};
  // Collectives of generations below this one give up (the scheduler lost one of their members).
  std::atomic<std::int64_t> abandon_below{0};
  std::atomic<std::int64_t> newest_generation{0};  // the newest rendezvous received
  // A stop (from the scheduler, its agent or a signal) the training thread has not read yet:
  // the wait it is in ends at once (the abandon checks, every 50 ms), so that the stop is read
  // then rather than after a collective's 30 s. Once read, a stopping leader's last word to
  // its followers (ElasticMember's abandon at a boundary) still goes out, but no wait lasts
  // past kStoppingGraceMs after the stop was read: a peer that hangs cannot hold a trainer that
  // is leaving. A stop goes only to a trainer the job no longer counts in a generation, or at
  // the job's end.
  std::atomic<bool> stop_unread{false};
  std::atomic<std::int64_t> stop_read_at_ms{0};  // 0: no stop read
  // When the first stop arrived (steady clock, ms; 0: none): the process leaves kStopBoundMs
  // after it whatever its training thread does (the main loop below).
  std::atomic<std::int64_t> stop_arrived_ms{0};
  // When the training thread began computing the step it is in, or last polled a wait in it
  // (steady clock, ms; 0: not in a step). Read by the trainer actor for the scheduler's probe
  // (TrainerActivity); written by the training thread only.
  std::atomic<std::int64_t> computing_since_ms{0};
  // A wait polled by the training thread: whatever it waits for, it is not computing.
  void waiting() {
    if (computing_since_ms.load(std::memory_order_relaxed) != 0) computing_since_ms = steady_ms();
  }
  static constexpr std::int64_t kStoppingGraceMs = 1000;
  bool stopping_waits_end(std::int64_t now_ms) const {
    const std::int64_t read_at = stop_read_at_ms.load();
    return stop_unread.load() || (read_at > 0 && now_ms - read_at > kStoppingGraceMs);
  }

  // The head the trainer sends to (cluster/head_follower.hpp: the same rule for synchronous
  // and asynchronous jobs).
  std::string head() const { return follower.head(); }
  // The job's agent says the job goes on under the head at `endpoint`, started as `epoch`.
  bool head_moved(const std::string& endpoint, std::uint64_t epoch) {
    const std::string before = follower.head();
    if (!follower.moved(endpoint, epoch)) {
      spdlog::warn(
          "trainer: ignored a move to the head at {} (start {}): a newer head leads the job",
          endpoint, epoch);
      return false;
    }
    if (endpoint != before) {
      spdlog::info("trainer: the job goes on under the head at {} (start {})", endpoint, epoch);
    }
    return true;
  }
  void heard_scheduler_at(const std::string& system, std::int64_t generation) {
    if (follower.heard_scheduler_at(system, generation)) {
      spdlog::info("trainer: the job's scheduler now speaks from {} (generation {})", system,
                   generation);
    }
  }
  HeadFollower follower{""};
  std::string scheduler_actor;
  std::string job;
  std::string trainer;
  std::string node;
  std::string gloo_host;

  void push(Inbound message) {
    if (std::holds_alternative<StopRequest>(message)) {
      stop_unread = true;
      std::int64_t none = 0;
      stop_arrived_ms.compare_exchange_strong(none, steady_ms());
    }
    {
      std::lock_guard lock(mutex);
      inbox.push_back(std::move(message));
    }
    changed.notify_all();
  }
};

proto::Millis now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
      .count();
}

class TrainerActor : public runtime::Actor {
 public:
  explicit TrainerActor(Control& control) : control_(control) {}
  void on_message(const runtime::Envelope& message) override {
    const bool from_scheduler =
        message.from.actor == control_.scheduler_actor && !message.from.system.empty();
    switch (message.kind) {
      case MessageKind::kRendezvous:
        if (auto rv = decode<Rendezvous>(message)) {
          if (from_scheduler) control_.heard_scheduler_at(message.from.system, rv->generation);
          std::int64_t newest = control_.newest_generation.load();
          while (newest < rv->generation &&
                 !control_.newest_generation.compare_exchange_weak(newest, rv->generation)) {
          }
          if (rv->abandon_previous) {
            // Read by the training thread while it waits in a collective (abandon check).
            std::int64_t seen = control_.abandon_below.load();
            while (seen < rv->generation &&
                   !control_.abandon_below.compare_exchange_weak(seen, rv->generation)) {
            }
          }
          control_.push(proto::RendezvousOrder{rv->generation, rv->rank, rv->world, rv->batches,
                                               rv->plan_version, rv->leave, rv->abandon_previous,
                                               rv->checkpoint, rv->checkpoint_step});
        }
        break;
      case MessageKind::kPlanUpdate:
        if (auto plan = decode<PlanUpdate>(message)) {
          control_.push(proto::PlanOrder{plan->generation, plan->version, plan->batches});
        }
        break;
      case MessageKind::kLeaseGrant:
        if (auto grant = decode<LeaseGrant>(message)) {
          if (from_scheduler) control_.heard_scheduler_at(message.from.system, grant->generation);
          control_.push(proto::LeaseAnswer{grant->generation, grant->seq, grant->granted,
                                           grant->duration_ms, grant->reason, grant->superseded});
        }
        break;
      case MessageKind::kStopTrainer: {
        auto stop = decode<StopTrainer>(message);
        control_.push(StopRequest{stop ? stop->reason : "stopped", 0});
        break;
      }
      case MessageKind::kHeadMoved:
        if (auto moved = decode<HeadMoved>(message);
            moved && moved->job_id == control_.job &&
            control_.head_moved(moved->head, moved->head_epoch)) {
          // A hello that the scheduler answers only by learning where this trainer is (a
          // synchronous job's scheduler also sends again the rendezvous it sent last; an
          // asynchronous job's reaches its workers and servers from then on); the reply is not
          // needed. An asynchronous role's next message goes to this head too (run_asp).
          tell(runtime::ActorAddress{control_.head(), control_.scheduler_actor},
               TrainerHello{control_.job, control_.trainer, control_.node,
                            static_cast<std::int32_t>(::getpid()), control_.gloo_host});
        }
        break;
      case MessageKind::kTrainerActivity: {
        const std::int64_t since = control_.computing_since_ms.load();
        reply(message, TrainerActivityReply{since == 0 ? 0 : std::max<std::int64_t>(
                                                                 0, steady_ms() - since)});
        break;
      }
      case MessageKind::kSetTrainerSpeed:
        if (auto speed = decode<SetTrainerSpeed>(message)) {
          control_.slowdown = speed->slowdown;
          control_.slowdown_changed = true;
        }
        break;
      default:
        break;
    }
  }

 private:
  Control& control_;
};

class TrainingLoop {
 public:
  TrainingLoop(const TrainerArgs& args, runtime::ActorSystem& system, Control& control)
      : args_(args), system_(system), control_(control) {}

  // Returns the process exit code: 0 when the scheduler ended the job or drained this trainer.
  int run() {
    auto hello = say_hello();
    if (!hello) return 3;
    JobSpec spec = parse_job_spec(hello->job_toml, hello->source_name);
    checkpoint_dir_ = hello->checkpoint_dir;
    collective_timeout_ = std::chrono::milliseconds(std::max(1000, hello->collective_timeout_ms));
    torch::set_num_threads(spec.train.threads);
    eval_every_ = spec.train.eval_every;
    checkpoint_every_ = spec.checkpoint.every;

    auto data = training::load_datasets(spec.data);
    const std::int64_t N = data.train->size();
    const TrainerSetup setup = trainer_setup(spec, data);
    total_steps_ = setup.total_steps;
    trainer_ = std::make_unique<training::Trainer>(setup.config, data);
    trainer_->set_slowdown(control_.slowdown.load());
    trainer_->set_slowdown_spins(args_.slowdown_spins);
    if (!hello->role.empty()) return run_asp(*hello, spec);
    trainer_->set_abandon_check(
        [this] {
          control_.waiting();
          return control_.stopping_waits_end(now_ms()) ||
                 control_.abandon_below.load() > trainer_->generation();
        });
    auto runtime_store = c10::make_intrusive<RuntimeStore>(
        system_,
        [this] {
          return runtime::ActorAddress{control_.head(), kStoreActor};
        },
        std::chrono::milliseconds(60000));
    // A rendezvous that a newer generation has replaced will not complete: stop waiting for it.
    // Nor for one this trainer will leave anyway.
    runtime_store->set_abandon_check([this] {
      control_.waiting();
      return control_.stopping_waits_end(now_ms()) ||
             control_.newest_generation.load() > joining_generation_;
    });
    store_ = c10::make_intrusive<c10d::PrefixStore>("job/" + args_.job, runtime_store);
    spdlog::info("trainer {}: ready ({} samples, {} steps)", args_.trainer, N, total_steps_);

    proto::ElasticMemberOptions options;
    options.total_steps = total_steps_;
    // How long a leader waits at a boundary for its lease before it abandons the generation:
    // the heartbeat timeout, after which the scheduler re-forms without an unreachable leader
    // anyway (and its followers, waiting in the control broadcast under the 30 s group timeout,
    // are released by the next rendezvous). Shorter, a head slowed by load (a renewal answered
    // late) made healthy generations break.
    options.lease_wait = collective_timeout_.count();
    options.idle_limit = 120000 + static_cast<proto::Millis>(spec.elastic.grace_period_s * 1000);
    proto::ElasticMember member(options, now_ms());
    // Asked by training::Trainer::step between the exchange and the update: the machine's
    // commit gate for the step in progress (TorchReplica::step sets gate_).
    trainer_->set_commit_gate([this] { return gate_ && (*gate_)(*gate_words_); });
    while (true) {
      feed_inbox(member);
      const proto::MemberAction action = member.next(now_ms());
      send(member);
      if (const auto* exit = std::get_if<proto::ExitAction>(&action)) {
        spdlog::info("trainer {}: exiting at step {}: {}", args_.trainer, trainer_->step_count(),
                     exit->reason);
        flush_sends();
        return signal_ ? 128 + signal_ : exit->code;
      }
      perform(action, member);
      send(member);
    }
  }

 private:
  void feed_inbox(proto::ElasticMember& member) {
    std::deque<Inbound> inbox;
    {
      std::lock_guard lock(control_.mutex);
      inbox.swap(control_.inbox);
    }
    for (auto& message : inbox) {
      const proto::Millis now = now_ms();
      if (auto* rv = std::get_if<proto::RendezvousOrder>(&message)) {
        member.on_rendezvous(*rv, now);
      } else if (auto* plan = std::get_if<proto::PlanOrder>(&message)) {
        member.on_plan(*plan);
      } else if (auto* lease = std::get_if<proto::LeaseAnswer>(&message)) {
        member.on_lease(*lease, now);
      } else if (auto* stop = std::get_if<StopRequest>(&message)) {
        if (control_.stop_read_at_ms.load() == 0) control_.stop_read_at_ms = now;
        control_.stop_unread = false;
        if (stop->signal) signal_ = stop->signal;
        spdlog::info("trainer {}: told to stop ({})", args_.trainer, stop->reason);
        member.on_stop(stop->reason);
      }
    }
  }

  // Asynchronous training (mode = "asp"): no generations, no collectives (asp_roles.hpp).
  int run_asp(const TrainerHelloReply& hello, const JobSpec& spec) {
    AspRoleContext context{system_,
                           [this] { return control_.head(); },
                           args_.agent,
                           args_.scheduler,
                           args_.job,
                           args_.trainer,
                           args_.gloo_host,
                           hello,
                           spec,
                           *trainer_,
                           total_steps_,
                           {},
                           {}};
    std::optional<std::string> stopped;
    context.wait_stop = [this, &stopped](std::chrono::milliseconds timeout)
        -> std::optional<std::string> {
      std::unique_lock lock(control_.mutex);
      const auto until = Clock::now() + timeout;
      while (!stopped) {
        while (!control_.inbox.empty()) {
          Inbound message = std::move(control_.inbox.front());
          control_.inbox.pop_front();
          if (auto* stop = std::get_if<StopRequest>(&message)) {
            if (stop->signal) signal_ = stop->signal;
            spdlog::info("trainer {}: told to stop ({})", args_.trainer, stop->reason);
            stopped = stop->reason;
          }
        }
        if (stopped || control_.changed.wait_until(lock, until) == std::cv_status::timeout) break;
      }
      return stopped;
    };
    context.apply_slowdown = [this] {
      if (control_.slowdown_changed.exchange(false)) trainer_->set_slowdown(control_.slowdown);
    };
    spdlog::info("trainer {}: asynchronous {} ({})", args_.trainer, hello.role,
                 hello.role == "server" ? fmt::format("shard {} of {}", hello.shard, hello.shards)
                                        : fmt::format("worker {}", hello.worker_id));
    const int code = hello.role == "server" ? run_asp_server(context) : run_asp_worker(context);
    return signal_ ? 128 + signal_ : code;
  }

  // The replica the machine's actions run on: this process's training::Trainer.
  class TorchReplica : public proto::Replica {
   public:
    explicit TorchReplica(TrainingLoop& loop) : loop_(loop) {}
    Outcome join(std::int64_t generation, std::int32_t rank, std::int32_t world) override {
      training::GroupOptions group;
      group.gloo_hostname = loop_.args_.gloo_host;
      loop_.joining_generation_ = generation;
      return outcome(loop_.trainer_->join_group(
          loop_.store_, static_cast<int>(generation), rank, world,
          std::max(loop_.collective_timeout_, std::chrono::milliseconds(30000)), group));
    }
    Outcome sync(const proto::SyncAction& action, std::int64_t* step,
                 std::uint64_t* checksum) override {
      int root = 0;
      training::CollectiveStatus status;
      if (action.checkpoint_step >= 0) {
        // The job resumes from a checkpoint: rank 0 loads it (model, optimizer state, step and
        // data cursor) and every rank adopts rank 0's state, whatever it held itself.
        if (loop_.trainer_->rank() == 0) {
          try {
            loop_.trainer_->load_checkpoint(action.checkpoint);
          } catch (const std::exception& e) {
            return {false, "cannot resume from checkpoint " + action.checkpoint + ": " + e.what(),
                    true};
          }
          if (loop_.trainer_->step_count() != action.checkpoint_step) {
            return {false,
                    fmt::format("checkpoint {} holds step {}, not step {} as the job recorded",
                                action.checkpoint, loop_.trainer_->step_count(),
                                action.checkpoint_step),
                    true};
          }
          spdlog::info("trainer {}: loaded checkpoint {} (step {})", loop_.args_.trainer,
                       action.checkpoint, action.checkpoint_step);
        }
        status = loop_.trainer_->sync_state_from_rank0();
      } else {
        status = loop_.trainer_->sync_state_from_most_advanced(&root);
      }
      if (status) {
        loop_.checksum_ = 0;
        for (const auto& named : loop_.trainer_->named_parameters()) {
          loop_.checksum_ += named.second.to(torch::kDouble).sum().item<double>();
        }
        spdlog::info("trainer {}: synced at step {} (state from rank {})", loop_.args_.trainer,
                     loop_.trainer_->step_count(), root);
      }
      *step = loop_.trainer_->step_count();
      *checksum = 0;  // the report carries the parameter sum instead (checksum_)
      return outcome(status);
    }
    // The group's first control words: a broadcast of their own.
    Outcome control(std::vector<std::int64_t>& words) override {
      loop_.apply_slowdown();
      loop_.boundary_ = Clock::now();
      const auto status = loop_.trainer_->broadcast_control(words);
      loop_.control_time_s_ = std::chrono::duration<double>(Clock::now() - loop_.boundary_).count();
      return outcome(status);
    }
    // One step, rank 0's words inside its gradient exchange (training::StepControl): every rank
    // commits it only if the words confirm its plan and the member's gate lets it.
    Outcome step(const std::vector<std::int32_t>& batches, std::vector<std::int64_t>& words,
                 const WordsCheck& confirms, const WordsCheck& gate, std::int64_t* step) override {
      loop_.apply_slowdown();
      loop_.boundary_ = Clock::now();
      // From the previous step's end (committed or not) to this one's start: what the loop
      // spends between steps (reports, the machine, the next action).
      const double gap_s = loop_.step_end_ == Clock::time_point{}
                               ? 0.0
                               : std::chrono::duration<double>(loop_.boundary_ - loop_.step_end_)
                                     .count();
      loop_.control_time_s_ = 0;
      training::StepControl carried;
      carried.words = words;  // rank 0's words; empty on the others
      carried.accept = confirms;
      loop_.last_batches_.assign(batches.begin(), batches.end());
      loop_.gate_ = &gate;
      loop_.gate_words_ = &carried.words;
      loop_.last_ = loop_.trainer_->step(loop_.last_batches_, &carried);
      loop_.gate_ = nullptr;
      loop_.gate_words_ = nullptr;
      words = carried.words;
      loop_.step_end_ = Clock::now();
      loop_.last_step_time_ =
          std::chrono::duration<double>(loop_.step_end_ - loop_.boundary_).count();
      *step = loop_.last_.step;
      const auto& r = loop_.last_;
      if (r.committed) {
        spdlog::debug(
            "trainer {}: step {} b={} {:.1f} ms: data {:.1f} fwd {:.1f} bwd {:.1f} "
            "slowdown {:.1f} exposed all-reduce {:.1f} ({}/{} buckets launched in "
            "backward) optimizer {:.1f} gap before {:.1f}",
            loop_.args_.trainer, r.step, r.samples, 1000 * loop_.last_step_time_,
            1000 * r.data_time_s, 1000 * r.forward_time_s, 1000 * r.backward_time_s,
            1000 * r.slowdown_time_s, 1000 * r.allreduce_time_s, r.buckets_launched_in_backward,
            r.buckets, 1000 * r.optimizer_time_s, 1000 * gap_s);
      }
      // Words that did not confirm the step: dropped alike on every rank, not a failure.
      if (r.committed || r.control_rejected) return {};
      return {false, r.error};
    }
    Outcome finish() override {
      auto eval = loop_.trainer_->evaluate();
      loop_.final_accuracy_ = eval.accuracy;
      loop_.final_loss_ = eval.loss;
      std::string error;
      loop_.final_checkpoint_ = loop_.save_checkpoint(&error);
      spdlog::info("trainer {}: done at step {}: test accuracy {:.4f}, loss {:.4f}",
                   loop_.args_.trainer, loop_.trainer_->step_count(), eval.accuracy, eval.loss);
      loop_.exit_before_done_if_asked();
      if (!error.empty()) return {false, "final checkpoint failed: " + error};
      return {};
    }

   private:
    static Outcome outcome(const training::CollectiveStatus& status) {
      return {status.ok, status.error};
    }
    TrainingLoop& loop_;
  };

  void perform(const proto::MemberAction& action, proto::ElasticMember& member) {
    if (const auto* wait = std::get_if<proto::WaitAction>(&action)) {
      const auto delay = std::chrono::milliseconds(std::max<proto::Millis>(0, wait->until - now_ms()));
      std::unique_lock lock(control_.mutex);
      control_.changed.wait_for(lock, delay, [&] { return !control_.inbox.empty(); });
      return;
    }
    TorchReplica replica(*this);
    // The commit gate's waits for a lease renewal, inside a step.
    const auto wait = [this, &member](proto::Millis until) {
      control_.waiting();
      send(member);
      const auto delay = std::chrono::milliseconds(std::max<proto::Millis>(0, until - now_ms()));
      {
        std::unique_lock lock(control_.mutex);
        control_.changed.wait_for(lock, delay, [&] { return !control_.inbox.empty(); });
      }
      feed_inbox(member);
    };
    const bool step = std::holds_alternative<proto::StepAction>(action);
    if (step) control_.computing_since_ms = steady_ms();
    proto::carry_out(action, replica, member, now_ms, wait);
    control_.computing_since_ms = 0;
    // After a committed step: evaluation on every rank (each its share of the test set),
    // periodic checkpoints on the leader.
    if (std::holds_alternative<proto::StepAction>(action) && last_.committed &&
        member.phase() == proto::ElasticMember::Phase::kTraining) {
      after_step(member.rank());
    }
  }

  void apply_slowdown() {
    if (control_.slowdown_changed.exchange(false)) trainer_->set_slowdown(control_.slowdown);
  }

  // Fault injection for the end-to-end tests (tests/integration/job_leader_faults_test.cpp):
  // with OMNILEARN_FAULT_EXIT_BEFORE_DONE=FILE, the first leader to finish (the one that
  // creates FILE) exits with code 0 without its TrainerDone, as a process that dies or whose
  // message is lost at that moment would. The job must still end, through a survivor.
  void exit_before_done_if_asked() {
    const char* marker = std::getenv("OMNILEARN_FAULT_EXIT_BEFORE_DONE");
    if (!marker || !*marker) return;
    const int fd = ::open(marker, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) return;
    ::close(fd);
    spdlog::warn("trainer {}: fault injection: exiting before TrainerDone", args_.trainer);
    std::_Exit(0);
  }

  // Fault injection for the end-to-end tests (tests/integration/job_leader_faults_test.cpp):
  // with OMNILEARN_FAULT_LOSE_FINAL_REPORT=FILE, the first leader to report the job's last step
  // (the one that creates FILE) sends neither that report nor its first done to the scheduler,
  // as when the head is killed as they arrive. True when this report is to be lost.
  bool lose_final_report_if_asked(const TrainerReport& report) {
    if (total_steps_ <= 0 || report.step != total_steps_) return false;
    const char* marker = std::getenv("OMNILEARN_FAULT_LOSE_FINAL_REPORT");
    if (!marker || !*marker) return false;
    const int fd = ::open(marker, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    ::close(fd);
    spdlog::warn("trainer {}: fault injection: the report of step {} is lost", args_.trainer,
                 report.step);
    losing_final_report_ = true;
    return true;
  }

  void after_step(std::int32_t rank) {
    eval_accuracy_ = eval_loss_ = -1;
    if (eval_every_ > 0 && last_.step % eval_every_ == 0 && last_.step < total_steps_) {
      // Every rank of the group is here after the same committed step. A failure breaks the
      // group: the next control round reports it.
      training::EvalResult eval;
      // Each rank evaluates a share of the test set in proportion to its batch: the same
      // batches on every rank (those of the step just committed).
      const auto status = trainer_->evaluate_sharded(&eval, 0, last_batches_);
      if (status) {
        eval_accuracy_ = eval.accuracy;
        eval_loss_ = eval.loss;
      } else {
        spdlog::warn("trainer {}: evaluation at step {} failed: {}", args_.trainer, last_.step,
                     status.error);
      }
    }
    step_checkpoint_.clear();
    if (rank == 0 && checkpoint_every_ > 0 && last_.step % checkpoint_every_ == 0) {
      std::string error;
      step_checkpoint_ = save_checkpoint(&error);  // reported with the step: where it lies
    }
  }

  // Carries what the machine wants sent.
  void send(proto::ElasticMember& member) {
    const runtime::ActorAddress scheduler{control_.head(), args_.scheduler};
    for (auto& message : member.take_outbox()) {
      if (const auto* report = std::get_if<proto::MemberReport>(&message)) {
        TrainerReport r;
        r.job_id = args_.job;
        r.trainer = args_.trainer;
        r.generation = report->generation;
        r.rank = report->rank;
        r.step = report->step;
        r.total_steps = total_steps_;
        r.error = report->error;
        r.synced_generation = report->synced_generation;
        switch (report->kind) {
          case proto::MemberReport::Kind::kSynced:
            r.synced = true;
            r.parameter_checksum = checksum_;
            system_.tell(scheduler, r);
            break;
          case proto::MemberReport::Kind::kLeft:
            r.left = true;
            system_.tell(scheduler, r);
            break;
          case proto::MemberReport::Kind::kBroken:
            spdlog::warn("trainer {}: generation {} broke at step {}: {}", args_.trainer,
                         report->generation, report->step, report->error);
            r.collective_failed = true;
            system_.tell(scheduler, r);
            break;
          case proto::MemberReport::Kind::kStep:
            r.epoch = last_.cursor.epoch;
            r.loss = last_.loss;
            r.batch = static_cast<std::int32_t>(last_.samples);
            r.batches.assign(last_batches_.begin(), last_batches_.end());
            r.compute_time_s = last_.compute_time_s;
            r.step_time_s = last_step_time_;
            r.allreduce_time_s = last_.allreduce_time_s;
            if (report->rank == 0) {
              r.eval_accuracy = eval_accuracy_;
              r.eval_loss = eval_loss_;
              r.checkpoint = step_checkpoint_;
              r.rank_compute_times_s = last_.rank_compute_times_s;
            }
            // Every step to the agent (heartbeat counters); the leader's to the scheduler.
            system_.tell(runtime::ActorAddress{args_.agent, kAgentActor}, r);
            if (report->rank == 0) {
              if (!lose_final_report_if_asked(r)) system_.tell(scheduler, r);
              last_leader_report_ = r;
            }
            break;
        }
      } else if (const auto* ask = std::get_if<proto::LeaseAsk>(&message)) {
        system_.tell(scheduler, LeaseRequest{args_.job, args_.trainer, ask->generation, ask->seq,
                                             ask->step});
      } else if (const auto* done = std::get_if<proto::MemberDone>(&message)) {
        TrainerDone d;
        d.job_id = args_.job;
        d.trainer = args_.trainer;
        d.rank = done->rank;
        d.step = done->step;
        d.ok = done->ok;
        d.error = done->error;
        d.generation = done->generation;
        d.outcome = proto::to_string(done->outcome);
        if (done->outcome == proto::MemberDone::Outcome::kFinished && done->rank == 0) {
          d.test_accuracy = final_accuracy_;
          d.test_loss = final_loss_;
          d.checkpoint = final_checkpoint_;
        }
        const bool again = last_done_ && last_done_->generation == done->generation &&
                           last_done_->step == done->step && last_done_->outcome == done->outcome;
        last_done_ = *done;
        if (!again && losing_final_report_) {
          spdlog::warn("trainer {}: fault injection: its first done is lost", args_.trainer);
          losing_final_report_ = false;
          continue;
        }
        // A done sent again was not answered: the head may have died, and with it the
        // leader's report of the same step, which is told, not asked (or a restarted head
        // received it before it had restored the job). Without it the job's last step would
        // have no `step` event though the done ends the job at that step, so the report goes
        // again first; the scheduler ignores a copy of a step it has.
        if (again && done->rank == 0 && last_leader_report_ &&
            last_leader_report_->generation == done->generation &&
            last_leader_report_->step == done->step) {
          system_.tell(scheduler, *last_leader_report_);
        }
        // Asked, not told: if the process exits next, the message must have left first.
        pending_.push_back(system_.ask(scheduler, d, std::chrono::seconds(2)));
        while (pending_.size() > 4) pending_.pop_front();
      }
    }
  }

  void flush_sends() {
    for (auto& f : pending_) f.wait_for(std::chrono::seconds(2));
    pending_.clear();
  }

  std::optional<TrainerHelloReply> say_hello() {
    TrainerHello hello{args_.job, args_.trainer, args_.node, static_cast<std::int32_t>(getpid()),
                       args_.gloo_host};
    for (int attempt = 0; attempt < 5; ++attempt) {
      auto result = system_
                        .ask(runtime::ActorAddress{control_.head(), args_.scheduler}, hello,
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

  // Writes a checkpoint of the committed state; returns its path, or "" with *error set.
  std::string save_checkpoint(std::string* error) {
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
      *error = e.what();
      return "";
    }
  }

  const TrainerArgs& args_;
  runtime::ActorSystem& system_;
  Control& control_;
  std::unique_ptr<training::Trainer> trainer_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::string checkpoint_dir_;
  std::chrono::milliseconds collective_timeout_{10000};
  std::int64_t total_steps_ = 0;
  std::int64_t eval_every_ = 0;
  std::int64_t checkpoint_every_ = 0;
  int signal_ = 0;
  std::int64_t joining_generation_ = 0;  // training thread only (the store's abandon check)

  // The member's commit gate for the step in progress and the words it judges (set by
  // TorchReplica::step for the length of training::Trainer::step; training thread only).
  const proto::Replica::WordsCheck* gate_ = nullptr;
  const std::vector<std::int64_t>* gate_words_ = nullptr;
  double control_time_s_ = 0;  // the last control broadcast (0 when carried in the exchange)

  // The last step, for its report.
  training::StepResult last_;
  std::vector<int> last_batches_;
  Clock::time_point boundary_;
  Clock::time_point step_end_;  // when the last step returned (none yet: the epoch)
  double last_step_time_ = 0;
  double eval_accuracy_ = -1, eval_loss_ = -1;
  std::string step_checkpoint_;  // the checkpoint the last step wrote, if any
  double checksum_ = 0;
  double final_accuracy_ = -1, final_loss_ = -1;
  std::string final_checkpoint_;
  std::optional<TrainerReport> last_leader_report_;  // sent again with a done (see send)
  std::optional<proto::MemberDone> last_done_;       // the last done sent
  bool losing_final_report_ = false;                 // its next first done is lost (injected)
  std::deque<std::future<runtime::AskResult>> pending_;
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
  app.add_flag("--slowdown-spin", args.slowdown_spins);
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
      system_options.credentials = runtime::read_cluster_file(args.cluster_file).credentials;
    } catch (const runtime::ClusterFileError& e) {
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
  control.follower.moved(args.head, 0);
  control.scheduler_actor = args.scheduler;
  control.job = args.job;
  control.trainer = args.trainer;
  control.node = args.node;
  control.gloo_host = args.gloo_host;
  system.spawn<actors::TrainerActor>("trainer", control);
  // The agent learns where this process is before any step (a server reports none): it points
  // the trainer to a new head through it.
  system.tell(runtime::ActorAddress{args.agent, actors::kAgentActor},
              actors::TrainerStarted{args.job, args.trainer},
              runtime::ActorAddress{system.id(), "trainer"});

  std::atomic<int> exit_code{-1};
  std::atomic<bool> loop_done{false};
  std::thread loop([&] {
    try {
      actors::TrainingLoop training(args, system, control);
      exit_code = training.run();
    } catch (const std::exception& e) {
      // A training error (bad data, a failed load): its text goes to the scheduler; the exit
      // code goes to the agent, which reports the exit, so the job sees it either way. An error
      // in the job's own input gets its own code: the scheduler fails the job instead of
      // starting the trainer again.
      const bool bad_input = dynamic_cast<const training::DatasetError*>(&e) != nullptr ||
                             dynamic_cast<const training::ModelError*>(&e) != nullptr;
      spdlog::error("trainer {}: {}", args.trainer, e.what());
      actors::TrainerDone done;
      done.job_id = args.job;
      done.trainer = args.trainer;
      done.ok = false;
      done.error = e.what();
      done.outcome = "error";
      system
          .ask(runtime::ActorAddress{control.head(), args.scheduler}, done, std::chrono::seconds(2))
          .wait_for(std::chrono::seconds(2));
      exit_code = bad_input ? scheduler::kTrainerExitBadInput : 1;
    }
    loop_done = true;
  });
  // A trainer told to stop leaves within this whatever its training thread does: a step of a
  // node slowed a thousandfold, a call that never returns. Each wait reads the stop within a
  // second, and no step is left half committed by leaving (the scheduler already counts this
  // trainer out, as it would a killed one); without the bound such a process would hold its
  // memory and device until its compute ended, if ever.
  constexpr std::int64_t kStopBoundMs = 10000;
  while (exit_code.load() < 0) {
    const std::int64_t told = control.stop_arrived_ms.load();
    if (told > 0 && actors::steady_ms() - told > kStopBoundMs && exit_code.load() < 0) {
      spdlog::warn("trainer {}: still running {} s after it was told to stop (its training "
                   "thread is busy: a long step, a stuck call); leaving without it",
                   args.trainer, kStopBoundMs / 1000);
      spdlog::default_logger()->flush();
      std::fflush(nullptr);
      std::_Exit(0);
    }
    if (int signal = runtime::wait_for_shutdown_signal(std::chrono::milliseconds(100))) {
      spdlog::info("trainer {}: signal {}; stopping", args.trainer, signal);
      control.push(actors::StopRequest{"signal " + std::to_string(signal), signal});
      // A blocked collective cannot be interrupted; give the loop a moment, then leave anyway,
      // with the signal's exit code: a signalled trainer did not succeed.
      for (int i = 0; i < 20 && exit_code.load() < 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (exit_code.load() < 0) std::_Exit(128 + signal);
    }
  }
  // With its exit code known, the loop only tears down. A group whose collective it abandoned
  // is destroyed on another thread that waits for that collective up to the group timeout
  // (30 s: Collectives::leave); nothing of it matters to anyone once the trainer leaves, and a
  // process that stays holds its memory and its device meanwhile.
  for (int i = 0; i < 20 && !loop_done.load(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!loop_done.load()) {
    spdlog::info("trainer {}: leaving without waiting for an abandoned collective's group",
                 args.trainer);
    spdlog::default_logger()->flush();
    std::fflush(nullptr);
    std::_Exit(exit_code.load());
  }
  loop.join();
  system.shutdown();
  return exit_code.load();
}
