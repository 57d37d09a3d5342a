// A watch of a remote actor ends with its Down: nothing stays armed to fire a second, stale
// Down when the remote system is later declared down.

#include <gtest/gtest.h>

#include "runtime/actor_system.hpp"
#include "runtime/system_messages.hpp"
#include "tests/support/actor_probe.hpp"
#include "tests/support/wait.hpp"

namespace omnilearn::runtime {
namespace {

using namespace std::chrono_literals;

TEST(RemoteWatch, IsRemovedWhenItsDownArrives) {
  ActorSystem a;
  ActorSystem b;
  a.listen("tcp://127.0.0.1:0");
  auto endpoint_b = b.listen("tcp://127.0.0.1:0");
  auto watcher = testing::spawn_probe(a, "watcher");
  b.spawn("target", std::make_unique<testing::FunctionActor>(
                        [](testing::FunctionActor&, const Envelope&) {}));
  ActorAddress target{endpoint_b, "target"};
  a.monitor(watcher.address, target);
  EXPECT_EQ(a.stats().remote_watches, 1u);
  // The MonitorRequest must arrive before the target stops: wait until b knows the watcher.
  ASSERT_TRUE(testing::wait_until([&] { return b.transport_stats().messages_in.load() > 0; }, 5s));
  b.stop("target", "finished");
  auto down = watcher.queue->pop_as<Down>(5s);
  ASSERT_TRUE(down);
  EXPECT_EQ(down->actor, "target");
  EXPECT_TRUE(testing::wait_until([&] { return a.stats().remote_watches == 0; }, 5s));
  a.declare_system_down(endpoint_b, "declared down");
  a.declare_system_down(b.id(), "declared down");
  EXPECT_FALSE(watcher.queue->pop_as<Down>(300ms)) << "a second, stale Down";
}

}  // namespace
}  // namespace omnilearn::runtime
