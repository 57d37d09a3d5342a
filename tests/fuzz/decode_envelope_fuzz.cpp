// libFuzzer target: runtime::decode_envelope on arbitrary frames (layout in fuzz_input.hpp).
// codec.hpp promises a total decoder: no crash, no throw, no leak, no unbounded allocation.
// Beyond that, an envelope that decodes must survive encode -> decode unchanged under the same
// limits, and its payload must go through the bounded unpacker (and, for the runtime's own
// message kinds, through the typed decoder) without throwing.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <variant>

#include "runtime/codec.hpp"
#include "runtime/system_messages.hpp"
#include "tests/fuzz/fuzz_input.hpp"

namespace {

using namespace omnilearn::runtime;

// A broken promise of the codec: abort so that libFuzzer saves the input.
void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "decode_envelope_fuzz: broken invariant: %s\n", what);
  std::abort();
}

bool same_envelope(const Envelope& a, const Envelope& b) {
  return a.kind == b.kind && a.to.actor == b.to.actor && a.from.system == b.from.system &&
         a.from.actor == b.from.actor && a.correlation == b.correlation && a.flags == b.flags &&
         a.payload == b.payload && a.attachments == b.attachments;
}

void decode_payload(const Envelope& envelope, const CodecLimits& limits) {
  // The generic path every handler's payload takes first; nullopt is a fine answer.
  (void)unpack_bounded(envelope.payload, limits);
  // unpack_payload<T> must turn every conversion error into nullopt.
  switch (envelope.kind) {
    case MessageKind::kError: (void)unpack_payload<ErrorReply>(envelope.payload, limits); break;
    case MessageKind::kMonitor:
      (void)unpack_payload<MonitorRequest>(envelope.payload, limits);
      break;
    case MessageKind::kDown: (void)unpack_payload<Down>(envelope.payload, limits); break;
    case MessageKind::kPing: (void)unpack_payload<Ping>(envelope.payload, limits); break;
    case MessageKind::kPong: (void)unpack_payload<Pong>(envelope.payload, limits); break;
    default: break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto input = omnilearn::fuzz::split_frames(data, size);
  const CodecLimits limits = input.tight_limits ? omnilearn::fuzz::kTightLimits : CodecLimits{};

  const auto decoded = decode_envelope(input.frames, limits);
  // The fast path for the header this build writes must agree with the generic decoder on
  // every input: the same error, or the same envelope.
  const auto generic = internal::decode_envelope_generic(input.frames, limits);
  check(decoded.index() == generic.index(), "fast and generic header decoders disagree");
  if (const auto* error = std::get_if<DecodeError>(&decoded)) {
    check(*error == std::get<DecodeError>(generic), "fast and generic decoders: other errors");
  } else {
    check(same_envelope(std::get<Envelope>(decoded), std::get<Envelope>(generic)),
          "fast and generic decoders: other envelopes");
  }
  // Bundles go through the same decoder, one header at a time; splitting must be total.
  if (!input.frames.empty()) {
    const auto split = split_bundle(input.frames[0]);
    if (const auto* headers = std::get_if<std::vector<std::string_view>>(&split)) {
      check(!headers->empty() && headers->size() <= kMaxBundleEnvelopes, "bundle bound broken");
      for (auto header : *headers) {
        check(header.data() >= input.frames[0].data() &&
                  header.data() + header.size() <= input.frames[0].data() + input.frames[0].size(),
              "a bundle entry outside its frame");
        const auto one = decode_envelope({header}, limits);
        const auto one_generic = internal::decode_envelope_generic({header}, limits);
        check(one.index() == one_generic.index(), "bundle entry: decoders disagree");
      }
    }
  }
  if (const auto* error = std::get_if<DecodeError>(&decoded)) {
    check(to_string(*error) != "unknown", "decode error without a name");
    return 0;
  }
  const Envelope& envelope = std::get<Envelope>(decoded);
  check(envelope.attachments.size() + 1 == input.frames.size(), "attachments lost or invented");
  check(envelope.attachments.size() <= limits.max_attachments, "max_attachments not enforced");
  check(envelope.to.actor.size() <= limits.max_string_bytes &&
            envelope.from.system.size() <= limits.max_string_bytes &&
            envelope.from.actor.size() <= limits.max_string_bytes,
        "max_string_bytes not enforced");

  // The canonical encoding is never larger than what was accepted, so the same limits must
  // accept it, and it must carry exactly the same message.
  const auto frames = encode_envelope(envelope);
  const auto again = decode_envelope({frames.begin(), frames.end()}, limits);
  check(std::holds_alternative<Envelope>(again), "re-encoded envelope does not decode");
  check(same_envelope(envelope, std::get<Envelope>(again)), "encode/decode round trip differs");

  decode_payload(envelope, limits);
  return 0;
}
