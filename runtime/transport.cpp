#include "runtime/transport.hpp"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <array>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <zmq.hpp>

namespace omnilearn::runtime {
namespace {

bool is_endpoint(const std::string& system) {
  return system.rfind("tcp://", 0) == 0 || system.rfind("ipc://", 0) == 0 ||
         system.rfind("inproc://", 0) == 0;
}

// Logs the first occurrence of each kind of drop, then only counts: a peer sending garbage must
// not be able to flood the log.
void log_drop_once(std::atomic<std::uint64_t>& counter, std::string_view what) {
  if (counter.fetch_add(1) == 0) {
    spdlog::warn("transport: dropped a {} message (further drops are counted, not logged)", what);
  }
}

// Logs at the 1st, 2nd, 4th, 8th... occurrence: a peer retrying a refused connection every
// second stays visible in the log without flooding it.
bool log_this_occurrence(std::uint64_t count) { return (count & (count - 1)) == 0; }

// The handshake failures a socket monitor reports; everything else it could report is noise here.
constexpr int kHandshakeEvents = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;

std::string describe_handshake_failure(std::uint16_t event, std::uint32_t value) {
  switch (event) {
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
      return fmt::format("authentication refused (status {}): the peer does not accept this "
                         "cluster file's credentials",
                         value);
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
      return fmt::format("protocol error 0x{:x} during the handshake: not an OmniLearn peer, "
                         "garbage bytes, or one side runs --insecure and the other with a "
                         "cluster file, or the keys belong to another cluster",
                         value);
    default:
      return fmt::format("handshake failed ({})", zmq_strerror(static_cast<int>(value)));
  }
}


std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The well-known endpoint libzmq sends ZAP requests to, one handler per context (RFC 27).
constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";
constexpr const char* kZapDomain = "omnilearn";

}  // namespace

struct Transport::Impl {
  // The transport whose I/O role this thread holds (nullptr: none), and the role's epoch when it
  // took it (each takeover bumps the epoch).
  static inline thread_local Impl* t_io_leader = nullptr;
  static inline thread_local std::uint64_t t_io_epoch = 0;

  TransportOptions options;
  InboundHandler on_inbound;
  UndeliverableHandler on_undeliverable;
  TransportStats stats;

  zmq::context_t context{1};
  int wake_fd = -1;

  // The send fence (set_send_fence), read by the I/O thread before each delivery.
  std::mutex fence_mutex;
  std::shared_ptr<const Transport::SendFence> send_fence;

  // Guarded by mutex: work handed to the I/O thread.
  std::mutex mutex;
  // A vector swapped with the I/O thread's and cleared there, so both keep their capacity: no
  // allocation per message once the traffic has warmed them up.
  std::vector<Envelope> outbox;
  std::condition_variable outbox_space;  // signalled when the I/O thread takes the outbox
  std::deque<std::function<void()>> commands;
  bool stopping = false;

  // Owned by the I/O thread only.
  std::unique_ptr<zmq::socket_t> router;
  struct Dealer {
    // Declared first so it is destroyed last: a monitor outliving its socket only sees "stopped".
    std::unique_ptr<zmq::socket_t> monitor;  // PAIR receiving the socket's handshake failures
    std::unique_ptr<zmq::socket_t> socket;
  };
  std::unordered_map<std::string, Dealer> dealers;  // by endpoint; never erased while running
  // PAIR socket receiving the ROUTER's handshake failures (each Dealer holds its own).
  std::unique_ptr<zmq::socket_t> router_monitor;
  int monitors_made = 0;
  // CURVE only: the ZAP handler and the one client key it admits (decoded from Z85).
  std::unique_ptr<zmq::socket_t> zap;
  std::array<std::uint8_t, 32> cluster_client_key{};
  struct Route {
    std::string dealer_endpoint;  // non-empty: reply through our DEALER to that endpoint
    std::string router_identity;  // otherwise: through the ROUTER to this identity
    std::uint64_t last_used = 0;  // route_clock when last heard from or sent to
  };
  std::unordered_map<std::string, Route> routes;  // by system id
  std::uint64_t route_clock = 0;

  // The I/O role (leader/follower). Exactly one thread at a time, the leader, reads and writes
  // the sockets, and it runs actor turns itself between two reads (run_inline), so that a
  // message and its reply need no hand-off between threads. While it runs actor code a standby
  // thread watches the clock: code that runs past options.inline_takeover (or enters a blocking
  // wait) loses the role, the standby becomes the leader and reads on, and the old leader, once
  // its code returns, becomes the standby (or ends, when there is one already).
  //
  // Who holds the role is decided by one atomic, inline_since: the leader writes a fresh ticket
  // (a nanosecond time, strictly increasing over the transport's life) when it begins inline
  // work and takes it back with a compare-exchange when the work returns; a standby takes the
  // role by a compare-exchange from that ticket to kTaken. Exactly one of the two succeeds, so
  // the sockets never have two users, and a leader whose ticket is gone knows it lost the role.
  static constexpr std::int64_t kTaken = -1;
  std::atomic<std::int64_t> inline_since{0};  // 0: no inline work; kTaken: just taken over
  std::int64_t last_ticket = 0;               // the leader's (passed on at each takeover)
  std::atomic<std::uint64_t> inline_runs{0};  // inline works begun: the standby's sign of traffic
  std::atomic<bool> standby_parked{false};    // the standby sleeps until inline work begins
  std::condition_variable standby_wake;
  std::uint64_t role_epoch = 0;  // guarded by mutex; bumped by each takeover
  bool handed_over = false;      // guarded by mutex: the leader yielded the role (yield_role)
  std::size_t standbys = 0;      // guarded by mutex
  struct IoThread {
    std::thread thread;
    std::shared_ptr<bool> done;  // set under mutex when the thread has ended: joinable at once
  };
  std::vector<IoThread> io_threads;  // guarded by mutex
  std::function<void()> on_burst_end;

  // Starts an I/O-capable thread: the leader (at construction) or a standby. Caller holds mutex.
  void start_io_thread_locked(bool leader) {
    std::erase_if(io_threads, [](IoThread& t) {
      if (!*t.done) return false;
      t.thread.join();
      return true;
    });
    auto done = std::make_shared<bool>(false);
    if (!leader) ++standbys;
    io_threads.push_back(IoThread{std::thread([this, leader, done] {
                                    ::pthread_setname_np(::pthread_self(), "ol-io");
                                    io_main(leader);
                                    std::lock_guard lock(mutex);
                                    *done = true;
                                  }),
                                  done});
  }

  void io_main(bool leader) {
    if (leader) {
      std::lock_guard lock(mutex);
      t_io_epoch = role_epoch;
    }
    while (true) {
      if (!leader && !wait_for_takeover()) return;
      t_io_leader = this;
      if (run()) return;  // stopped: run() closed the sockets
      // The role was taken over while this thread ran an actor's turn: stand by instead.
      leader = false;
      std::lock_guard lock(mutex);
      ++standbys;
    }
  }

  // The standby becomes the leader. Caller holds mutex.
  void become_leader_locked() {
    ++role_epoch;
    t_io_epoch = role_epoch;
    --standbys;
    handed_over = false;
    stats.io_takeovers.fetch_add(1, std::memory_order_relaxed);
    // Someone must watch the new leader in turn; the old one joins in once it is free.
    if (standbys == 0) start_io_thread_locked(false);
  }

  // A standby's life: sleep while no actor code runs on the leader, watch the clock while some
  // does, take the role if it runs too long. True: this thread is now the leader. False: it is
  // not needed (stopping, or another standby is there) and ends.
  bool wait_for_takeover() {
    const std::int64_t limit =
        std::chrono::duration_cast<std::chrono::nanoseconds>(options.inline_takeover).count();
    std::unique_lock lock(mutex);
    std::uint64_t runs_seen = inline_runs.load();
    while (true) {
      if (stopping || standbys > 1) {
        --standbys;
        return false;
      }
      if (handed_over) {
        become_leader_locked();
        return true;
      }
      std::int64_t ticket = inline_since.load();
      if (ticket > 0) {
        const std::int64_t busy = steady_ns() - ticket;
        if (busy >= limit) {
          if (inline_since.compare_exchange_strong(ticket, kTaken)) {
            become_leader_locked();
            return true;
          }
          continue;  // the work ended (or new work began) just now: look again
        }
        standby_wake.wait_for(lock, std::chrono::nanoseconds(limit - busy));
        continue;
      }
      // Nothing runs inline now. While turns keep coming, look again after a limit's time
      // (no wake-up on the leader's path); after a quiet spell, sleep until the leader calls.
      const std::uint64_t runs = inline_runs.load();
      if (runs != runs_seen) {
        runs_seen = runs;
        standby_wake.wait_for(lock, options.inline_takeover);
        continue;
      }
      standby_parked.store(true);
      if (inline_since.load() <= 0 && !stopping && !handed_over && standbys <= 1) {
        standby_wake.wait(lock);
      }
      standby_parked.store(false);
      runs_seen = inline_runs.load();
    }
  }

  // The leader only: runs `work` (actor code), watched by the standby. False when the role was
  // taken over meanwhile: this thread must not touch the sockets again.
  bool run_inline(const std::function<void()>& work) {
    const std::int64_t ticket = std::max(steady_ns(), last_ticket + 1);
    last_ticket = ticket;
    inline_since.store(ticket);
    inline_runs.fetch_add(1, std::memory_order_relaxed);
    if (standby_parked.load()) {
      std::lock_guard lock(mutex);  // the standby is between its check and its wait, or waiting
      standby_wake.notify_one();
    }
    try {
      work();
    } catch (const std::exception& e) {
      spdlog::error("transport: inline work threw: {}", e.what());
    }
    std::int64_t mine = ticket;
    if (inline_since.compare_exchange_strong(mine, 0)) return true;
    t_io_leader = nullptr;  // taken over: from here on an ordinary thread
    return false;
  }

  // The leader only, inside run_inline: a wait is coming (a BlockingScope), so the standby
  // takes the role now rather than after the takeover limit.
  void yield_role() {
    std::int64_t ticket = inline_since.load();
    if (ticket <= 0 || !inline_since.compare_exchange_strong(ticket, kTaken)) return;
    std::lock_guard lock(mutex);
    handed_over = true;
    standby_wake.notify_all();
  }

  void wake() {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd, &one, sizeof one);
  }

  zmq::socket_t& dealer_for(const std::string& endpoint) {
    auto it = dealers.find(endpoint);
    if (it != dealers.end()) return *it->second.socket;
    auto socket = std::make_unique<zmq::socket_t>(context, zmq::socket_type::dealer);
    socket->set(zmq::sockopt::routing_id, options.system_id);
    socket->set(zmq::sockopt::linger, 0);
    socket->set(zmq::sockopt::sndhwm, options.send_high_water_mark);
    socket->set(zmq::sockopt::reconnect_ivl, 100);
    socket->set(zmq::sockopt::reconnect_ivl_max, 1000);
    socket->set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(options.limits.max_message_bytes));
    if (options.credentials) {
      socket->set(zmq::sockopt::curve_serverkey, options.credentials->server.public_key);
      socket->set(zmq::sockopt::curve_publickey, options.credentials->client.public_key);
      socket->set(zmq::sockopt::curve_secretkey, options.credentials->client.secret_key);
    }
    Dealer dealer{monitor(*socket), std::move(socket)};
    dealer.socket->connect(endpoint);
    return *dealers.emplace(endpoint, std::move(dealer)).first->second.socket;
  }

  // A PAIR socket that receives `socket`'s handshake failures.
  std::unique_ptr<zmq::socket_t> monitor(zmq::socket_t& socket) {
    auto endpoint = fmt::format("inproc://omnilearn.monitor.{}", monitors_made++);
    if (zmq_socket_monitor(socket.handle(), endpoint.c_str(), kHandshakeEvents) != 0) {
      throw zmq::error_t();
    }
    auto events = std::make_unique<zmq::socket_t>(context, zmq::socket_type::pair);
    events->set(zmq::sockopt::linger, 0);
    events->connect(endpoint);
    return events;
  }

  void drain_monitor(zmq::socket_t& events, const std::string* dealer_endpoint) {
    for (int i = 0; i < 64; ++i) {
      zmq::message_t event;
      zmq::message_t address;
      try {
        if (!events.recv(event, zmq::recv_flags::dontwait)) return;
        if (event.more() && !events.recv(address, zmq::recv_flags::none)) return;
      } catch (const zmq::error_t&) {
        return;
      }
      if (event.size() < 6) continue;
      std::uint16_t id = 0;
      std::uint32_t value = 0;
      std::memcpy(&id, event.data(), sizeof id);
      std::memcpy(&value, static_cast<const char*>(event.data()) + 2, sizeof value);
      if (dealer_endpoint) {
        auto n = stats.failed_handshakes_out.fetch_add(1) + 1;
        if (log_this_occurrence(n)) {
          spdlog::error("transport: cannot talk to {}: {} ({} failed handshake(s) so far)",
                        *dealer_endpoint, describe_handshake_failure(id, value), n);
        }
      } else if (id != ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {  // ZAP refusals are counted by answer_zap
        auto n = stats.failed_handshakes.fetch_add(1) + 1;
        if (log_this_occurrence(n)) {
          spdlog::warn("transport: refused a connection on {}: {} ({} so far)",
                       address.to_string(), describe_handshake_failure(id, value), n);
        }
      }
    }
  }

  // Answers libzmq's ZAP requests (RFC 27): admit a CURVE peer only if it holds the cluster's
  // client key. Runs before the peer can send a single message, so nothing it sends is decoded.
  void answer_zap() {
    for (int i = 0; i < 64; ++i) {
      std::vector<zmq::message_t> request;
      try {
        zmq::message_t part;
        if (!zap->recv(part, zmq::recv_flags::dontwait)) return;
        request.push_back(std::move(part));
        while (request.back().more()) {
          zmq::message_t next;
          if (!zap->recv(next, zmq::recv_flags::none)) break;
          request.push_back(std::move(next));
        }
      } catch (const zmq::error_t&) {
        return;
      }
      // [version, request id, domain, address, identity, mechanism, client key]
      bool admitted = request.size() >= 7 && request[0].to_string_view() == "1.0" &&
                      request[5].to_string_view() == "CURVE" &&
                      request[6].size() == cluster_client_key.size() &&
                      std::memcmp(request[6].data(), cluster_client_key.data(),
                                  cluster_client_key.size()) == 0;
      if (!admitted) {
        auto n = stats.refused_peers.fetch_add(1) + 1;
        if (log_this_occurrence(n)) {
          spdlog::warn("transport: refused peer {}: it does not hold this cluster's credentials "
                       "({} refused so far)",
                       request.size() > 3 ? request[3].to_string() : std::string("?"), n);
        }
      }
      std::string request_id = request.size() > 1 ? request[1].to_string() : std::string();
      std::array<std::string, 6> reply = {"1.0", request_id, admitted ? "200" : "400",
                                          admitted ? "OK" : "not a member of this cluster",
                                          "", ""};
      try {
        for (size_t k = 0; k < reply.size(); ++k) {
          zap->send(zmq::buffer(reply[k]),
                    k + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
        }
      } catch (const zmq::error_t& e) {
        spdlog::error("transport: cannot answer an authentication request: {}", e.what());
      }
    }
  }

  // Binds the ZAP handler; must exist before the ROUTER accepts its first CURVE connection.
  void start_zap() {
    std::array<std::uint8_t, 32> key{};
    if (zmq_z85_decode(key.data(), options.credentials->client.public_key.c_str()) == nullptr) {
      throw std::runtime_error("transport: the cluster's client key is not valid Z85");
    }
    cluster_client_key = key;
    zap = std::make_unique<zmq::socket_t>(context, zmq::socket_type::rep);
    zap->set(zmq::sockopt::linger, 0);
    zap->bind(kZapEndpoint);
  }

  // Bounded (a flood of identities cannot grow memory), and a full table forgets the peers
  // silent longest rather than refusing newcomers: a head that lives for months meets a new
  // system id with every CLI command and every trainer process, and must still answer the next.
  void learn_route(const std::string& system, Route route) {
    if (system.empty() || is_endpoint(system)) return;
    route.last_used = ++route_clock;
    auto it = routes.find(system);
    if (it != routes.end()) {
      it->second = std::move(route);
      return;
    }
    add_route(system, std::move(route));
  }

  // learn_route for the hot path: a peer that speaks again over the same connection only
  // refreshes its entry (no strings built per message).
  void refresh_route(const std::string& system, const std::string* dealer_endpoint,
                     const std::string& identity) {
    if (system.empty() || is_endpoint(system)) return;
    auto it = routes.find(system);
    if (it != routes.end() &&
        (dealer_endpoint ? it->second.dealer_endpoint == *dealer_endpoint
                         : it->second.dealer_endpoint.empty() &&
                               it->second.router_identity == identity)) {
      it->second.last_used = ++route_clock;
      return;
    }
    learn_route(system, dealer_endpoint ? Route{*dealer_endpoint, {}} : Route{{}, identity});
  }

  void add_route(const std::string& system, Route route) {
    if (routes.size() >= static_cast<size_t>(std::max(1, options.max_learned_routes))) {
      forget_oldest_routes();
    }
    routes.emplace(system, std::move(route));
  }

  // Forgets the least recently used eighth of the routes in one pass, so that a full table
  // costs one pass per max_learned_routes / 8 new peers. A forgotten peer that speaks again is
  // learned again; only a message to it before then is unroutable.
  void forget_oldest_routes() {
    if (routes.empty()) return;
    std::vector<std::uint64_t> uses;
    uses.reserve(routes.size());
    for (const auto& [system, route] : routes) uses.push_back(route.last_used);
    const std::size_t forget = std::max<std::size_t>(1, routes.size() / 8);
    std::nth_element(uses.begin(), uses.begin() + static_cast<std::ptrdiff_t>(forget - 1),
                     uses.end());
    const std::uint64_t newest_forgotten = uses[forget - 1];
    std::erase_if(routes, [&](const auto& entry) {
      return entry.second.last_used <= newest_forgotten;
    });
  }

  // An attachment handed to ZeroMQ without a copy: the message points at the Bytes' memory and
  // holds a reference to its owner until ZeroMQ is done with it (released on ZeroMQ's thread).
  static zmq::message_t zero_copy_message(const Bytes& bytes) {
    if (bytes.empty() || !bytes.owner()) return zmq::message_t(bytes.data(), bytes.size());
    auto* keep = new std::shared_ptr<const void>(bytes.owner());
    return zmq::message_t(const_cast<char*>(bytes.data()), bytes.size(),
                          [](void*, void* hint) {
                            delete static_cast<std::shared_ptr<const void>*>(hint);
                          },
                          keep);
  }

  static bool send_frames(zmq::socket_t& socket, const std::string* identity,
                          const std::string& header, const std::vector<Bytes>& attachments) {
    try {
      if (identity) {
        if (!socket.send(zmq::buffer(*identity), zmq::send_flags::sndmore |
                                                     zmq::send_flags::dontwait)) {
          return false;
        }
      }
      auto header_flags = zmq::send_flags::dontwait;
      if (!attachments.empty()) header_flags = header_flags | zmq::send_flags::sndmore;
      if (!socket.send(zmq::buffer(header), header_flags)) return false;
      for (size_t i = 0; i < attachments.size(); ++i) {
        auto flags = zmq::send_flags::dontwait;
        if (i + 1 < attachments.size()) flags = flags | zmq::send_flags::sndmore;
        auto message = zero_copy_message(attachments[i]);
        if (!socket.send(message, flags)) return false;
      }
      return true;
    } catch (const zmq::error_t&) {
      return false;  // EHOSTUNREACH with ROUTER_MANDATORY: the peer is gone
    }
  }

  // Where an envelope goes: a socket, and for a ROUTER the peer's identity; or why nowhere.
  struct Target {
    zmq::socket_t* socket = nullptr;
    std::string identity;  // ROUTER sends only
    std::string why;       // set when there is no socket
  };

  Target resolve(const Envelope& envelope) {
    Target target;
    const std::string& system = envelope.to.system;
    if (is_endpoint(system)) {
      try {
        target.socket = &dealer_for(system);
      } catch (const zmq::error_t& e) {
        target.why = "cannot connect to " + system + ": " + e.what();
      }
      return target;
    }
    auto it = routes.find(system);
    if (it == routes.end()) {
      target.why = "no route to system " + system;
      return target;
    }
    it->second.last_used = ++route_clock;
    if (!envelope.reply_dealer.empty() && dealers.count(envelope.reply_dealer)) {
      target.socket = &dealer_for(envelope.reply_dealer);
    } else if (envelope.reply_router && router) {
      target.socket = router.get();
      target.identity = system;
    } else if (!it->second.dealer_endpoint.empty()) {
      target.socket = &dealer_for(it->second.dealer_endpoint);
    } else if (router) {
      target.socket = router.get();
      target.identity = it->second.router_identity;
    } else {
      target.why = "peer " + system + " is unreachable";
    }
    return target;
  }

  void undeliverable(const Envelope& envelope, const std::string& why, bool unroutable) {
    log_drop_once(unroutable ? stats.dropped_unroutable : stats.dropped_send_full,
                  unroutable ? "unroutable" : "undeliverable");
    if (on_undeliverable) on_undeliverable(envelope, why);
  }

  // Sends `envelopes` (all for `target`, in order). Runs of envelopes without attachments go
  // as bundles (codec.hpp): a burst of asks to one peer costs one ZeroMQ message, not one each.
  void send_to(const Target& target, const std::vector<Envelope*>& envelopes) {
    const std::string* identity = target.identity.empty() ? nullptr : &target.identity;
    auto failed = [&](const Envelope& envelope) {
      undeliverable(envelope,
                    is_endpoint(envelope.to.system)
                        ? "send queue to " + envelope.to.system + " is full"
                        : "peer " + envelope.to.system + " is unreachable",
                    false);
    };
    std::vector<const Envelope*> run;
    std::size_t run_bytes = 0;
    auto flush = [&] {
      if (run.empty()) return;
      bool sent;
      if (run.size() == 1) {
        sent = send_frames(*target.socket, identity, encode_header(*run[0]), {});
      } else {
        sent = send_frames(*target.socket, identity, encode_bundle(run), {});
        if (sent) stats.bundles_out.fetch_add(1, std::memory_order_relaxed);
      }
      if (sent) {
        stats.messages_out.fetch_add(run.size(), std::memory_order_relaxed);
      } else {
        for (const auto* envelope : run) failed(*envelope);
      }
      run.clear();
      run_bytes = 0;
    };
    for (Envelope* envelope : envelopes) {
      if (!envelope->attachments.empty()) {
        flush();
        if (send_frames(*target.socket, identity, encode_header(*envelope),
                        envelope->attachments)) {
          stats.messages_out.fetch_add(1, std::memory_order_relaxed);
        } else {
          failed(*envelope);
        }
        continue;
      }
      run.push_back(envelope);
      run_bytes += 64 + envelope->payload.size();
      if (run.size() >= kMaxBundleEnvelopes || run_bytes >= kMaxBundleBytes) flush();
    }
    flush();
  }

  // Everything the I/O thread took from the outbox in one go, grouped by where it goes (order
  // kept per destination, which is all ZeroMQ keeps anyway).
  void deliver_all(std::vector<Envelope>& out) {
    if (out.empty()) return;
    std::shared_ptr<const SendFence> fence;
    {
      std::lock_guard lock(fence_mutex);
      fence = send_fence;
    }
    if (fence) {
      if (const std::optional<std::string> why = (*fence)()) {
        if (stats.dropped_fenced.fetch_add(out.size()) == 0) {
          spdlog::warn("transport: sending nothing more: {}", *why);
        }
        if (on_undeliverable) {
          for (const auto& envelope : out) on_undeliverable(envelope, "fenced: " + *why);
        }
        return;
      }
    }
    std::vector<std::pair<Target, std::vector<Envelope*>>> groups;
    for (auto& envelope : out) {
      Target target = resolve(envelope);
      if (!target.socket) {
        undeliverable(envelope, target.why, target.why.rfind("no route", 0) == 0);
        continue;
      }
      auto group = std::find_if(groups.begin(), groups.end(), [&](const auto& g) {
        return g.first.socket == target.socket && g.first.identity == target.identity;
      });
      if (group == groups.end()) {
        groups.emplace_back(std::move(target), std::vector<Envelope*>{});
        group = std::prev(groups.end());
      }
      group->second.push_back(&envelope);
    }
    for (const auto& [target, envelopes] : groups) send_to(target, envelopes);
  }

  void handle_inbound(std::vector<zmq::message_t>& parts, const std::string* dealer_endpoint) {
    std::string identity;
    size_t first = 0;
    if (!dealer_endpoint) {  // ROUTER: first frame is the peer identity
      if (parts.empty()) return;
      identity = parts[0].to_string();
      first = 1;
      // A routing id is only ever a system id. One shaped like an endpoint ("tcp://...") would
      // make a reply to this peer dial that address from here: never accept it.
      if (is_endpoint(identity)) {
        log_drop_once(stats.dropped_malformed, "endpoint-shaped routing id");
        return;
      }
    }
    if (parts.size() > first + 1 + options.limits.max_attachments) {
      log_drop_once(stats.dropped_malformed, "malformed");  // too many frames: not kept at all
      return;
    }
    std::vector<std::string_view> frames;
    frames.reserve(parts.size() - first);
    frames.push_back(first < parts.size() ? parts[first].to_string_view() : std::string_view());
    // Attachment frames are kept, not copied: each becomes the owner of its Bytes. (Moved into
    // its holder before its data is read: a small message keeps its bytes inline, so moving it
    // moves them.)
    std::vector<Bytes> attachment_frames;
    if (parts.size() > first + 1) attachment_frames.reserve(parts.size() - first - 1);
    for (size_t i = first + 1; i < parts.size(); ++i) {
      auto holder = std::make_shared<zmq::message_t>(std::move(parts[i]));
      frames.push_back(holder->to_string_view());
      attachment_frames.push_back(Bytes::view(holder, holder->data<char>(), holder->size()));
    }
    if (first >= parts.size()) frames.clear();
    if (frames.size() == 1 && is_bundle(frames[0])) {
      auto headers = split_bundle(frames[0]);
      if (std::holds_alternative<DecodeError>(headers)) {
        log_drop_once(stats.dropped_malformed, "malformed bundle");
        return;
      }
      stats.bundles_in.fetch_add(1, std::memory_order_relaxed);
      for (auto header : std::get<std::vector<std::string_view>>(headers)) {
        accept(decode_envelope({header}, options.limits), identity, dealer_endpoint);
      }
      return;
    }
    accept(decode_envelope(frames, options.limits, &attachment_frames), identity,
           dealer_endpoint);
  }

  // One decoded inbound envelope (or why it could not be decoded): count, learn the route,
  // hand it on.
  void accept(std::variant<Envelope, DecodeError> decoded, const std::string& identity,
              const std::string* dealer_endpoint) {
    if (auto* error = std::get_if<DecodeError>(&decoded)) {
      switch (*error) {
        case DecodeError::kOversized: log_drop_once(stats.dropped_oversized, "oversized"); break;
        case DecodeError::kUnknownKind:
          log_drop_once(stats.dropped_unknown_kind, "unknown-kind");
          break;
        case DecodeError::kBadVersion:
          log_drop_once(stats.dropped_bad_version, "bad-version");
          break;
        default: log_drop_once(stats.dropped_malformed, "malformed"); break;
      }
      return;
    }
    auto& envelope = std::get<Envelope>(decoded);
    if (dealer_endpoint) {
      if (is_endpoint(envelope.from.system)) {
        // A reply to it would make us dial wherever it says: refuse the message.
        log_drop_once(stats.dropped_malformed, "endpoint-shaped sender id");
        return;
      }
      envelope.arrived_via = *dealer_endpoint;
      refresh_route(envelope.from.system, dealer_endpoint, identity);
    } else {
      // The identity is what we can reply to; a peer cannot claim another peer's route
      // because the route is keyed by the identity ZeroMQ saw, not by what the payload says.
      envelope.from.system = identity;
      refresh_route(identity, nullptr, identity);
    }
    envelope.to.system = options.system_id;
    envelope.from_network = true;
    stats.messages_in.fetch_add(1, std::memory_order_relaxed);
    on_inbound(std::move(envelope));
  }

  void drain(zmq::socket_t& socket, const std::string* dealer_endpoint) {
    // Bounded per wake-up so one chatty peer cannot starve the others or the outbox.
    for (int i = 0; i < 256; ++i) {
      std::vector<zmq::message_t> parts;
      zmq::message_t part;
      try {
        if (!socket.recv(part, zmq::recv_flags::dontwait)) return;
        parts.push_back(std::move(part));
        while (parts.back().more()) {
          zmq::message_t next;
          if (!socket.recv(next, zmq::recv_flags::none)) break;
          parts.push_back(std::move(next));
        }
      } catch (const zmq::error_t&) {
        return;
      }
      handle_inbound(parts, dealer_endpoint);
      // The turns this message (a bundle: up to thousands of envelopes) made ready run now,
      // before the next is read, so no more than one message's worth waits in the mailboxes
      // (the in-flight limit counts them) while the I/O thread reads on.
      if (on_burst_end) {
        on_burst_end();
        if (t_io_leader != this) return;  // taken over: the sockets are the new leader's
      }
    }
  }

  enum class Polled { kWake, kRouter, kDealer, kRouterMonitor, kDealerMonitor, kZap };

  // The leader's loop. True when the transport stopped (the sockets are closed); false when the
  // role was taken over during an actor's turn (the sockets are the new leader's).
  bool run() {
    std::vector<zmq::pollitem_t> items;
    // Parallel to items: what each one is, and for a DEALER or its monitor, its map entry (whose
    // address is stable: unordered_map nodes do not move, and dealers are never erased here).
    std::vector<std::pair<Polled, std::pair<const std::string, Dealer>*>> polled;
    std::vector<Envelope> out;
    while (true) {
      out.clear();
      std::deque<std::function<void()>> todo;
      {
        std::lock_guard lock(mutex);
        out.swap(outbox);
        todo.swap(commands);
        if (stopping && out.empty() && todo.empty()) break;
      }
      if (!out.empty()) outbox_space.notify_all();
      for (auto& command : todo) command();
      if (!out.empty()) deliver_all(out);
      // Everything read is in the mailboxes: the turns claimed meanwhile run here, before the
      // next sleep (also the first thing a leader does after a takeover: what the old one had
      // claimed and not run yet).
      if (on_burst_end) on_burst_end();
      if (t_io_leader != this) return false;
      {
        std::lock_guard lock(mutex);
        // Leave only with nothing queued: a command posted before stop() must still run.
        if (stopping && outbox.empty() && commands.empty()) break;
        // What this thread queued itself (a command's or a turn's sends) wrote no wake-up: take
        // it before sleeping.
        if (!outbox.empty()) continue;
      }

      items.clear();
      polled.clear();
      auto add = [&](zmq::socket_t* socket, Polled what,
                     std::pair<const std::string, Dealer>* dealer = nullptr) {
        items.push_back({socket ? socket->handle() : nullptr, socket ? 0 : wake_fd, ZMQ_POLLIN, 0});
        polled.emplace_back(what, dealer);
      };
      add(nullptr, Polled::kWake);
      if (router) add(router.get(), Polled::kRouter);
      if (router_monitor) add(router_monitor.get(), Polled::kRouterMonitor);
      if (zap) add(zap.get(), Polled::kZap);
      for (auto& entry : dealers) {
        add(entry.second.socket.get(), Polled::kDealer, &entry);
        add(entry.second.monitor.get(), Polled::kDealerMonitor, &entry);
      }
      try {
        zmq::poll(items.data(), items.size(), std::chrono::milliseconds(-1));
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) continue;
        spdlog::error("transport: poll failed: {}", e.what());
        continue;
      }
      if (items[0].revents & ZMQ_POLLIN) {
        std::uint64_t value;
        [[maybe_unused]] auto n = ::read(wake_fd, &value, sizeof value);
      }
      for (size_t i = 1; i < items.size(); ++i) {
        if (!(items[i].revents & ZMQ_POLLIN)) continue;
        auto [what, dealer] = polled[i];
        switch (what) {
          case Polled::kRouter: drain(*router, nullptr); break;
          case Polled::kRouterMonitor: drain_monitor(*router_monitor, nullptr); break;
          case Polled::kZap: answer_zap(); break;
          case Polled::kDealer: drain(*dealer->second.socket, &dealer->first); break;
          case Polled::kDealerMonitor: drain_monitor(*dealer->second.monitor, &dealer->first); break;
          case Polled::kWake: break;
        }
        if (t_io_leader != this) return false;
      }
    }
    // Sockets first, then what watches them: a monitor outliving its socket only sees "stopped".
    router.reset();
    router_monitor.reset();
    dealers.clear();
    zap.reset();
    return true;
  }

  // False once stop() has begun: the I/O thread may already be gone, and a command queued now
  // would never run (and whoever waits on it would wait forever).
  bool post(std::function<void()> command) {
    {
      std::lock_guard lock(mutex);
      if (stopping) return false;
      commands.push_back(std::move(command));
    }
    wake();
    return true;
  }
};

Transport::Transport(TransportOptions options, InboundHandler on_inbound,
                     UndeliverableHandler on_undeliverable, BurstHandler on_burst_end)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->on_inbound = std::move(on_inbound);
  impl_->on_undeliverable = std::move(on_undeliverable);
  impl_->on_burst_end = std::move(on_burst_end);
  // spdlog's registry is a lazily built static inside the (uninstrumented) shared library: build
  // it here, before the I/O thread can log, so ThreadSanitizer sees the thread start order.
  spdlog::default_logger_raw();
  impl_->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl_->wake_fd < 0) throw std::runtime_error("transport: eventfd failed");
  std::lock_guard lock(impl_->mutex);
  impl_->start_io_thread_locked(/*leader=*/true);
  impl_->start_io_thread_locked(/*leader=*/false);
}

Transport::~Transport() {
  stop();
  ::close(impl_->wake_fd);
}

std::string Transport::bind(const std::string& endpoint) {
  // (endpoint bound, error): the error travels as text and is thrown on the caller's thread, so
  // no exception object is shared between threads.
  std::promise<std::pair<std::string, std::string>> bound;
  auto result = bound.get_future();
  bool posted = impl_->post([impl = impl_.get(), endpoint, &bound] {
    try {
      if (!impl->router) {
        impl->router = std::make_unique<zmq::socket_t>(impl->context, zmq::socket_type::router);
        impl->router->set(zmq::sockopt::router_mandatory, 1);
        impl->router->set(zmq::sockopt::router_handover, 1);
        impl->router->set(zmq::sockopt::linger, 0);
        impl->router->set(zmq::sockopt::sndhwm, impl->options.send_high_water_mark);
        impl->router->set(zmq::sockopt::maxmsgsize,
                          static_cast<int64_t>(impl->options.limits.max_message_bytes));
        if (impl->options.credentials) {
          impl->start_zap();
          impl->router->set(zmq::sockopt::curve_server, true);
          impl->router->set(zmq::sockopt::curve_secretkey,
                            impl->options.credentials->server.secret_key);
          impl->router->set(zmq::sockopt::zap_domain, kZapDomain);
        }
        impl->router_monitor = impl->monitor(*impl->router);
      }
      std::string wanted = endpoint;
      // ZeroMQ spells "any port" as '*'; accept the more familiar :0 too.
      if (wanted.size() > 2 && wanted.compare(wanted.size() - 2, 2, ":0") == 0) {
        wanted.replace(wanted.size() - 1, 1, "*");
      }
      impl->router->bind(wanted);
      bound.set_value({impl->router->get(zmq::sockopt::last_endpoint), ""});
    } catch (const std::exception& e) {  // zmq::error_t, or a bad cluster key from start_zap
      bound.set_value({"", "cannot listen on " + endpoint + ": " + e.what()});
    }
  });
  if (!posted) throw std::runtime_error("cannot listen on " + endpoint + ": transport stopped");
  auto [listening, error] = result.get();
  if (!error.empty()) throw std::runtime_error(error);
  return listening;
}

bool Transport::on_io_thread() { return Impl::t_io_leader != nullptr; }

bool Transport::holds_io_role() const { return Impl::t_io_leader == impl_.get(); }

bool Transport::run_inline(const std::function<void()>& work) {
  if (Impl::t_io_leader != impl_.get()) {
    work();
    return false;
  }
  return impl_->run_inline(work);
}

void Transport::yield_io_role() {
  if (Impl::t_io_leader) Impl::t_io_leader->yield_role();
}

void Transport::set_send_fence(SendFence fence) {
  auto shared = fence ? std::make_shared<const SendFence>(std::move(fence)) : nullptr;
  std::lock_guard lock(impl_->fence_mutex);
  impl_->send_fence = std::move(shared);
}

void Transport::send(Envelope envelope) {
  bool was_empty;
  {
    std::unique_lock lock(impl_->mutex);
    if (impl_->stopping) return;
    const std::size_t limit = std::max<std::size_t>(1, impl_->options.max_outbox);
    // The leader never waits: it is the one that would make room.
    const bool leader =
        Impl::t_io_leader == impl_.get() && Impl::t_io_epoch == impl_->role_epoch;
    if (impl_->outbox.size() >= limit && !leader) {
      impl_->stats.outbox_waits.fetch_add(1, std::memory_order_relaxed);
      bool room = impl_->outbox_space.wait_for(lock, impl_->options.outbox_wait, [&] {
        return impl_->stopping || impl_->outbox.size() < limit;
      });
      if (impl_->stopping) return;
      if (!room) {
        lock.unlock();
        log_drop_once(impl_->stats.dropped_outbox_full, "outbox-full");
        if (impl_->on_undeliverable) {
          impl_->on_undeliverable(
              envelope, fmt::format("the outbox stayed full ({} messages) for {} ms: the network "
                                    "or the peers cannot keep up",
                                    limit, impl_->options.outbox_wait.count()));
        }
        return;
      }
    }
    // The leader takes the outbox before it next sleeps: it needs no wake-up.
    was_empty = impl_->outbox.empty() && !leader;
    impl_->outbox.push_back(std::move(envelope));
  }
  // Only the first message into an empty outbox needs a wake-up: the I/O thread takes the whole
  // outbox at once, and it cannot have taken it since it became non-empty without seeing that
  // first wake-up (a write(2) per message was the largest single cost of a small tell).
  if (was_empty) impl_->wake();
}

void Transport::stop() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->outbox_space.notify_all();  // senders waiting for room give up
  impl_->standby_wake.notify_all();
  impl_->wake();
  // Join every I/O thread: the leader closes the sockets and ends; standbys end; an old leader
  // still in an actor's turn ends when the turn returns. (A thread calling stop() from a turn
  // detaches itself instead.)
  while (true) {
    std::vector<Impl::IoThread> threads;
    {
      std::lock_guard lock(impl_->mutex);
      threads.swap(impl_->io_threads);
    }
    if (threads.empty()) return;
    for (auto& t : threads) {
      if (t.thread.get_id() == std::this_thread::get_id()) {
        t.thread.detach();
      } else {
        t.thread.join();
      }
    }
  }
}

const TransportStats& Transport::stats() const { return impl_->stats; }
void Transport::count_malformed_payload() {
  log_drop_once(impl_->stats.dropped_malformed, "malformed payload");
}
const std::string& Transport::system_id() const { return impl_->options.system_id; }

}  // namespace omnilearn::runtime
