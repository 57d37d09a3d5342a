// The head's dashboard from the command line: --dashboard-port/--dashboard-host for `head` and
// `run`, and `omnilearn dashboard-token`, which prints the token a dashboard on another
// interface asks for, derived from the cluster file.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/dashboard.hpp"
#include "dashboard/access.hpp"

namespace omnilearn::cli {

void add_dashboard_flags(CLI::App* command, DashboardFlags& flags, bool allow_host) {
  command
      ->add_option("--dashboard-port", flags.port,
                   "Serve the web dashboard and Prometheus /metrics on this port (0: any free "
                   "port; default: no dashboard)")
      ->check(CLI::Range(0, 65535));
  if (allow_host) {
    command
        ->add_option("--dashboard-host", flags.host,
                     "Interface of the dashboard; any but 127.0.0.1, ::1 or localhost makes "
                     "every request need the token (omnilearn dashboard-token)")
        ->capture_default_str();
  }
}

std::unique_ptr<dashboard::DashboardServer> start_dashboard(
    runtime::ActorSystem& system, const DashboardFlags& flags,
    const std::optional<runtime::ClusterCredentials>& credentials) {
  if (flags.port < 0) return nullptr;
  dashboard::DashboardOptions options;
  options.host = flags.host;
  options.port = static_cast<std::uint16_t>(flags.port);
  if (!dashboard::is_default_loopback(flags.host)) {
    if (!credentials) {
      throw CliError(fmt::format(
          "--dashboard-host {}: a dashboard beyond loopback needs a token, derived from the "
          "cluster file, and --insecure has none; drop --insecure or keep the dashboard on "
          "127.0.0.1",
          flags.host));
    }
    options.token = dashboard::dashboard_token(*credentials);
  }
  try {
    auto server = std::make_unique<dashboard::DashboardServer>(system, options);
    std::printf("dashboard: %s\n", server->url().c_str());
    std::fflush(stdout);
    return server;
  } catch (const dashboard::DashboardError& e) {
    throw CliError(std::string("--dashboard-port: ") + e.what());
  }
}

void add_dashboard_token_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<ClusterFlags>();
  auto* command = app.add_subcommand(
      "dashboard-token",
      "Print the token a head's dashboard on a non-loopback --dashboard-host asks for");
  command->add_option("--cluster-file", flags->cluster_file,
                      "The cluster file (default: $OMNILEARN_CLUSTER_FILE, else "
                      "~/.omnilearn/cluster.toml)");
  command->callback([flags, &exit_code] {
    // The address does not matter here; a placeholder keeps resolve_cluster_access from
    // asking for one the file may not hold yet.
    ClusterFlags cluster = *flags;
    cluster.address = "127.0.0.1:1";
    auto access = resolve_cluster_access(cluster);
    std::printf("%s\n", dashboard::dashboard_token(*access.credentials).c_str());
    exit_code = 0;
  });
}

}  // namespace omnilearn::cli
