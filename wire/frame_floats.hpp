#pragma once
// The float32 values a received frame carries (ASP parameters and gradients). A frame is a
// slice of the buffer ZeroMQ received, at whatever byte offset the bundle put it, so it may not
// be aligned for float: reading it as float* is then undefined behaviour (UBSan reports it).
// An aligned frame is used in place; a misaligned one is copied once into `scratch`.

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "runtime/bytes.hpp"

namespace omnilearn::actors {

inline std::span<const float> frame_floats(const runtime::Bytes& frame,
                                           std::vector<float>& scratch) {
  const std::size_t n = frame.size() / sizeof(float);
  if (reinterpret_cast<std::uintptr_t>(frame.data()) % alignof(float) == 0) {
    return {reinterpret_cast<const float*>(frame.data()), n};
  }
  scratch.resize(n);
  std::memcpy(scratch.data(), frame.data(), n * sizeof(float));
  return {scratch.data(), n};
}

}  // namespace omnilearn::actors
