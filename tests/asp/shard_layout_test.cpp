#include <gtest/gtest.h>

#include <stdexcept>

#include "asp/shard_layout.hpp"

namespace omnilearn::asp {
namespace {

TEST(ShardLayout, SlicesAreContiguousCoverEverythingAndDifferByAtMostOne) {
  for (std::int64_t n : {1, 2, 7, 10, 64, 1001}) {
    for (int k = 1; k <= std::min<std::int64_t>(n, 12); ++k) {
      ShardLayout layout(n, k);
      std::int64_t next = 0, smallest = n, largest = 0;
      for (int s = 0; s < k; ++s) {
        const ShardSlice slice = layout.slice(s);
        EXPECT_EQ(slice.offset, next) << n << "/" << k;
        next += slice.size;
        smallest = std::min(smallest, slice.size);
        largest = std::max(largest, slice.size);
      }
      EXPECT_EQ(next, n);
      EXPECT_LE(largest - smallest, 1);
      EXPECT_GE(smallest, 1);
    }
  }
}

TEST(ShardLayout, TheLargerShardsComeFirst) {
  ShardLayout layout(10, 4);
  EXPECT_EQ(layout.slice(0), (ShardSlice{0, 3}));
  EXPECT_EQ(layout.slice(1), (ShardSlice{3, 3}));
  EXPECT_EQ(layout.slice(2), (ShardSlice{6, 2}));
  EXPECT_EQ(layout.slice(3), (ShardSlice{8, 2}));
}

TEST(ShardLayout, ShardOfAgreesWithTheSlices) {
  for (std::int64_t n : {1, 5, 10, 97}) {
    for (int k = 1; k <= std::min<std::int64_t>(n, 9); ++k) {
      ShardLayout layout(n, k);
      for (std::int64_t i = 0; i < n; ++i) {
        const int s = layout.shard_of(i);
        const ShardSlice slice = layout.slice(s);
        EXPECT_GE(i, slice.offset);
        EXPECT_LT(i, slice.offset + slice.size) << n << "/" << k << " index " << i;
      }
    }
  }
}

TEST(ShardLayout, RejectsBadArguments) {
  EXPECT_THROW(ShardLayout(10, 0), std::invalid_argument);
  EXPECT_THROW(ShardLayout(3, 4), std::invalid_argument);
  EXPECT_NO_THROW(ShardLayout(4, 4));
  ShardLayout layout(10, 3);
  EXPECT_THROW(layout.slice(3), std::out_of_range);
  EXPECT_THROW(layout.slice(-1), std::out_of_range);
  EXPECT_THROW(layout.shard_of(10), std::out_of_range);
  EXPECT_THROW(layout.shard_of(-1), std::out_of_range);
}

}  // namespace
}  // namespace omnilearn::asp
