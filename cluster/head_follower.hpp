#pragma once
// Which head a trainer process sends to (its scheduler, the rendezvous store, an ASP worker's
// deal requests, a server's reports): the head that started it, until
//  - its agent says the job goes on under a head at another endpoint (HeadMoved: a standby took
//    over, or the head came back elsewhere), of an epoch no older than one already followed; or
//  - the job's scheduler speaks from another head about a newer generation (synchronous jobs).
// Epochs and generations only go up across heads (each is written to the shared store before a
// head acts on it), so a deposed head thawed for a moment, which can only speak of older ones,
// is never followed back. The rule is the same for synchronous and asynchronous jobs.
//
// Threads: any; every method locks.

#include <cstdint>
#include <mutex>
#include <string>

namespace omnilearn::actors {

class HeadFollower {
 public:
  explicit HeadFollower(std::string head) : head_(std::move(head)) {}

  // The head's address (an endpoint, or a system id once a scheduler was heard from there).
  std::string head() const;

  // The agent says the job goes on under the head at `endpoint`, which started as `epoch`.
  // Returns false, following nothing, when a head of a newer epoch was followed already.
  bool moved(const std::string& endpoint, std::uint64_t epoch);

  // The job's scheduler spoke from `system` about `generation`. Returns true when that makes
  // `system` the head followed from now on (a newer generation than any heard so far, from
  // another head).
  bool heard_scheduler_at(const std::string& system, std::int64_t generation);

 private:
  mutable std::mutex mutex_;
  std::string head_;             // guarded by mutex_
  std::uint64_t epoch_ = 0;      // the newest epoch followed (0: the starting head's)
  std::int64_t generation_ = 0;  // the newest generation heard from head_
};

}  // namespace omnilearn::actors
