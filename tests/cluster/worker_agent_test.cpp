// WorkerAgent in-process with a stand-in trainer program (a shell script): every trainer exit
// reaches the trainer's scheduler as TrainerExited, a clean one included, with the exit code
// (128 + signal when killed) and the last lines the trainer wrote to stderr.

#include "cluster/worker_agent.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cluster/node_registry.hpp"
#include "tests/support/actor_probe.hpp"
#include "tests/support/wait.hpp"

namespace omnilearn::actors {
namespace {

using namespace std::chrono_literals;
using runtime::ActorAddress;
namespace fs = std::filesystem;

// Behaves according to its --trainer argument, like a trainer that ends in one of these ways.
constexpr const char* kTrainerScript = R"(#!/bin/sh
trainer=""
while [ $# -gt 0 ]; do
  if [ "$1" = "--trainer" ]; then trainer="$2"; fi
  shift
done
case "$trainer" in
  clean) echo "all steps done" >&2; exit 0 ;;
  failing)
    for i in 1 2 3 4 5 6 7; do echo "error line $i" >&2; done
    printf "the last words, without a newline" >&2
    exit 3 ;;
  killed) echo "about to be killed" >&2; kill -9 $$ ;;
  sleeper*) exec sleep 60 ;;
esac
exit 99
)";

class Agent : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("omnilearn-agent-test-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    trainer_program = dir / "fake-trainer.sh";
    std::ofstream(trainer_program) << kTrainerScript;
    fs::permissions(trainer_program, fs::perms::owner_all);

    MembershipConfig config;
    config.heartbeat_interval = 100ms;
    config.heartbeat_timeout = 5000ms;
    head_endpoint = head.listen("tcp://127.0.0.1:0");
    head.spawn<NodeRegistry>(kRegistryActor, config);
    scheduler = testing::spawn_probe(head, "job-test");
  }
  void TearDown() override {
    worker.reset();  // stops the agent (and any trainer) before the script goes
    std::error_code ec;
    fs::remove_all(dir, ec);
  }

  // A new worker system running agent w1 of the head at `endpoint`, not yet registered.
  void spawn_agent(const std::string& endpoint, const std::string& program) {
    worker = std::make_unique<runtime::ActorSystem>();
    WorkerOptions options;
    options.agent.head_endpoint = endpoint;
    options.agent.name = "w1";
    options.trainer_binary = program;
    options.local_endpoint = worker->listen("tcp://127.0.0.1:0");
    options.gloo_host = "127.0.0.1";
    worker->spawn<WorkerAgent>(kAgentActor, options);
  }

  void start_agent(const std::string& program) {
    spawn_agent(head_endpoint, program);
    ASSERT_TRUE(testing::wait_until(
        [&] {
          auto reply = head.ask(ActorAddress{"", kRegistryActor}, StatusRequest{false}, 2s).get();
          auto status = reply.as<StatusReply>();
          return status && status->nodes.size() == 1;
        },
        10s))
        << "the agent did not register";
  }

  // Starts trainer `name` and returns what the agent reported when it exited.
  std::optional<TrainerExited> run_trainer(const std::string& name) {
    worker->tell(ActorAddress{"", kAgentActor}, SpawnTrainer{"job-1", name, "job-test"});
    return scheduler.queue->pop_as<TrainerExited>(20s);
  }

  fs::path dir;
  fs::path trainer_program;
  runtime::ActorSystem head;
  std::string head_endpoint;
  testing::Probe scheduler;
  std::unique_ptr<runtime::ActorSystem> worker;
};

TEST_F(Agent, ACleanExitIsReportedToo) {
  ASSERT_NO_FATAL_FAILURE(start_agent(trainer_program));
  auto exited = run_trainer("clean");
  ASSERT_TRUE(exited) << "no TrainerExited for a trainer that exited with code 0";
  EXPECT_EQ(exited->job_id, "job-1");
  EXPECT_EQ(exited->trainer, "clean");
  EXPECT_FALSE(exited->node_id.empty());
  EXPECT_EQ(exited->exit_code, 0);
  EXPECT_EQ(exited->reason, "exited with code 0");
  EXPECT_EQ(exited->last_error, "all steps done");
}

TEST_F(Agent, AFailedTrainerCarriesItsCodeAndItsLastFiveLines) {
  ASSERT_NO_FATAL_FAILURE(start_agent(trainer_program));
  auto exited = run_trainer("failing");
  ASSERT_TRUE(exited);
  EXPECT_EQ(exited->exit_code, 3);
  EXPECT_EQ(exited->reason, "exited with code 3");
  EXPECT_EQ(exited->last_error,
            "error line 4\nerror line 5\nerror line 6\nerror line 7\n"
            "the last words, without a newline");
}

TEST_F(Agent, AKilledTrainerIsReportedWith128PlusTheSignal) {
  ASSERT_NO_FATAL_FAILURE(start_agent(trainer_program));
  auto exited = run_trainer("killed");
  ASSERT_TRUE(exited);
  EXPECT_EQ(exited->exit_code, 128 + 9);
  EXPECT_NE(exited->reason.find("killed by signal 9"), std::string::npos) << exited->reason;
  EXPECT_EQ(exited->last_error, "about to be killed");
}

TEST_F(Agent, ATrainerProgramThatCannotRunIsReportedWithWhy) {
  ASSERT_NO_FATAL_FAILURE(start_agent((dir / "no-such-program").string()));
  auto exited = run_trainer("any");
  ASSERT_TRUE(exited);
  EXPECT_EQ(exited->exit_code, 127);
  EXPECT_NE(exited->reason.find("could not run"), std::string::npos) << exited->reason;
  EXPECT_NE(exited->last_error.find("cannot execute the trainer program"), std::string::npos)
      << exited->last_error;
}

// The head placed trainers on this node while the agent's registration reply was lost; when
// the agent gets through, it is another node record, the one they were started for having been
// declared dead (their jobs wrote them off). Those are stopped at once instead of idling until
// their own timeout; one started without a node record named is left alone.
TEST_F(Agent, TrainersStartedForANodeRecordDeclaredDeadAreStoppedOnRegistering) {
  runtime::ActorSystem late_head;  // no registry yet: the agent cannot register
  const std::string endpoint = late_head.listen("tcp://127.0.0.1:0");
  testing::Probe late_scheduler = testing::spawn_probe(late_head, "job-test");
  spawn_agent(endpoint, trainer_program);
  worker->tell(ActorAddress{"", kAgentActor},
               SpawnTrainer{"job-1", "sleeper-stale", "job-test", "n-declared-dead"});
  worker->tell(ActorAddress{"", kAgentActor},
               SpawnTrainer{"job-1", "sleeper-unnamed", "job-test", ""});
  std::this_thread::sleep_for(300ms);
  MembershipConfig config;
  config.heartbeat_interval = 100ms;
  config.heartbeat_timeout = 5000ms;
  late_head.spawn<NodeRegistry>(kRegistryActor, config);
  auto exited = late_scheduler.queue->pop_as<TrainerExited>(20s);
  ASSERT_TRUE(exited) << "the stale trainer was not stopped";
  EXPECT_EQ(exited->trainer, "sleeper-stale");
  EXPECT_EQ(exited->exit_code, 128 + SIGTERM);
  EXPECT_FALSE(late_scheduler.queue->pop_as<TrainerExited>(1s)) << "the other keeps running";
  worker.reset();  // stops the agent and the trainer left, while their head is still up
}

}  // namespace
}  // namespace omnilearn::actors
