#pragma once
// Turning what users type ("head.example:7070", "127.0.0.1:0") into ZeroMQ endpoints.

#include <cstdint>
#include <string>

namespace omnilearn::runtime {

struct HostPort {
  std::string host;
  std::uint16_t port = 0;
};

// Parses "HOST:PORT" (or "[v6]:PORT"). Throws std::invalid_argument with a message that says
// what a valid address looks like.
HostPort parse_host_port(const std::string& text);

// "tcp://HOST:PORT".
std::string tcp_endpoint(const HostPort& address);

// Parses the port of a "tcp://host:port" endpoint (as returned by a bind); 0 if none.
std::uint16_t endpoint_port(const std::string& endpoint);

}  // namespace omnilearn::runtime
