// DESIGN invariant 2: every sample exactly once per epoch, whatever the batch vectors do.
#include "training/sampler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>

namespace omnilearn::training {
namespace {

// Concatenates every rank's slice, step by step, for random batch vectors; the result must cut
// into consecutive chunks of N that are each a permutation of [0, N) (the epochs), and the
// cursor must track the stream.
void check_exactly_once(int64_t n, uint64_t seed, int max_world, int max_batch, int steps,
                        std::mt19937_64& rng) {
  EpochSampler sampler(n, seed);
  Cursor cursor;
  std::vector<int64_t> stream;
  int64_t consumed = 0;
  for (int s = 0; s < steps; ++s) {
    const int world = 1 + static_cast<int>(rng() % static_cast<uint64_t>(max_world));
    std::vector<int> b(static_cast<size_t>(world));
    int total = 0;
    for (int& x : b) {
      x = static_cast<int>(rng() % static_cast<uint64_t>(max_batch + 1));
      total += x;
    }
    if (total == 0) b[0] = 1;
    const int64_t global = checked_global_batch(b);
    for (int r = 0; r < world; ++r) {
      const std::vector<int64_t> part = sampler.slice(cursor, b, r);
      ASSERT_EQ(static_cast<int64_t>(part.size()), b[static_cast<size_t>(r)]);
      stream.insert(stream.end(), part.begin(), part.end());
    }
    cursor = sampler.advance(cursor, global);
    consumed += global;
    ASSERT_EQ(cursor.epoch, consumed / n);
    ASSERT_EQ(cursor.position, consumed % n);
  }
  const int64_t full_epochs = static_cast<int64_t>(stream.size()) / n;
  ASSERT_GE(full_epochs, 1) << "test must cover at least one epoch";
  for (int64_t e = 0; e < full_epochs; ++e) {
    std::vector<int64_t> epoch(stream.begin() + e * n, stream.begin() + (e + 1) * n);
    std::sort(epoch.begin(), epoch.end());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(epoch[static_cast<size_t>(i)], i) << "epoch " << e;
  }
  // The unfinished epoch so far holds no repeats either.
  std::vector<int64_t> tail(stream.begin() + full_epochs * n, stream.end());
  std::sort(tail.begin(), tail.end());
  EXPECT_EQ(std::adjacent_find(tail.begin(), tail.end()), tail.end());
}

TEST(EpochSampler, ExactlyOncePerEpochForRandomBatchVectors) {
  std::mt19937_64 rng(2024);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 3000);
    const int max_batch = 1 + static_cast<int>(rng() % 300);
    check_exactly_once(n, rng(), 1 + static_cast<int>(rng() % 8), max_batch,
                       static_cast<int>(4 * n / max_batch + 20), rng);
  }
}

TEST(EpochSampler, GlobalBatchLargerThanDatasetSpansEpochs) {
  std::mt19937_64 rng(5);
  check_exactly_once(7, 1, 3, 20, 30, rng);
}

TEST(EpochSampler, TailOfEpochContinuesIntoNextPermutation) {
  EpochSampler sampler(10, 42);
  Cursor c = sampler.advance(Cursor{}, 8);  // two steps of 4
  ASSERT_EQ(c, (Cursor{0, 8}));
  const std::vector<int> b = {1, 3};
  std::vector<int64_t> step = sampler.slice(c, b, 0);
  const std::vector<int64_t> rank1 = sampler.slice(c, b, 1);
  step.insert(step.end(), rank1.begin(), rank1.end());
  const auto& e0 = sampler.permutation(0);
  const auto& e1 = sampler.permutation(1);
  EXPECT_EQ(step, (std::vector<int64_t>{e0[8], e0[9], e1[0], e1[1]}));
  EXPECT_EQ(sampler.advance(c, 4), (Cursor{1, 2}));
}

TEST(EpochSampler, PermutationsAreSeededPerEpoch) {
  EpochSampler a(1000, 9), b(1000, 9), other(1000, 10);
  EXPECT_EQ(a.permutation(3), b.permutation(3));
  EXPECT_NE(a.permutation(0), a.permutation(1));
  EXPECT_NE(a.permutation(0), other.permutation(0));
  std::vector<int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(a.permutation(0), identity);
}

TEST(EpochSampler, ResumingFromACursorGivesTheSameStream) {
  EpochSampler sampler(500, 3);
  const Cursor mid{4, 123};
  const std::vector<int64_t> whole = sampler.indices(mid, 0, 900);
  EpochSampler fresh(500, 3);
  std::vector<int64_t> parts = fresh.indices(mid, 0, 400);
  const std::vector<int64_t> rest = fresh.indices(fresh.advance(mid, 400), 0, 500);
  parts.insert(parts.end(), rest.begin(), rest.end());
  EXPECT_EQ(parts, whole);
}

TEST(EpochSampler, RejectsInvalidArguments) {
  EXPECT_THROW(EpochSampler(0, 1), std::invalid_argument);
  EpochSampler sampler(10, 1);
  EXPECT_THROW(sampler.slice({}, {}, 0), std::invalid_argument);
  EXPECT_THROW(sampler.slice({}, {0, 0}, 0), std::invalid_argument);
  EXPECT_THROW(sampler.slice({}, {3, -1}, 0), std::invalid_argument);
  EXPECT_THROW(sampler.slice({}, {3, 1}, 2), std::invalid_argument);
  EXPECT_THROW(sampler.advance({}, -1), std::invalid_argument);
}

}  // namespace
}  // namespace omnilearn::training
