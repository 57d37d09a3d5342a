// Writes the seed corpus of decode_envelope_fuzz: real envelopes from encode_envelope, laid out
// as fuzz_input.hpp describes. Usage: make_envelope_seeds <dir> (then review and commit the
// files; scripts/fuzz.sh never writes into the checked-in corpus).

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/codec.hpp"
#include "runtime/system_messages.hpp"
#include "tests/fuzz/fuzz_input.hpp"

namespace {

using namespace omnilearn::runtime;

Envelope envelope(MessageKind kind, std::string payload) {
  Envelope e;
  e.kind = kind;
  e.to.actor = "registry";
  e.from = ActorAddress{"s-0123456789abcdef", "agent"};
  e.payload = std::move(payload);
  return e;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <output-dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  auto write = [&](const std::string& name, Envelope e, bool tight) {
    // Real system ids are longer than kTightLimits.max_string_bytes: shorten them so that the
    // tight seeds decode, and the fuzzer starts from the success path under both limits.
    if (tight) e.from.system = "s-1";
    std::ofstream(dir + "/" + name, std::ios::binary)
        << omnilearn::fuzz::join_frames(encode_envelope(e), tight);
  };

  write("ping", envelope(MessageKind::kPing, pack_payload(Ping{42})), false);
  write("pong_tight_limits", envelope(MessageKind::kPong, pack_payload(Pong{7})), true);

  auto error = envelope(MessageKind::kError, pack_payload(ErrorReply{"no-such-actor", "gone"}));
  error.correlation = 0xfffffffffffffff0u;
  error.flags = Envelope::kReply;
  write("error_reply", error, false);

  write("down", envelope(MessageKind::kDown, pack_payload(Down{"s-1", "trainer-0", "exit"})),
        false);
  write("monitor", envelope(MessageKind::kMonitor, pack_payload(MonitorRequest{"a", "b"})), false);

  // A nested payload, so the fuzzer starts from maps and arrays inside the bounded unpacker.
  auto nested = envelope(MessageKind::kHeartbeat, std::string());
  {
    omnilearn::runtime::internal::StringSink sink{nested.payload};
    msgpack::packer<omnilearn::runtime::internal::StringSink> packer(sink);
    packer.pack_array(3);
    packer.pack_map(2);
    packer.pack(std::string("node"));
    packer.pack(std::string("n1"));
    packer.pack(std::string("slots"));
    packer.pack(std::vector<int>{1, 2, 3});
    packer.pack(-1.5);
    packer.pack_nil();
  }
  write("heartbeat_nested_payload", nested, false);

  auto blob = envelope(MessageKind::kBlob, std::string("\x00\x01\xff", 3));
  blob.attachments = {std::string(), std::string("\x00\xfe", 2), std::string(300, 'x')};
  write("blob_three_attachments", blob, false);
  write("blob_three_attachments_tight_limits", blob, true);  // exactly kTightLimits.max_attachments

  auto many = envelope(MessageKind::kBlob, std::string());
  many.attachments.assign(15, std::string("a"));
  write("blob_fifteen_attachments", many, false);
  return 0;
}
