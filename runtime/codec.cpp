#include "runtime/codec.hpp"

#include <algorithm>
#include <exception>
#include <memory>

namespace omnilearn::runtime {

std::string_view to_string(DecodeError error) {
  switch (error) {
    case DecodeError::kOversized: return "oversized";
    case DecodeError::kMalformed: return "malformed";
    case DecodeError::kBadVersion: return "bad-version";
    case DecodeError::kUnknownKind: return "unknown-kind";
    case DecodeError::kTooManyFrames: return "too-many-frames";
  }
  return "unknown";
}

std::vector<std::string> encode_envelope(const Envelope& envelope) {
  std::vector<std::string> frames;
  frames.reserve(1 + envelope.attachments.size());
  std::string& header = frames.emplace_back();
  // The header's exact size is at most this: one allocation, no copy.
  header.reserve(48 + envelope.to.actor.size() + envelope.from.system.size() +
                 envelope.from.actor.size() + envelope.payload.size());
  internal::StringSink sink{header};
  msgpack::packer<internal::StringSink> packer(sink);
  packer.pack_array(8);
  packer.pack(kProtocolVersion);
  packer.pack(static_cast<std::uint16_t>(envelope.kind));
  packer.pack(envelope.to.actor);
  packer.pack(envelope.from.system);
  packer.pack(envelope.from.actor);
  packer.pack(envelope.correlation);
  packer.pack(envelope.flags);
  packer.pack_bin(static_cast<std::uint32_t>(envelope.payload.size()));
  packer.pack_bin_body(envelope.payload.data(), static_cast<std::uint32_t>(envelope.payload.size()));
  for (const auto& attachment : envelope.attachments) frames.push_back(attachment);
  return frames;
}

std::optional<msgpack::object_handle> unpack_bounded(std::string_view bytes,
                                                     const CodecLimits& limits) {
  if (bytes.size() > limits.max_message_bytes) return std::nullopt;
  try {
    std::size_t offset = 0;
    // msgpack-c reserves an array's or map's elements as soon as it reads the claimed count,
    // before any element arrives; every element takes at least one byte of input, so no honest
    // container is larger than the input. Without this clamp a few bytes claiming a million
    // elements, nested to max_depth, reserve about a gigabyte.
    const std::size_t items = std::min(limits.max_container_items, bytes.size());
    msgpack::unpack_limit limit(items, items, limits.max_message_bytes, limits.max_message_bytes,
                                limits.max_message_bytes, limits.max_depth);
    // msgpack's default zone starts with an 8 KiB chunk: a large malloc for every message (two
    // per received message: header and payload). Start small, in proportion to the input; the
    // zone grows by itself if the objects need more.
    auto zone =
        std::make_unique<msgpack::zone>(std::min<std::size_t>(8192, 256 + 2 * bytes.size()));
    bool referenced = false;
    msgpack::object object = msgpack::unpack(*zone, bytes.data(), bytes.size(), offset, referenced,
                                             nullptr, nullptr, limit);
    if (offset != bytes.size()) return std::nullopt;  // trailing garbage
    return msgpack::object_handle(object, std::move(zone));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

namespace {

bool read_string(const msgpack::object& object, std::size_t max_bytes, std::string& out) {
  if (object.type != msgpack::type::STR || object.via.str.size > max_bytes) return false;
  out.assign(object.via.str.ptr, object.via.str.size);
  return true;
}

bool read_uint(const msgpack::object& object, std::uint64_t& out) {
  if (object.type != msgpack::type::POSITIVE_INTEGER) return false;
  out = object.via.u64;
  return true;
}

}  // namespace

std::variant<Envelope, DecodeError> decode_envelope(const std::vector<std::string_view>& frames,
                                                    const CodecLimits& limits) {
  if (frames.empty()) return DecodeError::kMalformed;
  if (frames.size() - 1 > limits.max_attachments) return DecodeError::kTooManyFrames;
  std::size_t total = 0;
  for (const auto& frame : frames) total += frame.size();
  if (total > limits.max_message_bytes) return DecodeError::kOversized;

  auto handle = unpack_bounded(frames[0], limits);
  if (!handle) return DecodeError::kMalformed;
  const msgpack::object& header = handle->get();
  if (header.type != msgpack::type::ARRAY || header.via.array.size < 8) {
    return DecodeError::kMalformed;
  }
  const msgpack::object* field = header.via.array.ptr;
  std::uint64_t version = 0, kind = 0, correlation = 0, flags = 0;
  if (!read_uint(field[0], version)) return DecodeError::kMalformed;
  if (version != kProtocolVersion) return DecodeError::kBadVersion;
  if (!read_uint(field[1], kind) || kind > 0xffff) return DecodeError::kMalformed;
  if (!is_known_kind(static_cast<std::uint16_t>(kind))) return DecodeError::kUnknownKind;

  Envelope envelope;
  envelope.kind = static_cast<MessageKind>(kind);
  if (!read_string(field[2], limits.max_string_bytes, envelope.to.actor) ||
      !read_string(field[3], limits.max_string_bytes, envelope.from.system) ||
      !read_string(field[4], limits.max_string_bytes, envelope.from.actor) ||
      !read_uint(field[5], correlation) || !read_uint(field[6], flags) || flags > 0xff ||
      field[7].type != msgpack::type::BIN) {
    return DecodeError::kMalformed;
  }
  envelope.correlation = correlation;
  envelope.flags = static_cast<std::uint8_t>(flags);
  envelope.payload.assign(field[7].via.bin.ptr, field[7].via.bin.size);
  for (std::size_t i = 1; i < frames.size(); ++i) envelope.attachments.emplace_back(frames[i]);
  return envelope;
}

}  // namespace omnilearn::runtime
