#include "runtime/codec.hpp"

#include <algorithm>
#include <cstring>
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
  frames.push_back(encode_header(envelope));
  for (const auto& attachment : envelope.attachments) frames.push_back(attachment.to_string());
  return frames;
}

namespace {
// Appends the header of `envelope` to `header`.
void append_header(std::string& header, const Envelope& envelope) {
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
}
}  // namespace

std::string encode_header(const Envelope& envelope) {
  std::string header;
  // The header's exact size is at most this: one allocation, no copy.
  header.reserve(48 + envelope.to.actor.size() + envelope.from.system.size() +
                 envelope.from.actor.size() + envelope.payload.size());
  append_header(header, envelope);
  return header;
}

std::string encode_bundle(const std::vector<const Envelope*>& envelopes) {
  std::string bundle;
  std::size_t bytes = 16;
  for (const auto* envelope : envelopes) bytes += 64 + envelope->payload.size();
  bundle.reserve(bytes);
  internal::StringSink sink{bundle};
  msgpack::packer<internal::StringSink> packer(sink);
  packer.pack_array(2);
  packer.pack_fix_uint32(kBundleTag);  // always 0xce + 4 bytes: the prefix is fixed
  packer.pack_array(static_cast<std::uint32_t>(envelopes.size()));
  std::string header;  // one scratch buffer for every entry
  for (const auto* envelope : envelopes) {
    header.clear();
    append_header(header, *envelope);
    packer.pack_bin(static_cast<std::uint32_t>(header.size()));
    packer.pack_bin_body(header.data(), static_cast<std::uint32_t>(header.size()));
  }
  return bundle;
}

namespace {
// [0x92, uint32 marker, the tag]: how every bundle starts.
constexpr unsigned char kBundlePrefix[] = {0x92, 0xce, 0x00, 0x4f, 0x4c, 0x42};

// A bounded reader of the few msgpack forms the header and bundles use. Every read checks what
// is left of the input; a failed read leaves the cursor unusable (callers give up).
struct Cursor {
  std::string_view in;
  std::size_t at = 0;

  bool byte(unsigned char& out) {
    if (at >= in.size()) return false;
    out = static_cast<unsigned char>(in[at++]);
    return true;
  }
  bool be(int width, std::uint64_t& out) {
    if (in.size() - at < static_cast<std::size_t>(width)) return false;
    out = 0;
    for (int i = 0; i < width; ++i) out = (out << 8) | static_cast<unsigned char>(in[at + i]);
    at += static_cast<std::size_t>(width);
    return true;
  }
  bool uint(std::uint64_t& out) {
    unsigned char b;
    if (!byte(b)) return false;
    if (b <= 0x7f) {
      out = b;
      return true;
    }
    switch (b) {
      case 0xcc: return be(1, out);
      case 0xcd: return be(2, out);
      case 0xce: return be(4, out);
      case 0xcf: return be(8, out);
      default: return false;
    }
  }
  bool array(std::uint64_t& count) {
    unsigned char b;
    if (!byte(b)) return false;
    if ((b & 0xf0) == 0x90) {
      count = b & 0x0f;
      return true;
    }
    if (b == 0xdc) return be(2, count);
    if (b == 0xdd) return be(4, count);
    return false;
  }
  bool body(std::uint64_t size, std::string_view& out) {
    if (in.size() - at < size) return false;
    out = in.substr(at, static_cast<std::size_t>(size));
    at += static_cast<std::size_t>(size);
    return true;
  }
  bool str(std::string_view& out) {
    unsigned char b;
    std::uint64_t size = 0;
    if (!byte(b)) return false;
    if ((b & 0xe0) == 0xa0) {
      size = b & 0x1f;
    } else if (!(b == 0xd9 ? be(1, size) : b == 0xda ? be(2, size) : b == 0xdb && be(4, size))) {
      return false;
    }
    return body(size, out);
  }
  bool bin(std::string_view& out) {
    unsigned char b;
    std::uint64_t size = 0;
    if (!byte(b)) return false;
    if (!(b == 0xc4 ? be(1, size) : b == 0xc5 ? be(2, size) : b == 0xc6 && be(4, size))) {
      return false;
    }
    return body(size, out);
  }
  bool done() const { return at == in.size(); }
};
}  // namespace

bool is_bundle(std::string_view frame) {
  return frame.size() >= sizeof kBundlePrefix &&
         std::memcmp(frame.data(), kBundlePrefix, sizeof kBundlePrefix) == 0;
}

std::variant<std::vector<std::string_view>, DecodeError> split_bundle(std::string_view frame) {
  if (!is_bundle(frame)) return DecodeError::kMalformed;
  Cursor cursor{frame, sizeof kBundlePrefix};
  std::uint64_t count = 0;
  if (!cursor.array(count) || count == 0 || count > kMaxBundleEnvelopes) {
    return DecodeError::kMalformed;
  }
  std::vector<std::string_view> headers(static_cast<std::size_t>(count));
  for (auto& header : headers) {
    if (!cursor.bin(header)) return DecodeError::kMalformed;
  }
  if (!cursor.done()) return DecodeError::kMalformed;  // trailing bytes
  return headers;
}

namespace internal {

bool unpack_in(std::string_view bytes, const CodecLimits& limits, msgpack::zone& zone,
               msgpack::object& out) {
  if (bytes.size() > limits.max_message_bytes) return false;
  try {
    std::size_t offset = 0;
    // msgpack-c reserves an array's or map's elements as soon as it reads the claimed count,
    // before any element arrives; every element takes at least one byte of input, so no honest
    // container is larger than the input. Without this clamp a few bytes claiming a million
    // elements, nested to max_depth, reserve about a gigabyte.
    const std::size_t items = std::min(limits.max_container_items, bytes.size());
    msgpack::unpack_limit limit(items, items, limits.max_message_bytes, limits.max_message_bytes,
                                limits.max_message_bytes, limits.max_depth);
    bool referenced = false;
    out = msgpack::unpack(zone, bytes.data(), bytes.size(), offset, referenced, nullptr, nullptr,
                          limit);
    return offset == bytes.size();  // trailing garbage otherwise
  } catch (const std::exception&) {
    return false;
  }
}

msgpack::zone& scratch_zone() {
  thread_local msgpack::zone zone(8192);
  return zone;
}

}  // namespace internal

std::optional<msgpack::object_handle> unpack_bounded(std::string_view bytes,
                                                     const CodecLimits& limits) {
  if (bytes.size() > limits.max_message_bytes) return std::nullopt;
  // msgpack's default zone starts with an 8 KiB chunk: a large malloc for every message. Start
  // small, in proportion to the input; the zone grows by itself if the objects need more.
  auto zone = std::make_unique<msgpack::zone>(std::min<std::size_t>(8192, 256 + 2 * bytes.size()));
  msgpack::object object;
  if (!internal::unpack_in(bytes, limits, *zone, object)) return std::nullopt;
  return msgpack::object_handle(object, std::move(zone));
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

namespace {

// The header exactly as encode_header writes it (8 fields, the shortest encodings msgpack picks),
// read straight from the bytes: no msgpack zone, no object tree. Any deviation (a newer sender's
// extra fields, another encoding, garbage) returns false and the generic decoder below decides,
// so the answer is the same either way (checked by fuzzing both: decode_envelope_fuzz).
bool decode_header_fast(std::string_view frame, const CodecLimits& limits, Envelope& envelope,
                        std::optional<DecodeError>& error) {
  if (limits.max_container_items < 8 || frame.size() < 8) return false;
  Cursor cursor{frame};
  std::uint64_t fields = 0, version = 0, kind = 0, correlation = 0, flags = 0;
  std::string_view to_actor, from_system, from_actor, payload;
  if (!cursor.array(fields) || fields != 8 || !cursor.uint(version) || !cursor.uint(kind) ||
      !cursor.str(to_actor) || !cursor.str(from_system) || !cursor.str(from_actor) ||
      !cursor.uint(correlation) || !cursor.uint(flags) || !cursor.bin(payload) ||
      !cursor.done()) {
    return false;
  }
  // The generic decoder's checks, in its order.
  if (version != kProtocolVersion) {
    error = DecodeError::kBadVersion;
  } else if (kind > 0xffff) {
    error = DecodeError::kMalformed;
  } else if (!is_known_kind(static_cast<std::uint16_t>(kind))) {
    error = DecodeError::kUnknownKind;
  } else if (to_actor.size() > limits.max_string_bytes ||
             from_system.size() > limits.max_string_bytes ||
             from_actor.size() > limits.max_string_bytes || flags > 0xff) {
    error = DecodeError::kMalformed;
  } else {
    envelope.kind = static_cast<MessageKind>(kind);
    envelope.to.actor.assign(to_actor);
    envelope.from.system.assign(from_system);
    envelope.from.actor.assign(from_actor);
    envelope.correlation = correlation;
    envelope.flags = static_cast<std::uint8_t>(flags);
    envelope.payload.assign(payload);
  }
  return true;
}

std::optional<DecodeError> decode_header_generic(std::string_view frame,
                                                 const CodecLimits& limits, Envelope& envelope) {
  auto handle = unpack_bounded(frame, limits);
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
  return std::nullopt;
}

std::variant<Envelope, DecodeError> decode_frames(const std::vector<std::string_view>& frames,
                                                  const CodecLimits& limits,
                                                  std::vector<Bytes>* attachment_frames,
                                                  bool allow_fast) {
  if (attachment_frames && attachment_frames->size() + 1 != frames.size()) {
    return DecodeError::kMalformed;
  }
  if (frames.empty()) return DecodeError::kMalformed;
  if (frames.size() - 1 > limits.max_attachments) return DecodeError::kTooManyFrames;
  std::size_t total = 0;
  for (const auto& frame : frames) total += frame.size();
  if (total > limits.max_message_bytes) return DecodeError::kOversized;

  Envelope envelope;
  std::optional<DecodeError> error;
  if (!allow_fast || !decode_header_fast(frames[0], limits, envelope, error)) {
    envelope = Envelope{};
    error = decode_header_generic(frames[0], limits, envelope);
  }
  if (error) return *error;
  if (attachment_frames) {
    envelope.attachments = std::move(*attachment_frames);
  } else {
    envelope.attachments.reserve(frames.size() - 1);
    for (std::size_t i = 1; i < frames.size(); ++i) {
      envelope.attachments.emplace_back(std::string(frames[i]));
    }
  }
  return envelope;
}

}  // namespace

std::variant<Envelope, DecodeError> decode_envelope(const std::vector<std::string_view>& frames,
                                                    const CodecLimits& limits,
                                                    std::vector<Bytes>* attachment_frames) {
  return decode_frames(frames, limits, attachment_frames, /*allow_fast=*/true);
}

namespace internal {
std::variant<Envelope, DecodeError> decode_envelope_generic(
    const std::vector<std::string_view>& frames, const CodecLimits& limits) {
  return decode_frames(frames, limits, nullptr, /*allow_fast=*/false);
}
}  // namespace internal

}  // namespace omnilearn::runtime
