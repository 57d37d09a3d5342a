#include "runtime/mailbox.hpp"

namespace omnilearn::runtime {
namespace {

// A burst larger than this leaves buffers that size behind: give the memory back once drained.
constexpr std::size_t kKeepCapacity = 1024;

}  // namespace

Mailbox::Push Mailbox::push(Letter&& letter) {
  std::lock_guard lock(mutex_);
  if (closed_) return Push::kRejected;
  incoming_.push_back(std::move(letter));
  queued_.fetch_add(1, std::memory_order_relaxed);
  if (claimed_) return Push::kQueued;
  claimed_ = true;
  return Push::kClaimed;
}

Mailbox::Take Mailbox::take(Letter& out) {
  if (next_ == taken_.size()) {
    taken_.clear();
    if (taken_.capacity() > kKeepCapacity) taken_.shrink_to_fit();
    next_ = 0;
    std::lock_guard lock(mutex_);
    if (incoming_.empty()) {
      if (closed_) return Take::kFinished;
      claimed_ = false;
      return Take::kReleased;
    }
    taken_.swap(incoming_);
  }
  out = std::move(taken_[next_++]);
  queued_.fetch_sub(1, std::memory_order_relaxed);
  return Take::kLetter;
}

bool Mailbox::release_if_empty() {
  if (next_ < taken_.size()) return false;
  std::lock_guard lock(mutex_);
  if (!incoming_.empty() || closed_) return false;
  claimed_ = false;
  return true;
}

bool Mailbox::close() {
  std::lock_guard lock(mutex_);
  if (closed_) return false;
  closed_ = true;
  if (claimed_) return false;
  claimed_ = true;
  return true;
}

bool Mailbox::closed() const {
  std::lock_guard lock(mutex_);
  return closed_;
}

std::size_t Mailbox::size() const { return queued_.load(std::memory_order_relaxed); }

}  // namespace omnilearn::runtime
