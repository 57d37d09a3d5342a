// An active head and a standby over a three-member etcd on loopback. When the active head is
// killed or frozen, the standby is elected once the lease runs out, takes over the same state
// (the workers keep their ids and incarnations, and follow it through --other-heads or a list
// of heads in --address, as clients do), and a
// frozen head that thaws finds itself deposed and exits without acting again. A job running
// on the old head goes on under the new one, with the same trainer processes, to its end.

#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <regex>
#include <set>

#include "tests/support/cluster.hpp"
#include "tests/support/etcd.hpp"
#include "tests/support/job_run.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;

class HeadStandby : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = EtcdCluster::unavailable(); !why.empty()) GTEST_SKIP() << why;
    etcd_ = std::make_unique<EtcdCluster>(3, scratch_.path() / "etcd");
  }

  // `omnilearn head` over the shared store, on a port the OS picks.
  std::unique_ptr<ChildProcess> start_head(bool standby, int heartbeat_interval_ms = 100) {
    std::vector<std::string> argv{omnilearn_binary().string(),
                                  "head",
                                  "--host",
                                  "127.0.0.1",
                                  "--port",
                                  "0",
                                  "--heartbeat-interval-ms",
                                  std::to_string(heartbeat_interval_ms),
                                  "--heartbeat-timeout-ms",
                                  "1500",
                                  "--store",
                                  store_,
                                  "--lease-ttl-s",
                                  "2"};
    if (standby) argv.push_back("--standby");
    return std::make_unique<ChildProcess>(
        argv, omnilearn_process_options({.name = standby ? "standby" : "active"}));
  }

  // The address in the first line of `process` that matches `pattern` (group 1).
  static std::string address_in(ChildProcess& process, const std::string& pattern) {
    const std::regex regex(pattern);
    auto line = process.wait_for_output(regex, 20s);
    std::smatch match;
    if (!line || !std::regex_search(*line, match, regex)) return "";
    return match[1].str();
  }

  std::optional<ClusterStatus> status_of(const std::string& address) {
    auto result = run_omnilearn({"status", "--address", address, "--json"}, 10s);
    if (result.status.code != 0) return std::nullopt;
    auto json = nlohmann::json::parse(result.out, nullptr, false);
    if (json.is_discarded()) return std::nullopt;
    return ClusterStatus(json);
  }

  ScratchDir scratch_{"omnilearn-standby"};
  std::unique_ptr<EtcdCluster> etcd_;
  std::string store_;
};

TEST_F(HeadStandby, TheStandbyTakesOverAKilledOrFrozenHeadAndTheWorkersFollow) {
  for (const bool freeze : {false, true}) {
    SCOPED_TRACE(freeze ? "SIGSTOP" : "kill -9");
    store_ = etcd_->store(freeze ? "frozen" : "killed");  // a state of its own for each case
    auto active = start_head(false);
    const auto active_address = address_in(*active, "listening on (\\S+)");
    ASSERT_FALSE(active_address.empty()) << active->describe();
    auto standby = start_head(true);
    const auto standby_address =
        address_in(*standby, "standby on (\\S+): waiting for the active head at");
    ASSERT_FALSE(standby_address.empty()) << standby->describe();
    EXPECT_NE(standby->output(Stream::kStdout).find(active_address), std::string::npos)
        << "the standby names the active head: " << standby->describe();

    // A third head without --standby is refused while one is active.
    auto third =
        run_omnilearn({"head", "--host", "127.0.0.1", "--port", "0", "--store", store_}, 15s);
    EXPECT_EQ(third.status.code, 2) << third.err;
    EXPECT_NE(third.err.find("is the active head"), std::string::npos) << third.err;

    // The two ways to name the standby: --other-heads, or after the first head in --address.
    std::vector<std::unique_ptr<ChildProcess>> workers;
    workers.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{omnilearn_binary().string(), "worker", "--address",
                                 active_address, "--other-heads", standby_address, "--name",
                                 "w1"},
        omnilearn_process_options({.name = "worker w1"})));
    workers.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{omnilearn_binary().string(), "worker", "--address",
                                 active_address + "," + standby_address, "--name", "w2"},
        omnilearn_process_options({.name = "worker w2"})));
    for (auto& worker : workers) ASSERT_TRUE(worker->wait_for_output("joined", 15s));
    std::optional<ClusterStatus> before;
    ASSERT_TRUE(wait_until(
        [&] {
          before = status_of(active_address);
          return before && before->count("alive") == 2;
        },
        15s));

    if (freeze) {
      ASSERT_TRUE(active->send_signal(SIGSTOP));
    } else {
      active->kill_and_reap();
    }
    ASSERT_TRUE(standby->wait_for_output("listening on " + standby_address, 20s))
        << standby->describe();

    std::optional<ClusterStatus> after;
    EXPECT_TRUE(wait_until(
        [&] {
          after = status_of(standby_address);
          return after && after->count("alive") == 2 &&
                 !after->json().at("head").at("nodes_back_ms").is_null();
        },
        20s))
        << (after ? after->json().dump() : "no status from the new head");
    ASSERT_TRUE(after);
    EXPECT_EQ(after->json().at("head").at("epoch"), 2);
    EXPECT_NE(after->json().at("head").at("store").get<std::string>().find("etcd://"),
              std::string::npos);
    for (const auto* name : {"w1", "w2"}) {
      ASSERT_TRUE(after->node(name)) << name;
      EXPECT_EQ(after->node(name)->at("id"), before->node(name)->at("id")) << name;
      EXPECT_EQ(after->node(name)->at("incarnation"), before->node(name)->at("incarnation"));
    }

    // Heard from, not only restored: alive past the heartbeat timeout, and each worker says so.
    for (auto& worker : workers) {
      EXPECT_TRUE(worker->wait_for_output("trying the head at tcp://" + standby_address, 10s,
                                          Stream::kStderr))
          << worker->describe();
    }
    std::this_thread::sleep_for(2s);
    // A client given both heads talks to the one that answers.
    auto settled = status_of(active_address + "," + standby_address);
    ASSERT_TRUE(settled);
    EXPECT_EQ(settled->count("alive"), 2u) << settled->json().dump();
    EXPECT_EQ(settled->count("dead"), 0u) << settled->json().dump();

    if (freeze) {
      // Thawed, the old head learns it was deposed and exits before it acts again.
      ASSERT_TRUE(active->send_signal(SIGCONT));
      auto exit = active->wait_exit(15s);
      ASSERT_TRUE(exit) << "the deposed head is still running: " << active->describe();
      EXPECT_EQ(exit->code, 1) << active->describe();
      EXPECT_NE(active->output(Stream::kStderr).find("no longer the active head"),
                std::string::npos)
          << active->describe();
      // The workers stay with the new head.
      std::this_thread::sleep_for(1s);
      auto later = status_of(standby_address);
      ASSERT_TRUE(later);
      EXPECT_EQ(later->count("alive"), 2u) << later->json().dump();
    }
    for (auto& worker : workers) worker->kill_and_reap();
    standby->kill_and_reap();
    active->kill_and_reap();
  }
}

// A job on three workers, the active head killed (or frozen) at step 5: the standby takes over
// and resumes it from the trainers' state; the trainers follow the new head; the job ends with
// every step committed once and no trainer started again.
TEST_F(HeadStandby, AJobGoesOnUnderTheStandbyWithItsTrainers) {
  if (!std::filesystem::exists(omnilearn_binary().parent_path() / "omnilearn-trainer")) {
    GTEST_SKIP() << "omnilearn-trainer is not built (OMNILEARN_WITH_TORCH=OFF)";
  }
  for (const bool freeze : {false, true}) {
    SCOPED_TRACE(freeze ? "SIGSTOP" : "kill -9");
    store_ = etcd_->store(freeze ? "job-frozen" : "job-killed");
    auto active = start_head(false, 200);
    const auto active_address = address_in(*active, "listening on (\\S+)");
    ASSERT_FALSE(active_address.empty()) << active->describe();
    auto standby = start_head(true, 200);
    const auto standby_address =
        address_in(*standby, "standby on (\\S+): waiting for the active head at");
    ASSERT_FALSE(standby_address.empty()) << standby->describe();
    std::vector<std::unique_ptr<ChildProcess>> workers;
    for (const auto* name : {"w1", "w2", "w3"}) {
      workers.push_back(std::make_unique<ChildProcess>(
          std::vector<std::string>{omnilearn_binary().string(), "worker", "--address",
                                   active_address, "--other-heads", standby_address, "--name",
                                   name},
          omnilearn_process_options({.name = std::string("worker ") + name})));
    }
    for (auto& worker : workers) ASSERT_TRUE(worker->wait_for_output("joined", 15s));

    constexpr std::int64_t kSteps = 300;
    ScratchDir scratch(freeze ? "standby-job-frozen" : "standby-job-killed");
    JobRun run(active_address + "," + standby_address,
               scratch.write("job.toml", synthetic_elastic_job("standby", kSteps, 11)),
               scratch.path() / "run");
    ASSERT_TRUE(run.wait_for_event("step", 90s, [](const nlohmann::json& e) {
      return e.at("step").get<int>() >= 5;
    })) << run.describe();
    ASSERT_EQ(job_trainer_processes(run.id()).size(), 3u);

    if (freeze) {
      ASSERT_TRUE(active->send_signal(SIGSTOP));
    } else {
      active->kill_and_reap();
    }
    ASSERT_TRUE(standby->wait_for_output("listening on " + standby_address, 20s))
        << standby->describe();
    auto resumed = run.wait_for_event("head_restarted", 30s);
    ASSERT_TRUE(resumed) << run.describe();
    EXPECT_EQ(resumed->at("resumed"), true);
    if (freeze) {
      // Thawed, the deposed head exits without a word to the trainers.
      ASSERT_TRUE(active->send_signal(SIGCONT));
      auto exit = active->wait_exit(15s);
      ASSERT_TRUE(exit) << "the deposed head is still running: " << active->describe();
      EXPECT_EQ(exit->code, 1) << active->describe();
    }

    auto summary = run.wait_finished(180s);
    ASSERT_TRUE(summary) << run.describe() << standby->describe();
    SCOPED_TRACE(summary->dump(2));
    EXPECT_EQ(summary->at("status"), "succeeded");
    EXPECT_EQ(summary->at("steps"), kSteps);
    EXPECT_EQ(expect_each_step_once(run.events(), kSteps), 3) << "trainers were started again";
    for (auto& worker : workers) worker->kill_and_reap();
    standby->kill_and_reap();
    active->kill_and_reap();
    const std::vector<ProcessInfo> left = job_processes_left(run.id(), 15s);
    EXPECT_TRUE(left.empty()) << describe(left);
  }
}

// An asynchronous job (one parameter server, two workers) with the active head killed mid-job:
// the standby takes over and resumes it from the dealer's snapshot; the server and the workers
// follow the new head (their agents point them to it) and the job ends with every sample taken
// once per epoch, by the same three processes.
TEST_F(HeadStandby, AnAsynchronousJobGoesOnUnderTheStandbyWithItsServerAndWorkers) {
  if (!std::filesystem::exists(omnilearn_binary().parent_path() / "omnilearn-trainer")) {
    GTEST_SKIP() << "omnilearn-trainer is not built (OMNILEARN_WITH_TORCH=OFF)";
  }
  store_ = etcd_->store("asp-killed");
  auto active = start_head(false, 200);
  const auto active_address = address_in(*active, "listening on (\\S+)");
  ASSERT_FALSE(active_address.empty()) << active->describe();
  auto standby = start_head(true, 200);
  const auto standby_address =
      address_in(*standby, "standby on (\\S+): waiting for the active head at");
  ASSERT_FALSE(standby_address.empty()) << standby->describe();
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (const auto* name : {"w1", "w2"}) {
    // Slowed x4, so that the kill lands mid-job.
    workers.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{omnilearn_binary().string(), "worker", "--address", active_address,
                                 "--other-heads", standby_address, "--name", name, "--slowdown",
                                 "4"},
        omnilearn_process_options({.name = std::string("worker ") + name})));
  }
  for (auto& worker : workers) ASSERT_TRUE(worker->wait_for_output("joined", 15s));

  constexpr int kEpochs = 40;
  ScratchDir scratch("standby-asp");
  JobRun run(active_address + "," + standby_address,
             scratch.write("asp.toml", synthetic_asp_job("standby-asp", kEpochs)),
             scratch.path() / "run");
  ASSERT_TRUE(run.wait_for_event("asp_interval", 90s, [](const nlohmann::json& e) {
    return e.at("step").get<int>() >= 20;
  })) << run.describe();
  const auto pids = [&] {
    std::set<pid_t> out;
    for (const auto& p : job_trainer_processes(run.id())) out.insert(p.pid);
    return out;
  };
  const std::set<pid_t> before = pids();
  ASSERT_EQ(before.size(), 3u) << describe(job_trainer_processes(run.id()));

  active->kill_and_reap();
  ASSERT_TRUE(standby->wait_for_output("listening on " + standby_address, 20s))
      << standby->describe();
  auto resumed = run.wait_for_event("head_restarted", 30s);
  ASSERT_TRUE(resumed) << run.describe();
  EXPECT_EQ(resumed->at("resumed"), true);
  EXPECT_EQ(resumed->at("head_epoch"), 2);
  // Training goes on under the new head: updates after it resumed the job.
  const double back_at = resumed->at("time").get<double>();
  ASSERT_TRUE(run.wait_for_event("asp_interval", 60s, [&](const nlohmann::json& e) {
    return e.at("time").get<double>() > back_at && e.value("updates", 0) > 0;
  })) << run.describe() << standby->describe();
  EXPECT_EQ(pids(), before) << describe(job_trainer_processes(run.id()));

  auto summary = run.wait_finished(150s);
  ASSERT_TRUE(summary) << run.describe() << standby->describe();
  SCOPED_TRACE(summary->dump(2));
  expect_every_sample_once(*summary, kEpochs);
  EXPECT_EQ(events_named(run.events(), "spawn").size(), 3u)
      << "servers or workers were started again";
  // Each of the three trainers moved to the new head (a worker's log holds its trainers').
  std::size_t moved = 0;
  const std::string moved_line = "the job goes on under the head at tcp://" + standby_address;
  for (auto& worker : workers) {
    const std::string log = worker->output(Stream::kStderr);
    for (std::size_t at = log.find(moved_line); at != std::string::npos;
         at = log.find(moved_line, at + 1)) {
      ++moved;
    }
  }
  EXPECT_EQ(moved, 3u) << workers[0]->describe() << workers[1]->describe();
  for (auto& worker : workers) worker->kill_and_reap();
  standby->kill_and_reap();
  const std::vector<ProcessInfo> left = job_processes_left(run.id(), 15s);
  EXPECT_TRUE(left.empty()) << describe(left);
}

}  // namespace
}  // namespace omnilearn::testing
