// A listening ActorSystem fed garbage — by a raw ZeroMQ DEALER and by a raw TCP socket — drops
// and counts it, and keeps serving real peers.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <zmq.hpp>

#include "runtime/actor_system.hpp"
#include "runtime/endpoint.hpp"
#include "runtime/system_messages.hpp"
#include "tests/support/wait.hpp"

namespace omnilearn::runtime {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t kMaxMessage = 64 * 1024;

std::string header(std::uint64_t version, std::uint64_t kind) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> p(buffer);
  p.pack_array(8);
  p.pack(version);
  p.pack(kind);
  p.pack(std::string("$system"));
  p.pack(std::string("raw"));
  p.pack(std::string("raw"));
  p.pack(std::uint64_t{0});
  p.pack(std::uint8_t{0});
  p.pack_bin(0);
  return std::string(buffer.data(), buffer.size());
}

class GarbageFrames : public ::testing::Test {
 protected:
  GarbageFrames() : server(options()) {}
  static SystemOptions options() {
    SystemOptions o;
    o.limits.max_message_bytes = kMaxMessage;
    return o;
  }
  void SetUp() override {
    endpoint = server.listen("tcp://127.0.0.1:0");
    raw.set(zmq::sockopt::linger, 0);
    raw.connect(endpoint);
  }

  void send_raw(const std::vector<std::string>& frames) {
    for (std::size_t i = 0; i < frames.size(); ++i) {
      auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      ASSERT_TRUE(raw.send(zmq::buffer(frames[i]), flags));
    }
  }

  // A real peer can still talk to the server.
  void expect_serving() {
    auto pong = client.ask(ActorAddress{endpoint, "$system"}, Ping{123}, 5s).get();
    ASSERT_TRUE(pong.ok()) << "the server stopped serving: " << pong.error;
    EXPECT_EQ(pong.as<Pong>()->sequence, 123u);
  }

  std::uint64_t drops() const {
    const auto& s = server.transport_stats();
    return s.dropped_malformed + s.dropped_oversized + s.dropped_unknown_kind +
           s.dropped_bad_version;
  }

  ActorSystem server;
  ActorSystem client;
  std::string endpoint;
  zmq::context_t context{1};
  zmq::socket_t raw{context, zmq::socket_type::dealer};
};

TEST_F(GarbageFrames, EachKindOfBadFrameIsDroppedAndCountedByKind) {
  const auto& stats = server.transport_stats();
  send_raw({"definitely not msgpack"});
  send_raw({std::string()});
  send_raw({header(kProtocolVersion, 4).substr(0, 10)});  // truncated
  send_raw({header(kProtocolVersion, 4) + "trailing"});   // trailing bytes
  send_raw({header(kProtocolVersion, 4242)});             // unknown kind
  send_raw({header(kProtocolVersion + 1, static_cast<std::uint64_t>(MessageKind::kPing))});
  send_raw({header(kProtocolVersion, 4), std::string(kMaxMessage, 'x')});  // frames sum too big
  ASSERT_TRUE(testing::wait_until([&] { return drops() == 7; }, 5s)) << "drops seen: " << drops();
  EXPECT_EQ(stats.dropped_malformed.load(), 4u);
  EXPECT_EQ(stats.dropped_unknown_kind.load(), 1u);
  EXPECT_EQ(stats.dropped_bad_version.load(), 1u);
  EXPECT_EQ(stats.dropped_oversized.load(), 1u);
  EXPECT_EQ(stats.messages_in.load(), 0u);
  expect_serving();
}

TEST_F(GarbageFrames, TheSameConnectionStillWorksAfterGarbage) {
  send_raw({"junk"});
  // A valid ask straight from the raw socket: the server must answer on this connection.
  Envelope ping;
  ping.kind = MessageKind::kPing;
  ping.to.actor = "$system";
  ping.from.actor = "raw-asker";
  ping.correlation = 9;
  ping.payload = pack_payload(Ping{55});
  send_raw(encode_envelope(ping));
  raw.set(zmq::sockopt::rcvtimeo, 5000);
  zmq::message_t reply;
  ASSERT_TRUE(raw.recv(reply)) << "no reply on the raw connection";
  auto decoded = decode_envelope({reply.to_string_view()});
  ASSERT_TRUE(std::holds_alternative<Envelope>(decoded));
  const auto& envelope = std::get<Envelope>(decoded);
  EXPECT_TRUE(envelope.is_reply());
  EXPECT_EQ(envelope.correlation, 9u);
  EXPECT_EQ(envelope.to.actor, "raw-asker");
  EXPECT_EQ(unpack_payload<Pong>(envelope.payload)->sequence, 55u);
  EXPECT_EQ(server.transport_stats().dropped_malformed.load(), 1u);
}

TEST_F(GarbageFrames, AFrameOverTheLimitCutsOnlyThatPeer) {
  // One frame larger than the limit: ZeroMQ itself drops the connection (maxmsgsize) before
  // the bytes are buffered; the server carries on with everyone else.
  send_raw({std::string(2 * kMaxMessage, 'x')});
  std::this_thread::sleep_for(100ms);
  expect_serving();
  EXPECT_EQ(server.transport_stats().messages_in.load(), 1u) << "only the client's ping";
}

TEST_F(GarbageFrames, RandomGarbageFuzzIsAllDroppedWhileServing) {
  std::mt19937_64 rng(7);
  constexpr int kMessages = 3000;
  for (int i = 0; i < kMessages; ++i) {
    std::vector<std::string> frames(1 + rng() % 4);
    for (auto& frame : frames) {
      frame.resize(rng() % 512);
      for (auto& c : frame) c = static_cast<char>(rng());
    }
    if (i % 3 == 0) {  // start from a real header so the deeper checks are reached too
      frames[0] = header(kProtocolVersion, static_cast<std::uint64_t>(MessageKind::kPing));
      frames[0][rng() % frames[0].size()] = static_cast<char>(rng());
      frames[0].resize(rng() % frames[0].size());
    }
    send_raw(frames);
    if (i % 500 == 0) expect_serving();
  }
  // Generous: under ThreadSanitizer the server decodes ~10x slower than in a plain build.
  ASSERT_TRUE(testing::wait_until([&] { return drops() == kMessages; }, 60s))
      << "dropped " << drops() << " of " << kMessages;
  expect_serving();
  EXPECT_EQ(server.stats().dead_letters, 0u);
}

int connect_tcp(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

TEST_F(GarbageFrames, RawTcpGarbageDoesNotHurtTheServer) {
  auto port = endpoint_port(endpoint);
  ASSERT_NE(port, 0);
  std::mt19937_64 rng(11);
  std::vector<std::string> payloads = {
      "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
      std::string("\xff\0\0\0\0\0\0\0\x01\x7f", 10),  // a ZMTP signature, then nonsense
      std::string("\xff\0\0\0\0\0\0\0\x01\x7f\x03\x00NULL", 16) + std::string(200, '\xee'),
      std::string(),  // connect and hang up
  };
  for (int i = 0; i < 20; ++i) {
    std::string noise(1 + rng() % 4096, '\0');
    for (auto& c : noise) c = static_cast<char>(rng());
    payloads.push_back(std::move(noise));
  }
  for (const auto& payload : payloads) {
    int fd = connect_tcp(port);
    ASSERT_GE(fd, 0) << "cannot connect to " << endpoint;
    if (!payload.empty()) {
      [[maybe_unused]] auto n = ::send(fd, payload.data(), payload.size(), MSG_NOSIGNAL);
    }
    ::close(fd);
  }
  // A connection that stays open with half a greeting must not block anyone else either.
  int stalled = connect_tcp(port);
  ASSERT_GE(stalled, 0);
  [[maybe_unused]] auto n = ::send(stalled, "\xff\0\0", 3, MSG_NOSIGNAL);
  expect_serving();
  expect_serving();
  ::close(stalled);
  // ZeroMQ reads a stream that does not start with the ZMTP 3 signature as legacy ZMTP 1.0
  // frames, so some noise does reach the decoder: it must all be dropped, none delivered.
  EXPECT_EQ(server.transport_stats().messages_in.load(), 2u) << "only the client's two pings";
  EXPECT_EQ(server.stats().dead_letters, 0u);
}

}  // namespace
}  // namespace omnilearn::runtime
