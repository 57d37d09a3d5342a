#pragma once
// Exactly-once data sharding for heterogeneous batch vectors (DESIGN invariant 2).
//
// The sample stream is the concatenation of one seeded permutation of [0, N) per epoch. A step
// with batch vector b consumes the next B = sum(b) entries of that stream; rank r takes the
// entries [offset_r, offset_r + b_r) of those B, offset_r = b_0 + ... + b_{r-1}.
//
// Epoch tail: when fewer than B samples remain in epoch e, the step takes all of them and
// continues with the first entries of epoch e+1's permutation. So every step has exactly B
// samples (the update keeps its meaning and the controller's timings stay comparable), nothing
// is dropped or repeated, and every epoch's permutation is consumed exactly once, whatever the
// batch vectors are. A step that crosses a boundary leaves the cursor in the new epoch.
//
// The permutation is computed by this file's own Fisher-Yates over std::mt19937_64, so it is the
// same on every platform and standard library.

#include <cstdint>
#include <vector>

namespace omnilearn::training {

// Position in the sample stream: the next sample is permutation(epoch)[position].
struct Cursor {
  int64_t epoch = 0;
  int64_t position = 0;  // always in [0, dataset_size)
  friend bool operator==(const Cursor&, const Cursor&) = default;
};

// Throws std::invalid_argument unless every entry is >= 0 and the sum is > 0.
int64_t checked_global_batch(const std::vector<int>& batches);

// Seeded per-epoch permutations and the slicing rule above. Not thread-safe (it caches the last
// permutations): each Trainer owns one and calls it from its training thread.
class EpochSampler {
 public:
  // Throws std::invalid_argument if dataset_size <= 0.
  EpochSampler(int64_t dataset_size, uint64_t seed);

  int64_t dataset_size() const { return size_; }
  uint64_t seed() const { return seed_; }

  // The permutation of [0, dataset_size) used in `epoch` (deterministic in seed and epoch).
  const std::vector<int64_t>& permutation(int64_t epoch) const;

  // Entries [offset, offset + count) of the stream that starts at `at`.
  std::vector<int64_t> indices(Cursor at, int64_t offset, int64_t count) const;

  // Rank `rank`'s slice of the step with batch vector `batches` that starts at `at`.
  std::vector<int64_t> slice(Cursor at, const std::vector<int>& batches, int rank) const;

  // The cursor after consuming `count` samples from `at`.
  Cursor advance(Cursor at, int64_t count) const;

 private:
  int64_t size_;
  uint64_t seed_;
  // Two cached epochs: a step touches at most the current and the next one (when B <= N).
  mutable int64_t cached_epoch_[2] = {-1, -1};
  mutable std::vector<int64_t> cached_perm_[2];
  mutable int next_slot_ = 0;
};

}  // namespace omnilearn::training
