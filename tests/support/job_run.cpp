#include "tests/support/job_run.hpp"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace omnilearn::testing {

namespace fs = std::filesystem;
using Json = nlohmann::json;

ScratchDir::ScratchDir(const std::string& prefix) {
  static std::atomic<int> counter{0};
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  if (info) name += std::string("-") + info->name();
  path_ = fs::temp_directory_path() / name;
  fs::remove_all(path_);
  fs::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  const char* keep = std::getenv("OMNILEARN_TEST_KEEP");
  if (::testing::Test::HasFailure() || (keep && *keep && std::string(keep) != "0")) {
    std::fprintf(stderr, "--- kept %s for the post-mortem ---\n", path_.c_str());
    return;
  }
  std::error_code ec;
  fs::remove_all(path_, ec);
}

fs::path ScratchDir::write(const std::string& name, const std::string& text) const {
  auto file = path_ / name;
  std::ofstream out(file);
  out << text;
  out.close();
  if (!out) throw std::runtime_error("cannot write " + file.string());
  return file;
}

namespace {

Json parse_event(const std::string& line) {
  auto json = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object() || !json.contains("event")) {
    throw std::runtime_error("events.jsonl has a line that is not an event: " + line);
  }
  return json;
}

// Parses the complete lines of `path` from byte `offset` on into `out`; returns the offset just
// after the last complete line.
std::uint64_t read_events_from(const fs::path& path, std::uint64_t offset, std::vector<Json>& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return offset;
  in.seekg(static_cast<std::streamoff>(offset));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t start = 0;
  for (std::size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    if (nl > start) out.push_back(parse_event(text.substr(start, nl - start)));
  }
  return offset + start;
}

}  // namespace

std::vector<Json> read_events(const fs::path& run_dir) {
  std::vector<Json> events;
  read_events_from(run_dir / "events.jsonl", 0, events);
  return events;
}

std::optional<Json> read_summary(const fs::path& run_dir) {
  std::ifstream in(run_dir / "summary.json");
  if (!in) return std::nullopt;
  std::stringstream buffer;
  buffer << in.rdbuf();
  auto json = Json::parse(buffer.str(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) return std::nullopt;
  return json;
}

std::vector<Json> events_named(const std::vector<Json>& events, const std::string& name) {
  std::vector<Json> out;
  for (const auto& e : events) {
    if (e.value("event", "") == name) out.push_back(e);
  }
  return out;
}

std::map<std::string, std::string> trainer_nodes(const std::vector<Json>& events) {
  std::map<std::string, std::string> nodes;
  for (const auto& e : events_named(events, "spawn")) {
    nodes[e.at("trainer").get<std::string>()] = e.at("node").get<std::string>();
  }
  return nodes;
}

void expect_no_split_brain(const std::vector<nlohmann::json>& events, std::int64_t last_step) {
  std::map<std::int64_t, std::set<std::int64_t>> generations_of_step;
  for (const auto* kind : {"step", "superseded_step"}) {
    for (const auto& e : events_named(events, kind)) {
      generations_of_step[e.at("step").get<std::int64_t>()].insert(
          e.at("generation").get<std::int64_t>());
    }
  }
  for (const auto& [step, generations] : generations_of_step) {
    EXPECT_EQ(generations.size(), 1u) << "step " << step << " committed by " << generations.size()
                                      << " generations";
  }
  std::int64_t previous = 0;
  for (const auto& e : events_named(events, "step")) {
    const auto step = e.at("step").get<std::int64_t>();
    EXPECT_GT(step, previous) << "the job's steps must only go up";
    previous = step;
  }
  EXPECT_EQ(previous, last_step);
}

std::vector<std::string> member_nodes(const std::vector<Json>& events, std::int64_t generation) {
  auto nodes = trainer_nodes(events);
  for (const auto& e : events_named(events, "generation")) {
    if (e.at("generation").get<std::int64_t>() != generation) continue;
    std::vector<std::string> out;
    for (const auto& member : e.at("members")) out.push_back(nodes.at(member.get<std::string>()));
    return out;
  }
  return {};
}

JobRun::JobRun(TestCluster& cluster, const fs::path& job_file, const fs::path& run_dir)
    : JobRun(cluster.address(), job_file, run_dir) {}

JobRun::JobRun(const std::string& address, const fs::path& job_file, const fs::path& run_dir)
    : run_dir_(run_dir) {
  auto result = run_omnilearn(
      {"submit", job_file.string(), "--address", address, "--run-dir", run_dir.string()},
      std::chrono::seconds(20));
  static const std::regex submitted(R"(submitted job ([0-9a-f]+))");
  std::smatch match;
  if (result.timed_out || result.status.code != 0 ||
      !std::regex_search(result.out, match, submitted)) {
    throw std::runtime_error("omnilearn submit failed (" + result.status.to_string() +
                             "):\nstdout: " + result.out + "\nstderr: " + result.err);
  }
  id_ = match[1];
}

const std::vector<Json>& JobRun::events() const {
  read_offset_ = read_events_from(run_dir_ / "events.jsonl", read_offset_, events_);
  return events_;
}

std::optional<Json> JobRun::wait_for_event(const Predicate& predicate,
                                           std::chrono::milliseconds timeout) const {
  std::optional<Json> found;
  wait_until(
      [&] {
        for (const auto& e : events()) {
          if (predicate(e)) {
            found = e;
            return true;
          }
        }
        return false;
      },
      timeout, std::chrono::milliseconds(100));
  return found;
}

std::optional<Json> JobRun::wait_for_event(const std::string& name,
                                           std::chrono::milliseconds timeout,
                                           const Predicate& predicate) const {
  return wait_for_event(
      [&](const Json& e) { return e.value("event", "") == name && (!predicate || predicate(e)); },
      timeout);
}

std::optional<Json> JobRun::wait_finished(std::chrono::milliseconds timeout) const {
  std::optional<Json> summary;
  wait_until(
      [&] {
        // The summary is written (atomically) right after the "finished" event.
        if (events_named(events(), "finished").empty()) return false;
        summary = read_summary(run_dir_);
        return summary.has_value();
      },
      timeout, std::chrono::milliseconds(100));
  return summary;
}

std::string JobRun::describe(std::size_t max_lines) const {
  std::ostringstream text;
  text << "job " << id_ << " (run directory " << run_dir_.string() << ")\n";
  std::ifstream in(run_dir_ / "events.jsonl");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::size_t first = lines.size() > max_lines ? lines.size() - max_lines : 0;
  if (first > 0) text << "  ... (" << first << " earlier events)\n";
  for (std::size_t i = first; i < lines.size(); ++i) text << "  " << lines[i] << "\n";
  if (auto summary = read_summary(run_dir_)) text << "summary: " << summary->dump() << "\n";
  return text.str();
}

std::vector<ProcessInfo> processes_with_argument(const std::string& needle) {
  std::vector<ProcessInfo> found;
  const pid_t self = ::getpid();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    if (pid == self) continue;
    std::ifstream in(entry.path() / "cmdline", std::ios::binary);
    std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (raw.empty()) continue;  // a zombie or a kernel thread
    std::vector<std::string> args;
    std::size_t start = 0;
    for (std::size_t nul; (nul = raw.find('\0', start)) != std::string::npos; start = nul + 1) {
      args.push_back(raw.substr(start, nul - start));
    }
    if (start < raw.size()) args.push_back(raw.substr(start));
    bool match = false;
    std::string joined;
    for (const auto& arg : args) {
      match |= arg.find(needle) != std::string::npos;
      joined += (joined.empty() ? "" : " ") + arg;
    }
    if (match) found.push_back({pid, joined});
  }
  return found;
}

std::string describe(const std::vector<ProcessInfo>& processes) {
  std::string text;
  for (const auto& p : processes) text += "  pid " + std::to_string(p.pid) + ": " + p.command_line + "\n";
  return text.empty() ? "  (none)\n" : text;
}

std::vector<ProcessInfo> trainer_processes(const std::string& cluster_address,
                                           const std::string& trainer_prefix) {
  std::vector<ProcessInfo> trainers;
  for (auto& p : processes_with_argument(cluster_address)) {
    if (p.command_line.find("omnilearn-trainer") == std::string::npos) continue;
    if (p.command_line.find("--trainer " + trainer_prefix) == std::string::npos) continue;
    trainers.push_back(std::move(p));
  }
  return trainers;
}

std::optional<bool> ignores_signal(pid_t pid, int sig) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("SigIgn:", 0) != 0) continue;
    const auto mask = std::stoull(line.substr(7), nullptr, 16);
    return ((mask >> (sig - 1)) & 1u) != 0;
  }
  return std::nullopt;
}

std::vector<ProcessInfo> job_trainer_processes(const std::string& job_id) {
  std::vector<ProcessInfo> trainers;
  for (auto& p : processes_with_argument(job_id)) {
    if (p.command_line.find("omnilearn-trainer") == std::string::npos) continue;
    if (p.command_line.find("--job " + job_id) == std::string::npos) continue;
    trainers.push_back(std::move(p));
  }
  return trainers;
}

std::vector<ProcessInfo> job_processes_left(const std::string& job_id,
                                            std::chrono::milliseconds within) {
  std::vector<ProcessInfo> left;
  wait_until(
      [&] {
        left = job_trainer_processes(job_id);
        return left.empty();
      },
      within);
  return left;
}

std::string synthetic_elastic_job(const std::string& name, std::int64_t steps, std::uint64_t seed,
                                  const std::string& precision) {
  return R"(
[job]
name = ")" + name + R"("

[model]
kind = "mlp"
hidden = [128, 64]

[data]
dataset = "synthetic"
train_size = 8192
test_size = 512

[train]
global_batch = 384
steps = )" + std::to_string(steps) + R"(
optimizer = "sgd"
lr = 0.05
momentum = 0.9
seed = )" + std::to_string(seed) + R"(
precision = ")" + precision + R"("

[controller]
policy = "proportional"
min_batch = 8
interval = 10
cooldown = 2

[elastic]
min_workers = 2
max_workers = 3
)";
}

namespace {

std::filesystem::path replay_program() {
  return omnilearn_binary().parent_path() / "omnilearn-parameter-replay";
}

// Runs the replay program with `args` and checks its comparison report with EXPECTs.
nlohmann::json expect_replay_report(const std::vector<std::string>& args, std::int64_t steps) {
  std::vector<std::string> argv{replay_program().string()};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_command(argv, std::chrono::minutes(5));
  std::string command;
  for (const auto& a : argv) command += a + " ";
  EXPECT_TRUE(r.status.exited() && r.status.code == 0)
      << command << ": " << r.status.to_string() << "\n" << r.out << r.err;
  if (!r.status.exited() || r.status.code != 0) return {};
  const auto report = nlohmann::json::parse(r.out);
  std::printf("compared with a calm run: %s\n", report.dump().c_str());
  EXPECT_EQ(report.at("steps").get<std::int64_t>(), steps) << report.dump();
  EXPECT_TRUE(report.at("cursor_equal").get<bool>()) << report.dump();
  EXPECT_GT(report.at("elements").get<std::int64_t>(), 0) << report.dump();
  EXPECT_LE(report.at("max_abs_diff").get<double>(), kExactTolerance)
      << "the job's state differs from a calm run's: " << report.dump();
  return report;
}

}  // namespace

CalmRun::CalmRun(const std::string& job_text, std::int64_t steps)
    : dir_(std::make_unique<ScratchDir>("calm-run")), steps_(steps) {
  job_file_ = dir_->write("job.toml", job_text);
  calm_file_ = dir_->path() / "calm.pt";
  ProcessOptions options;
  options.name = "calm-run";
  process_ = std::make_unique<ChildProcess>(
      std::vector<std::string>{"/usr/bin/nice", "-n", "19", replay_program().string(),
                               job_file_.string(), "--steps", std::to_string(steps), "--save",
                               calm_file_.string()},
      options);
}

CalmRun::~CalmRun() = default;

nlohmann::json CalmRun::expect_equal(const std::string& checkpoint) {
  EXPECT_FALSE(checkpoint.empty()) << "the job wrote no checkpoint to compare";
  if (checkpoint.empty()) return {};
  if (!done_) {
    // The job is over: nothing is left to yield to.
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(process_->pid()), 0);
    const auto exit = process_->wait_exit(std::chrono::minutes(5));
    EXPECT_TRUE(exit && exit->exited() && exit->code == 0)
        << "the calm run failed: " << (exit ? exit->to_string() : "still running") << "\n"
        << process_->output(Stream::kStdout) << process_->output(Stream::kStderr);
    if (!exit || !exit->exited() || exit->code != 0) return {};
    done_ = true;
  }
  return expect_replay_report({job_file_.string(), checkpoint, "--calm", calm_file_.string()},
                              steps_);
}

std::string synthetic_asp_job(const std::string& name, int epochs) {
  return R"([job]
name = ")" + name + R"("
mode = "asp"
[model]
kind = "mlp"
hidden = [32]
[data]
dataset = "synthetic"
train_size = )" + std::to_string(kSyntheticAspSamples) + R"(
test_size = 256
[train]
global_batch = 64
optimizer = "sgd"
lr = 0.01
epochs = )" + std::to_string(epochs) + R"(
seed = 7
[elastic]
min_workers = 1
max_workers = 2
[asp]
servers = 1
)";
}

void expect_every_sample_once(const nlohmann::json& summary, int epochs) {
  EXPECT_EQ(summary.at("status"), "succeeded");
  const auto& sampling = summary.at("sampling");
  EXPECT_EQ(sampling.at("epochs_completed"), epochs);
  EXPECT_EQ(sampling.at("samples_accepted"), epochs * kSyntheticAspSamples);
  const auto& server = summary.at("servers").at(0);
  EXPECT_EQ(server.at("restarts"), 0);
  EXPECT_EQ(server.at("version"), summary.at("updates"))
      << "the server applied a different number of updates than the job counted";
  EXPECT_EQ(summary.at("updates_lost_at_most"), 0);
}

int expect_each_step_once(const std::vector<nlohmann::json>& events, std::int64_t last_step) {
  std::map<std::int64_t, std::set<std::int64_t>> generations_of_step;
  std::int64_t last = 0;
  // The last steps may be committed only by an older generation's leader under its lease: a
  // head killed near the end restarts after the leader finished, and its reports of those steps
  // reach the new head from a generation that is no longer the current one.
  std::int64_t last_superseded = 0;
  // A superseded leader whose done goes unanswered sends its last report again: a head writes
  // each superseded step once all the same (a restarted head does not know what the one
  // before it wrote).
  std::map<std::int64_t, std::int64_t> last_superseded_of;  // generation -> its last step
  int spawns = 0;
  for (const auto& e : events) {
    const auto kind = e.value("event", "");
    if (kind == "spawn") ++spawns;
    if (kind == "head_restarted") last_superseded_of.clear();
    if (kind != "step" && kind != "superseded_step") continue;
    const auto step = e.at("step").get<std::int64_t>();
    const auto generation = e.at("generation").get<std::int64_t>();
    generations_of_step[step].insert(generation);
    if (kind == "step") {
      EXPECT_GT(step, last) << "the job's steps must only go up: " << e;
      last = step;
    } else {
      last_superseded = std::max(last_superseded, step);
      auto [it, fresh] = last_superseded_of.try_emplace(generation, step);
      if (!fresh) {
        EXPECT_GT(step, it->second) << "a superseded leader's steps must only go up: " << e;
        it->second = step;
      }
    }
  }
  last = std::max(last, last_superseded);
  for (const auto& [step, generations] : generations_of_step) {
    EXPECT_EQ(generations.size(), 1u) << "step " << step << " committed by "
                                      << generations.size() << " generations";
  }
  EXPECT_EQ(last, last_step);
  return spawns;
}

nlohmann::json expect_calm_replay_equal(const std::filesystem::path& job_file,
                                        const std::string& checkpoint, std::int64_t steps) {
  EXPECT_FALSE(checkpoint.empty()) << "the job wrote no checkpoint to compare";
  if (checkpoint.empty()) return {};
  return expect_replay_report({job_file.string(), checkpoint}, steps);
}

HeadOptions job_head_options() {
  HeadOptions options;
  options.heartbeat_interval = std::chrono::milliseconds(200);
  options.heartbeat_timeout = std::chrono::milliseconds(1500);
  return options;
}

TestCluster& JobTest::start_cluster(HeadOptions head) {
  cluster_ = std::make_unique<TestCluster>(std::move(head));
  address_ = cluster_->address();
  return *cluster_;
}

ChildProcess& JobTest::start_worker(const std::string& name, std::vector<std::string> extra_args,
                                    ProcessOptions options) {
  auto& process = cluster_->start_worker(name, std::move(extra_args), std::move(options));
  workers_.push_back({name, &process, process.pid()});
  return process;
}

namespace {

// Where a worker named `name` with PID `pid` keeps its trainers' CPU quota (actors/cpu_quota).
std::vector<fs::path> quota_cgroups(const std::string& name, pid_t pid) {
  const std::string leaf = "omnilearn-" + name + "-" + std::to_string(pid);
  return {fs::path("/sys/fs/cgroup/cpu") / leaf, fs::path("/sys/fs/cgroup") / leaf};
}

}  // namespace

int JobTest::favour_quota_cgroups() {
  int changed = 0;
  for (const auto& w : workers_) {
    for (const auto& cgroup : quota_cgroups(w.name, w.pid)) {
      std::error_code ec;
      if (!fs::exists(cgroup, ec)) continue;
      const bool v1 = fs::exists(cgroup / "cpu.shares", ec);
      std::ofstream out(cgroup / (v1 ? "cpu.shares" : "cpu.weight"));
      out << (v1 ? "8192" : "1000");
      out.close();
      changed += out.good() ? 1 : 0;
    }
  }
  return changed;
}

void JobTest::start_job_on_three_workers(const std::string& name, const std::string& job) {
  using namespace std::chrono_literals;
  auto& cluster = start_cluster();
  for (const auto* worker : {"w1", "w2", "w3"}) start_worker(worker);
  for (const auto* worker : {"w1", "w2", "w3"}) {
    ASSERT_TRUE(cluster.wait_worker_joined(worker, 15s)) << cluster.worker(worker).describe();
  }
  scratch_ = std::make_unique<ScratchDir>(name);
  run_ = std::make_unique<JobRun>(cluster, scratch_->write("job.toml", job),
                                  scratch_->path() / "run");
  auto training = run_->wait_for_event("step", 45s, [](const nlohmann::json& e) {
    return e.at("step").get<int>() >= 10 && e.at("batches").size() == 3;
  });
  ASSERT_TRUE(training) << run_->describe();
  auto first_generation = run_->wait_for_event("generation", 1s);
  ASSERT_TRUE(first_generation) << run_->describe();
  first_generation_ = *first_generation;
}

void JobTest::TearDown() {
  if (!cluster_) return;
  // A graceful leave first: that is how a worker cleans up after itself.
  std::vector<const StartedWorker*> left_gracefully;
  for (const auto& w : workers_) {
    if (w.process->send_signal(SIGTERM)) {
      auto exit = w.process->wait_exit(std::chrono::seconds(10));
      EXPECT_TRUE(exit && exit->exited() && exit->code == 0)
          << "worker " << w.name << " did not leave cleanly on SIGTERM: "
          << (exit ? exit->to_string() : std::string("still running"));
      left_gracefully.push_back(&w);
    }
  }
  cluster_.reset();
  // Killed processes vanish at once, but a trainer orphaned by its worker is reaped by init:
  // give that a moment.
  std::vector<ProcessInfo> left;
  bool clean = wait_until(
      [&] {
        left = processes_with_argument(address_);
        return left.empty();
      },
      std::chrono::seconds(5), std::chrono::milliseconds(50));
  EXPECT_TRUE(clean) << "processes of the cluster at " << address_
                     << " outlived it:\n" << describe(left);
  for (const auto& w : workers_) {
    bool graceful = std::find(left_gracefully.begin(), left_gracefully.end(), &w) !=
                    left_gracefully.end();
    for (const auto& cgroup : quota_cgroups(w.name, w.pid)) {
      std::error_code ec;
      if (!fs::exists(cgroup, ec)) continue;
      EXPECT_FALSE(graceful) << "worker " << w.name << " left its cgroup " << cgroup
                             << " behind after a clean exit";
      // Empty once its processes are gone; rmdir is how a cgroup is removed.
      wait_until([&] { return ::rmdir(cgroup.c_str()) == 0 || errno == ENOENT; },
                 std::chrono::seconds(3), std::chrono::milliseconds(50));
    }
  }
  workers_.clear();
}

}  // namespace omnilearn::testing
