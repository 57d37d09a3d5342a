#pragma once
// The process's network edge: one ROUTER that peers connect to, one DEALER per peer this process
// connects to, and a single I/O thread that owns all of them (ZeroMQ sockets are not
// thread-safe). Other threads hand messages over through a locked queue plus an eventfd wake-up.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "runtime/codec.hpp"
#include "runtime/envelope.hpp"
#include "runtime/security.hpp"

namespace omnilearn::runtime {

// Counters of what the transport saw; read from any thread.
struct TransportStats {
  std::atomic<std::uint64_t> messages_in{0};
  std::atomic<std::uint64_t> messages_out{0};
  std::atomic<std::uint64_t> dropped_malformed{0};
  std::atomic<std::uint64_t> dropped_oversized{0};
  std::atomic<std::uint64_t> dropped_unknown_kind{0};
  std::atomic<std::uint64_t> dropped_bad_version{0};
  std::atomic<std::uint64_t> dropped_unroutable{0};   // no route to the destination system
  std::atomic<std::uint64_t> dropped_send_full{0};    // peer queue full or peer gone
  // Connections the ZAP handler refused: the peer spoke CURVE but without the cluster's key.
  std::atomic<std::uint64_t> refused_peers{0};
  // Inbound connections whose handshake failed before any message: garbage bytes, a plain-text
  // peer at a CURVE socket (or the reverse), a peer with the wrong server key.
  std::atomic<std::uint64_t> failed_handshakes{0};
  // Our own outbound handshakes that failed: the peer refused our credentials or speaks another
  // security mechanism. Clients use it to say "wrong cluster file" rather than "no reply".
  std::atomic<std::uint64_t> failed_handshakes_out{0};
};

struct TransportOptions {
  std::string system_id;
  CodecLimits limits;
  int send_high_water_mark = 10000;  // messages queued per peer before sends are dropped
  // Peers remembered by system id (to reply to them); when full, the least recently used
  // eighth is forgotten.
  int max_learned_routes = 65536;
  // Set: every socket speaks CURVE with these keys and the ROUTER admits only the cluster's
  // client key. Unset: plain TCP (`--insecure`), for local experiments only.
  std::optional<ClusterCredentials> credentials;
};

class Transport {
 public:
  // Called on the I/O thread for every decoded inbound envelope; must not block.
  using InboundHandler = std::function<void(Envelope&&)>;
  // Called on the I/O thread when a message cannot be routed or sent.
  using UndeliverableHandler = std::function<void(const Envelope&, const std::string& why)>;

  Transport(TransportOptions options, InboundHandler on_inbound,
            UndeliverableHandler on_undeliverable);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // Binds the ROUTER (any thread, before or after start). "tcp://127.0.0.1:0" picks a free port;
  // returns the endpoint actually bound. Throws std::runtime_error if the address is unusable.
  std::string bind(const std::string& endpoint);

  // Queues a message (any thread). Routing: to.system that is an endpoint ("tcp://...") goes
  // through a DEALER connected on first use; any other system id goes to the peer that
  // last spoke with that id.
  void send(Envelope envelope);

  // Stops the I/O thread and closes all sockets (any thread but the I/O thread). Idempotent.
  void stop();

  const TransportStats& stats() const;
  const std::string& system_id() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace omnilearn::runtime
