#pragma once
// The address a process tells other machines to connect to (the head's, in the cluster file; a
// worker's, for its trainers' collectives) and the start-up check that catches the classic
// multi-machine mistake: advertising a loopback address (Debian maps the host name to
// 127.0.1.1) while other machines are expected to connect. The decision is a pure function of
// what was resolved, so it is unit-tested without touching the network.

#include <optional>
#include <string>
#include <vector>

#include "runtime/endpoint.hpp"

namespace omnilearn::runtime {

// "localhost", 127.0.0.0/8 or ::1 (the text of a name or a numeric address; no lookup).
bool is_loopback_host(const std::string& host);
// A bind address that means every interface: 0.0.0.0, *, :: .
bool is_wildcard_host(const std::string& host);

// The numeric addresses `host` resolves to on this machine (getaddrinfo, IPv4 and IPv6, no
// duplicates, in the resolver's order); empty if it does not resolve.
std::vector<std::string> resolve_host(const std::string& host);
// This machine's interface addresses that are up and not loopback, IPv4 first.
std::vector<std::string> non_loopback_interface_addresses();

// Parses an --advertise-address value: HOST, HOST:PORT or [V6]:PORT (port 0: none given). A
// bare IPv6 address (more than one colon, no brackets) is a host. Throws std::invalid_argument
// with what a valid value looks like.
HostPort parse_advertise_address(const std::string& text);

// What advertise_warning judges.
struct AdvertiseCheck {
  std::string who;                    // "the head", "this worker": the subject of the warning
  std::string flag;                   // the flag that fixes it: "--advertise-address"
  std::string advertised;             // the host other machines are told to connect to
  std::vector<std::string> resolved;  // what `advertised` resolves to here (resolve_host)
  // Whether other machines are expected to connect: a head bound to a non-loopback or wildcard
  // address; a worker whose head is on another machine.
  bool others_connect = false;
  // Where the process listens (the head's --host); empty when the advertised address is also
  // where it listens (a worker's collectives bind to their advertised address).
  std::string bind_host;
  std::vector<std::string> suggestions;  // non-loopback addresses of this machine, to propose
};

// One line (no trailing newline) saying what is wrong and what to pass instead, when another
// machine would be told to connect somewhere it cannot: a loopback advertised address while
// others are expected to connect, an advertised address that does not resolve here, or a
// non-loopback advertised address for a head that listens on loopback only. nullopt when fine.
std::optional<std::string> advertise_warning(const AdvertiseCheck& check);

}  // namespace omnilearn::runtime
