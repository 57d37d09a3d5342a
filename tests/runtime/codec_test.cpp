// Envelope codec: everything that goes in comes out, and every malformed frame is rejected with
// the right reason — never a crash, a throw, or an allocation the input does not pay for.

#include "runtime/codec.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/system_messages.hpp"

namespace omnilearn::runtime {
namespace {

std::vector<std::string_view> views(const std::vector<std::string>& frames) {
  return {frames.begin(), frames.end()};
}

std::variant<Envelope, DecodeError> decode(const std::vector<std::string>& frames,
                                           const CodecLimits& limits = {}) {
  return decode_envelope(views(frames), limits);
}

DecodeError error_of(const std::variant<Envelope, DecodeError>& result) {
  EXPECT_TRUE(std::holds_alternative<DecodeError>(result)) << "decoded a frame that is invalid";
  return std::holds_alternative<DecodeError>(result) ? std::get<DecodeError>(result)
                                                     : DecodeError::kMalformed;
}

Envelope sample_envelope() {
  Envelope e;
  e.kind = MessageKind::kHeartbeat;
  e.to = ActorAddress{"tcp://127.0.0.1:1", "registry"};
  e.from = ActorAddress{"s-0123456789abcdef", "agent"};
  e.correlation = std::numeric_limits<std::uint64_t>::max() - 7;
  e.flags = Envelope::kReply;
  e.payload = std::string("\x00\x01\xff payload with a NUL\x00", 23);
  e.attachments = {std::string(), std::string("\x00\xfe", 2), std::string(1 << 20, 'x')};
  return e;
}

// A header array written field by field, so each test can break exactly one thing.
struct RawHeader {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> packer{buffer};
  std::string str() const { return std::string(buffer.data(), buffer.size()); }
};

std::string header(std::uint64_t version, std::uint64_t kind, std::size_t array_size = 8) {
  RawHeader h;
  h.packer.pack_array(static_cast<std::uint32_t>(array_size));
  h.packer.pack(version);
  h.packer.pack(kind);
  h.packer.pack(std::string("to"));
  h.packer.pack(std::string("sys"));
  h.packer.pack(std::string("from"));
  h.packer.pack(std::uint64_t{1});
  h.packer.pack(std::uint8_t{0});
  h.packer.pack_bin(0);
  for (std::size_t i = 8; i < array_size; ++i) h.packer.pack(std::string("future field"));
  return h.str();
}

TEST(Codec, RoundTripKeepsEveryFieldAndAttachment) {
  Envelope in = sample_envelope();
  auto frames = encode_envelope(in);
  ASSERT_EQ(frames.size(), 1 + in.attachments.size());
  auto result = decode(frames);
  ASSERT_TRUE(std::holds_alternative<Envelope>(result)) << to_string(std::get<DecodeError>(result));
  const auto& out = std::get<Envelope>(result);
  EXPECT_EQ(out.kind, in.kind);
  EXPECT_EQ(out.to.actor, in.to.actor);
  EXPECT_TRUE(out.to.system.empty()) << "the wire carries only the destination actor";
  EXPECT_EQ(out.from, in.from);
  EXPECT_EQ(out.correlation, in.correlation);
  EXPECT_EQ(out.flags, in.flags);
  EXPECT_TRUE(out.is_reply());
  EXPECT_EQ(out.payload, in.payload);
  EXPECT_EQ(out.attachments, in.attachments);
}

TEST(Codec, RoundTripOfDefaultsAndEveryKnownKind) {
  for (std::uint16_t k = 0; k <= 400; ++k) {
    if (!is_known_kind(k)) continue;
    Envelope in;
    in.kind = static_cast<MessageKind>(k);
    auto result = decode(encode_envelope(in));
    ASSERT_TRUE(std::holds_alternative<Envelope>(result)) << "kind " << k;
    EXPECT_EQ(std::get<Envelope>(result).kind, in.kind);
    EXPECT_TRUE(std::get<Envelope>(result).payload.empty());
    EXPECT_TRUE(std::get<Envelope>(result).attachments.empty());
  }
}

TEST(Codec, TypedPayloadsRoundTrip) {
  auto down = unpack_payload<Down>(pack_payload(Down{"s-1", "trainer-3", "crashed: oom"}));
  ASSERT_TRUE(down);
  EXPECT_EQ(down->system, "s-1");
  EXPECT_EQ(down->actor, "trainer-3");
  EXPECT_EQ(down->reason, "crashed: oom");
  auto error = unpack_payload<ErrorReply>(pack_payload(ErrorReply{"no-such-actor", "gone"}));
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code, "no-such-actor");
  auto ping = unpack_payload<Ping>(pack_payload(Ping{~0ull}));
  ASSERT_TRUE(ping);
  EXPECT_EQ(ping->sequence, ~0ull);
  auto monitor = unpack_payload<MonitorRequest>(pack_payload(MonitorRequest{"w", "t"}));
  ASSERT_TRUE(monitor);
  EXPECT_EQ(monitor->watcher_actor, "w");
  EXPECT_EQ(monitor->target_actor, "t");
}

TEST(Codec, PayloadOfTheWrongShapeIsNulloptNotAThrow) {
  EXPECT_FALSE(unpack_payload<Down>(pack_payload(Ping{3})));
  EXPECT_FALSE(unpack_payload<Ping>(pack_payload(std::string("not a ping"))));
  EXPECT_FALSE(unpack_payload<Ping>(""));
  EXPECT_FALSE(unpack_payload<Ping>(std::string("\xc1", 1)));  // never-used msgpack byte
  auto packed = pack_payload(Ping{3});
  EXPECT_FALSE(unpack_payload<Ping>(packed + "x")) << "trailing bytes";
  EXPECT_FALSE(unpack_payload<Ping>(packed.substr(0, packed.size() - 1))) << "truncated";
}

TEST(Codec, EveryTruncationOfAHeaderIsMalformed) {
  Envelope in = sample_envelope();
  in.attachments.clear();
  auto frames = encode_envelope(in);
  const std::string full = frames[0];
  for (std::size_t length = 0; length < full.size(); ++length) {
    auto result = decode({full.substr(0, length)});
    EXPECT_EQ(error_of(result), DecodeError::kMalformed) << "prefix of " << length << " bytes";
  }
}

TEST(Codec, TrailingBytesAfterTheHeaderAreMalformed) {
  auto frames = encode_envelope(sample_envelope());
  frames[0] += '\0';
  EXPECT_EQ(error_of(decode(frames)), DecodeError::kMalformed);
}

TEST(Codec, OversizedMessagesAreRejectedCountingAllFrames) {
  CodecLimits limits;
  limits.max_message_bytes = 4096;
  Envelope e;
  e.kind = MessageKind::kBlob;
  e.payload = std::string(5000, 'p');
  EXPECT_EQ(error_of(decode(encode_envelope(e), limits)), DecodeError::kOversized);

  e.payload = std::string(100, 'p');
  e.attachments = {std::string(2000, 'a'), std::string(2000, 'b')};  // each small, sum too big
  EXPECT_EQ(error_of(decode(encode_envelope(e), limits)), DecodeError::kOversized);

  e.attachments = {std::string(1000, 'a')};
  EXPECT_TRUE(std::holds_alternative<Envelope>(decode(encode_envelope(e), limits)));
}

TEST(Codec, TooManyAttachmentsAreRejected) {
  CodecLimits limits;
  limits.max_attachments = 3;
  Envelope e;
  e.kind = MessageKind::kBlob;
  e.attachments.assign(4, std::string("a"));
  EXPECT_EQ(error_of(decode(encode_envelope(e), limits)), DecodeError::kTooManyFrames);
  e.attachments.assign(3, std::string("a"));
  EXPECT_TRUE(std::holds_alternative<Envelope>(decode(encode_envelope(e), limits)));
}

TEST(Codec, UnknownKindsAreRejectedAsUnknown) {
  // Gaps between the runtime's kinds, past its last one, and user kinds nobody registered.
  for (std::uint64_t kind : {0ull, 7ull, 99ull, 150ull, 299ull, 399ull, 1024ull, 65535ull}) {
    EXPECT_EQ(error_of(decode({header(kProtocolVersion, kind)})), DecodeError::kUnknownKind)
        << "kind " << kind;
  }
  // Not even a 16-bit number: malformed rather than unknown.
  EXPECT_EQ(error_of(decode({header(kProtocolVersion, 65536)})), DecodeError::kMalformed);
}

TEST(Codec, OtherProtocolVersionsAreRejectedAsBadVersion) {
  auto kind = static_cast<std::uint64_t>(MessageKind::kPing);
  for (std::uint64_t version : {0ull, 2ull, 255ull, ~0ull}) {
    EXPECT_EQ(error_of(decode({header(version, kind)})), DecodeError::kBadVersion)
        << "version " << version;
  }
  EXPECT_TRUE(std::holds_alternative<Envelope>(decode({header(kProtocolVersion, kind)})));
}

TEST(Codec, NewerSendersMayAppendHeaderFields) {
  auto kind = static_cast<std::uint64_t>(MessageKind::kPing);
  EXPECT_TRUE(std::holds_alternative<Envelope>(decode({header(kProtocolVersion, kind, 10)})));
  EXPECT_EQ(error_of(decode({header(kProtocolVersion, kind, 7)})), DecodeError::kMalformed);
}

TEST(Codec, WrongFieldTypesAreMalformed) {
  auto build = [](auto&& write_field, int bad_index) {
    RawHeader h;
    h.packer.pack_array(8);
    for (int i = 0; i < 8; ++i) {
      if (i == bad_index) {
        write_field(h.packer);
        continue;
      }
      switch (i) {
        case 0:
          h.packer.pack(kProtocolVersion);
          break;
        case 1:
          h.packer.pack(static_cast<std::uint16_t>(MessageKind::kPing));
          break;
        case 2:
        case 3:
        case 4:
          h.packer.pack(std::string("x"));
          break;
        case 5:
          h.packer.pack(std::uint64_t{0});
          break;
        case 6:
          h.packer.pack(std::uint8_t{0});
          break;
        case 7:
          h.packer.pack_bin(0);
          break;
      }
    }
    return h.str();
  };
  auto negative = [](auto& p) { p.pack(std::int64_t{-1}); };
  auto text = [](auto& p) { p.pack(std::string("1")); };
  auto nil = [](auto& p) { p.pack_nil(); };
  auto dbl = [](auto& p) { p.pack(1.5); };  // 1.0 would be packed as an integer
  auto bin = [](auto& p) {
    p.pack_bin(1);
    p.pack_bin_body("a", 1);
  };
  auto array = [](auto& p) { p.pack_array(0); };
  for (int index = 0; index < 8; ++index) {
    for (auto* name : {"negative", "text", "nil", "double", "bin", "array"}) {
      std::string frame;
      std::string which(name);
      if (which == "negative") frame = build(negative, index);
      if (which == "text") frame = build(text, index);
      if (which == "nil") frame = build(nil, index);
      if (which == "double") frame = build(dbl, index);
      if (which == "bin") frame = build(bin, index);
      if (which == "array") frame = build(array, index);
      bool valid_anyway =
          (which == "text" && index >= 2 && index <= 4) || (which == "bin" && index == 7);
      auto result = decode({frame});
      if (valid_anyway) {
        EXPECT_TRUE(std::holds_alternative<Envelope>(result)) << which << " at " << index;
      } else {
        ASSERT_TRUE(std::holds_alternative<DecodeError>(result)) << which << " at " << index;
        EXPECT_EQ(std::get<DecodeError>(result), DecodeError::kMalformed)
            << which << " at " << index;
      }
    }
  }
  // Flags wider than a byte.
  auto wide_flags = build([](auto& p) { p.pack(std::uint64_t{256}); }, 6);
  EXPECT_EQ(error_of(decode({wide_flags})), DecodeError::kMalformed);
}

TEST(Codec, HeadersThatAreNotArraysAreMalformed) {
  std::vector<std::string> bad;
  bad.push_back("");
  for (auto&& write : std::vector<std::function<void(msgpack::packer<msgpack::sbuffer>&)>>{
           [](auto& p) { p.pack(42); },
           [](auto& p) { p.pack(std::string("hello")); },
           [](auto& p) { p.pack_map(0); },
           [](auto& p) { p.pack_nil(); },
           [](auto& p) { p.pack_array(0); },
       }) {
    RawHeader h;
    write(h.packer);
    bad.push_back(h.str());
  }
  for (const auto& frame : bad) {
    EXPECT_EQ(error_of(decode({frame})), DecodeError::kMalformed);
  }
  EXPECT_EQ(error_of(decode_envelope({})), DecodeError::kMalformed) << "no frames at all";
}

TEST(Codec, OverlongStringsInTheHeaderAreMalformed) {
  CodecLimits limits;
  limits.max_string_bytes = 16;
  Envelope e;
  e.kind = MessageKind::kPing;
  e.to.actor = std::string(17, 'a');
  EXPECT_EQ(error_of(decode(encode_envelope(e), limits)), DecodeError::kMalformed);
  e.to.actor = std::string(16, 'a');
  EXPECT_TRUE(std::holds_alternative<Envelope>(decode(encode_envelope(e), limits)));
}

TEST(Codec, DeepNestingIsRejected) {
  // 10,000 nested arrays: a recursive decoder without a depth bound would blow the stack.
  std::string deep(10000, '\x91');
  deep += '\xc0';
  EXPECT_FALSE(unpack_bounded(deep));
  EXPECT_EQ(error_of(decode({deep})), DecodeError::kMalformed);
  Envelope e;
  e.kind = MessageKind::kPing;
  e.payload = deep;
  auto frames = encode_envelope(e);
  ASSERT_TRUE(std::holds_alternative<Envelope>(decode(frames)))
      << "the header is fine: only the payload is hostile";
  EXPECT_FALSE(unpack_payload<Ping>(std::get<Envelope>(decode(frames)).payload));
}

std::size_t vm_peak_kib() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmPeak:") {
      std::size_t kib = 0;
      status >> kib;
      return kib;
    }
    std::getline(status, key);
  }
  return 0;
}

TEST(Codec, ClaimedContainerSizesDoNotAllocateBeyondTheInput) {
  // Five bytes claiming an array (or map) of 60 million elements: a decoder that allocates
  // what the header claims reserves gigabytes before noticing the input is five bytes long.
  CodecLimits generous;
  generous.max_container_items = 64u << 20;
  const std::string array_bomb("\xdd\x03\x93\x87\x00", 5);  // array32, 60,000,000 items
  const std::string map_bomb("\xdf\x03\x93\x87\x00", 5);    // map32, 60,000,000 pairs
  auto before = vm_peak_kib();
  ASSERT_GT(before, 0u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(unpack_bounded(array_bomb, generous));
    EXPECT_FALSE(unpack_bounded(map_bomb, generous));
    EXPECT_EQ(error_of(decode({array_bomb}, generous)), DecodeError::kMalformed);
  }
  auto grown_mib = (vm_peak_kib() - before) / 1024;
  EXPECT_LT(grown_mib, 64u) << "decoding a 5-byte frame reserved " << grown_mib << " MiB";
}

TEST(Codec, NestedContainerClaimsWithDefaultLimitsStayBounded) {
  // 31 nested arrays each claiming just under the default max_container_items: 155 bytes that
  // would make a claim-trusting decoder reserve 31 x 24 MB.
  std::string bomb;
  for (int i = 0; i < 31; ++i) bomb += std::string("\xdd\x00\x0f\x42\x3f", 5);  // 999,999
  auto before = vm_peak_kib();
  EXPECT_FALSE(unpack_bounded(bomb));
  EXPECT_EQ(error_of(decode({bomb})), DecodeError::kMalformed);
  Envelope e;
  e.kind = MessageKind::kPing;
  e.payload = bomb;
  auto frames = encode_envelope(e);
  auto decoded = decode(frames);
  ASSERT_TRUE(std::holds_alternative<Envelope>(decoded));
  EXPECT_FALSE(unpack_payload<Ping>(std::get<Envelope>(decoded).payload));
  auto grown_mib = (vm_peak_kib() - before) / 1024;
  EXPECT_LT(grown_mib, 64u) << "decoding 155 bytes reserved " << grown_mib << " MiB";
}

// Bundles: many attachment-free envelopes in one frame.
std::vector<Envelope> bundle_sample(std::size_t n) {
  std::vector<Envelope> envelopes;
  // Built field by field, not from sample_envelope(): its 1 MiB attachment, allocated and freed
  // 4,096 times, took 19 s under TSan (an mmap, shadow and munmap each) and timed the test out
  // on a slower CI machine.
  for (std::size_t i = 0; i < n; ++i) {
    Envelope e;
    e.kind = MessageKind::kHeartbeat;
    e.to = ActorAddress{"tcp://127.0.0.1:1", "registry"};
    e.from = ActorAddress{"s-0123456789abcdef", "agent"};
    e.flags = Envelope::kReply;
    e.correlation = i + 1;
    e.payload = std::string(i % 300, static_cast<char>('a' + i % 26));  // bin8 and bin16 sizes
    envelopes.push_back(std::move(e));
  }
  return envelopes;
}

std::vector<const Envelope*> pointers(const std::vector<Envelope>& envelopes) {
  std::vector<const Envelope*> out;
  for (const auto& e : envelopes) out.push_back(&e);
  return out;
}

TEST(Codec, BundlesCarryEveryEnvelopeInOrder) {
  for (std::size_t n : {2u, 15u, 16u, 300u, static_cast<unsigned>(kMaxBundleEnvelopes)}) {
    auto envelopes = bundle_sample(n);
    auto frame = encode_bundle(pointers(envelopes));
    ASSERT_TRUE(is_bundle(frame)) << n;
    auto split = split_bundle(frame);
    ASSERT_TRUE(std::holds_alternative<std::vector<std::string_view>>(split)) << n;
    const auto& headers = std::get<std::vector<std::string_view>>(split);
    ASSERT_EQ(headers.size(), n);
    for (std::size_t i = 0; i < n; ++i) {
      auto decoded = decode_envelope({headers[i]});
      ASSERT_TRUE(std::holds_alternative<Envelope>(decoded)) << i;
      const auto& e = std::get<Envelope>(decoded);
      EXPECT_EQ(e.correlation, i + 1);
      EXPECT_EQ(e.payload, envelopes[i].payload);
      EXPECT_EQ(e.kind, envelopes[i].kind);
      EXPECT_EQ(e.from.actor, envelopes[i].from.actor);
    }
  }
  // A plain header is never taken for a bundle.
  EXPECT_FALSE(is_bundle(encode_header(sample_envelope())));
  EXPECT_FALSE(is_bundle(header(kProtocolVersion, 1)));
}

TEST(Codec, EveryTruncationOrExtensionOfABundleIsRejected) {
  auto envelopes = bundle_sample(5);
  auto frame = encode_bundle(pointers(envelopes));
  for (std::size_t cut = 0; cut < frame.size(); ++cut) {
    EXPECT_TRUE(std::holds_alternative<DecodeError>(split_bundle(frame.substr(0, cut))))
        << "a bundle cut at " << cut << " of " << frame.size() << " was accepted";
  }
  EXPECT_TRUE(std::holds_alternative<DecodeError>(split_bundle(frame + "x")))
      << "trailing bytes accepted";
}

TEST(Codec, BundlesClaimingMoreEntriesThanAllowedOrNoneAreRejected) {
  RawHeader h;
  h.packer.pack_array(2);
  h.packer.pack_fix_uint32(kBundleTag);
  h.packer.pack_array(static_cast<std::uint32_t>(kMaxBundleEnvelopes + 1));
  for (std::size_t i = 0; i <= kMaxBundleEnvelopes; ++i) h.packer.pack_bin(0);
  EXPECT_TRUE(is_bundle(h.str()));
  EXPECT_TRUE(std::holds_alternative<DecodeError>(split_bundle(h.str())));
  RawHeader empty;
  empty.packer.pack_array(2);
  empty.packer.pack_fix_uint32(kBundleTag);
  empty.packer.pack_array(0);
  EXPECT_TRUE(std::holds_alternative<DecodeError>(split_bundle(empty.str())));
  RawHeader not_bins;
  not_bins.packer.pack_array(2);
  not_bins.packer.pack_fix_uint32(kBundleTag);
  not_bins.packer.pack_array(1);
  not_bins.packer.pack(std::string("a str, not a bin"));
  EXPECT_TRUE(std::holds_alternative<DecodeError>(split_bundle(not_bins.str())));
}

TEST(Codec, RandomGarbageNeverCrashesOrDecodesAndBothHeaderDecodersAgree) {
  std::mt19937_64 rng(20240531);
  CodecLimits limits;
  limits.max_message_bytes = 1 << 16;
  std::size_t decoded = 0;
  for (int round = 0; round < 20000; ++round) {
    std::vector<std::string> frames(1 + rng() % 3);
    for (auto& frame : frames) {
      frame.resize(rng() % 96);
      for (auto& c : frame) c = static_cast<char>(rng());
    }
    // Half the rounds start from a valid header and flip bytes, which reaches deeper checks.
    if (round % 2 == 0) {
      Envelope e;
      e.kind = MessageKind::kHeartbeat;
      e.to.actor = "registry";
      e.payload = pack_payload(Ping{rng()});
      frames[0] = encode_envelope(e)[0];
      for (int flips = 1 + static_cast<int>(rng() % 3); flips > 0; --flips) {
        frames[0][rng() % frames[0].size()] = static_cast<char>(rng());
      }
      if (rng() % 4 == 0) frames[0].resize(rng() % frames[0].size());
    }
    auto result = decode(frames, limits);
    // The fast path for this build's own headers and the generic decoder agree on everything.
    auto generic = internal::decode_envelope_generic(views(frames), limits);
    ASSERT_EQ(result.index(), generic.index()) << "round " << round;
    if (auto* error = std::get_if<DecodeError>(&result)) {
      ASSERT_EQ(*error, std::get<DecodeError>(generic)) << "round " << round;
    } else {
      const auto& a = std::get<Envelope>(result);
      const auto& b = std::get<Envelope>(generic);
      ASSERT_TRUE(a.kind == b.kind && a.to.actor == b.to.actor && a.from.system == b.from.system &&
                  a.from.actor == b.from.actor && a.correlation == b.correlation &&
                  a.flags == b.flags && a.payload == b.payload)
          << "round " << round;
    }
    if (auto* envelope = std::get_if<Envelope>(&result)) {
      ++decoded;  // a flip that kept it valid (e.g. inside a string): must still be sane
      EXPECT_LE(envelope->payload.size(), limits.max_message_bytes);
      unpack_payload<Ping>(envelope->payload);
    }
    // The payload decoder must be total too.
    unpack_payload<Down>(frames[0]);
    unpack_bounded(frames.back(), limits);
  }
  // Pure random bytes essentially never form a valid header; flipped ones sometimes do.
  EXPECT_LT(decoded, 10000u);
}

}  // namespace
}  // namespace omnilearn::runtime
