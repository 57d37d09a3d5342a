#pragma once
// Who may read the dashboard. On the default loopback address, whoever can reach 127.0.0.1 (and
// the Host header must name a loopback host, so a web page elsewhere cannot read it through DNS
// rebinding). On any other address, every request must carry the cluster's dashboard token.

#include <optional>
#include <string>

#include "runtime/security.hpp"

namespace omnilearn::dashboard {

// The dashboard token of a cluster: 64 hex digits, a keyed BLAKE2b hash of a fixed label under
// the cluster's server secret key. Whoever holds the cluster file can derive it; it reveals
// nothing of the key. Throws std::runtime_error if libsodium cannot start.
std::string dashboard_token(const runtime::ClusterCredentials& credentials);

// True for the addresses the dashboard may serve without a token: 127.0.0.1, ::1, localhost.
bool is_default_loopback(const std::string& host);

// Constant-time comparison of a presented token with the expected one.
bool token_matches(const std::string& expected, const std::string& presented);

// The token a request presents: `Authorization: Bearer T`, else `?token=T`, else the cookie
// `omnilearn_dashboard=T`. Inputs are the raw header and cookie values ("" when absent).
std::optional<std::string> presented_token(const std::string& authorization_header,
                                           const std::string& query_token,
                                           const std::string& cookie_header);

// Whether a Host header names a loopback host ("127.0.0.1:8265", "localhost", "[::1]:80").
bool is_loopback_host_header(const std::string& host_header);

inline constexpr const char* kTokenCookie = "omnilearn_dashboard";

}  // namespace omnilearn::dashboard
