// The head's dashboard from the command line: --dashboard-port/--dashboard-host for `head` and
// `run`; `omnilearn dashboard`, which asks a running head where its dashboard is and prints the
// URL once a GET there answers; and `omnilearn dashboard-token`, which prints the token a
// dashboard on another interface asks for, derived from the cluster file.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include "wire/membership_protocol.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/dashboard.hpp"
#include "cli/flag_checks.hpp"
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
    const std::optional<runtime::ClusterCredentials>& credentials, bool announce) {
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
    if (announce) {
      std::printf("dashboard: %s\n", server->url().c_str());
      std::fflush(stdout);
    }
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
  command->footer("Example: omnilearn dashboard-token --cluster-file ~/.omnilearn/cluster.toml");
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

namespace {

// "http://HOST:PORT/" -> HOST (brackets of an IPv6 address dropped) and PORT; nullopt otherwise.
std::optional<std::pair<std::string, std::uint16_t>> split_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) return std::nullopt;
  std::string rest = url.substr(scheme.size());
  rest = rest.substr(0, rest.find('/'));
  const auto colon = rest.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  std::string host = rest.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  try {
    const int port = std::stoi(rest.substr(colon + 1));
    if (port <= 0 || port > 65535) return std::nullopt;
    return std::make_pair(host, static_cast<std::uint16_t>(port));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

struct DashboardCommandFlags {
  ClusterFlags cluster;
  int timeout_ms = 3000;
};

int run_dashboard(const DashboardCommandFlags& flags) {
  auto access = resolve_cluster_access(flags.cluster);
  runtime::ActorSystem system(access.system_options());
  const auto timeout = std::chrono::milliseconds(flags.timeout_ms);
  auto answer =
      system
          .ask(runtime::ActorAddress{runtime::tcp_endpoint(access.head), actors::kRegistryActor},
               actors::StatusRequest{false}, timeout)
          .get();
  auto status = answer.as<actors::StatusReply>();
  const std::string head = access.head.host + ":" + std::to_string(access.head.port);
  if (!status) {
    throw CliError(
        fmt::format("cannot reach the head at {} within {} ms ({}{}); is `omnilearn "
                    "head` running there?",
                    head, flags.timeout_ms, answer.error.empty() ? "bad reply" : answer.error,
                    handshake_hint(system)),
        no_answer_exit_code(system));
  }
  if (status->dashboard_url.empty()) {
    throw CliError("the head at " + head +
                       " serves no dashboard: start it with --dashboard-port PORT (0: any free "
                       "port)",
                   kExitFailed);
  }
  // A head on every interface says "HOST": the address this command reached it at.
  std::string url = status->dashboard_url;
  if (const auto at = url.find("//HOST:"); at != std::string::npos) {
    const bool v6 = access.head.host.find(':') != std::string::npos;
    url.replace(at + 2, 4, v6 ? "[" + access.head.host + "]" : access.head.host);
  }
  std::string token;
  if (status->dashboard_token) {
    if (!access.credentials) {
      throw CliError("the dashboard at " + url +
                     " asks for the token derived from the cluster file, and --insecure has "
                     "none: pass --cluster-file");
    }
    token = dashboard::dashboard_token(*access.credentials);
  }
  auto where = split_url(url);
  if (!where) throw CliError("the head named a dashboard URL this command cannot read: " + url, 1);
  auto probe = dashboard::probe_dashboard(where->first, where->second, token, timeout);
  if (probe.status != 200) {
    throw CliError(
        fmt::format("the head's dashboard at {} does not answer ({}); is port {} "
                    "reachable from here?",
                    url, probe.status == 0 ? probe.error : fmt::format("HTTP {}", probe.status),
                    where->second),
        kExitUnreachable);
  }
  std::printf("%s%s\n", url.c_str(), token.empty() ? "" : ("?token=" + token).c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace

void add_dashboard_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<DashboardCommandFlags>();
  auto* command = app.add_subcommand(
      "dashboard",
      "Print the running head's dashboard URL (with its token when it needs one), once the "
      "dashboard answers there; open it in a browser");
  add_cluster_flags(command, flags->cluster);
  command->add_option("--timeout-ms", flags->timeout_ms, "How long to wait for the head, in ms")
      ->check(positive_number())
      ->capture_default_str();
  command->footer("Example: omnilearn dashboard   (then open the URL it prints)");
  command->callback([flags, &exit_code] { exit_code = run_dashboard(*flags); });
}

}  // namespace omnilearn::cli
