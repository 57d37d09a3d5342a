#pragma once
// The byte layout decode_envelope_fuzz reads its frames from, shared with the seed generator so
// that the checked-in corpus and the target cannot drift apart.
//
//   byte 0   control: bits 0-3 = number of frames - 1 (1..16 frames);
//            bit 7 = decode with kTightLimits instead of the production defaults
//   then     for every frame but the last: a 2-byte little-endian length and that many bytes
//            (clamped to what is left); the last frame is everything that remains.
// Missing bytes make empty frames, so every input, even the empty one, is a valid layout.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/codec.hpp"

namespace omnilearn::fuzz {

inline constexpr std::uint8_t kFrameCountMask = 0x0f;
inline constexpr std::uint8_t kTightLimitsBit = 0x80;

// Small enough that every limit check (size, attachments, string length, container items,
// depth) is reachable from a few hundred bytes of input; large enough for the 8-field header.
inline constexpr runtime::CodecLimits kTightLimits{
    .max_message_bytes = 512,
    .max_attachments = 3,
    .max_string_bytes = 16,
    .max_container_items = 16,
    .max_depth = 4,
};

struct FramedInput {
  std::vector<std::string_view> frames;  // views into the fuzzer's buffer
  bool tight_limits = false;
};

inline FramedInput split_frames(const std::uint8_t* data, std::size_t size) {
  FramedInput input;
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::size_t count = 1;
  if (!rest.empty()) {
    const auto control = static_cast<std::uint8_t>(rest[0]);
    count = 1 + (control & kFrameCountMask);
    input.tight_limits = (control & kTightLimitsBit) != 0;
    rest.remove_prefix(1);
  }
  for (std::size_t i = 0; i + 1 < count; ++i) {
    std::size_t length = 0;
    if (rest.size() >= 2) {
      length = static_cast<std::uint8_t>(rest[0]) | (static_cast<std::uint8_t>(rest[1]) << 8);
      rest.remove_prefix(2);
    } else {
      rest = {};
    }
    length = std::min(length, rest.size());
    input.frames.push_back(rest.substr(0, length));
    rest.remove_prefix(length);
  }
  input.frames.push_back(rest);
  return input;
}

// The inverse of split_frames, for the seed generator: 1..16 frames, all but the last < 64 KiB.
inline std::string join_frames(const std::vector<std::string>& frames, bool tight_limits) {
  std::string out;
  out.push_back(static_cast<char>(((frames.size() - 1) & kFrameCountMask) |
                                  (tight_limits ? kTightLimitsBit : 0)));
  for (std::size_t i = 0; i + 1 < frames.size(); ++i) {
    out.push_back(static_cast<char>(frames[i].size() & 0xff));
    out.push_back(static_cast<char>((frames[i].size() >> 8) & 0xff));
    out += frames[i];
  }
  out += frames.back();
  return out;
}

}  // namespace omnilearn::fuzz
