#pragma once
// The cluster file: where a cluster's head is and the credentials that make a process a member
// (runtime/security.hpp). `omnilearn head` writes it on first start; workers, trainers and CLI
// clients read it. It is a secret: whoever holds it can join the cluster and submit jobs, so it
// is written with mode 0600 and refused when others can read it (as ssh refuses a private key).
//
// Format (TOML):
//   address = "HOST:PORT"
//   server_public_key = "..."   # Z85, 40 characters each
//   server_secret_key = "..."
//   client_public_key = "..."
//   client_secret_key = "..."

#include <filesystem>
#include <stdexcept>
#include <string>

#include "runtime/security.hpp"

namespace omnilearn::runtime {

struct ClusterFile {
  std::string address;  // HOST:PORT of the head
  ClusterCredentials credentials;
};

// A cluster file that cannot be used; the message says what to do.
class ClusterFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// $HOME/.omnilearn/cluster.toml (the current directory's .omnilearn/ if HOME is unset).
std::filesystem::path default_cluster_file_path();

// Reads and checks a cluster file: present, readable by its owner only, every key well formed
// and each secret key matching its public key. Throws ClusterFileError.
ClusterFile read_cluster_file(const std::filesystem::path& path);

// Writes `file` with mode 0600 through write_file_atomically (runtime/atomic_file.hpp), creating
// the parent directory with mode 0700 if needed. Throws ClusterFileError.
void write_cluster_file(const std::filesystem::path& path, const ClusterFile& file);

// The head's start: the file at `path` if it exists (a restarted head keeps its cluster), else
// fresh credentials and no address. Writes nothing: the head records its address once it has
// bound its port (write_cluster_file). Throws ClusterFileError.
ClusterFile load_or_new_cluster_file(const std::filesystem::path& path);

}  // namespace omnilearn::runtime
