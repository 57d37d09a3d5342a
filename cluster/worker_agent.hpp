#pragma once
// WorkerAgent: the node agent of `omnilearn worker`. On top of membership it hosts trainers:
// starts a trainer process per SpawnTrainer, collects their per-step reports into the counters
// its heartbeats carry, reports every trainer exit to the trainer's scheduler (TrainerExited,
// with the exit code and the last lines the trainer wrote to stderr), and applies the node's
// emulated resources (slowdown factor, CPU quota) to itself and its trainers.

#include <sys/types.h>

#include <deque>
#include <map>
#include <memory>
#include <string>

#include "cluster/cpu_quota.hpp"
#include "cluster/fork_thread.hpp"
#include "wire/job_protocol.hpp"
#include "cluster/node_agent.hpp"

namespace omnilearn::actors {

struct WorkerOptions {
  AgentOptions agent;
  std::string trainer_binary;   // path of omnilearn-trainer
  std::string local_endpoint;   // where this agent listens for its trainers (loopback)
  std::string gloo_host;        // address peers reach this node's collectives at
  double slowdown = 1.0;
  // The slowdown burns the CPU a slower machine would instead of sleeping (trainers get
  // --slowdown-spin; training::Trainer::set_slowdown_spins says why).
  bool slowdown_spins = false;
  // The cluster file the trainers read their credentials from; empty: they run --insecure like
  // this agent.
  std::string cluster_file;
};

class WorkerAgent : public NodeAgent {
 public:
  // `quota`, when given, already holds this process (created by the caller so that a cgroup
  // problem is reported before the node joins).
  explicit WorkerAgent(WorkerOptions options, std::unique_ptr<CpuQuota> quota = nullptr);
  ~WorkerAgent() override;

  void on_start() override;
  void on_stop() override;

 protected:
  std::vector<ActorCounters> hosted_counters() override;
  void fill_usage(NodeUsage& usage) override;
  void on_other_message(const runtime::Envelope& message) override;
  void on_forgotten() override;
  // Stops the trainers started for another node record than the one just registered: the
  // head declared that one dead and wrote them off (a registration reply lost, then a new
  // registration), so they would only idle until their own timeout.
  void on_registered(const AgentState& state) override;
  // Asks the head about each job this node hosts trainers of, and stops the trainers of the
  // jobs it has ended or does not know: their scheduler is gone with the previous head.
  void on_head_restarted(std::uint64_t epoch) override;
  // Reports again the exits reported since `since`: told while the head did not answer, they
  // may be lost, and the job would learn of those trainers only when a probe or a formation's
  // timeout finds them gone.
  void on_head_answers_again(std::chrono::steady_clock::time_point since) override;

 private:
  // The read end of a trainer's stderr: what it writes is passed on to the agent's stderr a
  // line at a time, and its last lines are kept for TrainerExited::last_error.
  class StderrTail {
   public:
    StderrTail() = default;
    explicit StderrTail(int fd);
    ~StderrTail();
    StderrTail(StderrTail&& other) noexcept;
    StderrTail& operator=(StderrTail&& other) noexcept;
    StderrTail(const StderrTail&) = delete;
    StderrTail& operator=(const StderrTail&) = delete;

    // Reads whatever is there without blocking; closes the pipe at end of file. `final`: the
    // trainer has exited, so a last line without a newline is complete, and the pipe is closed
    // even if something else (a process the trainer started) still holds its write end.
    void drain(bool final = false);
    std::string last_lines() const;  // joined with newlines

   private:
    void take_line(std::string line);
    int fd_ = -1;
    std::string partial_;            // a line not yet ended
    std::deque<std::string> last_;   // the last kKeptLines lines
  };

  struct Hosted {
    std::string job_id;
    std::string trainer;
    std::string scheduler;
    std::string node_id;  // the node record it was started for
    pid_t pid = -1;
    StderrTail stderr_tail;
    std::string system;  // the trainer's actor system, once it reported
    // Last report and the aggregate since the last heartbeat, at the current batch.
    TrainerReport last;
    double compute_sum = 0;
    double step_sum = 0;
    int samples = 0;  // steps aggregated
    ActorCounters published;
  };

  void spawn(const SpawnTrainer& request);
  void reap();
  // One job's question of on_head_restarted, retried while the head does not answer.
  void check_job_after_restart(const std::string& job_id, std::uint64_t epoch, int attempt);
  void stop_job_trainers(const std::string& job_id, const std::string& why);
  void set_resources(const runtime::Envelope& message, const SetNodeResources& request);

  WorkerOptions options_;
  std::map<std::string, Hosted> hosted_;  // by trainer name
  std::uint64_t head_epoch_ = 0;          // the head start on_head_restarted was last told of
  // Exits reported lately (the newest kKeptExits): reported again to a restarted head, which
  // may not have heard them (they went to the head that died), and to a head that answers
  // again after a silence. A job whose trainers all died meanwhile learns so at once instead of
  // waiting for them to report; a scheduler ignores an exit it knows already.
  struct ReportedExit {
    std::string scheduler;
    TrainerExited exit;
    std::chrono::steady_clock::time_point at;  // when it was first told
  };
  static constexpr std::size_t kKeptExits = 64;
  std::deque<ReportedExit> recent_exits_;
  std::unique_ptr<CpuQuota> quota_;
  ForkThread fork_thread_;  // forks the trainers; declared last, so it goes first
};

}  // namespace omnilearn::actors
