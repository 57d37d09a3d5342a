#pragma once
// The dashboard flags `head` and `run` share, and starting the server with them.

#include <memory>
#include <optional>
#include <string>

#include "dashboard/dashboard_server.hpp"
#include "runtime/actor_system.hpp"
#include "runtime/security.hpp"

namespace CLI {
class App;
}

namespace omnilearn::cli {

struct DashboardFlags {
  int port = -1;  // -1: no dashboard; 0: a free port
  std::string host = "127.0.0.1";
};
// --dashboard-port, and --dashboard-host when `allow_host` (the head; `run` stays on loopback).
void add_dashboard_flags(CLI::App* command, DashboardFlags& flags, bool allow_host);

// Starts the dashboard when flags.port >= 0 and prints "dashboard: URL" on stdout; nullptr
// otherwise. A host other than 127.0.0.1, ::1 or localhost needs the cluster's credentials
// (every request must then carry the token derived from them). CliError when it cannot start.
// `announce` false: no "dashboard: URL" line (`run --json`, whose stdout is JSON only).
std::unique_ptr<dashboard::DashboardServer> start_dashboard(
    runtime::ActorSystem& system, const DashboardFlags& flags,
    const std::optional<runtime::ClusterCredentials>& credentials, bool announce = true);

}  // namespace omnilearn::cli
