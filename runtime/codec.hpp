#pragma once
// Envelope <-> wire frames, and typed payload <-> msgpack bytes.
// Every decoder is total: bounded input, no throw, no unbounded allocation; a bad frame gives
// a DecodeError saying why, which the transport counts and drops.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <msgpack.hpp>

#include "runtime/envelope.hpp"

namespace omnilearn::runtime {

struct CodecLimits {
  std::size_t max_message_bytes = 64u << 20;  // whole message, all frames together
  std::size_t max_attachments = 64;
  std::size_t max_string_bytes = 1u << 20;    // names and ids inside the header
  std::size_t max_container_items = 1u << 20; // msgpack arrays/maps inside a payload
  std::size_t max_depth = 32;
};

enum class DecodeError {
  kOversized,      // larger than max_message_bytes
  kMalformed,      // not msgpack, wrong shape, trailing bytes
  kBadVersion,     // protocol version this build does not speak
  kUnknownKind,    // message kind this build does not know
  kTooManyFrames,  // more attachments than allowed
};
std::string_view to_string(DecodeError error);

// Frames on the wire: frame 0 is the msgpack header array
// [version, kind, to_actor, from_system, from_actor, correlation, flags, payload(bin)];
// frames 1.. are attachments.
std::vector<std::string> encode_envelope(const Envelope& envelope);
std::variant<Envelope, DecodeError> decode_envelope(const std::vector<std::string_view>& frames,
                                                    const CodecLimits& limits = {});

// Bounded unpacking of one msgpack object. Returns nullopt on any error.
std::optional<msgpack::object_handle> unpack_bounded(std::string_view bytes,
                                                     const CodecLimits& limits = {});

namespace internal {
// A msgpack output stream that appends straight to a std::string. msgpack::sbuffer would
// allocate 8 KiB up front and then be copied into the string: two large allocations per
// message on the hot path.
struct StringSink {
  std::string& out;
  void write(const char* data, std::size_t size) { out.append(data, size); }
};
}  // namespace internal

// Typed payloads: any type with MSGPACK_DEFINE (or a msgpack adaptor).
template <class Message>
std::string pack_payload(const Message& message) {
  std::string bytes;
  bytes.reserve(64);  // most control messages fit: one allocation
  internal::StringSink sink{bytes};
  msgpack::pack(sink, message);
  return bytes;
}

// Decodes a payload; nullopt when it is malformed or of the wrong shape (never throws).
template <class Message>
std::optional<Message> unpack_payload(std::string_view bytes, const CodecLimits& limits = {}) {
  auto handle = unpack_bounded(bytes, limits);
  if (!handle) return std::nullopt;
  try {
    Message message{};
    handle->get().convert(message);
    return message;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace omnilearn::runtime
