// Soak: a head that lives for months must keep nothing per finished job. A head and
// two workers run short jobs back to back (OMNILEARN_SOAK_JOBS, default 40); each must succeed.
// Once the first OMNILEARN_SOAK_CHECKPOINT jobs (default 10) and once all of them have finished,
// with no job running, the head's own counters (`omnilearn status --json`: threads, open_fds,
// actors, store_keys) and its resident memory are read and printed: threads, descriptors and
// actors must be what they were at the checkpoint, no rendezvous key may be left, and the
// resident memory may grow by less than 20 MiB. The 500-job figures of docs/benchmarks.md come
// from bench/jobs/soak.py, which runs the same loop longer.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "tests/support/job_run.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

// Steps take milliseconds here: the job is mostly its trainers starting and stopping, which is
// what a head accumulates leftovers from.
const std::string kJob = R"([job]
name = "soak"

[model]
kind = "mlp"
hidden = [16]

[data]
dataset = "synthetic"
train_size = 512
test_size = 128

[train]
global_batch = 64
steps = 3
optimizer = "sgd"
lr = 0.05
seed = 5
threads = 1

[controller]
policy = "proportional"
min_batch = 8
interval = 10

[elastic]
min_workers = 1
max_workers = 2
slots = 1
)";

constexpr std::int64_t kMaxRssGrowthKib = 20 * 1024;

int env_int(const char* name, int fallback) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  try {
    return std::stoi(text);
  } catch (const std::exception&) {
    ADD_FAILURE() << name << "=" << text << " is not a number; using " << fallback;
    return fallback;
  }
}

// VmRSS of `pid` in KiB, or -1 if it cannot be read.
std::int64_t resident_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    std::int64_t kib = -1;
    fields >> kib;
    return kib;
  }
  return -1;
}

// What the head holds while no job runs.
struct HeadFootprint {
  std::uint64_t threads = 0;
  std::uint64_t open_fds = 0;
  std::uint64_t actors = 0;
  std::uint64_t store_keys = 0;
  std::int64_t rss_kib = -1;

  std::string describe() const {
    return fmt::format("threads {}, open_fds {}, actors {}, store_keys {}, VmRSS {} KiB", threads,
                       open_fds, actors, store_keys, rss_kib);
  }
};

class Soak : public JobTest {
 protected:
  std::optional<HeadFootprint> footprint(const ClusterStatus& status) {
    const auto& counters = status.json().at("counters");
    for (const auto* key : {"threads", "open_fds", "actors", "store_keys"}) {
      if (!counters.contains(key)) {
        ADD_FAILURE() << "`status --json` has no counter '" << key << "': " << counters.dump();
        return std::nullopt;
      }
    }
    HeadFootprint f;
    f.threads = counters.at("threads").get<std::uint64_t>();
    f.open_fds = counters.at("open_fds").get<std::uint64_t>();
    f.actors = counters.at("actors").get<std::uint64_t>();
    f.store_keys = counters.at("store_keys").get<std::uint64_t>();
    f.rss_kib = resident_kib(cluster().head().process().pid());
    return f;
  }

  // The head's footprint once no job is pending or running, the head runs only its own
  // `idle_actors`, no rendezvous key is left, and two reads in a row agree on threads and
  // descriptors (a client that just exited may still have a connection being closed).
  std::optional<HeadFootprint> settled_footprint(std::uint64_t idle_actors) {
    std::optional<HeadFootprint> previous;
    std::optional<HeadFootprint> settled;
    cluster().wait_for_status(
        [&](const ClusterStatus& status) {
          for (const auto& job : status.json().at("jobs")) {
            const auto state = job.value("state", "");
            if (state == "pending" || state == "running") return false;
          }
          auto now = footprint(status);
          if (!now || now->actors != idle_actors || now->store_keys != 0) return false;
          bool same = previous && previous->threads == now->threads &&
                      previous->open_fds == now->open_fds;
          previous = now;
          if (same) settled = now;
          return same;
        },
        60s, 200ms);
    if (!settled) {
      ADD_FAILURE() << "the head did not settle with " << idle_actors
                    << " actors and no store keys once its jobs finished; last read: "
                    << (previous ? previous->describe() : std::string("none")) << "\n"
                    << cluster().last_status_text();
    }
    return settled;
  }

  void expect_no_trainer_left() {
    std::vector<ProcessInfo> left;
    EXPECT_TRUE(wait_until(
        [&] {
          left = trainer_processes(address_, "");
          return left.empty();
        },
        15s))
        << "trainers outlived their jobs:\n" << describe(left);
  }
};

TEST_F(Soak, AHeadKeepsNothingPerFinishedJob) {
  const int jobs = env_int("OMNILEARN_SOAK_JOBS", 40);
  const int checkpoint = std::min(env_int("OMNILEARN_SOAK_CHECKPOINT", 10), jobs);
  ASSERT_GE(checkpoint, 1) << "OMNILEARN_SOAK_JOBS and _CHECKPOINT must be at least 1";

  auto& cluster = start_cluster();
  for (const auto* worker : {"w1", "w2"}) start_worker(worker);
  for (const auto* worker : {"w1", "w2"}) {
    ASSERT_TRUE(cluster.wait_worker_joined(worker, 30s)) << cluster.worker(worker).describe();
  }
  auto before = cluster.status();
  ASSERT_TRUE(before) << cluster.last_status_text();
  auto idle = footprint(*before);
  ASSERT_TRUE(idle);
  const auto idle_actors = idle->actors;
  std::printf("soak: before any job: %s\n", idle->describe().c_str());

  scratch_ = std::make_unique<ScratchDir>("soak");
  const auto job_file = scratch_->write("job.toml", kJob);
  std::optional<HeadFootprint> at_checkpoint;
  for (int i = 1; i <= jobs; ++i) {
    JobRun run(cluster, job_file, scratch_->path() / fmt::format("run-{}", i));
    auto summary = run.wait_finished(180s);
    ASSERT_TRUE(summary) << "job " << i << " of " << jobs << " did not finish\n" << run.describe();
    ASSERT_EQ(summary->value("status", ""), "succeeded")
        << "job " << i << " of " << jobs << "\n" << run.describe();
    if (i == checkpoint) {
      at_checkpoint = settled_footprint(idle_actors);
      ASSERT_TRUE(at_checkpoint);
      expect_no_trainer_left();
      std::printf("soak: after job %d: %s\n", i, at_checkpoint->describe().c_str());
      std::fflush(stdout);
    }
  }

  auto at_end = settled_footprint(idle_actors);
  ASSERT_TRUE(at_end);
  expect_no_trainer_left();
  std::printf("soak: after job %d: %s\n", jobs, at_end->describe().c_str());
  std::printf("soak: VmRSS growth from job %d to job %d: %lld KiB (bound %lld KiB)\n", checkpoint,
              jobs, static_cast<long long>(at_end->rss_kib - at_checkpoint->rss_kib),
              static_cast<long long>(kMaxRssGrowthKib));
  RecordProperty("after_checkpoint", at_checkpoint->describe());
  RecordProperty("after_last_job", at_end->describe());

  // A connection being torn down can leave a descriptor for a moment: wait for the counts to
  // come back before calling them grown.
  auto same_as_checkpoint = [&] {
    auto now = cluster.status();
    if (!now) return false;
    auto f = footprint(*now);
    if (f) at_end = f;
    return f && f->threads == at_checkpoint->threads && f->open_fds == at_checkpoint->open_fds;
  };
  wait_until(same_as_checkpoint, 30s, 500ms);
  EXPECT_EQ(at_end->threads, at_checkpoint->threads) << "threads grew with the jobs run";
  EXPECT_EQ(at_end->open_fds, at_checkpoint->open_fds) << "descriptors grew with the jobs run";
  EXPECT_EQ(at_end->actors, at_checkpoint->actors) << "a finished job kept an actor";
  EXPECT_EQ(at_end->store_keys, 0u) << "a finished job left rendezvous keys";
  ASSERT_GE(at_checkpoint->rss_kib, 0);
  ASSERT_GE(at_end->rss_kib, 0);
  EXPECT_LT(at_end->rss_kib - at_checkpoint->rss_kib, kMaxRssGrowthKib)
      << "the head's resident memory grew from " << at_checkpoint->rss_kib << " KiB after job "
      << checkpoint << " to " << at_end->rss_kib << " KiB after job " << jobs;
}

}  // namespace
}  // namespace omnilearn::testing
