#pragma once
// How a flat parameter vector of N floats is cut into k contiguous shards, one per parameter
// server: the first N mod k shards hold floor(N/k) + 1 floats, the others floor(N/k), so sizes
// differ by at most one and shard s starts where shard s-1 ends.

#include <cstdint>

namespace omnilearn::asp {

// One shard's part of the flat vector: [offset, offset + size).
struct ShardSlice {
  std::int64_t offset = 0;
  std::int64_t size = 0;
  friend bool operator==(const ShardSlice&, const ShardSlice&) = default;
};

class ShardLayout {
 public:
  // Throws std::invalid_argument unless servers >= 1 and servers <= parameters (every shard
  // holds at least one float).
  ShardLayout(std::int64_t parameters, int servers);

  std::int64_t parameters() const { return parameters_; }
  int servers() const { return servers_; }

  // Shard `shard`'s slice; throws std::out_of_range outside [0, servers).
  ShardSlice slice(int shard) const;
  // The shard holding flat index `index`; throws std::out_of_range outside [0, parameters).
  int shard_of(std::int64_t index) const;

 private:
  std::int64_t parameters_;
  int servers_;
  std::int64_t base_;   // floor(N / k)
  std::int64_t extra_;  // N mod k: how many shards hold base_ + 1
};

}  // namespace omnilearn::asp
