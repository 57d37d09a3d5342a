#include <gtest/gtest.h>

#include "asp/restart_ledger.hpp"

namespace omnilearn::asp {
namespace {

TEST(RestartLedger, NoRestartLosesNothing) {
  RestartLedger ledger;
  ledger.replied(0, 57);
  ledger.unanswered(0);  // a timeout to a live server is no loss
  EXPECT_EQ(ledger.lost(), 0);
  EXPECT_EQ(ledger.lost_at_most(), 0);
}

TEST(RestartLedger, ARestartLosesWhatRepliesShowedPastItsCheckpoint) {
  RestartLedger ledger;
  ledger.replied(0, 12);
  ledger.replied(0, 47);
  ledger.replied(0, 45);  // replies arrive out of order
  ledger.resumed(1, 40);
  EXPECT_EQ(ledger.lost_at(1), 7);
  EXPECT_EQ(ledger.lost(), 7);
  EXPECT_EQ(ledger.lost_at_most(), 7);
}

TEST(RestartLedger, UnansweredPushesToADeadIncarnationBoundTheLossFromAbove) {
  RestartLedger ledger;
  ledger.replied(0, 47);
  ledger.unanswered(0);
  ledger.unanswered(0);
  ledger.resumed(1, 40);
  EXPECT_EQ(ledger.lost(), 7);
  EXPECT_EQ(ledger.unanswered_before_restarts(), 2);
  EXPECT_EQ(ledger.lost_at_most(), 9);
  ledger.unanswered(1);  // the live incarnation's: not (yet) a loss
  EXPECT_EQ(ledger.lost_at_most(), 9);
}

TEST(RestartLedger, RepliesArrivingAfterTheRestartStillCount) {
  RestartLedger ledger;
  ledger.replied(0, 41);
  ledger.resumed(1, 40);
  EXPECT_EQ(ledger.lost(), 1);
  ledger.replied(0, 44);  // a worker's late ask
  ledger.unanswered(0);
  ledger.replied(1, 43);  // the new incarnation moves on: not a loss
  EXPECT_EQ(ledger.lost(), 4);
  EXPECT_EQ(ledger.lost_at_most(), 5);
}

TEST(RestartLedger, SeveralRestartsAddUpEachAgainstItsOwnPredecessor) {
  RestartLedger ledger;
  ledger.replied(0, 30);
  ledger.resumed(1, 20);  // lost 10
  ledger.replied(1, 26);
  ledger.resumed(2, 20);  // lost 6: the newer checkpoint was not written
  ledger.resumed(3, 20);  // incarnation 2 died before any reply: nothing known past 20
  ledger.replied(3, 61);
  ledger.resumed(4, 60);  // lost 1
  EXPECT_EQ(ledger.lost_at(1), 10);
  EXPECT_EQ(ledger.lost_at(2), 6);
  EXPECT_EQ(ledger.lost_at(3), 0);
  EXPECT_EQ(ledger.lost_at(4), 1);
  EXPECT_EQ(ledger.lost_at(5), 0);  // not restarted
  EXPECT_EQ(ledger.lost(), 17);
}

TEST(RestartLedger, AnIncarnationThatDiedBeforeServingHidesNothing) {
  // Incarnation 1 failed to start (no reply, never resumed); 2 resumed from 0's checkpoint.
  RestartLedger ledger;
  ledger.replied(0, 47);
  ledger.unanswered(0);
  ledger.resumed(2, 40);
  EXPECT_EQ(ledger.lost_at(2), 7);
  EXPECT_EQ(ledger.lost(), 7);
  EXPECT_EQ(ledger.lost_at_most(), 8);
}

TEST(RestartLedger, ARestartAheadOfWhatRepliesShowedLosesNothing) {
  // The checkpoint was written after the last push whose reply reached a worker.
  RestartLedger ledger;
  ledger.replied(0, 38);
  ledger.resumed(1, 40);
  EXPECT_EQ(ledger.lost(), 0);
}

}  // namespace
}  // namespace omnilearn::asp
