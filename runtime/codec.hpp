#pragma once
// Envelope <-> wire frames, and typed payload <-> msgpack bytes.
// Every decoder is total: bounded input, no throw, no unbounded allocation; a bad frame gives
// a DecodeError saying why, which the transport counts and drops.

#include <cstddef>
#include <cstring>
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
// The transport sends the header from encode_header and the attachments as they are (no copy);
// encode_envelope copies everything into strings (tests, fuzzing, benchmarks).
std::string encode_header(const Envelope& envelope);
std::vector<std::string> encode_envelope(const Envelope& envelope);
// `attachment_frames`, when given, holds frames 1.. as Bytes that own them (the received
// ZeroMQ frames): the envelope's attachments then share them instead of copying.
std::variant<Envelope, DecodeError> decode_envelope(
    const std::vector<std::string_view>& frames, const CodecLimits& limits = {},
    std::vector<Bytes>* attachment_frames = nullptr);

// A bundle: several envelopes without attachments in one frame, for a burst to one peer (one
// ZeroMQ message, one CURVE box, one wake-up for all of them). The frame is the msgpack array
// [kBundleTag, [header(bin), header(bin), ...]] with each header as encode_header writes it;
// a plain header is an array of 8 or more, so the two never look alike.
inline constexpr std::uint32_t kBundleTag = 0x4f4c42;  // "OLB"
inline constexpr std::size_t kMaxBundleEnvelopes = 4096;
inline constexpr std::size_t kMaxBundleBytes = 1u << 20;  // a sender starts a new bundle beyond
std::string encode_bundle(const std::vector<const Envelope*>& envelopes);
bool is_bundle(std::string_view frame);
// The headers inside a bundle (views into `frame`), or why it is not one. Bounded: at most
// kMaxBundleEnvelopes entries, each within the frame. Decode each with decode_envelope.
std::variant<std::vector<std::string_view>, DecodeError> split_bundle(std::string_view frame);

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

// Packs into a buffer on the stack and makes the string once, of the exact size: a payload of
// up to 15 bytes (a ping, a counter) then needs no allocation at all (std::string keeps it
// inline), a larger one exactly one; past the buffer it spills into a growing string.
class SmallSink {
 public:
  void write(const char* data, std::size_t size) {
    if (!spilled_ && used_ + size <= sizeof local_) {
      std::memcpy(local_ + used_, data, size);
      used_ += size;
      return;
    }
    if (!spilled_) {
      spill_.reserve(2 * (used_ + size));
      spill_.append(local_, used_);
      spilled_ = true;
    }
    spill_.append(data, size);
  }
  std::string take() { return spilled_ ? std::move(spill_) : std::string(local_, used_); }

 private:
  char local_[256];
  std::size_t used_ = 0;
  bool spilled_ = false;
  std::string spill_;
};

// unpack_bounded into a zone the caller owns; false on any error.
bool unpack_in(std::string_view bytes, const CodecLimits& limits, msgpack::zone& zone,
               msgpack::object& out);
// This thread's zone for payloads decoded and converted at once (unpack_payload): its first
// chunk is kept between messages, so a warm thread decodes without allocating for the zone.
msgpack::zone& scratch_zone();
// decode_envelope without its fast path for the header this build writes: the reference the
// fast path is checked against (tests, fuzzing).
std::variant<Envelope, DecodeError> decode_envelope_generic(
    const std::vector<std::string_view>& frames, const CodecLimits& limits = {});
}  // namespace internal

// Typed payloads: any type with MSGPACK_DEFINE (or a msgpack adaptor).
template <class Message>
std::string pack_payload(const Message& message) {
  internal::SmallSink sink;
  msgpack::pack(sink, message);
  return sink.take();
}

// Decodes a payload; nullopt when it is malformed or of the wrong shape (never throws).
template <class Message>
std::optional<Message> unpack_payload(std::string_view bytes, const CodecLimits& limits = {}) {
  msgpack::zone& zone = internal::scratch_zone();
  struct Cleared {  // the objects live in the zone only until the message is converted
    msgpack::zone& zone;
    ~Cleared() { zone.clear(); }
  } cleared{zone};
  msgpack::object object;
  if (!internal::unpack_in(bytes, limits, zone, object)) return std::nullopt;
  try {
    Message message{};
    object.convert(message);
    return message;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace omnilearn::runtime
