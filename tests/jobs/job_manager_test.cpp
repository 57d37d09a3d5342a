// JobManager in-process with real SchedulerActors (no nodes, so jobs stay pending until they
// are stopped): a finished job's scheduler is stopped and the JobManager answers for the job
// from its run directory; a scheduler that dies first fails its job (summary.json, a "finished"
// event); a forgotten job keeps no scheduler; a job's rendezvous keys go with it.

#include "jobs/job_manager.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <typeinfo>

#include "cluster/node_registry.hpp"
#include "cluster/store_actor.hpp"
#include "tests/support/wait.hpp"

namespace omnilearn::actors {
namespace {

using namespace std::chrono_literals;
using runtime::ActorAddress;
using Json = nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kJob = R"([job]
name = "jobs-test"
[model]
kind = "mlp"
hidden = [8]
[data]
dataset = "synthetic"
train_size = 256
test_size = 64
[train]
global_batch = 32
steps = 5
optimizer = "sgd"
lr = 0.05
seed = 1
[controller]
policy = "proportional"
min_batch = 4
interval = 5
[elastic]
min_workers = 1
max_workers = 1
)";

std::vector<std::string> lines_of(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class Jobs : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("omnilearn-jobs-test-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override {
    head.shutdown();
    std::error_code ec;
    if (!HasFailure()) fs::remove_all(dir, ec);
  }

  void start_head(JobManagerOptions options = {}) {
    options.runs_root = (dir / "runs").string();
    if (options.finished_scheduler_grace == JobManagerOptions{}.finished_scheduler_grace) {
      options.finished_scheduler_grace = 50ms;
    }
    head.spawn<NodeRegistry>(kRegistryActor, MembershipConfig{});
    head.spawn<StoreActor>(kStoreActor);
    head.spawn<JobManager>(kJobsActor, options);
  }

  template <class Reply, class Request>
  std::optional<Reply> ask(const std::string& actor, const Request& request) {
    auto answer = head.ask(ActorAddress{"", actor}, request, 10s).get();
    auto reply = answer.template as<Reply>();
    EXPECT_TRUE(reply) << "no " << typeid(Reply).name() << " from " << actor << ": "
                       << answer.error;
    return reply;
  }

  SubmitJobReply submit(const std::string& run_dir = "") {
    auto reply = ask<SubmitJobReply>(kJobsActor, SubmitJob{kJob, "job.toml", run_dir});
    EXPECT_TRUE(reply && reply->accepted) << (reply ? reply->error : "");
    return reply.value_or(SubmitJobReply{});
  }
  JobStatusReply job_status(const std::string& id, std::uint64_t since) {
    return ask<JobStatusReply>(kJobsActor, JobStatusRequest{id, since}).value_or(JobStatusReply{});
  }
  std::optional<JobInfo> job_info(const std::string& id) {
    auto status = ask<StatusReply>(kJobsActor, StatusRequest{});
    if (!status) return std::nullopt;
    for (const auto& job : status->jobs) {
      if (job.id == id) return job;
    }
    return std::nullopt;
  }
  bool wait_state(const std::string& id, const std::string& state) {
    return testing::wait_until(
        [&] {
          auto info = job_info(id);
          return info && info->state == state;
        },
        10s);
  }
  StoreReply store(StoreRequest::Op op, const std::string& key = "") {
    StoreRequest request;
    request.op = op;
    if (!key.empty()) request.keys = {key};
    request.value = "v";
    return ask<StoreReply>(kStoreActor, request).value_or(StoreReply{});
  }

  fs::path dir;
  runtime::ActorSystem head;
};

TEST_F(Jobs, ASchedulerThatCrashesFailsItsJob) {
  start_head();
  auto job = submit();
  const auto id = job.job_id;
  ASSERT_TRUE(testing::wait_until(
      [&] { return !lines_of(fs::path(job.run_dir) / "events.jsonl").empty(); }, 10s))
      << "the scheduler did not start";
  ASSERT_TRUE(store(StoreRequest::kSet, "job/" + id + "/gen/1/rank0").ok);
  ASSERT_TRUE(store(StoreRequest::kSet, "job/another/gen/1/rank0").ok);

  // What the runtime does when a handler throws: the actor ends with "crashed: <what>".
  head.stop(scheduler_actor_name(id), "crashed: injected fault");

  ASSERT_TRUE(wait_state(id, "failed")) << "the job still looks alive without its scheduler";
  const std::string reason = "the job's scheduler crashed: injected fault";
  EXPECT_EQ(job_info(id)->reason, reason);

  auto summary = Json::parse(std::ifstream(fs::path(job.run_dir) / "summary.json"), nullptr, false);
  ASSERT_TRUE(summary.is_object()) << "no summary.json";
  EXPECT_EQ(summary.value("job_id", ""), id);
  EXPECT_EQ(summary.value("name", ""), "jobs-test");
  EXPECT_EQ(summary.value("status", ""), "failed");
  EXPECT_EQ(summary.value("reason", ""), reason);
  auto events = lines_of(fs::path(job.run_dir) / "events.jsonl");
  auto last = Json::parse(events.back());
  EXPECT_EQ(last.value("event", ""), "finished");
  EXPECT_EQ(last.value("status", ""), "failed");

  // Followers are answered by the JobManager: the job's events to the end, and the summary.
  auto status = job_status(id, 0);
  EXPECT_TRUE(status.found);
  EXPECT_TRUE(status.finished);
  EXPECT_EQ(status.job.state, "failed");
  ASSERT_EQ(status.events.size(), events.size());
  EXPECT_EQ(Json::parse(status.events.front()).value("event", ""), "submitted");
  EXPECT_EQ(status.next, events.size());
  EXPECT_EQ(Json::parse(status.summary_json).value("status", ""), "failed");

  auto stop = ask<SimpleReply>(kJobsActor, StopJob{id, "too late"});
  ASSERT_TRUE(stop);
  EXPECT_TRUE(stop->ok);
  EXPECT_NE(stop->message.find("already finished"), std::string::npos) << stop->message;

  EXPECT_EQ(store(StoreRequest::kNumKeys).number, 1) << "the job's rendezvous keys stay behind";
  EXPECT_EQ(head.stats().actors, 3u) << "registry, store, jobs";
}

TEST_F(Jobs, AFinishedJobsSchedulerStopsAndTheJobManagerAnswersForIt) {
  start_head();
  // A reused run directory: the job's events start after an older run's.
  const auto run_dir = dir / "reused";
  fs::create_directories(run_dir);
  std::ofstream(run_dir / "events.jsonl") << "{\"event\":\"old\"}\n{\"event\":\"old\"}\n";
  auto job = submit(run_dir.string());
  const auto id = job.job_id;
  ASSERT_TRUE(store(StoreRequest::kSet, "job/" + id + "/gen/1/rank0").ok);

  auto stopped = ask<SimpleReply>(kJobsActor, StopJob{id, "stopped by the test"});
  ASSERT_TRUE(stopped && stopped->ok);
  ASSERT_TRUE(wait_state(id, "stopped"));
  ASSERT_TRUE(testing::wait_until([&] { return !head.has_actor(scheduler_actor_name(id)); }, 10s))
      << "the finished job's scheduler is still running";
  ASSERT_TRUE(testing::wait_until([&] { return store(StoreRequest::kNumKeys).number == 0; }, 10s))
      << "the job's rendezvous keys outlived it";
  EXPECT_EQ(head.stats().actors, 3u);

  auto events = lines_of(run_dir / "events.jsonl");
  ASSERT_GE(events.size(), 4u);  // 2 old + submitted ... finished
  auto status = job_status(id, 0);
  EXPECT_TRUE(status.found);
  EXPECT_TRUE(status.finished);
  EXPECT_EQ(status.job.state, "stopped");
  ASSERT_EQ(status.events.size(), events.size() - 2) << "the older run's events are not this job's";
  auto first = Json::parse(status.events.front());
  EXPECT_EQ(first.value("event", ""), "submitted");
  EXPECT_EQ(first.value("job_id", ""), id);
  EXPECT_EQ(Json::parse(status.events.back()).value("event", ""), "finished");
  EXPECT_EQ(Json::parse(status.summary_json).value("status", ""), "stopped");
  auto later = job_status(id, 1);
  ASSERT_EQ(later.events.size(), status.events.size() - 1);
  EXPECT_EQ(later.events.front(), status.events[1]);
  EXPECT_EQ(later.next, status.next);
  auto beyond = job_status(id, 1000);
  EXPECT_TRUE(beyond.events.empty());
  EXPECT_TRUE(beyond.finished);

  // A long job's file: replies carry at most 2,000 events, and `finished` only with the last.
  {
    std::ofstream out(run_dir / "events.jsonl", std::ios::app);
    for (int i = 0; i < 2500; ++i) out << "{\"event\":\"step\",\"step\":" << i << "}\n";
  }
  const auto total = status.events.size() + 2500;
  auto page = job_status(id, 0);
  EXPECT_EQ(page.events.size(), 2000u);
  EXPECT_FALSE(page.finished);
  EXPECT_EQ(page.next, 2000u);
  auto rest = job_status(id, page.next);
  EXPECT_EQ(rest.events.size(), total - 2000);
  EXPECT_TRUE(rest.finished);
  EXPECT_EQ(rest.next, total);
  EXPECT_EQ(Json::parse(rest.events.back()).value("step", -1), 2499);
  auto again = job_status(id, 1);  // backwards after a forward read
  EXPECT_EQ(again.events.front(), status.events[1]);

  auto stop = ask<SimpleReply>(kJobsActor, StopJob{id, "again"});
  ASSERT_TRUE(stop && stop->ok);
  EXPECT_NE(stop->message.find("already finished"), std::string::npos) << stop->message;
}

TEST_F(Jobs, AForgottenJobKeepsNoScheduler) {
  JobManagerOptions options;
  options.max_jobs = 1;
  options.finished_scheduler_grace = 1h;  // only the eviction can stop it
  start_head(options);
  auto first = submit();
  auto refused = ask<SubmitJobReply>(kJobsActor, SubmitJob{kJob, "job.toml", ""});
  ASSERT_TRUE(refused);
  EXPECT_FALSE(refused->accepted) << "the only job is still pending";
  EXPECT_NE(refused->error.find("--max-jobs"), std::string::npos) << refused->error;

  ASSERT_TRUE(ask<SimpleReply>(kJobsActor, StopJob{first.job_id, "make room"}));
  ASSERT_TRUE(wait_state(first.job_id, "stopped"));
  EXPECT_TRUE(head.has_actor(scheduler_actor_name(first.job_id))) << "within its grace";

  auto second = submit();
  EXPECT_FALSE(head.has_actor(scheduler_actor_name(first.job_id)))
      << "the forgotten job's scheduler must go with it";
  EXPECT_TRUE(head.has_actor(scheduler_actor_name(second.job_id)));
  auto gone = head.ask(ActorAddress{"", kJobsActor}, JobStatusRequest{first.job_id, 0}, 10s).get();
  auto error = gone.as<runtime::ErrorReply>();
  ASSERT_TRUE(error) << gone.error;
  EXPECT_EQ(error->code, "no-such-job");
}

}  // namespace
}  // namespace omnilearn::actors

namespace omnilearn::actors {
namespace {

// A head over a state store: submissions are recorded before they are answered; a second head
// over the same state answers for a finished job as before, carries on a pending synchronous
// and a pending asynchronous one (their schedulers run again, after a head_restarted event
// following the last whole line of their events.jsonl: a line the first head was cut off
// writing is dropped), and ends one whose job file no longer parses as failed with the outage,
// a head_restarted event and a summary.
TEST_F(Jobs, ARestartedHeadKeepsItsJobsResumesThemAndEndsOnesItCannotRead) {
  std::shared_ptr<state::StateStore> store = state::open_memory_store();
  JobManagerOptions options;
  options.store = store;
  start_head(options);
  auto pending = submit((dir / "pending").string());
  ASSERT_TRUE(store->get(job_key(pending.job_id))) << "answered before it was recorded";
  std::string asp_toml = kJob;
  const std::string name_line = "name = \"jobs-test\"";
  asp_toml.replace(asp_toml.find(name_line), name_line.size(), name_line + "\nmode = \"asp\"");
  asp_toml += "[asp]\nservers = 1\n";
  auto asp =
      ask<SubmitJobReply>(kJobsActor, SubmitJob{asp_toml, "asp.toml", (dir / "asp").string()});
  ASSERT_TRUE(asp && asp->accepted) << (asp ? asp->error : "");
  auto broken = submit((dir / "broken").string());
  auto stopped = submit((dir / "stopped").string());
  ASSERT_TRUE(ask<SimpleReply>(kJobsActor, StopJob{stopped.job_id}));
  ASSERT_TRUE(wait_state(stopped.job_id, "stopped"));
  ASSERT_TRUE(testing::wait_until(
      [&] {
        auto record = store->get(job_key(stopped.job_id));
        return record && Json::parse(*record).at("finished").get<bool>();
      },
      10s));
  ASSERT_TRUE(wait_state(pending.job_id, "pending"));
  ASSERT_TRUE(wait_state(asp->job_id, "pending"));
  ASSERT_TRUE(wait_state(broken.job_id, "pending"));
  // The first head dies here, as kill -9 would stop it: what the store holds now is what the
  // next head finds (a graceful shutdown would go on to end the pending job itself).
  std::shared_ptr<state::StateStore> crashed = state::open_memory_store();
  std::vector<state::Write> writes;
  for (const auto& [key, value] : store->load("")) {
    if (key == job_key(broken.job_id)) {
      // A job file the next head's rules refuse.
      Json record = Json::parse(value);
      record["toml"] = "[job\nname = ";
      writes.push_back({key, record.dump()});
      continue;
    }
    writes.push_back({key, value});
  }
  crashed->commit(writes);
  head.shutdown();
  store = crashed;
  // The first head was killed in the middle of a line.
  for (const auto* run : {"pending", "asp", "broken"}) {
    std::ofstream(dir / run / "events.jsonl", std::ios::app) << R"({"time": 1, "ev)";
  }

  runtime::ActorSystem second;
  auto restored = start_head_epoch(*store, 2000.0);
  ASSERT_EQ(restored.jobs.size(), 4u);
  JobManagerOptions again;
  again.runs_root = (dir / "runs").string();
  again.store = store;
  again.restored = restored.jobs;
  again.head = restored.info;
  again.head.outage_s = 1.5;
  second.spawn<NodeRegistry>(kRegistryActor, MembershipConfig{});
  second.spawn<StoreActor>(kStoreActor);
  second.spawn<JobManager>(kJobsActor, again);
  auto ask_second = [&](const std::string& id) {
    auto answer = second.ask(ActorAddress{"", kJobsActor}, JobStatusRequest{id, 0}, 10s).get();
    return answer.as<JobStatusReply>();
  };
  auto was_stopped = ask_second(stopped.job_id);
  ASSERT_TRUE(was_stopped && was_stopped->found);
  EXPECT_TRUE(was_stopped->finished);
  EXPECT_EQ(was_stopped->job.state, "stopped");
  // The synchronous and the asynchronous job go on: their schedulers run again (they had placed
  // no trainer, so the jobs start), after a head_restarted event.
  for (const auto& [id, run] : {std::pair{pending.job_id, "pending"}, {asp->job_id, "asp"}}) {
    auto was = ask_second(id);
    ASSERT_TRUE(was && was->found) << run;
    EXPECT_FALSE(was->finished) << run;
    EXPECT_EQ(was->job.state, "pending") << run;
    EXPECT_TRUE(second.has_actor(scheduler_actor_name(id))) << run;
    ASSERT_TRUE(testing::wait_until(
        [&] {
          // After it the asynchronous job's machine says what it restored.
          for (const auto& line : lines_of(dir / run / "events.jsonl")) {
            const Json e = Json::parse(line, nullptr, false);
            if (e.value("event", "") == "head_restarted" && e.value("resumed", false)) return true;
          }
          return false;
        },
        10s))
        << run << ":\n"
        << [&] {
             std::string all;
             for (const auto& line : lines_of(dir / run / "events.jsonl")) all += line + "\n";
             return all;
           }();
  }
  // The one whose job file no longer parses ends.
  auto was_broken = ask_second(broken.job_id);
  ASSERT_TRUE(was_broken && was_broken->found);
  EXPECT_TRUE(was_broken->finished);
  EXPECT_EQ(was_broken->job.state, "failed");
  EXPECT_NE(was_broken->job.reason.find("the head restarted after an outage of 1.5 s while the "
                                        "job was pending"),
            std::string::npos)
      << was_broken->job.reason;
  EXPECT_NE(was_broken->job.reason.find("cannot read its job file"), std::string::npos)
      << was_broken->job.reason;
  for (const auto* run : {"pending", "asp", "broken"}) {
    for (const auto& line : lines_of(dir / run / "events.jsonl")) {
      EXPECT_FALSE(Json::parse(line, nullptr, false).is_discarded()) << "not an event: " << line;
    }
  }
  const auto lines = lines_of(dir / "broken" / "events.jsonl");
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(Json::parse(lines[lines.size() - 2]).at("event"), "head_restarted");
  EXPECT_EQ(Json::parse(lines.back()).at("event"), "finished");
  auto summary = Json::parse(std::ifstream(dir / "broken" / "summary.json"));
  EXPECT_EQ(summary.at("status"), "failed");
  auto record = Json::parse(*store->get(job_key(broken.job_id)));
  EXPECT_TRUE(record.at("finished").get<bool>());
  EXPECT_EQ(record.at("state"), "failed");
  second.shutdown();
}

// `omnilearn drain` and `undrain` are answered once the head's store has them: a head killed
// right after the answer restarts with the node drained (or usable again) as the user was told.
TEST_F(Jobs, ADrainIsAnsweredOnceTheHeadsStoreHasIt) {
  std::shared_ptr<state::StateStore> store = state::open_memory_store();
  RegistryState registry;
  registry.store = store;
  head.spawn<NodeRegistry>(kRegistryActor, MembershipConfig{}, HeadCounterSource{},
                           DashboardAddress{}, registry);
  head.spawn<StoreActor>(kStoreActor);
  JobManagerOptions options;
  options.runs_root = (dir / "runs").string();
  options.store = store;
  head.spawn<JobManager>(kJobsActor, options);
  RegisterNode node;
  node.name = "w1";
  auto registered = ask<RegisterNodeReply>(kRegistryActor, node);
  ASSERT_TRUE(registered && registered->accepted) << (registered ? registered->error : "");

  // The JobManager knows the node once the registry's "joined" event reached it.
  std::optional<SimpleReply> drained;
  ASSERT_TRUE(testing::wait_until(
      [&] {
        drained = ask<SimpleReply>(kJobsActor, DrainNode{"w1"});
        return drained && drained->ok;
      },
      10s))
      << (drained ? drained->message : "no answer");
  EXPECT_TRUE(store->get(drained_key("w1"))) << "the drain was answered before it was written";

  auto usable = ask<SimpleReply>(kJobsActor, UndrainNode{"w1"});
  ASSERT_TRUE(usable && usable->ok) << (usable ? usable->message : "no answer");
  EXPECT_FALSE(store->get(drained_key("w1"))) << "the undrain was answered before it was written";
}

}  // namespace
}  // namespace omnilearn::actors
