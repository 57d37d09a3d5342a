#pragma once
// What a process needs to take part in a closed cluster: ZeroMQ CURVE keys.
//
// Model: one cluster, one secret. Every ROUTER in the cluster (head, node agents, trainers)
// serves with the cluster's server key pair; every DEALER authenticates with the cluster's client
// key pair, and a ZAP handler on each ROUTER admits only that client public key. Holding the
// cluster file (runtime/cluster_file.hpp) is therefore what makes a process a member; everything
// on the wire is encrypted and authenticated by CURVE (Curve25519 + XSalsa20-Poly1305).

#include <string>

namespace omnilearn::runtime {

// Z85-encoded Curve25519 keys (40 characters each).
struct CurveKeyPair {
  std::string public_key;
  std::string secret_key;
};

struct ClusterCredentials {
  CurveKeyPair server;  // every listening socket in the cluster serves with this pair
  CurveKeyPair client;  // every connecting socket authenticates with this pair
};

// True if this libzmq was built with CURVE (Debian's is, through libsodium).
bool curve_available();

// A fresh random key pair. Throws std::runtime_error if CURVE is unavailable.
CurveKeyPair generate_curve_key_pair();

// Fresh server and client pairs for a new cluster.
ClusterCredentials generate_cluster_credentials();

// Throws std::invalid_argument naming `what` unless `key` is 40 valid Z85 characters.
void check_curve_key(const std::string& key, const std::string& what);

// Throws std::invalid_argument unless the secret keys match their public keys and all four keys
// are well formed: catches a hand-edited or truncated cluster file before any socket uses it.
void check_cluster_credentials(const ClusterCredentials& credentials);

}  // namespace omnilearn::runtime
