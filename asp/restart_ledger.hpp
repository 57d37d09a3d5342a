#pragma once
// What a parameter-server shard's restarts lost, as far as the scheduler can tell.
// A server killed with -9 takes its count of applied updates with it; what survives is what the
// workers' push replies said (incarnation k reached version v) and which pushes got no reply.
// A restart resumes incarnation k + 1 at its checkpoint's version; the updates lost there are
// the versions incarnation k was known to reach past it. A push that got no reply may have been
// applied before the death, and its reply lost with it: the true loss lies between `lost()` and
// `lost_at_most()`. (A push from a worker that died with it is in neither.)
//
// Replies may arrive after the restart (a worker's ask can be late): every figure is over all
// that was recorded, whatever the order. Pure: one owner (the scheduler actor) per shard.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>

namespace omnilearn::asp {

class RestartLedger {
 public:
  // A push reply from `incarnation` said the shard was at `version` after the push.
  void replied(std::int64_t incarnation, std::int64_t version);
  // A push to `incarnation` got no reply (the ask failed or timed out).
  void unanswered(std::int64_t incarnation);
  // `incarnation` (>= 1) started at `version`: the checkpoint it resumed from.
  void resumed(std::int64_t incarnation, std::int64_t version);

  // Updates lost at the restart that began `incarnation`: the highest version the newest
  // earlier incarnation that ran (replied or resumed; incarnation 0 otherwise) was known to
  // reach minus the version this one resumed at; 0 if not resumed.
  std::int64_t lost_at(std::int64_t incarnation) const;
  // Over every restart recorded.
  std::int64_t lost() const;
  // lost() plus the pushes to an incarnation that has since been restarted that got no reply.
  std::int64_t lost_at_most() const;
  // Unanswered pushes to incarnations since restarted.
  std::int64_t unanswered_before_restarts() const;

  // Everything recorded, for a restarted scheduler (restore_state throws on a bad state).
  nlohmann::json state() const;
  void restore_state(const nlohmann::json& state);

 private:
  // Highest version incarnation `k` is known to have been at: its replies, or where it resumed.
  std::int64_t known_reached(std::int64_t incarnation) const;

  std::map<std::int64_t, std::int64_t> reached_;     // by incarnation: highest replied version
  std::map<std::int64_t, std::int64_t> unanswered_;  // by incarnation
  std::map<std::int64_t, std::int64_t> resumed_;     // by incarnation >= 1: version resumed at
};

}  // namespace omnilearn::asp
