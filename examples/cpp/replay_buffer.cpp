#include "replay_buffer.hpp"

#include <random>
#include <stdexcept>

namespace replay {

ReplayBuffer::ReplayBuffer(int capacity) : capacity_(capacity) {
  if (capacity <= 0) throw std::invalid_argument("capacity must be positive");
}

int ReplayBuffer::add(std::vector<Transition> batch) {
  for (auto& t : batch) {
    items_.push_back(std::move(t));
    if (static_cast<int>(items_.size()) > capacity_) items_.pop_front();
    ++total_;
  }
  return size();
}

int ReplayBuffer::size() const { return static_cast<int>(items_.size()); }
std::int64_t ReplayBuffer::total_added() const { return total_; }

std::vector<Transition> ReplayBuffer::sample(int count, std::uint64_t seed) const {
  std::vector<Transition> out;
  if (items_.empty()) return out;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> pick(0, items_.size() - 1);
  for (int i = 0; i < count; ++i) out.push_back(items_[pick(rng)]);
  return out;
}

}  // namespace replay

OMNILEARN_ACTOR(replay::ReplayBuffer, int);
OMNILEARN_REMOTE(&replay::ReplayBuffer::add);
OMNILEARN_REMOTE(&replay::ReplayBuffer::size);
OMNILEARN_REMOTE(&replay::ReplayBuffer::total_added);
OMNILEARN_REMOTE(&replay::ReplayBuffer::sample);
