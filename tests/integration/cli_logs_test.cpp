// A trainer's failure travels to whoever watches the job. A job whose trainers fail
// at start: events.jsonl has a "trainer_exited" line per exit with the code and the trainer's
// last stderr lines, the summary's reason carries that text, `submit --follow` prints it and
// exits 1, and `omnilearn logs JOB [--follow]` re-attaches to the job, running or finished,
// and shows the same. The first test stands a shell script in for the trainer program (no
// LibTorch needed); the second runs the real trainer on a data directory that does not exist
// (skipped where the trainer is not built).

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <sstream>

#include "tests/support/job_run.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kError = "fake-trainer: cannot open /no/such/dataset: No such file";

// A trainer program that fails at once, the way a trainer that cannot load its data does.
fs::path failing_trainer(const ScratchDir& dir) {
  auto path = dir.write("failing-trainer.sh", std::string("#!/bin/sh\n"
                                                          "echo 'fake-trainer: loading' >&2\n"
                                                          "echo '") +
                                                  kError + "' >&2\nexit 3\n");
  ::chmod(path.c_str(), 0755);
  return path;
}

std::vector<Json> trainer_exits(const fs::path& run_dir) {
  return events_named(read_events(run_dir), "trainer_exited");
}

TEST(CliLogs, ATrainerThatFailsAtStartSaysWhyInEventsSummaryFollowAndLogs) {
  ScratchDir dir("trainer-fails");
  ProcessOptions fake;
  fake.env = {"OMNILEARN_TRAINER=" + failing_trainer(dir).string()};
  TestCluster cluster;
  cluster.start_worker("w1", {}, fake);
  cluster.start_worker("w2", {}, fake);
  ASSERT_TRUE(cluster.wait_worker_joined("w1")) << cluster.worker("w1").describe();
  ASSERT_TRUE(cluster.wait_worker_joined("w2")) << cluster.worker("w2").describe();
  const auto job = dir.write("job.toml", synthetic_elastic_job("fails-at-start", 20, 3));
  const auto run_dir = dir.path() / "run";

  auto submitted = run_omnilearn({"submit", job.string(), "--address", cluster.address(), "--json",
                                  "--run-dir", run_dir.string()},
                                 20s);
  ASSERT_EQ(submitted.status.code, 0) << submitted.err;
  const std::string job_id = Json::parse(submitted.out).at("job_id");

  // Re-attach while it runs (it fails after a few start attempts, with back-offs).
  auto followed = run_omnilearn({"logs", job_id, "--address", cluster.address(), "--follow"}, 120s);
  ASSERT_FALSE(followed.timed_out) << followed.out << followed.err;
  EXPECT_EQ(followed.status.code, 1) << "a failed job: " << followed.out << followed.err;
  EXPECT_NE(followed.out.find("exited with code 3"), std::string::npos) << followed.out;
  EXPECT_NE(followed.out.find(std::string("    | ") + kError), std::string::npos) << followed.out;
  EXPECT_NE(followed.out.find("job failed"), std::string::npos) << followed.out;
  EXPECT_NE(followed.out.find("== summary: job " + job_id + " failed"), std::string::npos)
      << followed.out;

  // events.jsonl: one line per exit, with the code and the trainer's own words.
  auto exits = trainer_exits(run_dir);
  ASSERT_FALSE(exits.empty()) << followed.out;
  for (const auto& e : exits) {
    EXPECT_EQ(e.value("exit_code", 0), 3) << e.dump();
    EXPECT_NE(e.value("last_error", "").find(kError), std::string::npos) << e.dump();
    EXPECT_EQ(e.value("trainer", "").rfind(job_id + "-w", 0), 0u) << e.dump();
    auto node = e.value("node", "");
    EXPECT_TRUE(node == "w1" || node == "w2") << e.dump();
  }
  auto summary = read_summary(run_dir);
  ASSERT_TRUE(summary);
  EXPECT_EQ(summary->value("status", ""), "failed") << summary->dump(2);
  EXPECT_NE(summary->value("reason", "").find(kError), std::string::npos) << summary->dump(2);

  // A finished job, read again: the same story, and the same exit code.
  auto logs = run_omnilearn({"logs", job_id, "--address", cluster.address()}, 20s);
  EXPECT_EQ(logs.status.code, 1) << logs.err;
  EXPECT_NE(logs.out.find(std::string("    | ") + kError), std::string::npos) << logs.out;
  EXPECT_NE(logs.out.find("reason: "), std::string::npos) << logs.out;
  auto json = run_omnilearn({"logs", job_id, "--address", cluster.address(), "--json"}, 20s);
  EXPECT_EQ(json.status.code, 1) << json.err;
  std::size_t exits_in_json = 0;
  std::istringstream lines(json.out);
  for (std::string line; std::getline(lines, line);) {
    auto e = Json::parse(line, nullptr, false);
    ASSERT_TRUE(e.is_object()) << line;
    exits_in_json += e.value("event", "") == "trainer_exited";
  }
  EXPECT_EQ(exits_in_json, exits.size());

  // submit --follow of a job that fails: the same lines, exit 1.
  auto again = run_omnilearn({"submit", job.string(), "--address", cluster.address(), "--follow",
                              "--run-dir", (dir.path() / "run2").string()},
                             120s);
  ASSERT_FALSE(again.timed_out) << again.out << again.err;
  EXPECT_EQ(again.status.code, 1) << again.out << again.err;
  EXPECT_NE(again.out.find(std::string("    | ") + kError), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("reason: "), std::string::npos) << again.out;
}

TEST(CliLogs, TheRealTrainerSaysWhichDataDirectoryIsMissing) {
  if (!fs::exists(omnilearn_binary().parent_path() / "omnilearn-trainer")) {
    GTEST_SKIP() << "omnilearn-trainer is not built (OMNILEARN_WITH_TORCH=OFF)";
  }
  ScratchDir dir("missing-data");
  TestCluster cluster(job_head_options());
  cluster.start_worker("w1");
  cluster.start_worker("w2");
  ASSERT_TRUE(cluster.wait_worker_joined("w1", 15s)) << cluster.worker("w1").describe();
  ASSERT_TRUE(cluster.wait_worker_joined("w2", 15s)) << cluster.worker("w2").describe();
  const std::string missing = (dir.path() / "no-such-fashion-mnist").string();
  auto job = dir.write("job.toml", R"([job]
name = "missing-data"

[model]
kind = "mlp"
hidden = [16]

[data]
dataset = "fashion-mnist"
path = ")" + missing + R"("

[train]
global_batch = 64
steps = 5
optimizer = "sgd"
lr = 0.05

[controller]
min_batch = 8

[elastic]
min_workers = 1
max_workers = 2
)");
  const auto run_dir = dir.path() / "run";
  auto followed = run_omnilearn({"submit", job.string(), "--address", cluster.address(), "--follow",
                                 "--run-dir", run_dir.string()},
                                140s);
  ASSERT_FALSE(followed.timed_out) << followed.out << followed.err;
  EXPECT_EQ(followed.status.code, 1) << followed.out << followed.err;
  EXPECT_NE(followed.out.find(missing), std::string::npos)
      << "--follow shows the trainer's error: " << followed.out;

  auto exits = trainer_exits(run_dir);
  ASSERT_FALSE(exits.empty());
  EXPECT_NE(exits.front().value("exit_code", 0), 0) << exits.front().dump();
  EXPECT_NE(exits.front().value("last_error", "").find(missing), std::string::npos)
      << exits.front().dump();
  auto summary = read_summary(run_dir);
  ASSERT_TRUE(summary);
  EXPECT_EQ(summary->value("status", ""), "failed");
  EXPECT_NE(summary->value("reason", "").find(missing), std::string::npos) << summary->dump(2);
}

}  // namespace
}  // namespace omnilearn::testing
