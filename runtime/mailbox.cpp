#include "runtime/mailbox.hpp"

namespace omnilearn::runtime {

bool Mailbox::push(Letter&& letter) {
  {
    std::lock_guard lock(mutex_);
    if (closed_) return false;
    letters_.push_back(std::move(letter));
  }
  ready_.notify_one();
  return true;
}

std::optional<Letter> Mailbox::pop() {
  std::unique_lock lock(mutex_);
  ready_.wait(lock, [&] { return !letters_.empty() || closed_; });
  if (letters_.empty()) return std::nullopt;
  Letter letter = std::move(letters_.front());
  letters_.pop_front();
  return letter;
}

std::optional<Letter> Mailbox::pop_for(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!ready_.wait_for(lock, timeout, [&] { return !letters_.empty() || closed_; })) {
    return std::nullopt;
  }
  if (letters_.empty()) return std::nullopt;
  Letter letter = std::move(letters_.front());
  letters_.pop_front();
  return letter;
}

void Mailbox::close() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
  }
  ready_.notify_all();
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
