#include "training/sampler.hpp"

#include <random>
#include <stdexcept>
#include <string>

namespace omnilearn::training {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Unbiased draw in [0, bound) by rejection: std::uniform_int_distribution is not specified
// bit-for-bit, and every rank (and a restarted job) must see the same permutation.
uint64_t draw_below(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t limit = UINT64_MAX - (UINT64_MAX % bound);
  uint64_t x;
  do {
    x = rng();
  } while (x >= limit);
  return x % bound;
}

}  // namespace

int64_t checked_global_batch(const std::vector<int>& batches) {
  if (batches.empty()) throw std::invalid_argument("batch vector must not be empty");
  int64_t total = 0;
  for (size_t r = 0; r < batches.size(); ++r) {
    if (batches[r] < 0) {
      throw std::invalid_argument("batch of rank " + std::to_string(r) + " must be >= 0, got " +
                                  std::to_string(batches[r]));
    }
    total += batches[r];
  }
  if (total <= 0) throw std::invalid_argument("batch vector must sum to a positive global batch");
  return total;
}

EpochSampler::EpochSampler(int64_t dataset_size, uint64_t seed) : size_(dataset_size), seed_(seed) {
  if (dataset_size <= 0) {
    throw std::invalid_argument("sampler needs a non-empty dataset, got size " +
                                std::to_string(dataset_size));
  }
}

const std::vector<int64_t>& EpochSampler::permutation(int64_t epoch) const {
  for (int i = 0; i < 2; ++i) {
    if (cached_epoch_[i] == epoch) return cached_perm_[i];
  }
  const int slot = next_slot_;
  next_slot_ = 1 - next_slot_;
  std::vector<int64_t>& perm = cached_perm_[slot];
  perm.resize(static_cast<size_t>(size_));
  for (int64_t i = 0; i < size_; ++i) perm[static_cast<size_t>(i)] = i;
  std::mt19937_64 rng(splitmix64(seed_ ^ splitmix64(static_cast<uint64_t>(epoch))));
  for (int64_t i = size_ - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(draw_below(rng, static_cast<uint64_t>(i + 1)));
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  cached_epoch_[slot] = epoch;
  return perm;
}

Cursor EpochSampler::advance(Cursor at, int64_t count) const {
  if (count < 0) throw std::invalid_argument("cannot move the cursor backwards");
  const int64_t absolute = at.position + count;
  return Cursor{at.epoch + absolute / size_, absolute % size_};
}

std::vector<int64_t> EpochSampler::indices(Cursor at, int64_t offset, int64_t count) const {
  if (offset < 0 || count < 0) throw std::invalid_argument("offset and count must be >= 0");
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(count));
  Cursor c = advance(at, offset);
  while (count > 0) {
    const std::vector<int64_t>& perm = permutation(c.epoch);
    const int64_t take = std::min(count, size_ - c.position);
    out.insert(out.end(), perm.begin() + c.position, perm.begin() + c.position + take);
    count -= take;
    c = advance(c, take);
  }
  return out;
}

std::vector<int64_t> EpochSampler::slice(Cursor at, const std::vector<int>& batches,
                                         int rank) const {
  checked_global_batch(batches);
  if (rank < 0 || rank >= static_cast<int>(batches.size())) {
    throw std::invalid_argument("rank " + std::to_string(rank) + " outside a batch vector of " +
                                std::to_string(batches.size()) + " ranks");
  }
  int64_t offset = 0;
  for (int r = 0; r < rank; ++r) offset += batches[static_cast<size_t>(r)];
  return indices(at, offset, batches[static_cast<size_t>(rank)]);
}

}  // namespace omnilearn::training
