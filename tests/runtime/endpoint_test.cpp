// Addresses users type: what parses, what does not, and that the error says what is expected.

#include "runtime/endpoint.hpp"

#include <gtest/gtest.h>

namespace omnilearn::runtime {
namespace {

TEST(Endpoint, ParsesHostAndPort) {
  auto a = parse_host_port("127.0.0.1:7070");
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, 7070);
  auto b = parse_host_port("tcp://head.example-1_x:65535");
  EXPECT_EQ(b.host, "head.example-1_x");
  EXPECT_EQ(b.port, 65535);
  auto c = parse_host_port("localhost:0");
  EXPECT_EQ(c.port, 0);
  auto v6 = parse_host_port("[::1]:80");
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.port, 80);
}

TEST(Endpoint, RejectsWhatIsNotHostColonPort) {
  for (const char* text : {"",           "7070",
                           ":7070",      "host:",
                           "host:abc",   "host:65536",
                           "host:-1",    "host:+1",
                           "host:70 ",   " host:70",
                           "a b:1",      "[]:1",
                           "host:7070x", "host:99999999999",
                           "tcp://",     "tcp://:1",
                           "h/st:1",     "host:0x10",
                           "ho\"st:1",   "[::1]"}) {
    try {
      parse_host_port(text);
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const std::invalid_argument& e) {
      std::string message = e.what();
      EXPECT_NE(message.find("expected HOST:PORT"), std::string::npos) << message;
      EXPECT_NE(message.find(std::string("'") + text + "'"), std::string::npos)
          << "the message should quote the input: " << message;
    }
  }
}

TEST(Endpoint, FormatsTcpEndpoints) {
  EXPECT_EQ(tcp_endpoint({"127.0.0.1", 7070}), "tcp://127.0.0.1:7070");
  EXPECT_EQ(tcp_endpoint({"::1", 80}), "tcp://[::1]:80");
  EXPECT_EQ(tcp_endpoint(parse_host_port("[::1]:80")), "tcp://[::1]:80");
}

TEST(Endpoint, ReadsThePortOfABoundEndpoint) {
  EXPECT_EQ(endpoint_port("tcp://127.0.0.1:5555"), 5555);
  EXPECT_EQ(endpoint_port("tcp://[::1]:80"), 80);
  EXPECT_EQ(endpoint_port("tcp://127.0.0.1"), 0);
  EXPECT_EQ(endpoint_port("tcp://127.0.0.1:notaport"), 0);
  EXPECT_EQ(endpoint_port("tcp://127.0.0.1:70000"), 0);
  EXPECT_EQ(endpoint_port(""), 0);
}

}  // namespace
}  // namespace omnilearn::runtime
