// Remote tasks and actors against a real cluster: an `omnilearn head` and workers that load
// this folder's remote_test_lib with --load, all on 127.0.0.1 on ports the OS picks; the test
// is the driver (it links the same library, as a user's program would). Every process is
// killed by PID when its TestCluster goes away.

#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <functional>
#include <fstream>
#include <thread>

#include <omnilearn/omnilearn.hpp>

#include "tests/core/remote_test_lib.hpp"
#include "tests/support/cluster.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;
using remote_test::Counter;

const std::string kLibrary = OL_REMOTE_TEST_LIB;
const std::string kEmptyLibrary = OL_EMPTY_TEST_LIB;
const std::string kNextAbiLibrary = OL_NEXT_ABI_TEST_LIB;
const std::string kRelaidLibrary = OL_RELAID_TEST_LIB;

ConnectOptions connect_to(const TestCluster& cluster) {
  ConnectOptions options;
  options.cluster_file = test_cluster_file().string();
  options.address = cluster.address();
  return options;
}

// Waits until the head's task router knows `count` nodes with executors.
bool wait_nodes(Cluster& driver, std::size_t count, std::chrono::milliseconds timeout = 15s) {
  return wait_until([&] { return driver.nodes().size() == count; }, timeout, 50ms);
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::path(test_cluster_file()).parent_path() / name).string();
}

// The pid a task wrote to `path`, once it exists.
int wait_pid_file(const std::string& path) {
  int pid = 0;
  wait_until([&] {
    std::ifstream in(path);
    return static_cast<bool>(in >> pid);
  }, 20s);
  return pid;
}

void kill_worker_by_pid(TestCluster& cluster, const std::vector<std::string>& names, int pid) {
  for (const auto& name : names) {
    if (cluster.worker(name).pid() == pid) {
      cluster.worker(name).kill_and_reap();
      return;
    }
  }
  FAIL() << "no worker has pid " << pid;
}

// Waits until the actor `handle()` returns answers from a process other than `old_pid`: it was
// re-created on another node. Errors meanwhile (the head has not seen the death yet, or the
// actor is being re-created) mean not yet.
bool wait_restarted_elsewhere(const std::function<ActorHandle<Counter>()>& handle, int old_pid) {
  return wait_until([&] {
    try {
      return handle().call(&Counter::pid).get(5s) != old_pid;
    } catch (const Error&) {
      return false;
    }
  }, 30s, 100ms);
}

class RemoteTest : public ::testing::Test {
 protected:
  void start(int workers, std::vector<std::string> extra = {}) {
    for (int i = 0; i < workers; ++i) {
      auto name = "w" + std::to_string(i);
      std::vector<std::string> args = {"--load", kLibrary, "--cpus", "2"};
      args.insert(args.end(), extra.begin(), extra.end());
      cluster_.start_worker(name, args);
      names_.push_back(name);
      ASSERT_TRUE(cluster_.wait_worker_joined(name, 20s)) << cluster_.worker(name).describe();
    }
    driver_.emplace(Cluster::connect(connect_to(cluster_)));
    ASSERT_TRUE(wait_nodes(*driver_, workers));
  }
  TestCluster cluster_;
  std::vector<std::string> names_;
  std::optional<Cluster> driver_;
};

TEST_F(RemoteTest, TasksRoundTripUserTypesAndReportRemoteErrors) {
  start(2);
  EXPECT_EQ(driver_->submit(remote_test::square, 7).get(30s), 49);

  remote_test::Sample sample{"abc", {1.5, 2.5, 3.0}, 4};
  auto summary = driver_->submit(remote_test::summarize, sample).get(30s);
  EXPECT_EQ(summary.text, "abc!");
  EXPECT_DOUBLE_EQ(summary.sum, 7.0);
  EXPECT_EQ(summary.label, 4);
  EXPECT_NE(summary.pid, ::getpid()) << "the task must run in a worker, not in the driver";

  // Many at once, spread over both workers; wait_any then wait_all.
  std::vector<Future<int>> futures;
  for (int i = 0; i < 200; ++i) futures.push_back(driver_->submit(remote_test::square, i));
  auto first = wait_any(futures, 30s);
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(wait_all(futures, 60s));
  for (int i = 0; i < 200; ++i) EXPECT_EQ(futures[i].get(0ms), i * i);

  // Composed on the driver: a result fed to the next task, and all of a batch at once.
  auto chained = driver_->submit(remote_test::square, 3).then([&](int nine) {
    return driver_->submit(remote_test::square, nine).get(30s);
  });
  EXPECT_EQ(chained.get(30s), 81);
  std::vector<Future<int>> batch;
  std::vector<int> squares;
  for (int i = 0; i < 10; ++i) {
    batch.push_back(driver_->submit(remote_test::square, i));
    squares.push_back(i * i);
  }
  EXPECT_EQ(when_all(batch).get(30s), squares);

  try {
    driver_->submit(remote_test::fail_with, std::string("bad learning rate")).get(30s);
    FAIL() << "a remote exception must reach the driver";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRemoteException);
    EXPECT_NE(std::string(e.what()).find("bad learning rate"), std::string::npos) << e.what();
  }

  // A result not there in time is a timeout on the waiting side, not a hang.
  auto slow = driver_->submit(remote_test::record_pid_then_sleep, temp_path("slow.pid"), 1500);
  try {
    slow.get(50ms);
    FAIL() << "get(50ms) must time out";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  }
  EXPECT_GT(slow.get(30s), 0);
}

// More than the head takes from one peer at once (8,192 messages): the client keeps the rest
// in its own bounded queue and the loop blocks only while that queue is full.
TEST_F(RemoteTest, ADriverSubmitsOneHundredThousandTasksInOneLoop) {
  start(2);
  constexpr int kTasks = 100000;
  std::vector<Future<int>> futures;
  futures.reserve(kTasks);
  for (int i = 0; i < kTasks; ++i) futures.push_back(driver_->submit(remote_test::square, i % 10000));
  int wrong = 0;
  std::string first_error;
  for (int i = 0; i < kTasks; ++i) {
    try {
      if (futures[i].get(120s) != (i % 10000) * (i % 10000)) ++wrong;
    } catch (const Error& e) {
      if (wrong++ == 0) first_error = e.what();
    }
  }
  EXPECT_EQ(wrong, 0) << "first error: " << first_error;
}

TEST_F(RemoteTest, InfeasibleRequestsFailAtOnceNamingWhatIsMissing) {
  start(1, {"--labels", "zone=a"});
  TaskOptions gpus;
  gpus.resources.gpus = 4;
  try {
    driver_->submit_with(gpus, remote_test::square, 2).get(10s);
    FAIL() << "no node has 4 GPUs";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInfeasible);
    EXPECT_NE(std::string(e.what()).find("gpus >= 4"), std::string::npos) << e.what();
  }
  ActorOptions zone_b;
  zone_b.resources.labels["zone"] = "b";
  try {
    driver_->spawn<Counter>(zone_b, std::string("c"), 0);
    FAIL() << "no node has zone=b";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInfeasible);
    EXPECT_NE(std::string(e.what()).find("label zone=b"), std::string::npos) << e.what();
  }
  ActorOptions zone_a;
  zone_a.resources.labels["zone"] = "a";
  auto counter = driver_->spawn<Counter>(zone_a, std::string("c"), 1);
  EXPECT_EQ(counter.call(&Counter::add, 2).get(30s), 3);

  try {
    driver_->spawn<remote_test::Refuser>(ActorOptions{}, std::string("no config"));
    FAIL() << "a constructor that throws must fail the spawn";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRemoteException);
    EXPECT_NE(std::string(e.what()).find("no config"), std::string::npos) << e.what();
  }
}

TEST_F(RemoteTest, AStatefulNamedActorServesTwoDriversInOrder) {
  start(2);
  ActorOptions options;
  options.name = "shared-counter";
  auto counter = driver_->spawn<Counter>(options, std::string("shared"), 100);
  // Calls from one handle run in the order they were made, tells included.
  std::vector<Future<int>> sums;
  for (int i = 1; i <= 50; ++i) {
    if (i % 10 == 0) {
      counter.tell(&Counter::add, i);
    } else {
      sums.push_back(counter.call(&Counter::add, i));
    }
  }
  ASSERT_TRUE(wait_all(sums, 60s));
  int expected = 100;
  std::size_t k = 0;
  for (int i = 1; i <= 50; ++i) {
    expected += i;
    if (i % 10 != 0) {
      EXPECT_EQ(sums[k++].get(0ms), expected);
    }
  }

  // A second driver (its own connection and actor system) finds it by name.
  auto second = Cluster::connect(connect_to(cluster_));
  auto same = second.get_actor<Counter>("shared-counter");
  EXPECT_EQ(same.call(&Counter::add, 1).get(30s), expected + 1);
  EXPECT_EQ(counter.call(&Counter::history).get(30s).size(), 51u);

  ActorOptions duplicate;
  duplicate.name = "shared-counter";
  try {
    second.spawn<Counter>(duplicate, std::string("again"), 0);
    FAIL() << "a name is unique while its actor lives";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRefused);
  }
  try {
    second.get_actor<Counter>("nobody");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNoSuchActor);
  }
  counter.kill();
  EXPECT_TRUE(wait_until([&] {
    try {
      second.get_actor<Counter>("shared-counter");
      return false;
    } catch (const Error& e) {
      return e.code() == ErrorCode::kNoSuchActor;
    }
  }, 10s));
}

TEST_F(RemoteTest, ATaskIsRetriedElsewhereWhenItsWorkerIsKilled) {
  start(2);
  TaskOptions options;
  options.max_retries = 1;
  options.resources.cpus = 2;  // one at a time per worker
  auto pid_file = temp_path("retry.pid");
  auto result = driver_->submit_with(options, remote_test::record_pid_then_sleep, pid_file, 3000);
  int first_pid = wait_pid_file(pid_file);
  ASSERT_GT(first_pid, 0);
  std::filesystem::remove(pid_file);
  kill_worker_by_pid(cluster_, names_, first_pid);
  int second_pid = result.get(60s);
  EXPECT_NE(second_pid, first_pid);

  // Without retries the same loss is a node-died error.
  auto pid_file2 = temp_path("noretry.pid");
  TaskOptions once;
  auto lost = driver_->submit_with(once, remote_test::record_pid_then_sleep, pid_file2, 3000);
  int pid = wait_pid_file(pid_file2);
  ASSERT_EQ(pid, second_pid) << "only one worker is left";
  kill_worker_by_pid(cluster_, names_, pid);
  try {
    lost.get(60s);
    FAIL() << "the task's only worker died";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNodeDied) << e.what();
  }
}

TEST_F(RemoteTest, AnActorRestartsOnAnotherNodeAndKeepsItsName) {
  start(2);
  ActorOptions options;
  options.name = "survivor";
  options.max_restarts = 1;
  auto counter = driver_->spawn<Counter>(options, std::string("s"), 10);
  EXPECT_EQ(counter.call(&Counter::add, 5).get(30s), 15);
  int first_pid = counter.call(&Counter::pid).get(30s);
  kill_worker_by_pid(cluster_, names_, first_pid);

  // Once the head has seen the node die the actor is re-created elsewhere, from its
  // constructor's arguments (state is not carried over), under the same name and handle.
  ASSERT_TRUE(wait_restarted_elsewhere([&] { return driver_->get_actor<Counter>("survivor"); },
                                       first_pid));
  EXPECT_EQ(counter.call(&Counter::add, 1).get(30s), 11) << "restarted from its constructor";
}

// Monitors across nodes: two drivers watch an actor on a worker; its node dying with a restart
// left is not an end (the monitors stay quiet while it comes back elsewhere); a kill is, and
// both monitors learn why. A monitor of an actor that is not running answers at once, and one
// with a short bound times out while the actor lives.
TEST_F(RemoteTest, MonitorsAcrossNodesFireOnceTheActorEndsForGood) {
  start(2);
  ActorOptions options;
  options.name = "watched";
  options.max_restarts = 1;
  auto counter = driver_->spawn<Counter>(options, std::string("m"), 0);
  int first_pid = counter.call(&Counter::pid).get(30s);
  auto second = Cluster::connect(connect_to(cluster_));
  auto mine = counter.monitor();
  auto theirs = second.get_actor<Counter>("watched").monitor();
  try {
    counter.monitor(300ms).get(5s);
    FAIL() << "a monitor fired while the actor lives";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
  }

  kill_worker_by_pid(cluster_, names_, first_pid);
  ASSERT_TRUE(wait_restarted_elsewhere([&] { return counter; }, first_pid))
      << "the actor did not come back on the other node";
  EXPECT_FALSE(mine.ready()) << "a restart is not an end: " << mine.get(0ms);
  EXPECT_FALSE(theirs.ready());

  counter.kill();
  std::string why_mine = mine.get(20s);
  std::string why_theirs = theirs.get(20s);
  EXPECT_NE(why_mine.find("killed"), std::string::npos) << why_mine;
  EXPECT_EQ(why_theirs, why_mine);
  std::string late = counter.monitor().get(20s);
  EXPECT_NE(late.find("no such actor"), std::string::npos) << late;
}

TEST_F(RemoteTest, ADriverThatDiesMidCallLeavesTheActorServingOthers) {
  start(1);
  ActorOptions options;
  options.name = "patient";
  auto counter = driver_->spawn<Counter>(options, std::string("p"), 0);
  // Another driver program calls a slow method and is killed before the answer comes back.
  auto ready = temp_path("child.ready");
  ProcessOptions driver_options;
  driver_options.name = "driver";
  ChildProcess child({OL_TEST_DRIVER, test_cluster_file().string(), cluster_.address(), "patient",
                      ready},
                     driver_options);
  ASSERT_TRUE(wait_until([&] { return std::filesystem::exists(ready); }, 20s)) << child.describe();
  std::this_thread::sleep_for(200ms);  // the call is on its way or running
  child.kill_and_reap();
  // The reply to the dead driver goes nowhere; the actor and the head go on.
  EXPECT_EQ(counter.call(&Counter::add, 1).get(30s), 1001);
  EXPECT_EQ(driver_->submit(remote_test::square, 3).get(30s), 9);
}

TEST(RemoteWorker, ALibraryThatFailsToLoadIsAClearErrorAtStart) {
  TestCluster cluster;
  auto missing = run_omnilearn({"worker", "--address", cluster.address(), "--name", "bad",
                                "--load", "/nonexistent/libnothing.so"},
                               20s);
  EXPECT_EQ(missing.status.code, 2) << missing.err;
  EXPECT_NE(missing.err.find("cannot load library /nonexistent/libnothing.so"),
            std::string::npos)
      << missing.err;
  auto empty = run_omnilearn(
      {"worker", "--address", cluster.address(), "--name", "bad", "--load", kEmptyLibrary}, 20s);
  EXPECT_EQ(empty.status.code, 2) << empty.err;
  EXPECT_NE(empty.err.find("registers no remote functions"), std::string::npos) << empty.err;
}

// Built against a changed copy of the header (tests/core/CMakeLists.txt): the worker reads the
// library's plugin table first and refuses it, instead of calling into types it lays out
// differently.
TEST(RemoteWorker, ALibraryBuiltAgainstAnotherHeaderRevisionIsRefused) {
  TestCluster cluster;
  auto next = run_omnilearn(
      {"worker", "--address", cluster.address(), "--name", "bad", "--load", kNextAbiLibrary}, 20s);
  EXPECT_EQ(next.status.code, 2) << next.err;
  EXPECT_NE(next.err.find("cannot use library " + kNextAbiLibrary), std::string::npos) << next.err;
  EXPECT_NE(next.err.find("plugin ABI " + std::to_string(OMNILEARN_PLUGIN_ABI + 1) +
                          ", and this worker runs ABI " + std::to_string(OMNILEARN_PLUGIN_ABI)),
            std::string::npos)
      << next.err;
  EXPECT_NE(next.err.find("rebuild the library"), std::string::npos) << next.err;
  auto relaid = run_omnilearn(
      {"worker", "--address", cluster.address(), "--name", "bad", "--load", kRelaidLibrary}, 20s);
  EXPECT_EQ(relaid.status.code, 2) << relaid.err;
  EXPECT_NE(relaid.err.find("laid out the header's types differently"), std::string::npos)
      << relaid.err;
}

TEST(RemoteWorker, StatusListsTheLibrariesAWorkerLoaded) {
  TestCluster cluster;
  cluster.start_worker("lib", {"--load", kLibrary});
  ASSERT_TRUE(cluster.wait_worker_joined("lib", 20s)) << cluster.worker("lib").describe();
  auto status = cluster.wait_for_status([](const ClusterStatus& s) { return s.node("lib").has_value(); }, 10s);
  ASSERT_TRUE(status);
  auto labels = status->node("lib")->at("resources").at("labels");
  EXPECT_EQ(labels.value("omnilearn.load", ""),
            std::filesystem::path(kLibrary).filename().string());
}

}  // namespace
}  // namespace omnilearn::testing
