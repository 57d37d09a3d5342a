// Bad job files: `omnilearn submit` of a job file that is malformed, has an unknown
// key, a wrong type or impossible values exits 2 with one line on stderr naming
// file:line:column, and the cluster is unaffected: the head still answers, no job is listed,
// no trainer is started, no run directory appears.

#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "tests/support/job_run.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// A valid job; each case below breaks one line of it.
const std::vector<std::string> kValidJob = {
    "[job]",                       // 1
    "name = \"bad-files\"",        // 2
    "",                            // 3
    "[model]",                     // 4
    "kind = \"mlp\"",              // 5
    "hidden = [16]",               // 6
    "",                            // 7
    "[data]",                      // 8
    "dataset = \"synthetic\"",     // 9
    "train_size = 256",            // 10
    "test_size = 64",              // 11
    "",                            // 12
    "[train]",                     // 13
    "global_batch = 64",           // 14
    "steps = 10",                  // 15
    "optimizer = \"sgd\"",         // 16
    "lr = 0.05",                   // 17
    "",                            // 18
    "[controller]",                // 19
    "policy = \"proportional\"",   // 20
    "min_batch = 4",               // 21
    "",                            // 22
    "[elastic]",                   // 23
    "min_workers = 1",             // 24
    "max_workers = 2",             // 25
};

struct BadCase {
  std::string name;
  int line;                    // 1-based line to replace (or insert before, see `insert`)
  std::string text;            // the new text of that line
  bool insert = false;         // insert `text` before `line` instead of replacing it
  int expected_line;           // where the error must point ...
  int expected_column;         // ... (0: any column)
  std::string expected_message;
};

std::string render(const BadCase& c) {
  std::vector<std::string> lines = kValidJob;
  if (c.insert) {
    lines.insert(lines.begin() + (c.line - 1), c.text);
  } else {
    lines[c.line - 1] = c.text;
  }
  std::string text;
  for (const auto& line : lines) text += line + "\n";
  return text;
}

std::size_t count_lines(const std::string& text) {
  std::size_t lines = 0;
  for (char c : text) lines += c == '\n';
  if (!text.empty() && text.back() != '\n') ++lines;
  return lines;
}

class JobBadFiles : public JobTest {};

TEST_F(JobBadFiles, SubmitExits2WithTheLocationAndTheClusterIsUnaffected) {
  auto& cluster = start_cluster();
  start_worker("w1");
  ASSERT_TRUE(cluster.wait_worker_joined("w1", 15s)) << cluster.worker("w1").describe();
  ScratchDir dir("bad-job");

  // The unchanged job is valid: every failure below is caused by its one broken line. (Checked
  // without starting it: a job with max_workers above the nodes would still start.)
  const std::vector<BadCase> cases = {
      {"unknown key (a typo)", 16, "optimiser = \"sgd\"", false, 16, 1, "unknown key 'optimiser'"},
      {"unknown section", 23, "[elastik]", false, 23, 0, "unknown section [elastik]"},
      {"wrong type", 14, "global_batch = \"64\"", false, 14, 16,
       "global_batch: expected an integer, got a string"},
      {"wrong type in a list", 6, "hidden = [16, \"x\"]", false, 6, 15, "hidden"},
      {"unknown policy", 20, "policy = \"fastest\"", false, 20, 10, "expected one of"},
      {"global_batch below max_workers x min_batch", 14, "global_batch = 6", false, 14, 16,
       "cannot give 2 workers"},
      {"min_workers above max_workers", 24, "min_workers = 3", false, 24, 15,
       "min_workers (3) is larger than max_workers (2)"},
      {"negative learning rate", 17, "lr = -0.1", false, 17, 6, "lr"},
      {"both steps and epochs", 16, "epochs = 2", true, 13, 0, "exactly one of"},
      {"malformed TOML: unterminated table header", 19, "[controller", false, 19, 0, ""},
      {"malformed TOML: bad number", 17, "lr = 0.0.5", false, 17, 0, ""},
      {"malformed TOML: duplicate key", 16, "steps = 20", true, 16, 0, "steps"},
  };

  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto job = dir.write("job.toml", render(c));
    auto run_dir = dir.path() / "run";
    auto result = run_omnilearn({"submit", job.string(), "--address", cluster.address(),
                                 "--run-dir", run_dir.string()},
                                20s);
    ASSERT_FALSE(result.timed_out) << "submit hung";
    EXPECT_TRUE(result.status.exited()) << result.status.to_string();
    EXPECT_EQ(result.status.code, 2) << result.err;
    EXPECT_TRUE(result.out.empty()) << "nothing was submitted: " << result.out;
    EXPECT_EQ(count_lines(result.err), 1u) << result.err;
    std::string location = job.string() + ":" + std::to_string(c.expected_line) + ":";
    if (c.expected_column > 0) location += std::to_string(c.expected_column) + ":";
    EXPECT_EQ(result.err.rfind("omnilearn: error: " + location, 0), 0u)
        << "expected the error at " << location << "\n  got: " << result.err
        << "  file:\n" << render(c);
    if (c.expected_column == 0) {
      // Some column, still: FILE:LINE:COLUMN: message.
      EXPECT_TRUE(std::regex_search(result.err, std::regex(":[0-9]+:[1-9][0-9]*: ")))
          << result.err;
    }
    EXPECT_NE(result.err.find(c.expected_message), std::string::npos) << result.err;
    EXPECT_EQ(result.err.find("terminate called"), std::string::npos) << result.err;
    EXPECT_FALSE(fs::exists(run_dir)) << "nothing may start for a bad job";
  }

  // A missing file is a user error too, and names the file.
  auto missing = (dir.path() / "no-such-job.toml").string();
  auto result = run_omnilearn({"submit", missing, "--address", cluster.address()}, 20s);
  EXPECT_EQ(result.status.code, 2) << result.status.to_string() << " " << result.err;
  EXPECT_NE(result.err.find(missing), std::string::npos) << result.err;

  // The cluster is unaffected: the head answers, the worker is alive, no job exists, and no
  // trainer process was started anywhere in this cluster.
  auto status = cluster.status(10s);
  ASSERT_TRUE(status) << cluster.last_status_text();
  EXPECT_TRUE(status->json().at("jobs").empty()) << status->json().dump(2);
  EXPECT_EQ(status->state("w1"), "alive") << status->json().dump(2);
  EXPECT_TRUE(cluster.worker("w1").running());
  EXPECT_TRUE(cluster.head().process().running());
  EXPECT_TRUE(trainer_processes(cluster.address(), "").empty())
      << describe(trainer_processes(cluster.address(), ""));

  // And it still takes a good job: the same file without its broken line runs to the end,
  // followed by the client (`--follow` asks the job's scheduler for events through the head).
  std::string good;
  for (const auto& line : kValidJob) good += line + "\n";
  auto run_dir = dir.path() / "good-run";
  auto follow = run_omnilearn({"submit", dir.write("good.toml", good).string(), "--address",
                               cluster.address(), "--run-dir", run_dir.string(), "--follow"},
                              60s);
  ASSERT_FALSE(follow.timed_out) << follow.out << follow.err;
  EXPECT_EQ(follow.status.code, 0) << follow.out << follow.err;
  EXPECT_NE(follow.out.find("submitted job"), std::string::npos) << follow.out;
  EXPECT_NE(follow.out.find("job succeeded at step 10"), std::string::npos) << follow.out;
  EXPECT_NE(follow.out.find("== summary: job"), std::string::npos) << follow.out;
  auto summary = read_summary(run_dir);
  ASSERT_TRUE(summary) << follow.out;
  EXPECT_EQ(summary->at("status"), "succeeded") << summary->dump(2);
  EXPECT_EQ(summary->at("steps"), 10) << summary->dump(2);
}

}  // namespace
}  // namespace omnilearn::testing
