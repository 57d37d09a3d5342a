#include "dashboard/access.hpp"

#include <arpa/inet.h>
#include <sodium.h>

#include <stdexcept>

namespace omnilearn::dashboard {

std::string dashboard_token(const runtime::ClusterCredentials& credentials) {
  if (sodium_init() < 0) throw std::runtime_error("libsodium failed to initialize");
  static constexpr char kLabel[] = "omnilearn dashboard token v1";
  const auto& key = credentials.server.secret_key;
  if (key.size() < crypto_generichash_KEYBYTES_MIN ||
      key.size() > crypto_generichash_KEYBYTES_MAX) {
    throw std::runtime_error("the cluster's server key is malformed; cannot derive a token");
  }
  unsigned char hash[32];
  crypto_generichash(hash, sizeof hash, reinterpret_cast<const unsigned char*>(kLabel),
                     sizeof kLabel - 1, reinterpret_cast<const unsigned char*>(key.data()),
                     key.size());
  char hex[sizeof hash * 2 + 1];
  sodium_bin2hex(hex, sizeof hex, hash, sizeof hash);
  return hex;
}

bool is_default_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "::1" || host == "[::1]" || host == "localhost";
}

bool token_matches(const std::string& expected, const std::string& presented) {
  if (expected.empty() || expected.size() != presented.size()) return false;
  return sodium_memcmp(expected.data(), presented.data(), expected.size()) == 0;
}

std::optional<std::string> presented_token(const std::string& authorization_header,
                                           const std::string& query_token,
                                           const std::string& cookie_header) {
  static constexpr std::string_view kBearer = "Bearer ";
  if (authorization_header.rfind(kBearer, 0) == 0) {
    return authorization_header.substr(kBearer.size());
  }
  if (!query_token.empty()) return query_token;
  const std::string name = std::string(kTokenCookie) + "=";
  std::size_t at = 0;
  while (at < cookie_header.size()) {
    auto end = cookie_header.find(';', at);
    if (end == std::string::npos) end = cookie_header.size();
    auto start = cookie_header.find_first_not_of(' ', at);
    if (start < end && cookie_header.compare(start, name.size(), name) == 0) {
      return cookie_header.substr(start + name.size(), end - start - name.size());
    }
    at = end + 1;
  }
  return std::nullopt;
}

bool is_loopback_host_header(const std::string& host_header) {
  std::string host = host_header;
  if (!host.empty() && host.front() == '[') {
    auto close = host.find(']');
    if (close == std::string::npos) return false;
    host = host.substr(1, close - 1);
  } else if (auto colon = host.rfind(':'); colon != std::string::npos) {
    host = host.substr(0, colon);
  }
  if (host == "localhost") return true;
  unsigned char address[16];
  if (::inet_pton(AF_INET6, host.c_str(), address) == 1) return host == "::1";
  // A dotted quad in 127.0.0.0/8, not a name that merely starts with "127.".
  return ::inet_pton(AF_INET, host.c_str(), address) == 1 && address[0] == 127;
}

}  // namespace omnilearn::dashboard
