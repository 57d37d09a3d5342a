#pragma once
// Step control: how rank 0's control words (StepControl) travel inside a step's gradient
// exchange. Each word is cut into 16-bit chunks, one floating-point element each: every chunk is
// exactly representable in float32, and a SUM of rank 0's chunk with the other ranks' zeros is
// exact in any order. Words beyond what the exchange carries (a plan of world batches and four
// more) follow in Trainer::broadcast_control. Internal to training/.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace omnilearn::training::internal {

constexpr int kChunkBits = 16;
constexpr int kChunksPerWord = 64 / kChunkBits;
// Words a step's exchange carries beyond a plan of world batches (kind, generation, version,
// one spare); longer ones follow in a broadcast.
constexpr int64_t kCarriedWordsOverWorld = 4;
// broadcast_control: words carried by its first broadcast, and the most it sends.
constexpr int64_t kControlInline = 63;
constexpr int64_t kMaxControlWords = int64_t{1} << 20;

// Words the exchange of a group of `world` carries.
inline int64_t carried_words(int world) { return world + kCarriedWordsOverWorld; }
// Elements of the exchange's control region for `capacity` words: the length, then the words.
inline int64_t control_elements(int64_t capacity) { return kChunksPerWord * (1 + capacity); }

// Writes [length, words...] (words beyond `capacity` left out) into `region` as chunks.
void encode_words(at::Tensor& region, const std::vector<int64_t>& words, int64_t capacity);

// Reads what encode_words wrote (after the SUM): the length, and the words if it fits. False if
// a chunk is not a 16-bit integer (the ranks disagreed on the layout).
bool decode_words(const at::Tensor& region, int64_t capacity, int64_t* length,
                  std::vector<int64_t>* words);

}  // namespace omnilearn::training::internal
