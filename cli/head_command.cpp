// omnilearn head: the cluster's head node (membership, rendezvous store, jobs).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "head/head.hpp"
#include "wire/membership_protocol.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/dashboard.hpp"
#include "cli/flag_checks.hpp"
#include "runtime/advertised_address.hpp"
#include "runtime/cluster_file.hpp"
#include "runtime/shutdown.hpp"
#include "state/etcd_store.hpp"
#include "state/state_store.hpp"

namespace omnilearn::cli {
namespace {

struct HeadFlags {
  std::string host = "127.0.0.1";
  std::string advertise_address;  // HOST[:PORT] written into the cluster file; default below
  int port = 7070;
  int heartbeat_interval_ms = 500;
  int heartbeat_timeout_ms = 3000;
  int full_disruption_hold_s = 300;
  int max_nodes = 4096;
  int max_jobs = 256;
  int max_in_flight = 8192;
  std::string runs_dir = "runs";
  std::string cluster_file;
  std::string state_dir;  // default: head-<port> beside the cluster file
  std::string store;      // "sqlite:DIR" (as --state-dir DIR), "memory:" or "etcd://..."
  bool standby = false;   // with etcd: wait to be elected instead of refusing
  int lease_ttl_s = 5;    // with etcd: a dead or frozen active head is replaced after this
  bool insecure = false;
  DashboardFlags dashboard;
};

// The cluster file's path: --cluster-file, else $OMNILEARN_CLUSTER_FILE, else the default.
std::filesystem::path cluster_file_path(const HeadFlags& flags) {
  if (!flags.cluster_file.empty()) return flags.cluster_file;
  if (const char* env = std::getenv("OMNILEARN_CLUSTER_FILE"); env && *env) return env;
  return runtime::default_cluster_file_path();
}

// One line on where the state is kept and what this start took over from a previous head.
void print_state_line(const actors::HeadInfo& head) {
  if (head.epoch <= 1) {
    std::printf("state: %s (new)\n", head.store.c_str());
    return;
  }
  std::string outage = head.outage_s >= 0 ? fmt::format(" after {:.1f} s down", head.outage_s) : "";
  std::printf(
      "state: %s (head start %llu%s: %d nodes and %d jobs restored, %d running jobs "
      "resumed, %d ended as failed)\n",
      head.store.c_str(), static_cast<unsigned long long>(head.epoch), outage.c_str(),
      head.restored_nodes, head.restored_jobs, head.resumed_jobs, head.failed_jobs);
}

int run_head(const HeadFlags& flags) {
  if (flags.heartbeat_interval_ms <= 0 || flags.heartbeat_timeout_ms <= flags.heartbeat_interval_ms) {
    throw CliError("--heartbeat-timeout-ms must be larger than --heartbeat-interval-ms (> 0)");
  }
  if (flags.insecure && !flags.cluster_file.empty()) {
    throw CliError("--insecure and --cluster-file contradict each other: choose one");
  }
  std::optional<runtime::HostPort> advertise;
  if (!flags.advertise_address.empty()) {
    try {
      advertise = runtime::parse_advertise_address(flags.advertise_address);
    } catch (const std::invalid_argument& e) {
      throw CliError(std::string("--advertise-address: ") + e.what());
    }
  }
  // Credentials before the first socket: a restarted head keeps its cluster's keys, so its
  // workers and clients need nothing new.
  std::optional<runtime::ClusterFile> cluster;
  auto path = cluster_file_path(flags);
  runtime::SystemOptions system_options;
  system_options.max_in_flight_per_peer = static_cast<std::size_t>(flags.max_in_flight);
  if (flags.insecure) {
    warn_insecure("this head");
  } else {
    try {
      cluster = runtime::load_or_new_cluster_file(path);
    } catch (const std::exception& e) {
      throw CliError(e.what());
    }
    system_options.credentials = cluster->credentials;
  }
  runtime::block_shutdown_signals();
  runtime::HostPort bind_address{flags.host, static_cast<std::uint16_t>(flags.port)};
  runtime::ActorSystem system(system_options);
  std::string bound;
  try {
    bound = system.listen(runtime::tcp_endpoint(bind_address));
  } catch (const std::exception& e) {
    // The hint fits one cause only: the port is taken.
    const std::string why = e.what();
    throw CliError(why + (why.find("Address already in use") != std::string::npos
                              ? " (is another head running on that port? --port 0 picks a free one)"
                              : " (is --host an address of this machine?)"));
  }
  auto port = runtime::endpoint_port(bound);
  actors::HeadOptions head;
  head.membership.heartbeat_interval = std::chrono::milliseconds(flags.heartbeat_interval_ms);
  head.membership.heartbeat_timeout = std::chrono::milliseconds(flags.heartbeat_timeout_ms);
  head.membership.full_disruption_hold = std::chrono::seconds(flags.full_disruption_hold_s);
  head.membership.max_nodes = static_cast<std::size_t>(flags.max_nodes);
  head.runs_root = flags.runs_dir;
  head.max_jobs = static_cast<std::size_t>(flags.max_jobs);
  // What workers and clients are told (the cluster file's address): --advertise-address, else
  // the interface listened on, else (all interfaces) the host name.
  std::string advertised = flags.host;
  if (advertise) {
    advertised = advertise->host;
  } else if (runtime::is_wildcard_host(flags.host)) {
    advertised = local_hostname();
  }
  std::uint16_t advertised_port = advertise && advertise->port != 0 ? advertise->port : port;
  // "tcp://HOST:PORT" less the scheme: HOST:PORT, an IPv6 host in brackets.
  const std::string address = runtime::tcp_endpoint({advertised, advertised_port}).substr(6);
  runtime::AdvertiseCheck check;
  check.who = "the head";
  check.flag = "--advertise-address";
  check.advertised = advertised;
  check.resolved = runtime::resolve_host(advertised);
  check.others_connect = !runtime::is_loopback_host(flags.host);
  check.bind_host = flags.host;
  check.suggestions = runtime::non_loopback_interface_addresses();
  if (auto warning = runtime::advertise_warning(check)) {
    std::fprintf(stderr, "WARNING: %s\n", warning->c_str());
  }
  if (advertised != flags.host || advertised_port != port) {
    spdlog::info("head: bound to {}:{}, advertised as {}", flags.host, port, address);
  }
  // The state: after listen, so that the default directory can name the port and the leader
  // key the address, and before the actors, which take over what it holds.
  try {
    if (flags.store.rfind("etcd://", 0) == 0) {
      state::EtcdOptions etcd;
      state::parse_etcd_spec(flags.store, etcd);
      etcd.self = address;
      etcd.standby = flags.standby;
      etcd.lease_ttl = std::chrono::seconds(flags.lease_ttl_s);
      etcd.on_waiting = [address](const std::string& active) {
        std::printf("standby on %s: waiting for the active head at %s to go\n", address.c_str(),
                    active.c_str());
        std::fflush(stdout);
      };
      etcd.on_deposed = [](const std::string& why) {
        // Another head may be active already: not one more answer, not one more write.
        std::fprintf(stderr, "omnilearn head: no longer the active head (%s); exiting\n",
                     why.c_str());
        std::fflush(stderr);
        std::_Exit(1);
      };
      head.store = state::open_etcd_store(std::move(etcd));
      // Thawed past its lease, a head's threads wake together, and one may send before the
      // watchdog deposes it: the fence asks the clock before every message leaves.
      system.set_send_fence([store = head.store] { return store->lapsed(); });
    } else if (flags.standby) {
      throw CliError("--standby needs a store that heads share: --store etcd://HOST:PORT,...");
    } else if (!flags.store.empty()) {
      head.store = state::open_state_store(flags.store);
    } else {
      auto dir = !flags.state_dir.empty()
                     ? std::filesystem::path(flags.state_dir)
                     : path.parent_path() / ("head-" + std::to_string(port));
      head.store = state::open_sqlite_store(dir);
    }
  } catch (const state::StateStoreError& e) {
    throw CliError(e.what());
  }
  // Before "listening": a dashboard that cannot start ends the head with the reason. Before the
  // actors too, so that the registry can tell `omnilearn dashboard` where it is; after the
  // store, so that a standby serves nothing until it is elected.
  auto dashboard = start_dashboard(
      system, flags.dashboard,
      cluster ? std::optional<runtime::ClusterCredentials>(cluster->credentials) : std::nullopt);
  if (dashboard) {
    head.dashboard_url = dashboard->base_url();
    head.dashboard_token = dashboard->needs_token();
  }
  actors::HeadInfo restored;
  try {
    restored = actors::spawn_head_actors(system, head);
  } catch (const state::StateStoreError& e) {
    throw CliError(e.what());
  }

  if (cluster) {
    cluster->address = address;
    try {
      runtime::write_cluster_file(path, *cluster);
    } catch (const runtime::ClusterFileError& e) {
      throw CliError(e.what());
    }
    auto shown = std::filesystem::absolute(path).string();
    // "listening" comes after the file is written: whoever waits for it may read the file.
    std::printf("omnilearn head listening on %s\n", address.c_str());
    print_state_line(restored);
    std::printf("cluster file: %s (mode 0600; whoever holds it can join and submit jobs)\n",
                shown.c_str());
    std::printf("workers join with: omnilearn worker --cluster-file %s\n", shown.c_str());
    std::printf("other machines: copy the file there first, e.g. scp -p %s HOST:.omnilearn/"
                "cluster.toml (then `omnilearn worker` and `omnilearn status` find it)\n",
                shown.c_str());
  } else {
    std::printf("omnilearn head listening on %s\n", address.c_str());
    print_state_line(restored);
    std::printf("workers join with: omnilearn worker --insecure --address %s\n", address.c_str());
  }
  std::fflush(stdout);

  int signal = runtime::wait_for_shutdown_signal(std::chrono::hours(24 * 365 * 100));
  spdlog::info("head: signal {} received, shutting down: {}", signal,
               actors::prepare_head_stop(head));
  dashboard.reset();  // it asks the actors: stop it before them
  system.shutdown();
  return 0;
}

}  // namespace

void add_head_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<HeadFlags>();
  auto* command = app.add_subcommand("head", "Start the head node of a cluster");
  command->add_option("--host", flags->host, "Interface to listen on (0.0.0.0: all)")
      ->capture_default_str();
  command->add_option("--advertise-address", flags->advertise_address,
                      "HOST[:PORT] that workers and clients on other machines reach the head at, "
                      "written into the cluster file (default: --host, or the host name when "
                      "--host is 0.0.0.0; the port defaults to the one listened on)");
  command->add_option("--port", flags->port, "Port for actor messages (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  command->add_option("--heartbeat-interval-ms", flags->heartbeat_interval_ms,
                      "How often workers send heartbeats")
      ->check(positive_number())
      ->capture_default_str();
  command->add_option("--heartbeat-timeout-ms", flags->heartbeat_timeout_ms,
                      "Silence after which a worker is declared dead")
      ->check(positive_number())
      ->capture_default_str();
  command->add_option("--full-disruption-hold-s", flags->full_disruption_hold_s,
                      "While no node at all is heard (this head's own network down), declare "
                      "none dead for up to this long beyond the heartbeat timeout; 0: off")
      ->check(non_negative_number())
      ->capture_default_str();
  command->add_option("--max-nodes", flags->max_nodes, "Most live nodes the head accepts")
      ->check(positive_number())
      ->capture_default_str();
  command->add_option("--max-jobs", flags->max_jobs,
                      "Most jobs the head keeps; the oldest finished ones are forgotten first")
      ->check(positive_number())
      ->capture_default_str();
  command->add_option("--max-in-flight", flags->max_in_flight,
                      "Most messages from one peer waiting at the head; beyond it requests get "
                      "an 'overloaded' error")
      ->check(positive_number())
      ->capture_default_str();
  command->add_option("--runs-dir", flags->runs_dir, "Where job run directories go")
      ->capture_default_str();
  command->add_option("--cluster-file", flags->cluster_file,
                      "Where the cluster's credentials are kept: created on first start, reused "
                      "after (default: $OMNILEARN_CLUSTER_FILE, else ~/.omnilearn/cluster.toml)");
  command->add_option("--state-dir", flags->state_dir,
                      "Where the head keeps what it must not forget across a restart (nodes, "
                      "jobs): an SQLite database, state.db, in this directory (default: "
                      "head-PORT beside the cluster file). One head per directory");
  command->add_option("--store", flags->store,
                      "The state store instead of --state-dir: sqlite:DIR; memory: to forget "
                      "everything when the head stops; etcd://HOST:PORT[,HOST:PORT...][/PREFIX] "
                      "to share it with standby heads (the active one is elected)")
      ->excludes("--state-dir");
  command->add_flag("--standby", flags->standby,
                    "With --store etcd://...: wait until the active head goes, then take over "
                    "(instead of refusing to start while one is active)");
  command->add_option("--lease-ttl-s", flags->lease_ttl_s,
                      "With --store etcd://...: the active head's lease; a standby takes over "
                      "this long after the active head died or froze")
      ->check(CLI::Range(1, 600))
      ->capture_default_str();
  command->add_flag("--insecure", flags->insecure,
                    "No authentication or encryption: anyone who reaches the port can run jobs. "
                    "Local experiments only");
  add_dashboard_flags(command, flags->dashboard, /*allow_host=*/true);
  command->footer(
      "Example: omnilearn head --host 0.0.0.0 --advertise-address 10.0.0.1 "
      "--dashboard-port 8265");
  command->callback([flags, &exit_code] { exit_code = run_head(*flags); });
}

}  // namespace omnilearn::cli
