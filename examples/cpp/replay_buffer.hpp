#pragma once
// A replay buffer as a remote actor: bounded, oldest transitions dropped first, sampled with a
// caller's seed. Named, so several drivers share one.
#include <cstdint>
#include <deque>
#include <vector>

#include <omnilearn/omnilearn.hpp>

namespace replay {

struct Transition {
  std::vector<float> state;
  int action = 0;
  float reward = 0;
  MSGPACK_DEFINE(state, action, reward);
};

class ReplayBuffer {
 public:
  explicit ReplayBuffer(int capacity);
  // Adds transitions; returns the buffer's size after.
  int add(std::vector<Transition> batch);
  int size() const;
  std::int64_t total_added() const;
  std::vector<Transition> sample(int count, std::uint64_t seed) const;

 private:
  int capacity_;
  std::int64_t total_ = 0;
  std::deque<Transition> items_;
};

}  // namespace replay
