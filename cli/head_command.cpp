// omnilearn head: the cluster's head node (membership, rendezvous store, jobs).
#include <CLI/CLI.hpp>

#include <cstdio>

#include <spdlog/spdlog.h>

#include "actors/head.hpp"
#include "actors/membership_protocol.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "runtime/shutdown.hpp"

namespace omnilearn::cli {
namespace {

struct HeadFlags {
  std::string host = "127.0.0.1";
  int port = 7070;
  int heartbeat_interval_ms = 500;
  int heartbeat_timeout_ms = 3000;
  int max_nodes = 4096;
  std::string runs_dir = "runs";
};

int run_head(const HeadFlags& flags) {
  if (flags.heartbeat_interval_ms <= 0 || flags.heartbeat_timeout_ms <= flags.heartbeat_interval_ms) {
    throw CliError("--heartbeat-timeout-ms must be larger than --heartbeat-interval-ms (> 0)");
  }
  runtime::block_shutdown_signals();
  runtime::HostPort bind_address{flags.host, static_cast<std::uint16_t>(flags.port)};
  runtime::ActorSystem system;
  std::string bound;
  try {
    bound = system.listen(runtime::tcp_endpoint(bind_address));
  } catch (const std::exception& e) {
    throw CliError(std::string(e.what()) + " (is another head running on that port?)");
  }
  auto port = runtime::endpoint_port(bound);
  actors::HeadOptions head;
  head.membership.heartbeat_interval = std::chrono::milliseconds(flags.heartbeat_interval_ms);
  head.membership.heartbeat_timeout = std::chrono::milliseconds(flags.heartbeat_timeout_ms);
  head.membership.max_nodes = static_cast<std::size_t>(flags.max_nodes);
  head.runs_root = flags.runs_dir;
  actors::spawn_head_actors(system, head);

  std::string advertised = flags.host == "0.0.0.0" || flags.host == "*" ? local_hostname()
                                                                          : flags.host;
  std::printf("omnilearn head listening on %s:%u\n", advertised.c_str(), port);
  std::printf("workers join with: omnilearn worker --address %s:%u\n", advertised.c_str(), port);
  std::fflush(stdout);

  int signal = runtime::wait_for_shutdown_signal(std::chrono::hours(24 * 365 * 100));
  spdlog::info("head: signal {} received, shutting down", signal);
  system.shutdown();
  return 0;
}

}  // namespace

void add_head_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<HeadFlags>();
  auto* command = app.add_subcommand("head", "Start the head node of a cluster");
  command->add_option("--host", flags->host, "Interface to listen on (0.0.0.0: all)")
      ->capture_default_str();
  command->add_option("--port", flags->port, "Port for actor messages (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  command->add_option("--heartbeat-interval-ms", flags->heartbeat_interval_ms,
                      "How often workers send heartbeats")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->add_option("--heartbeat-timeout-ms", flags->heartbeat_timeout_ms,
                      "Silence after which a worker is declared dead")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->add_option("--max-nodes", flags->max_nodes, "Most live nodes the head accepts")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->add_option("--runs-dir", flags->runs_dir, "Where job run directories go")
      ->capture_default_str();
  command->callback([flags, &exit_code] { exit_code = run_head(*flags); });
}

}  // namespace omnilearn::cli
