#include "runtime/transport.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

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

}  // namespace

struct Transport::Impl {
  TransportOptions options;
  InboundHandler on_inbound;
  UndeliverableHandler on_undeliverable;
  TransportStats stats;

  zmq::context_t context{1};
  int wake_fd = -1;

  // Guarded by mutex: work handed to the I/O thread.
  std::mutex mutex;
  std::deque<Envelope> outbox;
  std::deque<std::function<void()>> commands;
  bool stopping = false;

  // Owned by the I/O thread only.
  std::unique_ptr<zmq::socket_t> router;
  std::unordered_map<std::string, std::unique_ptr<zmq::socket_t>> dealers;  // by endpoint
  struct Route {
    std::string dealer_endpoint;  // non-empty: reply through our DEALER to that endpoint
    std::string router_identity;  // otherwise: through the ROUTER to this identity
  };
  std::unordered_map<std::string, Route> routes;  // by system id

  std::thread io_thread;

  void wake() {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd, &one, sizeof one);
  }

  zmq::socket_t& dealer_for(const std::string& endpoint) {
    auto it = dealers.find(endpoint);
    if (it != dealers.end()) return *it->second;
    auto socket = std::make_unique<zmq::socket_t>(context, zmq::socket_type::dealer);
    socket->set(zmq::sockopt::routing_id, options.system_id);
    socket->set(zmq::sockopt::linger, 0);
    socket->set(zmq::sockopt::sndhwm, options.send_high_water_mark);
    socket->set(zmq::sockopt::reconnect_ivl, 100);
    socket->set(zmq::sockopt::reconnect_ivl_max, 1000);
    socket->set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(options.limits.max_message_bytes));
    socket->connect(endpoint);
    return *dealers.emplace(endpoint, std::move(socket)).first->second;
  }

  void learn_route(const std::string& system, Route route) {
    if (system.empty() || is_endpoint(system)) return;
    auto it = routes.find(system);
    if (it == routes.end() && routes.size() >= static_cast<size_t>(options.max_learned_routes)) {
      return;  // bounded: a flood of fake identities cannot grow memory
    }
    routes[system] = std::move(route);
  }

  static bool send_frames(zmq::socket_t& socket, const std::string* identity,
                          const std::vector<std::string>& frames) {
    try {
      if (identity) {
        if (!socket.send(zmq::buffer(*identity), zmq::send_flags::sndmore |
                                                     zmq::send_flags::dontwait)) {
          return false;
        }
      }
      for (size_t i = 0; i < frames.size(); ++i) {
        auto flags = zmq::send_flags::dontwait;
        if (i + 1 < frames.size()) flags = flags | zmq::send_flags::sndmore;
        if (!socket.send(zmq::buffer(frames[i]), flags)) return false;
      }
      return true;
    } catch (const zmq::error_t&) {
      return false;  // EHOSTUNREACH with ROUTER_MANDATORY: the peer is gone
    }
  }

  void deliver_out(Envelope& envelope) {
    auto frames = encode_envelope(envelope);
    bool sent = false;
    std::string why;
    const std::string& system = envelope.to.system;
    if (is_endpoint(system)) {
      try {
        sent = send_frames(dealer_for(system), nullptr, frames);
        if (!sent) why = "send queue to " + system + " is full";
      } catch (const zmq::error_t& e) {
        why = "cannot connect to " + system + ": " + e.what();
      }
    } else {
      auto it = routes.find(system);
      if (it == routes.end()) {
        why = "no route to system " + system;
        log_drop_once(stats.dropped_unroutable, "unroutable");
        if (on_undeliverable) on_undeliverable(envelope, why);
        return;
      }
      if (!it->second.dealer_endpoint.empty()) {
        sent = send_frames(dealer_for(it->second.dealer_endpoint), nullptr, frames);
      } else if (router) {
        sent = send_frames(*router, &it->second.router_identity, frames);
      }
      if (!sent) why = "peer " + system + " is unreachable";
    }
    if (sent) {
      stats.messages_out.fetch_add(1, std::memory_order_relaxed);
    } else {
      log_drop_once(stats.dropped_send_full, "undeliverable");
      if (on_undeliverable) on_undeliverable(envelope, why);
    }
  }

  void handle_inbound(std::vector<zmq::message_t>& parts, const std::string* dealer_endpoint) {
    std::string identity;
    size_t first = 0;
    if (!dealer_endpoint) {  // ROUTER: first frame is the peer identity
      if (parts.empty()) return;
      identity = parts[0].to_string();
      first = 1;
    }
    std::vector<std::string_view> frames;
    for (size_t i = first; i < parts.size(); ++i) frames.push_back(parts[i].to_string_view());
    auto decoded = decode_envelope(frames, options.limits);
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
      learn_route(envelope.from.system, Route{*dealer_endpoint, {}});
    } else {
      // The identity is what we can reply to; a peer cannot claim another peer's route
      // because the route is keyed by the identity ZeroMQ saw, not by what the payload says.
      envelope.from.system = identity;
      learn_route(identity, Route{{}, identity});
    }
    envelope.to.system = options.system_id;
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
    }
  }

  void run() {
    std::vector<zmq::pollitem_t> items;
    std::vector<std::string> item_endpoints;  // parallel to items: dealer endpoint or ""
    while (true) {
      std::deque<Envelope> out;
      std::deque<std::function<void()>> todo;
      {
        std::lock_guard lock(mutex);
        out.swap(outbox);
        todo.swap(commands);
        if (stopping && out.empty() && todo.empty()) break;
      }
      for (auto& command : todo) command();
      for (auto& envelope : out) deliver_out(envelope);
      {
        std::lock_guard lock(mutex);
        // Leave only with nothing queued: a command posted before stop() must still run.
        if (stopping && outbox.empty() && commands.empty()) break;
      }

      items.clear();
      item_endpoints.clear();
      items.push_back({nullptr, wake_fd, ZMQ_POLLIN, 0});
      item_endpoints.emplace_back();
      if (router) {
        items.push_back({router->handle(), 0, ZMQ_POLLIN, 0});
        item_endpoints.emplace_back();
      }
      for (auto& [endpoint, socket] : dealers) {
        items.push_back({socket->handle(), 0, ZMQ_POLLIN, 0});
        item_endpoints.push_back(endpoint);
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
        if (item_endpoints[i].empty()) {
          drain(*router, nullptr);
        } else {
          auto it = dealers.find(item_endpoints[i]);
          if (it != dealers.end()) drain(*it->second, &it->first);
        }
      }
    }
    router.reset();
    dealers.clear();
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
                     UndeliverableHandler on_undeliverable)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->on_inbound = std::move(on_inbound);
  impl_->on_undeliverable = std::move(on_undeliverable);
  impl_->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl_->wake_fd < 0) throw std::runtime_error("transport: eventfd failed");
  impl_->io_thread = std::thread([impl = impl_.get()] { impl->run(); });
}

Transport::~Transport() {
  stop();
  ::close(impl_->wake_fd);
}

std::string Transport::bind(const std::string& endpoint) {
  std::promise<std::string> bound;
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
      }
      std::string wanted = endpoint;
      // ZeroMQ spells "any port" as '*'; accept the more familiar :0 too.
      if (wanted.size() > 2 && wanted.compare(wanted.size() - 2, 2, ":0") == 0) {
        wanted.replace(wanted.size() - 1, 1, "*");
      }
      impl->router->bind(wanted);
      bound.set_value(impl->router->get(zmq::sockopt::last_endpoint));
    } catch (const zmq::error_t& e) {
      bound.set_exception(std::make_exception_ptr(
          std::runtime_error("cannot listen on " + endpoint + ": " + e.what())));
    }
  });
  if (!posted) throw std::runtime_error("cannot listen on " + endpoint + ": transport stopped");
  return result.get();
}

void Transport::send(Envelope envelope) {
  bool was_empty;
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->stopping) return;
    was_empty = impl_->outbox.empty();
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
    if (impl_->stopping && !impl_->io_thread.joinable()) return;
    impl_->stopping = true;
  }
  impl_->wake();
  if (impl_->io_thread.joinable()) impl_->io_thread.join();
}

const TransportStats& Transport::stats() const { return impl_->stats; }
const std::string& Transport::system_id() const { return impl_->options.system_id; }

}  // namespace omnilearn::runtime
