#pragma once
// Small pieces every command shares: where the head is, logging, this machine's name.

#include <optional>
#include <string>
#include <vector>

#include <spdlog/common.h>

#include "runtime/actor_system.hpp"
#include "runtime/endpoint.hpp"
#include "runtime/security.hpp"

namespace CLI {
class App;
}

namespace omnilearn::cli {

// How a command reaches a cluster: --address, --cluster-file, --insecure.
struct ClusterFlags {
  std::string address;
  std::string cluster_file;
  bool insecure = false;
};
void add_cluster_flags(CLI::App* command, ClusterFlags& flags);

// What a client or worker uses to talk to the cluster.
struct ClusterAccess {
  runtime::HostPort head;  // the head to talk to: with several given, the one that answered
  // Every head given (--address H1:P1,H2:P2: an active head and its standbys), `head` first.
  std::vector<runtime::HostPort> heads;
  std::optional<runtime::ClusterCredentials> credentials;  // unset only with --insecure
  std::string cluster_file;                                // the file read; "" with --insecure
  runtime::SystemOptions system_options() const;
};

// Credentials: none with --insecure (after a loud warning); else the cluster file from
// --cluster-file, $OMNILEARN_CLUSTER_FILE, or ~/.omnilearn/cluster.toml when it exists; no file
// at all is a CliError saying how to get one. Head address: --address, $OMNILEARN_ADDRESS, or
// the cluster file's address; a comma-separated list names heads that share their state (a
// standby's included), and `head` is the first of them whose registry answers within a second
// (the first of the list when none does: the command then says it cannot reach it).
ClusterAccess resolve_cluster_access(const ClusterFlags& flags);

// Says loudly, on stderr, what --insecure gives away.
void warn_insecure(const std::string& who);

// Appended to "no answer from ..." errors: why the head may have been silent, when this
// process's handshakes failed (wrong cluster file, or --insecure against a closed cluster).
std::string handshake_hint(const runtime::ActorSystem& system);

// The exit code of "no answer from the head": 2 (bad input) when this process's handshakes
// failed, since then the cluster file is not that cluster's (or one side runs --insecure);
// else 3 (the head could not be reached).
int no_answer_exit_code(const runtime::ActorSystem& system);

// The head's address from --address, else $OMNILEARN_ADDRESS; CliError (exit 2) if neither is
// set or it does not parse.
runtime::HostPort resolve_head_address(const std::string& flag_value);
// The same for a comma-separated list of heads ("H1:P1,H2:P2"), in order.
std::vector<runtime::HostPort> resolve_head_addresses(const std::string& flag_value);

// The levels $OMNILEARN_LOG may name.
inline constexpr const char* kLogLevels[] = {"trace", "debug",    "info", "warn",
                                             "error", "critical", "off"};
// The level a $OMNILEARN_LOG value names ("" : info); nullopt for a word that is none.
std::optional<spdlog::level::level_enum> parse_log_level(const std::string& name);

// Logs go to stderr (stdout stays machine-readable); level from $OMNILEARN_LOG (info default).
// A value that names no level is a CliError (exit 2) listing the levels.
void setup_logging();

std::string local_hostname();

}  // namespace omnilearn::cli
