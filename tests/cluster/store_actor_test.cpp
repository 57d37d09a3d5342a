// StoreActor in-process: kDeletePrefix removes exactly the keys under a prefix, leaves parked
// waiters alone, is refused from other processes and for an empty prefix, and the key count the
// head reports (StoreStats) follows every change.

#include "cluster/store_actor.hpp"

#include <gtest/gtest.h>

#include "tests/support/actor_probe.hpp"

namespace omnilearn::actors {
namespace {

using namespace std::chrono_literals;
using runtime::ActorAddress;

class Store : public ::testing::Test {
 protected:
  void SetUp() override {
    endpoint = head.listen("tcp://127.0.0.1:0");
    head.spawn<StoreActor>(kStoreActor, StoreLimits{}, stats);
  }

  StoreReply request(StoreRequest body, runtime::ActorSystem* from = nullptr) {
    ActorAddress store = from ? ActorAddress{endpoint, kStoreActor} : ActorAddress{"", kStoreActor};
    auto answer = (from ? *from : head).ask(store, body, 5s).get();
    auto reply = answer.as<StoreReply>();
    EXPECT_TRUE(reply) << answer.error;
    return reply.value_or(StoreReply{});
  }
  StoreReply set(const std::string& key, const std::string& value) {
    StoreRequest body;
    body.op = StoreRequest::kSet;
    body.keys = {key};
    body.value = value;
    return request(body);
  }
  StoreReply delete_prefix(const std::string& prefix, runtime::ActorSystem* from = nullptr) {
    StoreRequest body;
    body.op = StoreRequest::kDeletePrefix;
    body.keys = {prefix};
    return request(body, from);
  }
  std::int64_t num_keys() {
    StoreRequest body;
    body.op = StoreRequest::kNumKeys;
    return request(body).number;
  }

  runtime::ActorSystem head;
  std::string endpoint;
  std::shared_ptr<StoreStats> stats = std::make_shared<StoreStats>();
};

TEST_F(Store, DeletePrefixRemovesExactlyTheKeysUnderThePrefix) {
  for (const auto* key : {"job/a/gen/1/rank0", "job/a/gen/2/rank0", "job/a/", "job/ab/x",
                          "job/b/gen/1/rank0", "job/"}) {
    ASSERT_TRUE(set(key, "v").ok);
  }
  EXPECT_EQ(stats->keys.load(), 6u) << "the count is published before the reply";

  auto deleted = delete_prefix("job/a/");
  ASSERT_TRUE(deleted.ok) << deleted.error;
  EXPECT_EQ(deleted.number, 3);
  EXPECT_EQ(num_keys(), 3);
  EXPECT_EQ(stats->keys.load(), 3u);

  StoreRequest check;
  check.op = StoreRequest::kCheck;
  check.keys = {"job/ab/x", "job/b/gen/1/rank0", "job/"};
  EXPECT_EQ(request(check).number, 1) << "keys that only share the prefix's characters stay";

  EXPECT_EQ(delete_prefix("job/a/").number, 0) << "deleting again is no error";
  EXPECT_EQ(delete_prefix("job/").number, 3);
  EXPECT_EQ(num_keys(), 0);
  EXPECT_EQ(stats->keys.load(), 0u);
}

TEST_F(Store, ParkedWaitersOnDeletedKeysKeepWaiting) {
  ASSERT_TRUE(set("job/a/present", "1").ok);
  // Two waits on a key of the job that does not exist yet: one long, one that runs out.
  StoreRequest wait;
  wait.op = StoreRequest::kWait;
  wait.keys = {"job/a/missing"};
  wait.timeout_ms = 30000;
  auto long_wait = head.ask(ActorAddress{"", kStoreActor}, wait, 60s);
  wait.timeout_ms = 100;
  auto short_wait = head.ask(ActorAddress{"", kStoreActor}, wait, 60s);

  EXPECT_EQ(delete_prefix("job/a/").number, 1);

  auto expired = short_wait.get().as<StoreReply>();
  ASSERT_TRUE(expired);
  EXPECT_FALSE(expired->ok);
  EXPECT_EQ(expired->error, "timeout") << "a waiter ends at its timeout, not at the delete";
  EXPECT_EQ(long_wait.wait_for(0s), std::future_status::timeout) << "still parked";
  EXPECT_EQ(stats->waiting.load(), 1u);

  ASSERT_TRUE(set("job/a/missing", "here").ok);
  auto woken = long_wait.get().as<StoreReply>();
  ASSERT_TRUE(woken);
  EXPECT_TRUE(woken->ok) << "the parked waiter is answered like any other once its key is set";
}

TEST_F(Store, DeletePrefixIsRefusedFromOtherProcessesAndForAnEmptyPrefix) {
  ASSERT_TRUE(set("job/a/x", "1").ok);

  runtime::ActorSystem trainer;  // another process: a trainer of some job
  auto remote = delete_prefix("job/a/", &trainer);
  EXPECT_FALSE(remote.ok);
  EXPECT_NE(remote.error.find("only accepted from actors on the head"), std::string::npos)
      << remote.error;

  auto everything = delete_prefix("");
  EXPECT_FALSE(everything.ok);
  EXPECT_NE(everything.error.find("non-empty prefix"), std::string::npos) << everything.error;
  EXPECT_EQ(num_keys(), 1);
}

}  // namespace
}  // namespace omnilearn::actors
