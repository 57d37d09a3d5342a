#pragma once
// Small pieces every command shares: where the head is, logging, this machine's name.

#include <optional>
#include <string>

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
  runtime::HostPort head;
  std::optional<runtime::ClusterCredentials> credentials;  // unset only with --insecure
  std::string cluster_file;                                // the file read; "" with --insecure
  runtime::SystemOptions system_options() const;
};

// Credentials: none with --insecure (after a loud warning); else the cluster file from
// --cluster-file, $OMNILEARN_CLUSTER_FILE, or ~/.omnilearn/cluster.toml when it exists; no file
// at all is a CliError saying how to get one. Head address: --address, $OMNILEARN_ADDRESS, or
// the cluster file's address.
ClusterAccess resolve_cluster_access(const ClusterFlags& flags);

// Says loudly, on stderr, what --insecure gives away.
void warn_insecure(const std::string& who);

// Appended to "no answer from ..." errors: why the head may have been silent, when this
// process's handshakes failed (wrong cluster file, or --insecure against a closed cluster).
std::string handshake_hint(const runtime::ActorSystem& system);

// The head's address from --address, else $OMNILEARN_ADDRESS; CliError (exit 2) if neither is
// set or it does not parse.
runtime::HostPort resolve_head_address(const std::string& flag_value);

// Logs go to stderr (stdout stays machine-readable); level from $OMNILEARN_LOG (info default).
void setup_logging();

std::string local_hostname();

}  // namespace omnilearn::cli
