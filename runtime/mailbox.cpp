#include "runtime/mailbox.hpp"

namespace omnilearn::runtime {

Mailbox::Push Mailbox::push(Letter&& letter) {
  std::lock_guard lock(mutex_);
  if (closed_) return Push::kRejected;
  letters_.push_back(std::move(letter));
  if (claimed_) return Push::kQueued;
  claimed_ = true;
  return Push::kClaimed;
}

Mailbox::Take Mailbox::take(Letter& out) {
  std::lock_guard lock(mutex_);
  if (!letters_.empty()) {
    out = std::move(letters_.front());
    letters_.pop_front();
    return Take::kLetter;
  }
  if (closed_) return Take::kFinished;
  claimed_ = false;
  return Take::kReleased;
}

bool Mailbox::release_if_empty() {
  std::lock_guard lock(mutex_);
  if (!letters_.empty() || closed_) return false;
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

std::size_t Mailbox::size() const {
  std::lock_guard lock(mutex_);
  return letters_.size();
}

}  // namespace omnilearn::runtime
