// The head's state in a real etcd (a one-member cluster on loopback): what is committed loads
// back, one head is active at a time, and a head whose leader key was taken over can no longer
// write, however sure it is of its lease: fencing by the store's revision.

#include "state/etcd_store.hpp"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <future>
#include <thread>

#include "tests/support/etcd.hpp"
#include "tests/support/job_run.hpp"
#include "tests/support/wait.hpp"

namespace omnilearn::state {
namespace {

using namespace std::chrono_literals;

class EtcdStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = testing::EtcdCluster::unavailable(); !why.empty()) GTEST_SKIP() << why;
    if (std::system("command -v etcdctl >/dev/null") != 0) {
      GTEST_SKIP() << "etcdctl is not installed (Debian's etcd-client)";
    }
    etcd_ = std::make_unique<testing::EtcdCluster>(1, scratch_.path());
  }
  EtcdOptions options(const std::string& self, bool standby = false) {
    EtcdOptions out;
    parse_etcd_spec(etcd_->store("test"), out);
    out.self = self;
    out.standby = standby;
    out.lease_ttl = 1s;
    return out;
  }
  testing::ScratchDir scratch_{"omnilearn-etcd-store"};
  std::unique_ptr<testing::EtcdCluster> etcd_;
};

TEST(EtcdSpec, ParsesMembersAndPrefixAndRefusesTheRest) {
  EtcdOptions options;
  parse_etcd_spec("etcd://10.0.0.1:2379,10.0.0.2:2379/cluster-a/", options);
  EXPECT_EQ(options.endpoints, (std::vector<std::string>{"10.0.0.1:2379", "10.0.0.2:2379"}));
  EXPECT_EQ(options.prefix, "/cluster-a");
  EXPECT_THROW(parse_etcd_spec("etcd://", options), StateStoreError);
  EXPECT_THROW(parse_etcd_spec("etcd://host", options), StateStoreError);
  EXPECT_THROW(parse_etcd_spec("http://h:1", options), StateStoreError);
}

TEST_F(EtcdStoreTest, WritesLoadBackAndAStandbyIsElectedWhenTheLeaderStepsDown) {
  std::atomic<int> deposed{0};
  auto first_options = options("head-a:7070");
  first_options.on_deposed = [&](const std::string&) { ++deposed; };
  auto first = open_etcd_store(first_options);
  EXPECT_EQ(first->describe(), etcd_->store("test"));
  std::vector<Write> many;
  for (int i = 0; i < 300; ++i)
    many.push_back({"jobs/" + std::to_string(i), "v" + std::to_string(i)});
  many.push_back({"nodes/x", std::string("bin\0ary", 7)});
  first->commit(many);  // more than one etcd transaction holds
  first->commit({{"jobs/7", std::nullopt}});
  auto jobs = first->load("jobs/");
  EXPECT_EQ(jobs.size(), 299u);
  EXPECT_EQ(jobs.at("jobs/42"), "v42");
  EXPECT_EQ(first->get("nodes/x"), std::string("bin\0ary", 7));

  // A second head without --standby is refused, naming the active one.
  try {
    open_etcd_store(options("head-b:7071"));
    ADD_FAILURE() << "two active heads";
  } catch (const StateStoreError& e) {
    EXPECT_NE(std::string(e.what()).find("head-a:7070 is the active head"), std::string::npos)
        << e.what();
  }

  // A standby waits; when the first head steps down (its store closed: lease revoked) it is
  // elected and reads what the first wrote.
  std::promise<std::unique_ptr<StateStore>> elected;
  std::atomic<bool> waiting{false};
  std::thread standby([&] {
    auto standby_options = options("head-b:7071", true);
    standby_options.on_waiting = [&](const std::string& active) {
      EXPECT_EQ(active, "head-a:7070");
      waiting = true;
    };
    elected.set_value(open_etcd_store(standby_options));
  });
  ASSERT_TRUE(testing::wait_until([&] { return waiting.load(); }, 10s));
  auto future = elected.get_future();
  EXPECT_EQ(future.wait_for(1500ms), std::future_status::timeout) << "elected beside a live head";
  first.reset();
  ASSERT_EQ(future.wait_for(10s), std::future_status::ready);
  standby.join();
  auto second = future.get();
  EXPECT_EQ(second->load("jobs/").size(), 299u);
  second->put("head/epoch", "2");
  EXPECT_EQ(deposed.load(), 0) << "a head that stepped down was not deposed";
}

TEST_F(EtcdStoreTest, AHeadWhoseKeyWasReplacedCannotWriteAndKnowsIt) {
  std::atomic<int> deposed{0};
  auto head_options = options("head-a:7070");
  head_options.on_deposed = [&](const std::string&) { ++deposed; };
  auto head = open_etcd_store(head_options);
  head->put("jobs/1", "a");
  // Someone else deletes and recreates the leader key (an operator, or an election after this
  // head's lease expired while it was frozen): its create revision is no longer this head's.
  {
    const auto del = "ETCDCTL_API=3 etcdctl --endpoints=" + etcd_->client_endpoints().at(0) +
                     " del /test/leader >/dev/null";
    ASSERT_EQ(std::system(del.c_str()), 0) << del;
    auto other = open_etcd_store(options("head-b:7071", true));
    EXPECT_THROW(head->put("jobs/1", "stale"), StateStoreError);
    EXPECT_EQ(deposed.load(), 1);
    EXPECT_EQ(other->get("jobs/1"), "a") << "the fenced write changed nothing";
  }
}

// An etcd that stops answering (frozen here; a head cut off from it sees the same: connections
// that get no answer): the head gives its lease up before etcd could let another head be
// elected, though the renewal it has in flight waits up to 3 s for an answer. The bound has a
// wide slack (the deadline falls at most 1.8 s after the freeze, the TTL being 2 s), and a
// keeper held up by that renewal would miss it by a second or more.
TEST_F(EtcdStoreTest, AHeadWhoseEtcdStopsAnsweringGivesUpItsLeaseInTime) {
  std::promise<std::pair<std::chrono::steady_clock::time_point, std::string>> deposed;
  std::atomic<bool> once{false};
  auto head_options = options("head-a:7070");
  head_options.lease_ttl = 2s;
  head_options.on_deposed = [&](const std::string& why) {
    if (!once.exchange(true)) deposed.set_value({std::chrono::steady_clock::now(), why});
  };
  auto head = open_etcd_store(head_options);
  std::this_thread::sleep_for(1s);  // renewed at least once
  const auto frozen = std::chrono::steady_clock::now();
  ASSERT_TRUE(etcd_->member(0).send_signal(SIGSTOP));
  auto outcome = deposed.get_future();
  const bool in_time = outcome.wait_for(10s) == std::future_status::ready;
  ASSERT_TRUE(etcd_->member(0).send_signal(SIGCONT));
  ASSERT_TRUE(in_time) << "not deposed 10 s after etcd stopped answering";
  const auto [at, why] = outcome.get();
  EXPECT_LT(at - frozen, 2900ms) << why;
  std::printf("deposed %.2f s after the freeze: %s\n",
              std::chrono::duration<double>(at - frozen).count(), why.c_str());
  EXPECT_NE(why.find("not renewed"), std::string::npos) << why;
}

// lapsed() answers from the clock: from the lease's deadline on it says the lease may be gone,
// without waiting for the watchdog thread to depose the head (a head frozen past its lease and
// thawed wakes all its threads at once; its send fence asks lapsed() before any message
// leaves). Before the deadline, while renewals succeed, it says nothing.
TEST_F(EtcdStoreTest, LapsedSaysFromTheClockThatTheLeaseMayBeGone) {
  std::atomic<bool> deposed{false};
  auto head_options = options("head-a:7070");
  head_options.lease_ttl = 2s;
  head_options.on_deposed = [&](const std::string&) { deposed = true; };
  auto head = open_etcd_store(head_options);
  for (int i = 0; i < 30; ++i) {  // 1.5 s: renewed on the way
    EXPECT_FALSE(head->lapsed()) << *head->lapsed();
    std::this_thread::sleep_for(50ms);
  }
  const auto frozen = std::chrono::steady_clock::now();
  ASSERT_TRUE(etcd_->member(0).send_signal(SIGSTOP));
  std::optional<std::string> why;
  while (!why && std::chrono::steady_clock::now() - frozen < 10s) {
    why = head->lapsed();
    if (!why) std::this_thread::sleep_for(2ms);
  }
  const auto at = std::chrono::steady_clock::now();
  const bool deposed_in_time = testing::wait_until([&] { return deposed.load(); }, 10s);
  ASSERT_TRUE(etcd_->member(0).send_signal(SIGCONT));
  ASSERT_TRUE(why) << "lapsed() said nothing 10 s after etcd stopped answering";
  EXPECT_LT(at - frozen, 2900ms);
  EXPECT_NE(why->find("not renewed in time"), std::string::npos) << *why;
  EXPECT_TRUE(deposed_in_time);
  EXPECT_TRUE(head->lapsed()) << "lapsed() must not turn back once the deadline passed";
  std::printf("lapsed %.2f s after the freeze: %s\n",
              std::chrono::duration<double>(at - frozen).count(), why->c_str());
}

}  // namespace
}  // namespace omnilearn::state
