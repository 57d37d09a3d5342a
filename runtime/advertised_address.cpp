#include "runtime/advertised_address.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace omnilearn::runtime {
namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

std::string numeric(const sockaddr* address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address->sa_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(address)->sin_addr, text,
                sizeof text);
  } else if (address->sa_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr, text,
                sizeof text);
  }
  return text;
}

std::string joined(const std::vector<std::string>& items) {
  std::string text;
  for (const auto& item : items) text += (text.empty() ? "" : ", ") + item;
  return text;
}

std::string suggestion(const AdvertiseCheck& check) {
  if (check.suggestions.empty()) return "";
  return " (this machine's: " + joined(check.suggestions) + ")";
}

}  // namespace

bool is_loopback_host(const std::string& host) {
  std::string name = lower(host);
  if (!name.empty() && name.front() == '[' && name.back() == ']') {
    name = name.substr(1, name.size() - 2);
  }
  if (name == "localhost" || name.ends_with(".localhost")) return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, name.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, name.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    // ::ffff:127.x.y.z, an IPv4 loopback address in IPv6 form.
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

bool is_wildcard_host(const std::string& host) {
  return host == "0.0.0.0" || host == "*" || host == "::" || host == "[::]";
}

std::vector<std::string> resolve_host(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::vector<std::string> addresses;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return addresses;
  for (const addrinfo* each = found; each; each = each->ai_next) {
    auto text = numeric(each->ai_addr);
    if (!text.empty() && std::find(addresses.begin(), addresses.end(), text) == addresses.end()) {
      addresses.push_back(text);
    }
  }
  ::freeaddrinfo(found);
  return addresses;
}

std::vector<std::string> non_loopback_interface_addresses() {
  ifaddrs* interfaces = nullptr;
  std::vector<std::string> v4, v6;
  if (::getifaddrs(&interfaces) != 0) return v4;
  for (const ifaddrs* each = interfaces; each; each = each->ifa_next) {
    if (!each->ifa_addr || !(each->ifa_flags & IFF_UP) || (each->ifa_flags & IFF_LOOPBACK)) {
      continue;
    }
    if (each->ifa_addr->sa_family == AF_INET6) {
      // Link-local addresses need a scope id that nobody types into a flag.
      const auto& address = reinterpret_cast<const sockaddr_in6*>(each->ifa_addr)->sin6_addr;
      if (IN6_IS_ADDR_LINKLOCAL(&address)) continue;
    }
    auto text = numeric(each->ifa_addr);
    if (text.empty() || is_loopback_host(text)) continue;
    auto& list = each->ifa_addr->sa_family == AF_INET ? v4 : v6;
    if (std::find(list.begin(), list.end(), text) == list.end()) list.push_back(text);
  }
  ::freeifaddrs(interfaces);
  v4.insert(v4.end(), v6.begin(), v6.end());
  return v4;
}

HostPort parse_advertise_address(const std::string& text) {
  std::string value = text;
  const bool bracketed = !value.empty() && value.front() == '[';
  const auto colons = std::count(value.begin(), value.end(), ':');
  try {
    if (bracketed && value.back() == ']') return parse_host_port(value + ":0");
    if (bracketed || colons == 1) return parse_host_port(value);
    return parse_host_port((colons > 1 ? "[" + value + "]" : value) + ":0");
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument("bad advertise address '" + text +
                                "' (expected HOST or HOST:PORT, e.g. 10.0.0.5 or "
                                "head.example:7070)");
  }
}

std::optional<std::string> advertise_warning(const AdvertiseCheck& check) {
  const bool advertises_loopback =
      is_loopback_host(check.advertised) ||
      (!check.resolved.empty() &&
       std::all_of(check.resolved.begin(), check.resolved.end(),
                   [](const std::string& a) { return is_loopback_host(a); }));
  const bool listens_on_loopback = !check.bind_host.empty() && is_loopback_host(check.bind_host);
  if (listens_on_loopback && !advertises_loopback) {
    return check.who + " listens on " + check.bind_host + " only but advertises " +
           check.advertised + ": other machines cannot connect to it. Listen on that address or " +
           "on 0.0.0.0 (--host)";
  }
  if (check.resolved.empty()) {
    return check.who + " advertises " + check.advertised +
           ", which does not resolve on this machine: pass " + check.flag +
           " with an address of this machine that the others reach" + suggestion(check);
  }
  if (!check.others_connect || !advertises_loopback) return std::nullopt;
  std::string where = check.advertised;
  if (check.resolved.size() != 1 || check.resolved.front() != check.advertised) {
    where += " (" + joined(check.resolved) + ")";
  }
  return check.who + " advertises " + where + ", a loopback address, to nodes on other machines" +
         (check.bind_host.empty() ? "" : " (it listens on " + check.bind_host + ")") +
         ": they would connect to themselves. Pass " + check.flag +
         " with an address the others reach" + suggestion(check);
}

}  // namespace omnilearn::runtime
