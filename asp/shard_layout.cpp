#include "asp/shard_layout.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace omnilearn::asp {

ShardLayout::ShardLayout(std::int64_t parameters, int servers)
    : parameters_(parameters), servers_(servers) {
  if (servers < 1) {
    throw std::invalid_argument("asp: servers must be >= 1, got " + std::to_string(servers));
  }
  if (parameters < servers) {
    throw std::invalid_argument("asp: " + std::to_string(servers) + " servers for " +
                                std::to_string(parameters) +
                                " parameters (each server needs at least one)");
  }
  base_ = parameters / servers;
  extra_ = parameters % servers;
}

ShardSlice ShardLayout::slice(int shard) const {
  if (shard < 0 || shard >= servers_) {
    throw std::out_of_range("asp: shard " + std::to_string(shard) + " outside [0, " +
                            std::to_string(servers_) + ")");
  }
  const std::int64_t s = shard;
  const std::int64_t offset = s * base_ + std::min(s, extra_);
  return ShardSlice{offset, base_ + (s < extra_ ? 1 : 0)};
}

int ShardLayout::shard_of(std::int64_t index) const {
  if (index < 0 || index >= parameters_) {
    throw std::out_of_range("asp: parameter index " + std::to_string(index) + " outside [0, " +
                            std::to_string(parameters_) + ")");
  }
  const std::int64_t big = extra_ * (base_ + 1);  // floats in the shards holding base_ + 1
  if (index < big) return static_cast<int>(index / (base_ + 1));
  return static_cast<int>(extra_ + (index - big) / base_);
}

}  // namespace omnilearn::asp
