#include "runtime/endpoint.hpp"

#include <cctype>
#include <charconv>
#include <stdexcept>

namespace omnilearn::runtime {

HostPort parse_host_port(const std::string& text) {
  auto fail = [&](const std::string& why) {
    return std::invalid_argument("bad address '" + text + "': " + why +
                                 " (expected HOST:PORT, e.g. 127.0.0.1:7070)");
  };
  std::string address = text;
  if (address.rfind("tcp://", 0) == 0) address = address.substr(6);
  auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) throw fail("missing host or port");
  HostPort result;
  result.host = address.substr(0, colon);
  if (result.host.front() == '[' && result.host.back() == ']') {
    result.host = result.host.substr(1, result.host.size() - 2);
  }
  if (result.host.empty()) throw fail("empty host");
  for (char c : result.host) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' ||
          c == '_' || c == '*')) {
      throw fail(std::string("invalid character '") + c + "' in host");
    }
  }
  std::string port_text = address.substr(colon + 1);
  unsigned value = 0;
  auto [end, error] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), value);
  if (port_text.empty() || error != std::errc() || end != port_text.data() + port_text.size() ||
      value > 65535) {
    throw fail("port must be a number from 0 to 65535");
  }
  result.port = static_cast<std::uint16_t>(value);
  return result;
}

std::string tcp_endpoint(const HostPort& address) {
  bool v6 = address.host.find(':') != std::string::npos;
  return "tcp://" + (v6 ? "[" + address.host + "]" : address.host) + ":" +
         std::to_string(address.port);
}

std::uint16_t endpoint_port(const std::string& endpoint) {
  auto colon = endpoint.rfind(':');
  if (colon == std::string::npos) return 0;
  unsigned value = 0;
  auto text = endpoint.substr(colon + 1);
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || value > 65535) return 0;
  return static_cast<std::uint16_t>(value);
}

}  // namespace omnilearn::runtime
