// A closed cluster over real loopback TCP: members with the cluster's CURVE keys talk; a peer
// with other keys, with no keys, or with raw garbage is refused before any message is decoded,
// and every refusal is counted. Also the per-peer in-flight limit.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>
#include <vector>

#include "runtime/actor_system.hpp"
#include "runtime/endpoint.hpp"
#include "runtime/security.hpp"
#include "runtime/system_messages.hpp"
#include "tests/support/actor_probe.hpp"
#include "tests/support/wait.hpp"

namespace omnilearn::runtime {
namespace {

using namespace std::chrono_literals;
using testing::wait_until;

SystemOptions with(std::optional<ClusterCredentials> credentials) {
  SystemOptions options;
  options.credentials = std::move(credentials);
  return options;
}

// The $system actor answers Ping with Pong: a round trip through everything but user actors.
bool pings(ActorSystem& client, const std::string& endpoint, std::chrono::milliseconds timeout) {
  auto answer = client.ask(ActorAddress{endpoint, "$system"}, Ping{7}, timeout).get();
  auto pong = answer.as<Pong>();
  return pong && pong->sequence == 7;
}

class ClosedCluster : public ::testing::Test {
 protected:
  ClusterCredentials cluster = generate_cluster_credentials();
  ActorSystem server{with(cluster)};
  std::string endpoint = server.listen("tcp://127.0.0.1:0");
};

TEST(CurveKeys, GeneratedKeysAreValidAndChecked) {
  ASSERT_TRUE(curve_available()) << "Debian's libzmq is built with CURVE (libsodium)";
  auto credentials = generate_cluster_credentials();
  EXPECT_EQ(credentials.server.public_key.size(), 40u);
  EXPECT_NE(credentials.server.public_key, credentials.client.public_key);
  EXPECT_NO_THROW(check_cluster_credentials(credentials));

  auto swapped = credentials;
  swapped.client.public_key = credentials.server.public_key;
  EXPECT_THROW(check_cluster_credentials(swapped), std::invalid_argument)
      << "a public key that does not belong to its secret key must be caught";
  auto truncated = credentials;
  truncated.server.secret_key.pop_back();
  EXPECT_THROW(check_cluster_credentials(truncated), std::invalid_argument);
  EXPECT_THROW(check_curve_key(std::string(40, ' '), "key"), std::invalid_argument);
}

TEST_F(ClosedCluster, MembersTalkBothWays) {
  ActorSystem member(with(cluster));
  auto member_endpoint = member.listen("tcp://127.0.0.1:0");
  EXPECT_TRUE(pings(member, endpoint, 5s));
  EXPECT_TRUE(pings(server, member_endpoint, 5s)) << "the reverse direction uses its own DEALER";
  EXPECT_EQ(server.transport_stats().refused_peers.load(), 0u);
  EXPECT_EQ(server.transport_stats().failed_handshakes.load(), 0u);
  EXPECT_EQ(member.transport_stats().failed_handshakes_out.load(), 0u);
}

TEST_F(ClosedCluster, AClientWithAnotherClientKeyIsRefusedByZapAndCounted) {
  // Knows the server's public key (as anyone who saw the cluster's traffic might) but not the
  // cluster's client secret: the CURVE handshake succeeds cryptographically, ZAP says no.
  auto outsider_keys = cluster;
  outsider_keys.client = generate_curve_key_pair();
  ActorSystem outsider(with(outsider_keys));
  EXPECT_FALSE(pings(outsider, endpoint, 1500ms));
  EXPECT_TRUE(wait_until([&] { return server.transport_stats().refused_peers.load() >= 1; }, 5s));
  EXPECT_TRUE(wait_until(
      [&] { return outsider.transport_stats().failed_handshakes_out.load() >= 1; }, 5s))
      << "the refused side must learn why, so a CLI can say 'wrong cluster file'";
  EXPECT_EQ(server.transport_stats().messages_in.load(), 0u) << "nothing was decoded";

  ActorSystem member(with(cluster));
  EXPECT_TRUE(pings(member, endpoint, 5s)) << "the server keeps serving members";
}

TEST_F(ClosedCluster, AnotherClustersKeysFailTheHandshake) {
  ActorSystem stranger(with(generate_cluster_credentials()));
  EXPECT_FALSE(pings(stranger, endpoint, 1500ms));
  EXPECT_TRUE(wait_until(
      [&] {
        const auto& s = server.transport_stats();
        return s.failed_handshakes.load() + s.refused_peers.load() >= 1;
      },
      5s));
  EXPECT_EQ(server.transport_stats().messages_in.load(), 0u);
}

TEST_F(ClosedCluster, APlainTextClientIsRefusedAndBothSidesCountIt) {
  ActorSystem insecure(with(std::nullopt));
  EXPECT_FALSE(pings(insecure, endpoint, 1500ms));
  EXPECT_TRUE(
      wait_until([&] { return server.transport_stats().failed_handshakes.load() >= 1; }, 5s));
  EXPECT_TRUE(wait_until(
      [&] { return insecure.transport_stats().failed_handshakes_out.load() >= 1; }, 5s));
  EXPECT_EQ(server.transport_stats().messages_in.load(), 0u);
}

TEST_F(ClosedCluster, AMemberCannotTalkToAPlainTextServer) {
  ActorSystem plain_server(with(std::nullopt));
  auto plain_endpoint = plain_server.listen("tcp://127.0.0.1:0");
  ActorSystem member(with(cluster));
  EXPECT_FALSE(pings(member, plain_endpoint, 1500ms)) << "a member never falls back to plain TCP";
  EXPECT_TRUE(wait_until(
      [&] { return member.transport_stats().failed_handshakes_out.load() >= 1; }, 5s));
}

TEST_F(ClosedCluster, RawGarbageBytesAreCountedAndTheServerKeepsServing) {
  auto port = endpoint_port(endpoint);
  for (int attempt = 0; attempt < 3; ++attempt) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    // A ZMTP-looking greeting that asks for the NULL mechanism, then junk; then pure junk.
    std::string greeting("\xff\0\0\0\0\0\0\0\x01\x7f\x03\x00NULL", 16);
    greeting.resize(64, '\0');
    std::string junk(4096, static_cast<char>(0xA5 + attempt));
    std::string bytes = attempt == 0 ? greeting + junk : junk;
    [[maybe_unused]] auto n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    std::this_thread::sleep_for(100ms);
    ::close(fd);
  }
  EXPECT_TRUE(
      wait_until([&] { return server.transport_stats().failed_handshakes.load() >= 1; }, 5s));
  EXPECT_EQ(server.transport_stats().messages_in.load(), 0u);
  ActorSystem member(with(cluster));
  EXPECT_TRUE(pings(member, endpoint, 5s));
}

// An actor that holds every message until released: its mailbox fills like a slow head's.
class Gate {
 public:
  void wait() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return open_; });
  }
  void open() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool open_ = false;
};

TEST(InFlightLimit, APeerBeyondItsLimitGetsOverloadedErrorsAndTheRestIsServed) {
  constexpr std::size_t kLimit = 4;
  constexpr int kAsks = 12;
  SystemOptions server_options;
  server_options.max_in_flight_per_peer = kLimit;
  ActorSystem server(server_options);
  auto endpoint = server.listen("tcp://127.0.0.1:0");
  Gate gate;
  server.spawn("slow", std::make_unique<testing::FunctionActor>(
                           [&gate](testing::FunctionActor& self, const Envelope& message) {
                             gate.wait();
                             if (auto ping = unpack_payload<Ping>(message.payload)) {
                               self.reply(message, Pong{ping->sequence});
                             }
                           }));
  ActorSystem client;
  std::vector<std::future<AskResult>> answers;
  for (int i = 0; i < kAsks; ++i) {
    answers.push_back(
        client.ask(ActorAddress{endpoint, "slow"}, Ping{static_cast<std::uint64_t>(i)}, 10s));
  }
  // The refusals come back while the actor is still stuck on the first message.
  ASSERT_TRUE(wait_until([&] { return server.stats().refused_in_flight >= kAsks - kLimit - 1; },
                         5s));
  std::this_thread::sleep_for(300ms);  // the last refusals' replies are on their way
  std::size_t overloaded = 0;
  std::vector<std::future<AskResult>> admitted;
  for (auto& answer : answers) {
    if (answer.wait_for(0s) != std::future_status::ready) {
      admitted.push_back(std::move(answer));
      continue;
    }
    auto result = answer.get();
    EXPECT_NE(result.error.find("overloaded"), std::string::npos) << result.error;
    ++overloaded;
  }
  // One message may already be out of the mailbox (being handled) and so have freed its slot.
  EXPECT_GE(overloaded, static_cast<std::size_t>(kAsks) - kLimit - 1);
  EXPECT_LE(overloaded, static_cast<std::size_t>(kAsks) - kLimit);
  EXPECT_EQ(server.stats().refused_in_flight, overloaded);
  gate.open();
  // The admitted ones are answered; afterwards the peer has its whole budget again. (Asking
  // before their answers are back would race the handler still freeing their slots.)
  for (auto& answer : admitted) {
    auto result = answer.get();
    EXPECT_TRUE(result.as<Pong>()) << "an admitted ask failed: " << result.error;
  }
  auto after = client.ask(ActorAddress{endpoint, "slow"}, Ping{99}, 10s).get();
  auto pong = after.as<Pong>();
  ASSERT_TRUE(pong) << after.error;
  EXPECT_EQ(pong->sequence, 99u);
}

TEST(InFlightLimit, BytesWaitingCountToo) {
  SystemOptions server_options;
  server_options.max_in_flight_bytes_per_peer = 1000;
  ActorSystem server(server_options);
  auto endpoint = server.listen("tcp://127.0.0.1:0");
  Gate gate;
  server.spawn("slow", std::make_unique<testing::FunctionActor>(
                           [&gate](testing::FunctionActor& self, const Envelope& message) {
                             gate.wait();
                             self.reply(message, Pong{0});
                           }));
  ActorSystem client;
  std::vector<std::future<AskResult>> answers;
  for (int i = 0; i < 5; ++i) {
    auto request = client.make_envelope(ActorAddress{endpoint, "slow"}, Ping::kKind,
                                        pack_payload(Ping{0}), {});
    request.attachments.push_back(std::string(600, 'x'));
    answers.push_back(client.ask_envelope(std::move(request), 10s));
  }
  // The first one (600 bytes) is admitted; each further one would pass 1,000 bytes waiting.
  ASSERT_TRUE(wait_until([&] { return server.stats().refused_in_flight >= 4; }, 5s));
  gate.open();
  int answered = 0;
  for (auto& answer : answers) {
    auto result = answer.get();
    if (result.as<Pong>()) ++answered;
  }
  EXPECT_EQ(answered, 1);
  EXPECT_EQ(server.stats().refused_in_flight, 4u);
}

}  // namespace
}  // namespace omnilearn::runtime
