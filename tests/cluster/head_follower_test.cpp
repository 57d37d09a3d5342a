// Which head a trainer follows (cluster/head_follower.hpp): a move its agent reports and a
// scheduler heard from another head about a newer generation are followed; a deposed head,
// which can only speak of an older epoch or generation, is never followed back.

#include "cluster/head_follower.hpp"

#include <gtest/gtest.h>

namespace omnilearn::actors {
namespace {

TEST(HeadFollower, StartsWithTheHeadThatStartedTheTrainer) {
  HeadFollower follower("tcp://127.0.0.1:7070");
  EXPECT_EQ(follower.head(), "tcp://127.0.0.1:7070");
}

TEST(HeadFollower, FollowsAMoveToANewerOrTheSameEpochButNeverBack) {
  HeadFollower follower("tcp://active:7070");
  EXPECT_TRUE(follower.moved("tcp://standby:7070", 2));
  EXPECT_EQ(follower.head(), "tcp://standby:7070");
  // Said again (the agent asks again after a second takeover check): still followed.
  EXPECT_TRUE(follower.moved("tcp://standby:7070", 2));
  // An agent still pointed at the deposed head (start 1) reports it: not followed.
  EXPECT_FALSE(follower.moved("tcp://active:7070", 1));
  EXPECT_EQ(follower.head(), "tcp://standby:7070");
  // A third head takes over from the standby.
  EXPECT_TRUE(follower.moved("tcp://third:7070", 3));
  EXPECT_EQ(follower.head(), "tcp://third:7070");
  EXPECT_FALSE(follower.moved("tcp://standby:7070", 2));
  EXPECT_EQ(follower.head(), "tcp://third:7070");
}

TEST(HeadFollower, FollowsTheSchedulerOfANewerGenerationOnly) {
  HeadFollower follower("tcp://active:7070");
  EXPECT_FALSE(follower.heard_scheduler_at("tcp://active:7070", 4));
  // The deposed head's scheduler, thawed, speaks of generation 3 from another system: ignored.
  EXPECT_FALSE(follower.heard_scheduler_at("old-head-system", 3));
  EXPECT_FALSE(follower.heard_scheduler_at("old-head-system", 4));
  EXPECT_EQ(follower.head(), "tcp://active:7070");
  // The new head's scheduler issues generation 5: followed.
  EXPECT_TRUE(follower.heard_scheduler_at("new-head-system", 5));
  EXPECT_EQ(follower.head(), "new-head-system");
  EXPECT_FALSE(follower.heard_scheduler_at("tcp://active:7070", 4));
  EXPECT_EQ(follower.head(), "new-head-system");
}

TEST(HeadFollower, AMoveKeepsTheNewestGenerationHeard) {
  HeadFollower follower("tcp://active:7070");
  EXPECT_FALSE(follower.heard_scheduler_at("tcp://active:7070", 7));
  EXPECT_TRUE(follower.moved("tcp://standby:7070", 2));
  // After the move, the old head's generation 7 from its own system is not newer.
  EXPECT_FALSE(follower.heard_scheduler_at("old-head-system", 7));
  EXPECT_EQ(follower.head(), "tcp://standby:7070");
  EXPECT_TRUE(follower.heard_scheduler_at("standby-system", 8));
  EXPECT_EQ(follower.head(), "standby-system");
}

}  // namespace
}  // namespace omnilearn::actors
