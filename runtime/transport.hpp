#pragma once
// The process's network edge: one ROUTER that peers connect to, one DEALER per peer this process
// connects to, and a single I/O thread that owns all of them (ZeroMQ sockets are not
// thread-safe). Other threads hand messages over through a locked queue plus an eventfd wake-up.

#include <atomic>
#include <chrono>
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
  // Sends that waited outbox_wait for room in a full outbox and were then refused (the sender's
  // ask fails with the reason; a tell is counted and logged here).
  std::atomic<std::uint64_t> dropped_outbox_full{0};
  std::atomic<std::uint64_t> outbox_waits{0};  // sends that had to wait for room (backpressure)
  // Bundles (several envelopes in one ZeroMQ message, runtime/codec.hpp) sent and received;
  // messages_in/out count the envelopes inside them.
  std::atomic<std::uint64_t> bundles_out{0};
  std::atomic<std::uint64_t> bundles_in{0};
  // Connections the ZAP handler refused: the peer spoke CURVE but without the cluster's key.
  std::atomic<std::uint64_t> refused_peers{0};
  // Inbound connections whose handshake failed before any message: garbage bytes, a plain-text
  // peer at a CURVE socket (or the reverse), a peer with the wrong server key.
  std::atomic<std::uint64_t> failed_handshakes{0};
  // Our own outbound handshakes that failed: the peer refused our credentials or speaks another
  // security mechanism. Clients use it to say "wrong cluster file" rather than "no reply".
  std::atomic<std::uint64_t> failed_handshakes_out{0};
  // Times an actor's turn on the I/O thread ran past TransportOptions::inline_takeover (or began
  // a blocking wait) and a standby thread took the sockets over.
  std::atomic<std::uint64_t> io_takeovers{0};
  // Messages the send fence held back (Transport::set_send_fence): this process had lost the
  // right to speak when they were about to leave.
  std::atomic<std::uint64_t> dropped_fenced{0};
};

struct TransportOptions {
  std::string system_id;
  CodecLimits limits;
  int send_high_water_mark = 10000;  // messages queued per peer before sends are dropped
  // Messages handed to the I/O thread and not yet taken by it. A sender on any other thread
  // waits (up to outbox_wait) while the outbox is full, so a producer faster than the network
  // slows down instead of growing this process's memory; the I/O thread itself never waits.
  std::size_t max_outbox = 65536;
  std::chrono::milliseconds outbox_wait{5000};
  // Peers remembered by system id (to reply to them); when full, the least recently used
  // eighth is forgotten.
  int max_learned_routes = 65536;
  // Set: every socket speaks CURVE with these keys and the ROUTER admits only the cluster's
  // client key. Unset: plain TCP (`--insecure`), for local experiments only.
  std::optional<ClusterCredentials> credentials;
  // How long actor code may run on the I/O thread (run_inline) before a standby thread takes
  // the sockets over. Messages meanwhile wait at most this long to be read.
  std::chrono::milliseconds inline_takeover{2};
};

class Transport {
 public:
  // Called on the I/O thread for every decoded inbound envelope; must not block.
  using InboundHandler = std::function<void(Envelope&&)>;
  // Called on the I/O thread when a message cannot be routed or sent, or on the sender's thread
  // when the outbox stayed full (max_outbox); must be thread-safe and must not block.
  using UndeliverableHandler = std::function<void(const Envelope&, const std::string& why)>;
  // Called on the I/O thread after each round of reads, with everything read handed to
  // on_inbound: where the owner runs the work those messages made ready (run_inline).
  using BurstHandler = std::function<void()>;

  // The I/O thread is a role, not a thread: one thread at a time holds the sockets (the
  // leader); a standby watches while the leader runs actor code (run_inline) and takes the role
  // over if that code runs past options.inline_takeover, so slow or blocking code never stops
  // the reading for longer than that.
  Transport(TransportOptions options, InboundHandler on_inbound,
            UndeliverableHandler on_undeliverable, BurstHandler on_burst_end = {});
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // Binds the ROUTER (any thread, before or after start). "tcp://127.0.0.1:0" picks a free port;
  // returns the endpoint actually bound. Throws std::runtime_error if the address is unusable.
  std::string bind(const std::string& endpoint);

  // True on the thread holding the I/O role of any Transport.
  static bool on_io_thread();
  // True on the thread holding this transport's I/O role.
  bool holds_io_role() const;

  // From the burst handler: runs `work` on the I/O thread, watched by the standby. True when
  // this thread still holds the role afterwards; false when it was taken over meanwhile (the
  // caller must hand any further work to other threads). Off the I/O thread: runs it, false.
  bool run_inline(const std::function<void()>& work);

  // On the I/O thread, inside run_inline: a wait is coming (ActorScheduler::BlockingScope), so
  // the standby takes the role over now. Anywhere else: nothing.
  static void yield_io_role();

  // Asked on the I/O thread right before messages leave for the network: a reason means this
  // process may no longer speak (a head whose lease ran out: another may lead by now), and
  // the messages are dropped (stats().dropped_fenced, the undeliverable handler told why). The
  // last check before the socket, so that a process frozen past its right and then thawed
  // sends nothing, whichever of its threads runs first. Must be cheap and must not block. Any
  // thread; an empty function removes the fence.
  using SendFence = std::function<std::optional<std::string>()>;
  void set_send_fence(SendFence fence);

  // Queues a message (any thread; blocks while the outbox is full, see max_outbox). Routing: to.system that is an endpoint ("tcp://...") goes
  // through a DEALER connected on first use; any other system id goes to the peer that
  // last spoke with that id.
  void send(Envelope envelope);

  // Stops the I/O threads and closes all sockets (any thread). Idempotent.
  void stop();

  const TransportStats& stats() const;
  // Counts a message whose payload its handler could not decode with the malformed frames the
  // transport drops (stats().dropped_malformed): one counter for every malformed message. Any
  // thread.
  void count_malformed_payload();
  const std::string& system_id() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace omnilearn::runtime
