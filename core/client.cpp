// The driver side of the public API (include/omnilearn/omnilearn.hpp): Cluster::connect and the
// Client that turns submits, spawns and calls into asks to the head's task router.
#include <omnilearn/omnilearn.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "core/protocol.hpp"
#include "runtime/actor_system.hpp"
#include "runtime/cluster_file.hpp"
#include "runtime/endpoint.hpp"
#include "runtime/system_messages.hpp"

namespace omnilearn {

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kRemoteException: return "remote exception";
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kNodeDied: return "node died";
    case ErrorCode::kInfeasible: return "infeasible";
    case ErrorCode::kDisconnected: return "disconnected";
    case ErrorCode::kNoSuchActor: return "no such actor";
    case ErrorCode::kNotRegistered: return "not registered";
    case ErrorCode::kBadValue: return "bad value";
    case ErrorCode::kRefused: return "refused";
    case ErrorCode::kEmptyHandle: return "empty handle";
  }
  return "error";
}

namespace detail {
namespace {

// The one thread then() functions run on, started on first use. Work still queued when the
// program exits is dropped (its futures are going away with the program).
class ContinuationThread {
 public:
  ~ContinuationThread() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
  }
  void post(std::function<void()> work) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      queue_.push_back(std::move(work));
      if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    }
    wake_.notify_one();
  }
  bool on_this_thread() const { return std::this_thread::get_id() == id_.load(); }

 private:
  void run() {
    id_ = std::this_thread::get_id();
    std::unique_lock lock(mutex_);
    while (true) {
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      auto work = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      work();  // run_continuation catches what the user's function throws
      work = nullptr;  // its captures released outside the lock
      lock.lock();
    }
  }
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;  // guarded by mutex_
  bool stopping_ = false;                    // guarded by mutex_
  std::thread thread_;                       // started under mutex_
  std::atomic<std::thread::id> id_{};
};

ContinuationThread& continuations() {
  static ContinuationThread instance;
  return instance;
}

}  // namespace

void post_continuation(std::function<void()> work) { continuations().post(std::move(work)); }
bool on_continuation_thread() { return continuations().on_this_thread(); }

}  // namespace detail

namespace {

using runtime::AskResult;

core::ResourceSpec to_spec(const Resources& resources) {
  return core::ResourceSpec{resources.cpus, resources.gpus, resources.labels};
}
Resources from_spec(const core::ResourceSpec& spec) {
  return Resources{spec.cpus, spec.gpus, spec.labels};
}

ErrorCode known_code(int code) {
  if (code < 0 || code > static_cast<int>(ErrorCode::kEmptyHandle)) return ErrorCode::kBadValue;
  return static_cast<ErrorCode>(code);
}

// The transport-level outcome of an ask as an Outcome (the task result inside, if any).
detail::Outcome outcome_of(const AskResult& answer, const std::string& what) {
  switch (answer.status) {
    case AskResult::Status::kTimeout:
      return {ErrorCode::kTimeout, what + ": " + answer.error, {}};
    case AskResult::Status::kUnreachable:
    case AskResult::Status::kError:
      return {ErrorCode::kDisconnected, what + ": " + answer.error, {}};
    case AskResult::Status::kOk:
      break;
  }
  if (auto result = answer.as<core::TaskResult>()) {
    return {known_code(result->code), result->message, std::move(result->value)};
  }
  if (answer.reply.kind == runtime::MessageKind::kError) {
    return {ErrorCode::kRefused, what + ": " + answer.error, {}};
  }
  return {ErrorCode::kBadValue, what + ": a malformed answer", {}};
}

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}() ^
                                   static_cast<std::uint64_t>(
                                       std::chrono::steady_clock::now().time_since_epoch().count())};
  return fmt::format("{}{:016x}", prefix, rng());
}

// Tasks and calls a driver may have unanswered at the head at once. The head holds at most
// SystemOptions::max_in_flight_per_peer (8,192) messages from one peer and refuses more
// ("overloaded"); half of that leaves room for the driver's other messages (tells, monitors,
// lookups) while keeping the head's pipeline full.
constexpr std::size_t kMaxInFlight = 4096;
// Beyond that, submits and calls wait in the client, up to this many (or bytes of arguments);
// past either, the submitting thread blocks until answers make room, as a Ray owner's does.
constexpr std::size_t kMaxQueued = 16384;
constexpr std::size_t kMaxQueuedBytes = 64u << 20;

class ClusterClient final : public detail::Client {
 public:
  ClusterClient(runtime::SystemOptions options, std::string head_endpoint)
      : system_(std::move(options)),
        router_{std::move(head_endpoint), core::kTaskRouterActor} {}

  // Fails what still waits in the queue; the asks in flight fail as the system shuts down.
  ~ClusterClient() override {
    std::deque<QueuedAsk> dropped;
    {
      std::lock_guard lock(flow_mutex_);
      closed_ = true;
      dropped.swap(queued_);
      queued_bytes_ = 0;
    }
    flow_room_.notify_all();
    for (auto& ask : dropped) ask.done(closed_result());
  }

  // Asks the router for the cluster's nodes; throws kDisconnected when it does not answer.
  void check_reachable(std::chrono::milliseconds timeout) {
    auto answer = system_.ask(router_, core::ClusterInfoRequest{}, timeout).get();
    if (!answer.ok()) {
      std::string hint;
      if (system_.transport_stats().failed_handshakes_out.load() > 0) {
        hint = " (the handshake failed: this cluster file's keys are not the head's, or one "
               "side runs --insecure)";
      }
      throw Error(ErrorCode::kDisconnected,
                  fmt::format("no answer from the head at {} within {} ms{}", router_.system,
                              timeout.count(), hint));
    }
  }

  std::shared_ptr<detail::FutureState> submit(const std::string& function, std::string args,
                                              const TaskOptions& options) override {
    core::SubmitTask task{random_id("t-"),        function,
                          std::move(args),        to_spec(options.resources),
                          options.max_retries,    options.timeout.count()};
    return ask_in_turn(task, options.timeout + std::chrono::seconds(2), "task " + function);
  }

  std::string spawn(const std::string& class_name, std::string args,
                    const ActorOptions& options) override {
    core::CreateActor request{random_id("a-"),
                              class_name,
                              std::move(args),
                              options.name,
                              to_spec(options.resources),
                              options.max_restarts,
                              static_cast<std::int32_t>(options.placement),
                              options.group,
                              options.timeout.count()};
    auto ref = ask_ref(request, options.timeout + std::chrono::seconds(2),
                       "creating actor " + class_name);
    return ref.actor_id;
  }

  std::shared_ptr<detail::FutureState> call(const std::string& actor_id, const std::string& method,
                                            std::string args, std::chrono::milliseconds timeout,
                                            bool oneway) override {
    core::ActorCall call{actor_id, method, std::move(args), oneway, timeout.count()};
    if (oneway) {
      system_.tell(router_, call);
      auto state = std::make_shared<detail::FutureState>();
      state->set(detail::Outcome{ErrorCode::kOk, {}, detail::encode(msgpack::type::nil_t())});
      return state;
    }
    return ask_in_turn(call, timeout + std::chrono::seconds(2), "call " + method);
  }

  std::pair<std::string, std::string> get_actor(const std::string& name) override {
    auto ref = ask_ref(core::GetActor{name}, std::chrono::seconds(10), "looking up actor " + name);
    return {ref.actor_id, ref.class_name};
  }

  void kill(const std::string& actor_id) override { system_.tell(router_, core::KillActor{actor_id}); }

  std::shared_ptr<detail::FutureState> monitor(const std::string& actor_id,
                                               std::chrono::milliseconds timeout) override {
    return ask(core::WatchActor{actor_id}, timeout, "monitoring actor " + actor_id);
  }

  std::vector<NodeInfo> nodes() override {
    auto answer = system_.ask(router_, core::ClusterInfoRequest{}, std::chrono::seconds(10)).get();
    auto info = answer.as<core::ClusterInfoReply>();
    if (!info) throw Error(ErrorCode::kDisconnected, "no node list from the head: " + answer.error);
    std::vector<NodeInfo> nodes;
    for (auto& node : info->nodes) {
      nodes.push_back(NodeInfo{node.name, from_spec(node.total), from_spec(node.used),
                               node.libraries, node.functions, node.running_tasks, node.actors});
    }
    return nodes;
  }

 private:
  // An ask that waits in this client for one of the kMaxInFlight places.
  struct QueuedAsk {
    runtime::Envelope request;
    std::chrono::steady_clock::time_point deadline;  // from the submit: queueing counts
    runtime::AskCallback done;
  };

  static AskResult closed_result() {
    AskResult result;
    result.status = AskResult::Status::kUnreachable;
    result.error = "the client shut down before this was sent";
    return result;
  }

  // A submit or call: sent now while fewer than kMaxInFlight are unanswered, else queued in
  // order; blocks the caller only while the queue is full. Any thread but the I/O thread.
  template <class M>
  std::shared_ptr<detail::FutureState> ask_in_turn(const M& message,
                                                   std::chrono::milliseconds timeout,
                                                   std::string what) {
    auto state = std::make_shared<detail::FutureState>();
    QueuedAsk ask{system_.make_envelope(router_, M::kKind, runtime::pack_payload(message), {}),
                  std::chrono::steady_clock::now() + timeout,
                  [state, what = std::move(what)](AskResult answer) {
                    state->set(outcome_of(answer, what));
                  }};
    const std::size_t bytes = ask.request.payload.size();
    {
      std::unique_lock lock(flow_mutex_);
      flow_room_.wait(lock, [&] {
        return closed_ || (queued_.size() < kMaxQueued &&
                           (queued_.empty() || queued_bytes_ + bytes <= kMaxQueuedBytes));
      });
      if (closed_) {
        lock.unlock();
        ask.done(closed_result());
        return state;
      }
      if (in_flight_ >= kMaxInFlight || !queued_.empty()) {
        queued_bytes_ += bytes;
        queued_.push_back(std::move(ask));
        return state;
      }
      ++in_flight_;
    }
    send_in_flight(std::move(ask));
    return state;
  }

  // Sends `ask`, which holds one of the in-flight places; an ask whose deadline passed in the
  // queue fails instead, and its place goes to the next.
  void send_in_flight(QueuedAsk ask) {
    while (true) {
      auto left = ask.deadline - std::chrono::steady_clock::now();
      if (left > std::chrono::steady_clock::duration::zero()) {
        system_.ask_then(
            std::move(ask.request),
            std::max(std::chrono::milliseconds(1),
                     std::chrono::duration_cast<std::chrono::milliseconds>(left)),
            [this, done = std::move(ask.done)](AskResult answer) {
              done(std::move(answer));
              answered();
            });
        return;
      }
      AskResult expired;
      expired.status = AskResult::Status::kTimeout;
      expired.error = "its time ran out while it waited in this client's queue (more submits "
                      "and calls than the head takes at once)";
      ask.done(std::move(expired));
      auto next = take_next();
      if (!next) return;
      ask = std::move(*next);
    }
  }

  // An in-flight ask was answered (on the I/O or timer thread): its place goes to the next
  // queued ask, if any.
  void answered() {
    if (auto next = take_next()) send_in_flight(std::move(*next));
  }

  // The next queued ask, which takes over the caller's in-flight place; nullopt (the place
  // freed) when none waits or the client is closing.
  std::optional<QueuedAsk> take_next() {
    std::optional<QueuedAsk> next;
    {
      std::lock_guard lock(flow_mutex_);
      if (queued_.empty() || closed_) {
        --in_flight_;
        return std::nullopt;
      }
      next = std::move(queued_.front());
      queued_.pop_front();
      queued_bytes_ -= next->request.payload.size();
    }
    flow_room_.notify_one();
    return next;
  }

  template <class M>
  std::shared_ptr<detail::FutureState> ask(const M& message, std::chrono::milliseconds timeout,
                                           std::string what) {
    auto state = std::make_shared<detail::FutureState>();
    // Completes on the I/O or timer thread: only decodes and sets the state.
    system_.ask_then(system_.make_envelope(router_, M::kKind, runtime::pack_payload(message), {}),
                     timeout, [state, what = std::move(what)](AskResult answer) {
                       state->set(outcome_of(answer, what));
                     });
    return state;
  }

  template <class M>
  core::ActorRef ask_ref(const M& message, std::chrono::milliseconds timeout,
                         const std::string& what) {
    auto answer = system_.ask(router_, message, timeout).get();
    if (!answer.ok()) {
      auto outcome = outcome_of(answer, what);
      throw Error(outcome.code, outcome.message);
    }
    auto ref = answer.template as<core::ActorRef>();
    if (!ref) throw Error(ErrorCode::kRefused, what + ": " + answer.error);
    if (ref->code != 0) throw Error(known_code(ref->code), ref->message);
    return *ref;
  }

  // Declared before system_, so that they outlive the completions its shutdown runs.
  std::mutex flow_mutex_;
  std::condition_variable flow_room_;     // queue room, and closed_
  std::size_t in_flight_ = 0;             // guarded by flow_mutex_
  std::deque<QueuedAsk> queued_;          // guarded by flow_mutex_
  std::size_t queued_bytes_ = 0;          // guarded by flow_mutex_
  bool closed_ = false;                   // guarded by flow_mutex_

  runtime::ActorSystem system_;
  runtime::ActorAddress router_;
};

}  // namespace

Cluster Cluster::connect(const ConnectOptions& options) {
  runtime::SystemOptions system_options;
  std::string address = options.address;
  if (address.empty()) {
    if (const char* env = std::getenv("OMNILEARN_ADDRESS")) address = env;
  }
  try {
    if (!options.insecure) {
      std::string path = options.cluster_file;
      if (path.empty()) {
        if (const char* env = std::getenv("OMNILEARN_CLUSTER_FILE")) path = env;
      }
      if (path.empty()) path = runtime::default_cluster_file_path().string();
      auto file = runtime::read_cluster_file(path);
      system_options.credentials = file.credentials;
      if (address.empty()) address = file.address;
    }
    if (address.empty()) {
      throw Error(ErrorCode::kDisconnected,
                  "no head address: pass ConnectOptions::address or set OMNILEARN_ADDRESS");
    }
    auto endpoint = runtime::tcp_endpoint(runtime::parse_host_port(address));
    auto client = std::make_shared<ClusterClient>(std::move(system_options), endpoint);
    client->check_reachable(options.timeout);
    return Cluster(std::move(client));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kDisconnected, e.what());
  }
}

}  // namespace omnilearn
