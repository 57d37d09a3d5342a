// Monitor -> Down: for local actors that stop, crash or never existed, and for actors on another
// ActorSystem over real loopback TCP. Also: a stopped actor's thread is joined.

#include <pthread.h>

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "runtime/actor_system.hpp"
#include "runtime/system_messages.hpp"
#include "tests/support/actor_probe.hpp"
#include "tests/support/wait.hpp"

namespace omnilearn::runtime {
namespace {

using namespace std::chrono_literals;
using testing::FunctionActor;

std::unique_ptr<Actor> idle_actor() {
  return std::make_unique<FunctionActor>([](FunctionActor&, const Envelope&) {});
}

TEST(Monitor, StoppingALocalActorSendsDownWithTheReason) {
  ActorSystem system;
  auto watcher = testing::spawn_probe(system, "watcher");
  auto target = system.spawn("target", idle_actor());
  system.monitor(watcher.address, target);
  system.stop("target", "finished its work");
  auto down = watcher.queue->pop_as<Down>(5s);
  ASSERT_TRUE(down) << "no Down arrived";
  EXPECT_EQ(down->system, system.id());
  EXPECT_EQ(down->actor, "target");
  EXPECT_EQ(down->reason, "finished its work");
}

TEST(Monitor, EveryWatcherIsToldOnce) {
  ActorSystem system;
  auto target = system.spawn("target", idle_actor());
  std::vector<testing::Probe> watchers;
  for (int i = 0; i < 5; ++i) {
    watchers.push_back(testing::spawn_probe(system, "w" + std::to_string(i)));
    system.monitor(watchers.back().address, target);
    system.monitor(watchers.back().address, target);  // twice: still one Down
  }
  system.stop("target");
  for (auto& watcher : watchers) {
    ASSERT_TRUE(watcher.queue->pop_as<Down>(5s)) << watcher.address.actor;
    EXPECT_FALSE(watcher.queue->pop_as<Down>(100ms)) << "a second Down";
  }
}

TEST(Monitor, ActorHelperAndStopSelf) {
  ActorSystem system;
  auto watcher = testing::spawn_probe(system, "watcher");
  // Stops itself when told anything.
  auto target = system.spawn(
      "target", std::make_unique<FunctionActor>([](FunctionActor& self, const Envelope&) {
        self.stop_self("asked to leave");
      }));
  std::promise<void> monitoring;
  watcher.run([&](testing::ProbeActor& self) {
    self.monitor(target);
    monitoring.set_value();
  });
  monitoring.get_future().wait();
  system.tell(target, Ping{1});
  auto down = watcher.queue->pop_as<Down>(5s);
  ASSERT_TRUE(down);
  EXPECT_EQ(down->reason, "asked to leave");
  EXPECT_TRUE(testing::wait_until([&] { return !system.has_actor("target"); }, 2s));
}

TEST(Monitor, ACrashIsReportedAsTheReason) {
  ActorSystem system;
  auto watcher = testing::spawn_probe(system, "watcher");
  auto target =
      system.spawn("target", std::make_unique<FunctionActor>([](FunctionActor&, const Envelope&) {
                     throw std::runtime_error("out of memory");
                   }));
  system.monitor(watcher.address, target);
  system.tell(target, Ping{1});
  auto down = watcher.queue->pop_as<Down>(5s);
  ASSERT_TRUE(down);
  EXPECT_EQ(down->reason, "crashed: out of memory");
}

TEST(Monitor, AFailedStartIsReportedAsTheReason) {
  ActorSystem system;
  auto watcher = testing::spawn_probe(system, "watcher");
  std::promise<void> may_fail;
  auto gate = may_fail.get_future().share();
  auto target = system.spawn(
      "target", std::make_unique<FunctionActor>([](FunctionActor&, const Envelope&) {},
                                                [gate](FunctionActor&) {
                                                  gate.wait();  // let the monitor land first
                                                  throw std::runtime_error("no GPU");
                                                }));
  system.monitor(watcher.address, target);
  may_fail.set_value();
  auto down = watcher.queue->pop_as<Down>(5s);
  ASSERT_TRUE(down);
  EXPECT_EQ(down->reason, "failed to start: no GPU");
}

// VmSize of this process in KiB: an exited thread that nobody joined keeps its whole stack
// mapped, so unjoined threads show here (and not in /proc/self/task, which they have left).
std::int64_t virtual_kib() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmSize:", 0) == 0) return std::stoll(line.substr(7));
  }
  return -1;
}

TEST(Monitor, StoppedActorsLeaveNoThreadBehind) {
  // A head starts and stops an actor per job for months: each stopped actor's thread must be
  // joined, however it stopped (stop(), stop_self, a crash).
  ActorSystem system;
  pthread_attr_t attributes;
  ASSERT_EQ(pthread_getattr_default_np(&attributes), 0);
  std::size_t stack_bytes = 0;
  pthread_attr_getstacksize(&attributes, &stack_bytes);
  pthread_attr_destroy(&attributes);
  const std::int64_t stack_kib = static_cast<std::int64_t>(stack_bytes / 1024);
  const std::int64_t before = virtual_kib();
  ASSERT_GT(before, 0);
  constexpr int kActors = 60;
  for (int i = 0; i < kActors; ++i) {
    const auto name = "short-lived-" + std::to_string(i);
    switch (i % 3) {
      case 0:
        system.spawn(name, idle_actor());
        system.stop(name);
        break;
      case 1:
        system.spawn(name, std::make_unique<FunctionActor>(
                               [](FunctionActor&, const Envelope&) {},
                               [](FunctionActor& self) { self.stop_self("done"); }));
        break;
      default:
        system.spawn(name, std::make_unique<FunctionActor>(
                               [](FunctionActor&, const Envelope&) {},
                               [](FunctionActor&) { throw std::runtime_error("crash"); }));
    }
  }
  ASSERT_TRUE(testing::wait_until([&] { return system.stats().actors == 0; }, 10s));
  system.spawn("last", idle_actor());  // joins whatever stopped since the previous spawn
  const std::int64_t growth = virtual_kib() - before;
  EXPECT_LT(growth, kActors * stack_kib / 2)
      << "VmSize grew by " << growth << " KiB over " << kActors << " stopped actors ("
      << stack_kib << " KiB of stack each): their threads were not joined";
}

TEST(Monitor, MonitoringAMissingActorSendsDownAtOnce) {
  ActorSystem system;
  auto watcher = testing::spawn_probe(system, "watcher");
  system.monitor(watcher.address, ActorAddress{system.id(), "ghost"});
  auto down = watcher.queue->pop_as<Down>(1s);
  ASSERT_TRUE(down);
  EXPECT_EQ(down->actor, "ghost");
  EXPECT_EQ(down->reason, "no such actor");
}

// Two systems in one process, connected over real TCP on 127.0.0.1 ports the OS picks.
class RemoteMonitor : public ::testing::Test {
 protected:
  void SetUp() override {
    endpoint_b = b.listen("tcp://127.0.0.1:0");
    ASSERT_EQ(endpoint_b.rfind("tcp://127.0.0.1:", 0), 0u) << endpoint_b;
  }
  // Returns once everything A sent to B before this call has been handled by B's I/O thread:
  // ZeroMQ keeps one connection's messages in order, and B answers $system pings there.
  void sync_with_b() {
    auto pong = a.ask(ActorAddress{endpoint_b, "$system"}, Ping{99}, 5s).get();
    ASSERT_TRUE(pong.ok()) << pong.error;
  }

  ActorSystem a;
  ActorSystem b;
  std::string endpoint_b;
};

TEST_F(RemoteMonitor, RemoteActorStoppingSendsDownAcrossTheWire) {
  auto watcher = testing::spawn_probe(a, "watcher");
  b.spawn("target", idle_actor());
  a.monitor(watcher.address, ActorAddress{endpoint_b, "target"});
  sync_with_b();
  b.stop("target", "job finished");
  auto envelope =
      watcher.queue->pop_if([](const Envelope& e) { return e.kind == Down::kKind; }, 5s);
  ASSERT_TRUE(envelope) << "no Down from the remote system";
  auto down = unpack_payload<Down>(envelope->payload);
  ASSERT_TRUE(down);
  EXPECT_EQ(down->system, b.id());
  EXPECT_EQ(down->actor, "target");
  EXPECT_EQ(down->reason, "job finished");
  EXPECT_EQ(envelope->from.system, b.id());
}

TEST_F(RemoteMonitor, RemoteActorCrashingSendsDown) {
  auto watcher = testing::spawn_probe(a, "watcher");
  b.spawn("target", std::make_unique<FunctionActor>([](FunctionActor&, const Envelope&) {
            throw std::runtime_error("segfault averted");
          }));
  a.monitor(watcher.address, ActorAddress{endpoint_b, "target"});
  sync_with_b();
  a.tell(ActorAddress{endpoint_b, "target"}, Ping{1});
  auto down = watcher.queue->pop_as<Down>(5s);
  ASSERT_TRUE(down);
  EXPECT_EQ(down->reason, "crashed: segfault averted");
}

TEST_F(RemoteMonitor, MissingRemoteActorSendsDown) {
  auto watcher = testing::spawn_probe(a, "watcher");
  a.monitor(watcher.address, ActorAddress{endpoint_b, "ghost"});
  auto down = watcher.queue->pop_as<Down>(5s);
  ASSERT_TRUE(down);
  EXPECT_EQ(down->actor, "ghost");
  EXPECT_EQ(down->reason, "no such actor");
}

TEST_F(RemoteMonitor, DeclaringTheSystemDownTellsItsWatchers) {
  auto watcher = testing::spawn_probe(a, "watcher");
  auto other = testing::spawn_probe(a, "other");
  b.spawn("t1", idle_actor());
  b.spawn("t2", idle_actor());
  a.monitor(watcher.address, ActorAddress{endpoint_b, "t1"});
  a.monitor(watcher.address, ActorAddress{endpoint_b, "t2"});
  a.monitor(other.address, ActorAddress{endpoint_b, "t1"});
  sync_with_b();
  // B's process is not stopped here: a graceful stop would send its own Downs ("stopped").
  // Declaring the system down is how the registry reports a node that died silently.
  a.declare_system_down(endpoint_b, "node dead");
  std::set<std::string> actors;
  for (int i = 0; i < 2; ++i) {
    auto down = watcher.queue->pop_as<Down>(5s);
    ASSERT_TRUE(down);
    EXPECT_EQ(down->reason, "node dead");
    EXPECT_EQ(down->system, endpoint_b);
    actors.insert(down->actor);
  }
  EXPECT_EQ(actors, (std::set<std::string>{"t1", "t2"}));
  auto other_down = other.queue->pop_as<Down>(5s);
  ASSERT_TRUE(other_down);
  EXPECT_EQ(other_down->actor, "t1");
  // Declared once, forgotten: a second declaration tells nobody.
  a.declare_system_down(endpoint_b, "again");
  EXPECT_FALSE(watcher.queue->pop_as<Down>(200ms));
}

}  // namespace
}  // namespace omnilearn::runtime
