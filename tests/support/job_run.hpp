#pragma once
// End-to-end job tests: a job file written to a scratch directory, submitted to a TestCluster
// with `omnilearn submit`, and its run directory (events.jsonl, summary.json) read back while
// it runs. Also: which omnilearn processes of a cluster are still alive, so that a test can
// prove it leaves none behind.
//
// Threads: everything here belongs to the test thread.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/child_process.hpp"
#include "tests/support/cluster.hpp"

namespace omnilearn::testing {

// A fresh directory under the system temp dir; removed with its contents by the destructor
// unless the running test has failed or OMNILEARN_TEST_KEEP=1 is set (then it is kept, and its
// path printed, for a post-mortem).
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix = "omnilearn-test");
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Writes `text` to path()/name and returns the absolute path.
  std::filesystem::path write(const std::string& name, const std::string& text) const;

 private:
  std::filesystem::path path_;
};

// Complete lines of `run_dir`/events.jsonl parsed as JSON, in order. A line still being
// written (no newline yet) is left out; a complete line that is not JSON throws
// std::runtime_error (the run directory is a product output: it must be well-formed).
std::vector<nlohmann::json> read_events(const std::filesystem::path& run_dir);
// `run_dir`/summary.json, once it exists and parses.
std::optional<nlohmann::json> read_summary(const std::filesystem::path& run_dir);

// The events named `name` (the "event" field), in order.
std::vector<nlohmann::json> events_named(const std::vector<nlohmann::json>& events,
                                         const std::string& name);
// Trainer name -> node name, from the "spawn" events.
std::map<std::string, std::string> trainer_nodes(const std::vector<nlohmann::json>& events);

// No split brain (gtest expectations): every step number was committed by exactly one
// generation (the current leader's "step" events and a superseded leader's "superseded_step"
// events together name each step once), and the job's steps went up one by one to `last_step`.
void expect_no_split_brain(const std::vector<nlohmann::json>& events, std::int64_t last_step);

// The node of each rank of generation `generation` (from its "generation" event and the "spawn"
// events); empty if that generation is not in `events`.
std::vector<std::string> member_nodes(const std::vector<nlohmann::json>& events,
                                      std::int64_t generation);

// A job submitted to a cluster. The constructor submits (`omnilearn submit FILE --address A
// --run-dir DIR`) and throws std::runtime_error with the CLI's output if that fails.
class JobRun {
 public:
  using Predicate = std::function<bool(const nlohmann::json&)>;

  JobRun(TestCluster& cluster, const std::filesystem::path& job_file,
         const std::filesystem::path& run_dir);
  // Submitted to the head(s) at `address` ("HOST:PORT", or several separated by commas).
  JobRun(const std::string& address, const std::filesystem::path& job_file,
         const std::filesystem::path& run_dir);

  const std::string& id() const { return id_; }
  const std::filesystem::path& run_dir() const { return run_dir_; }

  // Every event so far (events.jsonl is read incrementally: only what was appended since the
  // last call is parsed). The reference stays valid until the next call.
  const std::vector<nlohmann::json>& events() const;
  // Polls events.jsonl until an event satisfies `predicate` (scanned in order); returns it.
  std::optional<nlohmann::json> wait_for_event(const Predicate& predicate,
                                               std::chrono::milliseconds timeout) const;
  // The same, for the first event named `name` that also satisfies `predicate` (if given).
  std::optional<nlohmann::json> wait_for_event(const std::string& name,
                                               std::chrono::milliseconds timeout,
                                               const Predicate& predicate = {}) const;
  // Waits for the "finished" event and the summary written with it; returns the summary.
  std::optional<nlohmann::json> wait_finished(std::chrono::milliseconds timeout) const;

  // The last `max_lines` events (one a line) and the summary if any: for failure messages.
  std::string describe(std::size_t max_lines = 60) const;

 private:
  std::string id_;
  std::filesystem::path run_dir_;
  mutable std::vector<nlohmann::json> events_;
  mutable std::uint64_t read_offset_ = 0;  // bytes of events.jsonl parsed into events_
};

// Live (not zombie) processes whose command line contains `needle` as part of an argument,
// excluding this process. Used with a cluster's address ("127.0.0.1:PORT": every worker and
// trainer of that cluster carries it) or a job id ("--job ID" of its trainers).
struct ProcessInfo {
  pid_t pid = 0;
  std::string command_line;  // arguments joined with spaces
};
std::vector<ProcessInfo> processes_with_argument(const std::string& needle);
std::string describe(const std::vector<ProcessInfo>& processes);

// Processes started by `omnilearn-trainer` for the trainer names starting with `prefix`
// (trainers are named "<job id>-<node>-t<N>", unique in the cluster).
std::vector<ProcessInfo> trainer_processes(const std::string& cluster_address,
                                           const std::string& trainer_prefix);

// Whether process `pid` ignores signal `sig` (SigIgn in /proc/PID/status); nullopt if it is gone.
std::optional<bool> ignores_signal(pid_t pid, int sig);

// The trainer processes of job `job_id` (any cluster) that are still alive.
std::vector<ProcessInfo> job_trainer_processes(const std::string& job_id);

// Waits up to `within` for every trainer process of job `job_id` to end; returns the ones still
// alive then (empty: none is left).
std::vector<ProcessInfo> job_processes_left(const std::string& job_id,
                                            std::chrono::milliseconds within);

// The elastic-protocol tests' job: a small MLP on synthetic data (the protocol is tested, not
// the learning), global batch 384, proportional control every 10 steps, 2..3 workers, in
// `precision` ("float32" or "float64": [train] precision).
std::string synthetic_elastic_job(const std::string& name, std::int64_t steps, std::uint64_t seed,
                                  const std::string& precision = "float32");

// Largest difference allowed between a float64 job's final state and its calm run: float64
// rounding, grown over a few hundred steps of heterogeneous batches, stays orders of magnitude
// below it (each comparison prints the difference it found), while a step lost, doubled or
// trained on other samples moves the parameters by far more.
inline constexpr double kExactTolerance = 1e-9;

// The calm run a fault test compares its job with: the job file's replica trained alone for
// `steps` steps by the omnilearn-parameter-replay program beside the omnilearn binary
// (tests/training/parameter_replay.cpp), with batch B: what any split of B over any workers
// computes, up to rounding. It starts at construction, in the background at the lowest CPU
// priority (nice 19), so that the job under test keeps the CPU it needs and the calm run gets
// what the job leaves idle; a test binary whose tests run one job (same seed, data and steps)
// shares one.
class CalmRun {
 public:
  CalmRun(const std::string& job_text, std::int64_t steps);
  ~CalmRun();
  CalmRun(const CalmRun&) = delete;
  CalmRun& operator=(const CalmRun&) = delete;

  // Waits for the calm run (it then runs at normal priority), then checks with EXPECTs that the
  // state in `checkpoint`, written by a job of the same file, is at the same step and equals it:
  // every parameter, buffer and optimizer-state element within kExactTolerance, the data cursor
  // equal. Returns the comparison's report (empty if it could not run).
  nlohmann::json expect_equal(const std::string& checkpoint);

 private:
  std::unique_ptr<ScratchDir> dir_;
  std::filesystem::path job_file_;
  std::filesystem::path calm_file_;
  std::int64_t steps_;
  std::unique_ptr<ChildProcess> process_;
  bool done_ = false;
};

// Checks, with EXPECTs, that the state in `checkpoint` (written by a job of `job_file`) equals a
// calm run's trained to the checkpoint's step, computed now: for a job whose length the test
// decides while it runs. Every element within kExactTolerance, the cursor equal, the checkpoint
// at step `steps`. Returns the report (empty if the comparison could not run).
// An asynchronous job over the synthetic dataset (1,024 training samples, batches of 64): one
// parameter server, one or two workers, `epochs` epochs.
constexpr std::int64_t kSyntheticAspSamples = 1024;
std::string synthetic_asp_job(const std::string& name, int epochs);

// Checks, with EXPECTs, that an asynchronous job's summary says every sample was taken once per
// epoch across whatever happened: epochs x kSyntheticAspSamples accepted, its one server never
// restarted, the server's version equal to the updates the job counted, none counted lost.
void expect_every_sample_once(const nlohmann::json& summary, int epochs);

// Checks, with EXPECTs, that a synchronous job's events name every step 1..last_step once:
// each step number committed by one generation only (the current leader's "step" events and a
// superseded leader's "superseded_step" events together), the job's steps only going up, the
// last one last_step. Returns how many "spawn" events there were (trainers started).
int expect_each_step_once(const std::vector<nlohmann::json>& events, std::int64_t last_step);

nlohmann::json expect_calm_replay_equal(const std::filesystem::path& job_file,
                                        const std::string& checkpoint, std::int64_t steps);

// Heartbeats for job tests: every 200 ms, dead after 1500 ms. The membership tests' 100/600 ms
// is too tight for LibTorch processes sharing two cores (a trainer start or a busy step would
// get a healthy node declared dead).
HeadOptions job_head_options();

// Base of the job tests: owns the cluster. After each test, workers that still run are asked
// to leave (SIGTERM: they stop their trainers and remove their CPU-quota cgroups), the cluster
// is torn down, and the test fails if any process of it (worker, trainer) or any cgroup a
// worker made for it is left; cgroups of workers that were killed are removed.
class JobTest : public ::testing::Test {
 protected:
  TestCluster& start_cluster(HeadOptions head = job_head_options());
  TestCluster& cluster() { return *cluster_; }
  // cluster().start_worker, remembered for the teardown checks.
  ChildProcess& start_worker(const std::string& name, std::vector<std::string> extra_args = {},
                             ProcessOptions options = {});
  // Gives the CPU-quota cgroups of the workers started so far (those run with --cpu-quota) a
  // large CPU weight (cgroup v1 cpu.shares 8192, v2 cpu.weight 1000), so that on a machine
  // shared with other work each emulated node gets its quota, as a real machine of that size
  // would, instead of one scheduler entity's share against every other process. Returns how
  // many it changed; 0 where cgroups are not writable (the test then runs without it).
  int favour_quota_cgroups();
  // The shared start of the elastic tests: a cluster, workers w1, w2, w3 (each waited for),
  // `job` submitted from a scratch directory named `name`, and training with all three (step
  // >= 10). Fails fatally otherwise: call it inside ASSERT_NO_FATAL_FAILURE. Sets run_ and
  // first_generation_ (the job's first "generation" event).
  void start_job_on_three_workers(const std::string& name, const std::string& job);
  void TearDown() override;

  std::unique_ptr<ScratchDir> scratch_;
  std::unique_ptr<JobRun> run_;
  nlohmann::json first_generation_;

  std::unique_ptr<TestCluster> cluster_;
  std::string address_;
  struct StartedWorker {
    std::string name;
    ChildProcess* process;
    pid_t pid;
  };
  std::vector<StartedWorker> workers_;
};

}  // namespace omnilearn::testing
