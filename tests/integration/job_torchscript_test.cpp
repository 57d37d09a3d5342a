// Issue 16, "Bring your own model": a PyTorch model saved with TorchScript and data saved as
// tensor files, by examples/torchscript/make_example.py (python3-torch), trained by a job on
// three heterogeneous workers (slowdown 1, 1, 2), submitted from the job file's directory with
// relative paths; then Python loads the final checkpoint into the scripted module
// (examples/torchscript/evaluate.py) and scores the test tensors exactly as the job's summary
// says. Before that, a job naming a missing model file is refused at submit, located.

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>

#include "tests/support/job_run.hpp"
#include "tests/support/torch_python.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Json = nlohmann::json;

// Relative paths: resolved against this file's directory at submit.
constexpr const char* kJob = R"([job]
name = "e2e-torchscript"

[model]
kind = "torchscript"
path = "model.pt"

[data]
dataset = "tensors"
train = "train.pt"
test = "test.pt"

[train]
global_batch = 256
epochs = 2
optimizer = "sgd"
lr = 0.05
momentum = 0.9
loss = "cross_entropy"
seed = 3
threads = 1

[controller]
policy = "proportional"
min_batch = 16
interval = 5
cooldown = 2

[elastic]
min_workers = 3
max_workers = 3
)";

class JobTorchScript : public JobTest {};

TEST_F(JobTorchScript, PythonScoresTheTrainedCheckpointAsTheSummarySays) {
  std::string why;
  const auto python = find_torch_python(&why);
  if (!python) GTEST_SKIP() << why;
  const char* source = std::getenv("OMNILEARN_SOURCE_DIR");
  ASSERT_NE(source, nullptr) << "run through ctest (OMNILEARN_SOURCE_DIR)";
  const fs::path example = fs::path(source) / "examples" / "torchscript";

  ScratchDir dir("torchscript-job");
  const auto made =
      run_python(*python, {(example / "make_example.py").string(), "--out", dir.path().string(),
                           "--train-samples", "6000", "--test-samples", "2000", "--seed", "1"});
  ASSERT_EQ(made.status.code, 0) << made.out << made.err;

  auto& cluster = start_cluster();
  start_worker("w1");
  start_worker("w2");
  start_worker("w3", {"--slowdown", "2"});
  for (const auto* worker : {"w1", "w2", "w3"}) {
    ASSERT_TRUE(cluster.wait_worker_joined(worker, 15s)) << cluster.worker(worker).describe();
  }
  ProcessOptions in_dir;
  in_dir.working_directory = dir.path().string();

  // A model file that is not there is refused before anything starts, at its key.
  std::string missing = kJob;
  missing.replace(missing.find("\"model.pt\""), 10, "\"missing.pt\"");
  dir.write("missing.toml", missing);
  const auto refused =
      run_omnilearn({"submit", "missing.toml", "--address", cluster.address()}, 20s, in_dir);
  EXPECT_EQ(refused.status.code, 2) << refused.out << refused.err;
  // (Submitted by its relative name, so the path is relative to the CLI's directory: the same.)
  EXPECT_NE(refused.err.find("missing.toml:6:8: [model] path: model file missing.pt does not "
                             "exist"),
            std::string::npos)
      << refused.err;
  EXPECT_EQ(refused.out, "") << "nothing was submitted";

  // The job, submitted from its directory by its relative name, followed to its end.
  dir.write("job.toml", kJob);
  const fs::path run_dir = dir.path() / "run";
  const auto followed = run_omnilearn({"submit", "job.toml", "--address", cluster.address(),
                                       "--run-dir", run_dir.string(), "--follow"},
                                      120s, in_dir);
  ASSERT_FALSE(followed.timed_out) << followed.out << followed.err;
  ASSERT_EQ(followed.status.code, 0) << followed.out << followed.err;
  const auto summary = read_summary(run_dir);
  ASSERT_TRUE(summary) << followed.out;
  ASSERT_EQ(summary->at("status"), "succeeded") << summary->dump(2);
  EXPECT_EQ(summary->at("steps"), (2 * 6000 + 255) / 256) << summary->dump(2);
  ASSERT_TRUE(summary->at("final_test_accuracy").is_number()) << summary->dump(2);
  const double accuracy = summary->at("final_test_accuracy").get<double>();
  // Trained: 10 classes, so chance is 0.1.
  EXPECT_GT(accuracy, 0.5) << summary->dump(2);

  // Three workers, and the slowed one was given the smallest batch.
  const auto steps = events_named(read_events(run_dir), "step");
  ASSERT_FALSE(steps.empty());
  const Json& last = steps.back();
  ASSERT_EQ(last.at("batches").size(), 3u) << last.dump();
  const auto nodes = member_nodes(read_events(run_dir), last.at("generation").get<std::int64_t>());
  ASSERT_EQ(nodes.size(), 3u);
  const auto batches = last.at("batches").get<std::vector<int>>();
  for (size_t rank = 0; rank < 3; ++rank) {
    if (nodes[rank] == "w3") {
      for (size_t other = 0; other < 3; ++other) {
        if (other != rank) {
          EXPECT_LT(batches[rank], batches[other]) << last.dump();
        }
      }
    }
  }

  // Python: the checkpoint the summary names, loaded into the scripted module, scores the test
  // tensors as the trainer did.
  const auto scored = run_python(
      *python, {(example / "evaluate.py").string(), (run_dir / "summary.json").string(), "--model",
                (dir.path() / "model.pt").string(), "--test", (dir.path() / "test.pt").string()});
  ASSERT_EQ(scored.status.code, 0) << scored.out << scored.err;
  const Json python_view = Json::parse(scored.out);
  std::printf("torchscript job: summary accuracy %.6f loss %.6f; Python %.6f loss %.6f\n", accuracy,
              summary->at("final_test_loss").get<double>(),
              python_view.at("accuracy").get<double>(), python_view.at("loss").get<double>());
  EXPECT_EQ(python_view.at("samples"), 2000);
  EXPECT_NEAR(python_view.at("accuracy").get<double>(), accuracy, 1e-6) << scored.out;
  const double loss = summary->at("final_test_loss").get<double>();
  EXPECT_NEAR(python_view.at("loss").get<double>(), loss, 1e-5 * loss) << scored.out;
}

}  // namespace
}  // namespace omnilearn::testing
