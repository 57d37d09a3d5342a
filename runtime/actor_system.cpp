#include "runtime/actor_system.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <queue>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "runtime/mailbox.hpp"
#include "runtime/system_messages.hpp"

namespace omnilearn::runtime {

std::string new_system_id() {
  std::random_device device;
  std::mt19937_64 rng((static_cast<std::uint64_t>(device()) << 32) ^ device() ^
                      static_cast<std::uint64_t>(
                          std::chrono::steady_clock::now().time_since_epoch().count()));
  return fmt::format("s-{:016x}", rng());
}

namespace {

constexpr const char* kSystemActor = "$system";

// A single timer thread for the whole system. Expired timers hand their task to the actor's
// mailbox (or run a completion), so no user code ever runs on this thread.
class TimerService {
 public:
  using Clock = std::chrono::steady_clock;

  TimerService() : thread_([this] { run(); }) {}
  ~TimerService() { stop(); }

  TimerId schedule(std::chrono::milliseconds delay, std::function<void()> fire) {
    std::lock_guard lock(mutex_);
    TimerId id = ++next_id_;
    auto deadline = Clock::now() + delay;
    // The timer thread sleeps until the earliest deadline; only a new earliest one changes
    // that. (Every ask schedules a timeout: waking the thread for each cost a context switch
    // per ask.)
    bool earliest = queue_.empty() || deadline < queue_.top().deadline;
    queue_.push(Entry{deadline, id});
    tasks_.emplace(id, std::move(fire));
    if (earliest) changed_.notify_one();
    return id;
  }

  void cancel(TimerId id) {
    std::lock_guard lock(mutex_);
    tasks_.erase(id);
  }

  void stop() {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
    }
    changed_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct Entry {
    Clock::time_point deadline;
    TimerId id;
    bool operator>(const Entry& other) const { return deadline > other.deadline; }
  };

  void run() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      if (queue_.empty()) {
        changed_.wait(lock);
        continue;
      }
      auto next = queue_.top();
      if (Clock::now() < next.deadline) {
        changed_.wait_until(lock, next.deadline);
        continue;
      }
      queue_.pop();
      auto it = tasks_.find(next.id);
      if (it == tasks_.end()) continue;  // cancelled
      auto fire = std::move(it->second);
      tasks_.erase(it);
      lock.unlock();
      fire();
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue_;  // guarded by mutex_
  std::unordered_map<TimerId, std::function<void()>> tasks_;             // guarded by mutex_
  TimerId next_id_ = 0;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace

struct ActorSystem::Impl {
  struct Cell {
    std::unique_ptr<Actor> actor;
    Mailbox mailbox;
    ActorAddress address;
    std::string stop_reason = "stopped";  // guarded by Impl::mutex
    std::thread::id thread_id;            // written once by spawn, before anyone can stop it
    std::promise<void> finished;  // set once on_stop ran and watchers were told
    std::shared_future<void> finished_future = finished.get_future().share();
  };

  struct PendingAsk {
    std::variant<std::promise<AskResult>, std::pair<std::weak_ptr<Cell>, AskCallback>> waiter;
    TimerId timer = 0;
  };

  SystemOptions options;
  std::string id;
  std::unique_ptr<Transport> transport;
  TimerService timers;
  std::atomic<std::uint64_t> next_correlation{1};
  std::atomic<std::uint64_t> dead_letters{0};
  std::atomic<std::uint64_t> refused_in_flight{0};
  struct InFlight {
    std::atomic<std::size_t> messages{0};
    std::atomic<std::size_t> bytes{0};
  };
  // remote system -> what it has waiting in mailboxes here (see max_in_flight_per_peer)
  std::unordered_map<std::string, std::shared_ptr<InFlight>> in_flight;  // guarded by mutex

  mutable std::mutex mutex;
  std::unordered_map<std::string, std::shared_ptr<Cell>> cells;      // guarded by mutex
  std::unordered_map<std::uint64_t, PendingAsk> pending;             // guarded by mutex
  // target actor name -> watchers (local or remote) to tell when it stops
  std::map<std::string, std::set<ActorAddress>> watchers;            // guarded by mutex
  // remote system -> (watcher, target) pairs to fire on declare_system_down
  std::map<std::string, std::set<std::pair<ActorAddress, ActorAddress>>> remote_watches;
  // Every actor thread not yet joined, with its actor's `finished`. A thread whose actor has
  // stopped is joined at the next spawn or stop (reap_finished_threads), so a system that starts
  // and stops actors for months (a job's scheduler each) does not keep a thread handle and its
  // stack per stopped actor until shutdown. Guarded by mutex.
  struct ActorThread {
    std::thread thread;
    std::shared_future<void> finished;
  };
  std::vector<ActorThread> threads;
  bool shut_down = false;                                            // guarded by mutex

  ActorSystem* owner = nullptr;

  void complete(std::uint64_t correlation, AskResult result) {
    PendingAsk entry;
    {
      std::lock_guard lock(mutex);
      auto it = pending.find(correlation);
      if (it == pending.end()) return;  // already completed (reply raced the timeout)
      entry = std::move(it->second);
      pending.erase(it);
    }
    if (entry.timer) timers.cancel(entry.timer);
    if (auto* promise = std::get_if<std::promise<AskResult>>(&entry.waiter)) {
      promise->set_value(std::move(result));
    } else {
      auto& [weak_cell, callback] = std::get<1>(entry.waiter);
      if (auto cell = weak_cell.lock()) {
        cell->mailbox.push(Letter{std::nullopt, [callback = std::move(callback),
                                                 result = std::move(result)]() mutable {
                                    callback(std::move(result));
                                  },
                                  {}});
      }
    }
  }

  // Where every message for this system lands: from the transport (I/O thread) or from a local
  // sender (any thread).
  void dispatch(Envelope&& envelope) {
    if (envelope.is_reply()) {
      AskResult result;
      result.status = AskResult::Status::kOk;
      if (envelope.kind == MessageKind::kError) {
        if (auto error = unpack_payload<ErrorReply>(envelope.payload)) {
          result.error = error->code + ": " + error->message;
        }
      }
      result.reply = std::move(envelope);
      complete(result.reply.correlation, std::move(result));
      return;
    }
    if (envelope.to.actor == kSystemActor) {
      handle_system_message(envelope);
      return;
    }
    std::shared_ptr<Cell> cell;
    std::shared_ptr<void> slot;
    bool over_limit = false;
    {
      std::lock_guard lock(mutex);
      auto it = cells.find(envelope.to.actor);
      if (it != cells.end()) cell = it->second;
      if (cell && envelope.from.system != id) {
        slot = take_in_flight_slot(envelope.from.system, size_of(envelope));
        over_limit = slot == nullptr;
      }
    }
    if (over_limit) {
      refuse_over_limit(envelope);
      return;
    }
    if (cell) {
      Letter letter{std::move(envelope), {}, std::move(slot)};
      if (cell->mailbox.push(std::move(letter))) return;
      envelope = std::move(*letter.envelope);
    }
    dead_letters.fetch_add(1, std::memory_order_relaxed);
    if (envelope.correlation != 0) {
      owner->reply(envelope, ErrorReply{"no-such-actor", "no actor named '" + envelope.to.actor +
                                                             "' on system " + id});
    }
  }

  void refuse_over_limit(const Envelope& envelope) {
    auto n = refused_in_flight.fetch_add(1) + 1;
    if ((n & (n - 1)) == 0) {
      spdlog::warn("system {}: {} is at its limit of messages waiting here ({} messages, {} "
                   "bytes); refusing more ({} so far)",
                   id, envelope.from.system, options.max_in_flight_per_peer,
                   options.max_in_flight_bytes_per_peer, n);
    }
    if (envelope.correlation != 0) {
      owner->reply(envelope,
                   ErrorReply{"overloaded",
                              fmt::format("too many messages from you are waiting at system {} "
                                          "(limits: {} messages, {} bytes); wait for replies "
                                          "before sending more",
                                          id, options.max_in_flight_per_peer,
                                          options.max_in_flight_bytes_per_peer)});
    }
  }

  static std::size_t size_of(const Envelope& envelope) {
    std::size_t bytes = envelope.payload.size();
    for (const auto& attachment : envelope.attachments) bytes += attachment.size();
    return bytes;
  }

  // Caller holds mutex. An empty pointer when `peer` is at its limit; otherwise a slot that
  // frees itself when the letter holding it is destroyed (handled or dropped).
  std::shared_ptr<void> take_in_flight_slot(const std::string& peer, std::size_t bytes) {
    if (in_flight.size() > 65536 && !in_flight.count(peer)) {
      // Bounded like the transport's routes: forget peers with nothing waiting.
      std::erase_if(in_flight, [](const auto& entry) { return entry.second->messages == 0; });
    }
    auto& counter = in_flight[peer];
    if (!counter) counter = std::make_shared<InFlight>();
    if (counter->messages.load() >= options.max_in_flight_per_peer ||
        (counter->messages.load() > 0 &&
         counter->bytes.load() + bytes > options.max_in_flight_bytes_per_peer)) {
      return {};
    }
    counter->messages.fetch_add(1);
    counter->bytes.fetch_add(bytes);
    return std::shared_ptr<void>(counter.get(), [keep = counter, bytes](void*) {
      keep->bytes.fetch_sub(bytes);
      keep->messages.fetch_sub(1);
    });
  }

  void handle_system_message(const Envelope& envelope) {
    if (envelope.kind == MessageKind::kMonitor) {
      auto request = unpack_payload<MonitorRequest>(envelope.payload);
      if (!request) return;
      add_watcher(ActorAddress{envelope.from.system, request->watcher_actor},
                  request->target_actor);
    } else if (envelope.kind == MessageKind::kPing) {
      auto ping = unpack_payload<Ping>(envelope.payload);
      if (ping && envelope.correlation != 0) owner->reply(envelope, Pong{ping->sequence});
    }
  }

  void add_watcher(const ActorAddress& watcher, const std::string& target) {
    bool exists;
    {
      std::lock_guard lock(mutex);
      exists = cells.count(target) > 0;
      if (exists) watchers[target].insert(watcher);
    }
    if (!exists) owner->tell(watcher, Down{id, target, "no such actor"}, {id, target});
  }

  void undeliverable(const Envelope& envelope, const std::string& why) {
    if (envelope.correlation != 0 && !envelope.is_reply()) {
      AskResult result;
      result.status = AskResult::Status::kUnreachable;
      result.error = why;
      complete(envelope.correlation, std::move(result));
    }
  }

  void run_actor(std::shared_ptr<Cell> cell) {
    auto& actor = *cell->actor;
    bool alive = true;
    try {
      actor.on_start();
    } catch (const std::exception& e) {
      spdlog::error("actor {}: on_start failed: {}", cell->address.actor, e.what());
      set_reason(*cell, std::string("failed to start: ") + e.what());
      alive = false;
    }
    while (alive) {
      auto letter = cell->mailbox.pop();
      if (!letter) break;
      try {
        if (letter->envelope) {
          actor.on_message(*letter->envelope);
        } else if (letter->task) {
          letter->task();
        }
      } catch (const std::exception& e) {
        // Let it crash: the actor ends and its monitors learn why.
        spdlog::error("actor {}: handler failed: {}", cell->address.actor, e.what());
        set_reason(*cell, std::string("crashed: ") + e.what());
        if (letter->envelope && letter->envelope->correlation != 0 &&
            !letter->envelope->is_reply()) {
          owner->reply(*letter->envelope, ErrorReply{"internal", e.what()});
        }
        break;
      }
    }
    cell->mailbox.close();
    try {
      actor.on_stop();
    } catch (const std::exception& e) {
      spdlog::error("actor {}: on_stop failed: {}", cell->address.actor, e.what());
    }
    retire(cell);
  }

  // Joins the threads of actors that have stopped. Any thread; never joins the caller's own.
  void reap_finished_threads() {
    std::vector<std::thread> done;
    {
      std::lock_guard lock(mutex);
      auto keep = std::partition(threads.begin(), threads.end(), [](const ActorThread& t) {
        return t.thread.get_id() == std::this_thread::get_id() ||
               t.finished.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
      });
      for (auto it = keep; it != threads.end(); ++it) done.push_back(std::move(it->thread));
      threads.erase(keep, threads.end());
    }
    // Outside the lock: the thread may still be destroying its actor, which may use the system.
    for (auto& thread : done) thread.join();
  }

  void set_reason(Cell& cell, std::string reason) {
    std::lock_guard lock(mutex);
    cell.stop_reason = std::move(reason);
  }

  // Runs on the actor's own thread after it stopped: unregister, notify watchers.
  void retire(const std::shared_ptr<Cell>& cell) {
    std::set<ActorAddress> to_notify;
    std::string reason;
    {
      std::lock_guard lock(mutex);
      reason = cell->stop_reason;
      auto it = cells.find(cell->address.actor);
      if (it != cells.end() && it->second == cell) cells.erase(it);
      auto w = watchers.find(cell->address.actor);
      if (w != watchers.end()) {
        to_notify = std::move(w->second);
        watchers.erase(w);
      }
    }
    for (const auto& watcher : to_notify) {
      owner->tell(watcher, Down{id, cell->address.actor, reason}, cell->address);
    }
    cell->finished.set_value();
  }
};

ActorSystem::ActorSystem(SystemOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->owner = this;
  impl_->id = impl_->options.system_id.empty() ? new_system_id() : impl_->options.system_id;
  TransportOptions transport_options;
  transport_options.system_id = impl_->id;
  transport_options.limits = impl_->options.limits;
  transport_options.credentials = impl_->options.credentials;
  impl_->transport = std::make_unique<Transport>(
      transport_options, [impl = impl_.get()](Envelope&& e) { impl->dispatch(std::move(e)); },
      [impl = impl_.get()](const Envelope& e, const std::string& why) {
        impl->undeliverable(e, why);
      });
}

ActorSystem::~ActorSystem() { shutdown(); }

const std::string& ActorSystem::id() const { return impl_->id; }

std::string ActorSystem::listen(const std::string& endpoint) {
  return impl_->transport->bind(endpoint);
}

ActorAddress ActorSystem::spawn(const std::string& name, std::unique_ptr<Actor> actor) {
  if (name.empty() || name[0] == '$') {
    throw std::invalid_argument("actor name '" + name + "' is reserved or empty");
  }
  auto cell = std::make_shared<Impl::Cell>();
  cell->address = ActorAddress{impl_->id, name};
  actor->system_ = this;
  actor->self_ = cell->address;
  cell->actor = std::move(actor);
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->shut_down) throw std::runtime_error("actor system is shut down");
    if (!impl_->cells.emplace(name, cell).second) {
      throw std::invalid_argument("an actor named '" + name + "' already exists");
    }
    impl_->threads.push_back(Impl::ActorThread{
        std::thread([impl = impl_.get(), cell] { impl->run_actor(cell); }),
        cell->finished_future});
    cell->thread_id = impl_->threads.back().thread.get_id();
  }
  impl_->reap_finished_threads();
  return cell->address;
}

void ActorSystem::stop(const std::string& name, const std::string& reason) {
  std::shared_ptr<Impl::Cell> cell;
  {
    std::lock_guard lock(impl_->mutex);
    auto it = impl_->cells.find(name);
    if (it == impl_->cells.end()) return;
    cell = it->second;
  }
  {
    std::lock_guard lock(impl_->mutex);
    if (!cell->mailbox.closed()) cell->stop_reason = reason;
  }
  cell->mailbox.close();
  if (cell->thread_id != std::this_thread::get_id()) {
    cell->finished_future.wait();
    impl_->reap_finished_threads();
  }
}

bool ActorSystem::has_actor(const std::string& name) const {
  std::lock_guard lock(impl_->mutex);
  return impl_->cells.count(name) > 0;
}

Envelope ActorSystem::make_envelope(const ActorAddress& to, MessageKind kind, std::string payload,
                                    const ActorAddress& from) const {
  Envelope envelope;
  envelope.kind = kind;
  envelope.to = to;
  envelope.from = from;
  envelope.from.system = impl_->id;
  envelope.payload = std::move(payload);
  return envelope;
}

void ActorSystem::send(Envelope envelope) {
  if (envelope.to.system.empty() || envelope.to.system == impl_->id) {
    // A request forwarded on this system (JobManager -> a job's scheduler) keeps its sender, so
    // the reply goes back to the remote client, not to this system with a stranger's
    // correlation id.
    if (envelope.from.system.empty()) envelope.from.system = impl_->id;
    envelope.to.system = impl_->id;
    impl_->dispatch(std::move(envelope));  // local delivery never touches a socket
  } else {
    envelope.from.system = impl_->id;  // whatever leaves this process is from this system
    impl_->transport->send(std::move(envelope));
  }
}

std::future<AskResult> ActorSystem::ask_envelope(Envelope request,
                                                 std::chrono::milliseconds timeout) {
  std::promise<AskResult> promise;
  auto future = promise.get_future();
  auto correlation = impl_->next_correlation.fetch_add(1);
  request.correlation = correlation;
  if (request.from.actor.empty()) request.from.actor = "$ask";
  {
    std::lock_guard lock(impl_->mutex);
    impl_->pending[correlation].waiter = std::move(promise);
  }
  auto timer = impl_->timers.schedule(timeout, [impl = impl_.get(), correlation, timeout] {
    AskResult result;
    result.status = AskResult::Status::kTimeout;
    result.error = fmt::format("no reply within {} ms", timeout.count());
    impl->complete(correlation, std::move(result));
  });
  {
    std::lock_guard lock(impl_->mutex);
    auto it = impl_->pending.find(correlation);
    if (it != impl_->pending.end()) it->second.timer = timer;
  }
  send(std::move(request));
  return future;
}

void ActorSystem::ask_envelope(Envelope request, std::chrono::milliseconds timeout,
                               AskCallback on_reply) {
  std::shared_ptr<Impl::Cell> cell;
  {
    std::lock_guard lock(impl_->mutex);
    auto it = impl_->cells.find(request.from.actor);
    if (it != impl_->cells.end()) cell = it->second;
  }
  auto correlation = impl_->next_correlation.fetch_add(1);
  request.correlation = correlation;
  {
    std::lock_guard lock(impl_->mutex);
    impl_->pending[correlation].waiter =
        std::make_pair(std::weak_ptr<Impl::Cell>(cell), std::move(on_reply));
  }
  auto timer = impl_->timers.schedule(timeout, [impl = impl_.get(), correlation, timeout] {
    AskResult result;
    result.status = AskResult::Status::kTimeout;
    result.error = fmt::format("no reply within {} ms", timeout.count());
    impl->complete(correlation, std::move(result));
  });
  {
    std::lock_guard lock(impl_->mutex);
    auto it = impl_->pending.find(correlation);
    if (it != impl_->pending.end()) it->second.timer = timer;
  }
  send(std::move(request));
}

void ActorSystem::monitor(const ActorAddress& watcher, const ActorAddress& target) {
  if (target.system.empty() || target.system == impl_->id) {
    impl_->add_watcher(watcher, target.actor);
    return;
  }
  {
    std::lock_guard lock(impl_->mutex);
    impl_->remote_watches[target.system].insert({watcher, target});
  }
  tell(ActorAddress{target.system, kSystemActor}, MonitorRequest{watcher.actor, target.actor},
       watcher);
}

void ActorSystem::declare_system_down(const std::string& system, const std::string& reason) {
  std::set<std::pair<ActorAddress, ActorAddress>> watches;
  {
    std::lock_guard lock(impl_->mutex);
    auto it = impl_->remote_watches.find(system);
    if (it == impl_->remote_watches.end()) return;
    watches = std::move(it->second);
    impl_->remote_watches.erase(it);
  }
  for (const auto& [watcher, target] : watches) {
    tell(watcher, Down{target.system, target.actor, reason}, target);
  }
}

TimerId ActorSystem::after(const std::string& actor, std::chrono::milliseconds delay,
                           std::function<void()> task) {
  std::weak_ptr<Impl::Cell> weak_cell;
  {
    std::lock_guard lock(impl_->mutex);
    auto it = impl_->cells.find(actor);
    if (it != impl_->cells.end()) weak_cell = it->second;
  }
  return impl_->timers.schedule(delay, [weak_cell, task = std::move(task)]() mutable {
    if (auto cell = weak_cell.lock()) cell->mailbox.push(Letter{std::nullopt, std::move(task), {}});
  });
}

void ActorSystem::cancel_timer(TimerId id) { impl_->timers.cancel(id); }

const TransportStats& ActorSystem::transport_stats() const { return impl_->transport->stats(); }

SystemStats ActorSystem::stats() const {
  std::lock_guard lock(impl_->mutex);
  return SystemStats{impl_->dead_letters.load(), impl_->cells.size(), impl_->pending.size(),
                     impl_->refused_in_flight.load()};
}

void ActorSystem::shutdown() {
  std::vector<std::shared_ptr<Impl::Cell>> cells;
  std::vector<Impl::ActorThread> threads;
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->shut_down) return;
    impl_->shut_down = true;
    for (auto& [name, cell] : impl_->cells) cells.push_back(cell);
    threads.swap(impl_->threads);
  }
  for (auto& cell : cells) cell->mailbox.close();
  for (auto& [thread, finished] : threads) {
    if (thread.get_id() == std::this_thread::get_id()) {
      thread.detach();  // shutdown called from an actor's handler: it ends on its own
    } else {
      thread.join();
    }
  }
  impl_->timers.stop();
  impl_->transport->stop();
  // Whoever still waits on an ask learns that no reply will come.
  std::unordered_map<std::uint64_t, Impl::PendingAsk> orphans;
  {
    std::lock_guard lock(impl_->mutex);
    orphans.swap(impl_->pending);
  }
  for (auto& [correlation, entry] : orphans) {
    if (auto* promise = std::get_if<std::promise<AskResult>>(&entry.waiter)) {
      AskResult result;
      result.status = AskResult::Status::kError;
      result.error = "actor system shut down";
      promise->set_value(std::move(result));
    }
  }
}

// Actor helpers that need the system's internals.
TimerId Actor::after(std::chrono::milliseconds delay, std::function<void()> task) {
  return system_->after(self_.actor, delay, std::move(task));
}
void Actor::cancel_timer(TimerId id) { system_->cancel_timer(id); }
void Actor::monitor(const ActorAddress& target) { system_->monitor(self_, target); }
void Actor::stop_self(const std::string& reason) {
  // Closing the mailbox ends the loop after the current letter; the thread retires itself.
  system_->stop(self_.actor, reason);
}

}  // namespace omnilearn::runtime
