#include "cluster/head_follower.hpp"

namespace omnilearn::actors {

std::string HeadFollower::head() const {
  std::lock_guard lock(mutex_);
  return head_;
}

bool HeadFollower::moved(const std::string& endpoint, std::uint64_t epoch) {
  std::lock_guard lock(mutex_);
  if (epoch < epoch_) return false;
  epoch_ = epoch;
  head_ = endpoint;
  return true;
}

bool HeadFollower::heard_scheduler_at(const std::string& system, std::int64_t generation) {
  std::lock_guard lock(mutex_);
  if (system == head_) {
    if (generation > generation_) generation_ = generation;
    return false;
  }
  if (generation <= generation_) return false;
  head_ = system;
  generation_ = generation;
  return true;
}

}  // namespace omnilearn::actors
