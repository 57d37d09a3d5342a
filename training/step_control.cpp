// Step control: rank 0's control words inside a step's gradient exchange (the codec), the
// decision every rank takes on them once the exchange completed, and broadcast_control() for
// the group's first words and for words too long for the exchange.
#include "training/step_control.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "training/trainer_impl.hpp"

namespace omnilearn::training {
namespace internal {

// Writes [length, words...] (words beyond `capacity` left out) into `region` as chunks.
void encode_words(at::Tensor& region, const std::vector<int64_t>& words, int64_t capacity) {
  std::vector<double> chunks(static_cast<size_t>(region.numel()), 0.0);
  auto put = [&](int64_t index, uint64_t word) {
    for (int c = 0; c < kChunksPerWord; ++c) {
      chunks[static_cast<size_t>(index * kChunksPerWord + c)] =
          static_cast<double>((word >> (kChunkBits * c)) & ((uint64_t{1} << kChunkBits) - 1));
    }
  };
  put(0, static_cast<uint64_t>(words.size()));
  const int64_t n = std::min<int64_t>(capacity, static_cast<int64_t>(words.size()));
  for (int64_t i = 0; i < n; ++i) put(1 + i, static_cast<uint64_t>(words[static_cast<size_t>(i)]));
  region.copy_(at::tensor(chunks, at::TensorOptions().dtype(at::kDouble)).to(region.options()));
}

// Reads what encode_words wrote (after the SUM): the length, and the words if it fits. False if
// a chunk is not a 16-bit integer (the ranks disagreed on the layout).
bool decode_words(const at::Tensor& region, int64_t capacity, int64_t* length,
                  std::vector<int64_t>* words) {
  const at::Tensor cpu = region.to(at::kCPU, at::kDouble).contiguous();
  const double* v = cpu.data_ptr<double>();
  bool ok = true;
  auto get = [&](int64_t index) {
    uint64_t word = 0;
    for (int c = 0; c < kChunksPerWord; ++c) {
      const double x = v[index * kChunksPerWord + c];
      if (!(x >= 0 && x < static_cast<double>(uint64_t{1} << kChunkBits)) || x != std::floor(x)) {
        ok = false;
        return uint64_t{0};
      }
      word |= static_cast<uint64_t>(x) << (kChunkBits * c);
    }
    return word;
  };
  *length = static_cast<int64_t>(get(0));
  words->clear();
  if (ok && *length >= 0 && *length <= capacity) {
    for (int64_t i = 0; i < *length; ++i) words->push_back(static_cast<int64_t>(get(1 + i)));
  }
  return ok && *length >= 0;
}

std::vector<NamedTensor> detached_copies(const std::vector<NamedTensor>& in) {
  std::vector<NamedTensor> out;
  out.reserve(in.size());
  for (const auto& [name, t] : in) out.emplace_back(name, t.detach().to(at::kCPU).clone());
  return out;
}

}  // namespace internal

using internal::kControlInline;
using internal::kMaxControlWords;

bool Trainer::Impl::settle_control(StepControl* control, bool* rejected, std::string* error) {
  *rejected = false;
  int64_t length = 0;
  std::vector<int64_t> words;
  if (!internal::decode_words(exchange->control_region(), exchange->control_capacity(), &length,
                              &words)) {
    *error = group
                 .fail("the gradient exchange carried malformed control words in generation " +
                       std::to_string(group.generation()))
                 .error;
    return false;
  }
  bool accepted = true;
  if (length > exchange->control_capacity()) {
    // Too long for the exchange: rank 0 sends them whole, and nobody commits this step (words
    // that confirm a plan always fit; longer ones are a command of another kind).
    if (group.rank() == 0) words = control->words;
    if (CollectiveStatus bc = broadcast_words(words); !bc) {
      *error = bc.error;
      return false;
    }
    accepted = false;
  }
  control->words = words;
  if (accepted && control->accept) accepted = control->accept(control->words);
  if (!accepted) {
    *rejected = true;
    *error = "rank 0's control words did not confirm the batches of this step";
    return false;
  }
  return true;
}

CollectiveStatus Trainer::Impl::broadcast_words(std::vector<int64_t>& words) {
  Impl& s = *this;
  if (s.alone()) return {};
  if (CollectiveStatus u = s.group.usable(); !u) return u;
  if (s.group.rank() == 0 && static_cast<int64_t>(words.size()) > kMaxControlWords) {
    throw std::invalid_argument("broadcast_control: at most " + std::to_string(kMaxControlWords) +
                                " words, got " + std::to_string(words.size()));
  }
  const auto longs = at::TensorOptions().dtype(at::kLong);
  // One broadcast in the common case: [length, up to kControlInline words]; a second one carries
  // the rest of a longer message (every rank learns from the first whether it follows).
  at::Tensor frame = at::zeros({kControlInline + 1}, longs);
  if (s.group.rank() == 0) {
    int64_t* f = frame.data_ptr<int64_t>();
    f[0] = static_cast<int64_t>(words.size());
    std::copy_n(words.begin(), std::min<int64_t>(kControlInline, f[0]), f + 1);
  }
  at::Tensor frame_dev = frame.to(s.device);
  if (CollectiveStatus st = s.group.broadcast(frame_dev, "control broadcast"); !st) return st;
  frame = frame_dev.to(at::kCPU);
  const int64_t* f = frame.data_ptr<int64_t>();
  const int64_t length = f[0];
  if (length < 0 || length > kMaxControlWords) {
    return s.group.fail("control broadcast carried an invalid length " + std::to_string(length));
  }
  std::vector<int64_t> received(f + 1, f + 1 + std::min(kControlInline, length));
  if (length > kControlInline) {
    at::Tensor rest = at::zeros({length - kControlInline}, longs);
    if (s.group.rank() == 0)
      std::copy(words.begin() + kControlInline, words.end(), rest.data_ptr<int64_t>());
    at::Tensor rest_dev = rest.to(s.device);
    if (CollectiveStatus st = s.group.broadcast(rest_dev, "control broadcast"); !st) return st;
    rest = rest_dev.to(at::kCPU);
    received.insert(received.end(), rest.data_ptr<int64_t>(),
                    rest.data_ptr<int64_t>() + rest.numel());
  }
  if (s.group.rank() != 0) words = std::move(received);
  return {};
}

CollectiveStatus Trainer::broadcast_control(std::vector<int64_t>& words) {
  return impl_->broadcast_words(words);
}

}  // namespace omnilearn::training
