#include "runtime/security.hpp"

#include <array>
#include <cstdint>
#include <stdexcept>

#include <zmq.h>

namespace omnilearn::runtime {

bool curve_available() { return zmq_has("curve") != 0; }

CurveKeyPair generate_curve_key_pair() {
  if (!curve_available()) {
    throw std::runtime_error(
        "this libzmq was built without CURVE security; install Debian's libzmq5 (built with "
        "libsodium) or run with --insecure for a local experiment");
  }
  std::array<char, 41> public_key{};
  std::array<char, 41> secret_key{};
  if (zmq_curve_keypair(public_key.data(), secret_key.data()) != 0) {
    throw std::runtime_error(std::string("cannot generate CURVE keys: ") +
                             zmq_strerror(zmq_errno()));
  }
  return {public_key.data(), secret_key.data()};
}

ClusterCredentials generate_cluster_credentials() {
  return {generate_curve_key_pair(), generate_curve_key_pair()};
}

void check_curve_key(const std::string& key, const std::string& what) {
  std::array<std::uint8_t, 32> decoded{};
  if (key.size() != 40 || zmq_z85_decode(decoded.data(), key.c_str()) == nullptr) {
    throw std::invalid_argument(what + " is not a CURVE key (expected 40 Z85 characters)");
  }
}

namespace {

void check_pair(const CurveKeyPair& pair, const std::string& what) {
  check_curve_key(pair.public_key, what + " public key");
  check_curve_key(pair.secret_key, what + " secret key");
  std::array<char, 41> derived{};
  if (zmq_curve_public(derived.data(), pair.secret_key.c_str()) != 0 ||
      pair.public_key != derived.data()) {
    throw std::invalid_argument(what + " public key does not belong to its secret key");
  }
}

}  // namespace

void check_cluster_credentials(const ClusterCredentials& credentials) {
  check_pair(credentials.server, "server");
  check_pair(credentials.client, "client");
}

}  // namespace omnilearn::runtime
