#include "runtime/actor_system.hpp"

#include <pthread.h>

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

#include "runtime/actor_scheduler.hpp"
#include "runtime/mailbox.hpp"
#include "runtime/system_messages.hpp"

namespace omnilearn::runtime {

std::string new_system_id() {
  std::random_device device;
  std::mt19937_64 rng((static_cast<std::uint64_t>(device()) << 32) ^ device() ^
                      static_cast<std::uint64_t>(
                          std::chrono::steady_clock::now().time_since_epoch().count()));
  // 64 random bits in 13 base-32 digits: with the prefix 15 characters, which std::string keeps
  // inline. Every envelope carries system ids (sender, receiver); at 18 characters each copy was
  // a heap allocation, two or three per message on the receiving side alone.
  static constexpr char kDigits[] = "0123456789abcdefghijklmnopqrstuv";
  std::uint64_t bits = rng();
  std::string id = "s-";
  for (int i = 0; i < 13; ++i) {
    id += kDigits[bits & 31];
    bits >>= 5;
  }
  return id;
}

namespace {

constexpr const char* kSystemActor = "$system";

// The actor whose turn the current thread is running (nullptr outside a turn): stop() from an
// actor's own handler must not wait for that actor to finish.
thread_local const void* t_current_cell = nullptr;

// Actor code on the I/O thread (ActorSystem::Impl::run_claimed_on_io): a round of turns there
// stops after this much time, leaving the rest to the pool, so the sockets are read again soon.
constexpr auto kInlineRoundBudget = std::chrono::microseconds(500);
// An actor whose turn on the I/O thread ran past the transport's takeover limit or blocked runs
// on the pool for this long, then may try again (a preempted turn is not a slow actor).
constexpr auto kPoolAfterTakeover = std::chrono::seconds(1);

std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A single timer thread for the whole system. Expired timers hand their task to the actor's
// mailbox (or run a completion), so no user code ever runs on this thread.
//
// Two kinds of entry share the heap: timers (a task each, cancellable by id) and ask deadlines,
// which cost no allocation at all (no task, no map entry, nothing to cancel): every ask has one,
// and an answered ask's deadline is simply skipped when it comes up.
class TimerService {
 public:
  using Clock = std::chrono::steady_clock;

  // Called on the timer thread when an ask's deadline passes (the ask may have been answered).
  using AskExpired = std::function<void(std::uint64_t correlation)>;
  // Whether an ask is still waiting (for dropping the deadlines of answered ones). Called with
  // the timer lock held: it may take locks of its own, but never call back into the service.
  using AskPending = std::function<bool(std::uint64_t correlation)>;

  TimerService(AskExpired expired, AskPending pending)
      : ask_expired_(std::move(expired)),
        ask_pending_(std::move(pending)),
        thread_([this] {
          ::pthread_setname_np(::pthread_self(), "ol-timer");
          run();
        }) {}
  ~TimerService() { stop(); }

  TimerId schedule(std::chrono::milliseconds delay, std::function<void()> fire) {
    std::lock_guard lock(mutex_);
    TimerId id = ++next_id_;
    auto deadline = Clock::now() + delay;
    // The timer thread sleeps until the earliest deadline; only a new earliest one changes
    // that. (Every ask schedules a timeout: waking the thread for each cost a context switch
    // per ask.)
    bool earliest = queue_.empty() || deadline < queue_.top().deadline;
    queue_.push(Entry{deadline, id, false});
    tasks_.emplace(id, std::move(fire));
    if (earliest) changed_.notify_one();
    return id;
  }

  void schedule_ask(std::chrono::milliseconds delay, std::uint64_t correlation) {
    std::lock_guard lock(mutex_);
    auto deadline = Clock::now() + delay;
    bool earliest = queue_.empty() || deadline < queue_.top().deadline;
    queue_.push(Entry{deadline, correlation, true});
    ++live_asks_;
    if (earliest) changed_.notify_one();
  }

  // One ask fewer waits (answered, timed out or failed). Once the deadlines of answered asks
  // outnumber the live entries, the heap is rebuilt from the live ones (amortized O(1)): a
  // process answering 50,000 asks/s with 10-minute timeouts would otherwise hold 30 million.
  void ask_done() {
    std::lock_guard lock(mutex_);
    if (live_asks_ > 0) --live_asks_;
    maybe_compact_locked();
  }

  void cancel(TimerId id) {
    std::lock_guard lock(mutex_);
    if (tasks_.erase(id) == 0) return;
    maybe_compact_locked();  // a cancelled timer's entry would otherwise wait for its deadline
  }

  std::size_t heap_size() const {
    std::lock_guard lock(mutex_);
    return queue_.size();
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
    std::uint64_t id;  // a TimerId, or an ask's correlation id
    bool ask;
    bool operator>(const Entry& other) const { return deadline > other.deadline; }
  };

  void maybe_compact_locked() {
    if (queue_.size() <= 2 * (tasks_.size() + live_asks_) + 1024) return;
    std::vector<Entry> live;
    live.reserve(tasks_.size() + live_asks_);
    while (!queue_.empty()) {
      const Entry& entry = queue_.top();
      if (entry.ask ? ask_pending_(entry.id) : tasks_.count(entry.id) > 0) live.push_back(entry);
      queue_.pop();
    }
    queue_ = decltype(queue_)(std::greater<>(), std::move(live));
  }

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
      if (next.ask) {
        lock.unlock();
        ask_expired_(next.id);
        lock.lock();
        continue;
      }
      auto it = tasks_.find(next.id);
      if (it == tasks_.end()) continue;  // cancelled
      auto fire = std::move(it->second);
      tasks_.erase(it);
      lock.unlock();
      fire();
      lock.lock();
    }
  }

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue_;  // guarded by mutex_
  std::unordered_map<TimerId, std::function<void()>> tasks_;             // guarded by mutex_
  TimerId next_id_ = 0;
  std::size_t live_asks_ = 0;  // ask deadlines scheduled and not yet done
  bool stopping_ = false;
  AskExpired ask_expired_;
  AskPending ask_pending_;
  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace

struct ActorSystem::Impl {
  struct Cell {
    std::unique_ptr<Actor> actor;
    Mailbox mailbox;
    ActorAddress address;
    std::string stop_reason = "stopped";  // guarded by Impl::mutex
    bool started = false;                 // touched only by the thread holding the claim
    bool crashed = false;                 // the same: a handler threw, the actor must finish
    bool runs_inline = false;             // Actor::runs_inline(), read once at spawn
    // Its turns may run on the I/O thread from this steady_now_ns() on (kPoolAfterTakeover).
    std::atomic<std::int64_t> inline_after{0};
    std::promise<void> finished;  // set once on_stop ran and watchers were told
    std::shared_future<void> finished_future = finished.get_future().share();
  };

  // A callback run on whichever thread completes the ask (ask_then).
  struct InlineCallback {
    AskCallback callback;
  };
  struct PendingAsk {
    std::variant<std::promise<AskResult>, std::pair<std::weak_ptr<Cell>, AskCallback>,
                 InlineCallback>
        waiter;
    std::chrono::milliseconds timeout{0};
    // Who was asked: a system id, or the endpoint the request went to. Only a reply from there
    // completes the ask (a stale or forged correlation id from another peer is dropped).
    std::string asked;
  };

  SystemOptions options;
  std::string id;
  std::unique_ptr<Transport> transport;
  // Its thread only calls these once asks exist, i.e. after the constructor has finished.
  TimerService timers{[this](std::uint64_t correlation) { time_out(correlation); },
                      [this](std::uint64_t correlation) {
                        std::lock_guard lock(mutex);
                        return pending.count(correlation) > 0;
                      }};
  std::atomic<std::uint64_t> next_correlation{1};
  std::atomic<std::uint64_t> dead_letters{0};
  std::atomic<std::uint64_t> refused_in_flight{0};
  std::atomic<std::uint64_t> mismatched_replies{0};
  // remote system -> what it has waiting in mailboxes here (see max_in_flight_per_peer)
  std::unordered_map<std::string, std::shared_ptr<InFlightCounter>> in_flight;  // guarded by mutex

  mutable std::mutex mutex;
  std::unordered_map<std::string, std::shared_ptr<Cell>> cells;      // guarded by mutex
  std::unordered_map<std::uint64_t, PendingAsk> pending;             // guarded by mutex
  // target actor name -> watchers (local or remote) to tell when it stops
  std::map<std::string, std::set<ActorAddress>> watchers;            // guarded by mutex
  // remote system -> (watcher, target) pairs to fire on declare_system_down
  std::map<std::string, std::set<std::pair<ActorAddress, ActorAddress>>> remote_watches;
  // Runs every actor's turns (runtime/actor_scheduler.hpp); created by the constructor.
  std::unique_ptr<ActorScheduler> scheduler;
  // Actors claimed by the I/O thread while it dispatched a round of reads: their turns run there
  // at the round's end (run_claimed_on_io). Touched only by the thread holding the I/O role (a
  // takeover hands them on with the role: the transport orders the two threads' accesses).
  std::vector<std::shared_ptr<Cell>> claimed_on_io;
  std::size_t claimed_next = 0;  // the next of claimed_on_io to run
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
    timers.ask_done();
    if (auto* promise = std::get_if<std::promise<AskResult>>(&entry.waiter)) {
      promise->set_value(std::move(result));
    } else if (auto* inline_callback = std::get_if<InlineCallback>(&entry.waiter)) {
      inline_callback->callback(std::move(result));
    } else {
      auto& [weak_cell, callback] = std::get<1>(entry.waiter);
      if (auto cell = weak_cell.lock()) {
        deliver(cell, Letter{std::nullopt,
                             [callback = std::move(callback), result = std::move(result)]() mutable {
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
      if (!reply_from_asked_peer(envelope)) {
        mismatched_replies.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      result.reply = std::move(envelope);
      complete(result.reply.correlation, std::move(result));
      return;
    }
    if (envelope.to.actor == kSystemActor) {
      handle_system_message(envelope);
      return;
    }
    if (envelope.kind == MessageKind::kDown && envelope.from_network) forget_remote_watch(envelope);
    std::shared_ptr<Cell> cell;
    InFlightSlot slot;
    bool over_limit = false;
    {
      std::lock_guard lock(mutex);
      auto it = cells.find(envelope.to.actor);
      if (it != cells.end()) cell = it->second;
      if (cell && envelope.from.system != id) {
        slot = take_in_flight_slot(envelope.from.system, size_of(envelope));
        over_limit = !slot;
      }
    }
    if (over_limit) {
      refuse_over_limit(envelope);
      return;
    }
    if (cell) {
      Letter letter{std::move(envelope), {}, std::move(slot)};
      if (deliver(cell, std::move(letter))) return;
      envelope = std::move(*letter.envelope);
    }
    dead_letters.fetch_add(1, std::memory_order_relaxed);
    if (envelope.correlation != 0) {
      owner->reply(envelope, ErrorReply{"no-such-actor", "no actor named '" + envelope.to.actor +
                                                             "' on system " + id});
    }
  }

  // A reply completes an ask only if it comes from the peer that was asked: the system id the
  // request was addressed to, or the peer behind the endpoint it was sent to.
  bool reply_from_asked_peer(const Envelope& reply) {
    std::lock_guard lock(mutex);
    auto it = pending.find(reply.correlation);
    if (it == pending.end()) return true;  // late or duplicate: complete() ignores it
    const std::string& asked = it->second.asked;
    if (asked.empty()) return true;
    // From this very system (a request that went out to our own endpoint and was answered
    // here) is the peer asked, too.
    return reply.from.system == asked || (!reply.arrived_via.empty() && reply.arrived_via == asked) ||
           (!reply.from_network && reply.from.system == id);
  }

  // Registers a pending ask with its timeout and returns its correlation id.
  std::uint64_t register_ask(Envelope& request, std::chrono::milliseconds timeout,
                             decltype(PendingAsk::waiter) waiter) {
    auto correlation = next_correlation.fetch_add(1);
    request.correlation = correlation;
    {
      std::lock_guard lock(mutex);
      auto& entry = pending[correlation];
      entry.waiter = std::move(waiter);
      entry.timeout = timeout;
      entry.asked = request.to.system.empty() ? id : request.to.system;
    }
    timers.schedule_ask(timeout, correlation);
    return correlation;
  }

  void time_out(std::uint64_t correlation) {
    std::chrono::milliseconds timeout{0};
    {
      std::lock_guard lock(mutex);
      auto it = pending.find(correlation);
      if (it == pending.end()) return;  // answered meanwhile
      timeout = it->second.timeout;
    }
    AskResult result;
    result.status = AskResult::Status::kTimeout;
    result.error = fmt::format("no reply within {} ms", timeout.count());
    complete(correlation, std::move(result));
  }

  // A Down from a remote system ends that watch: without this, every watch of a remote actor
  // that stopped on its own stayed in remote_watches until its whole system was declared down
  // (and then fired a second, stale Down).
  void forget_remote_watch(const Envelope& envelope) {
    auto down = unpack_payload<Down>(envelope.payload);
    if (!down) return;
    std::lock_guard lock(mutex);
    for (const auto* key : {&envelope.from.system, &envelope.arrived_via}) {
      if (key->empty()) continue;
      auto it = remote_watches.find(*key);
      if (it == remote_watches.end()) continue;
      std::erase_if(it->second, [&](const auto& watch) {
        return watch.first.actor == envelope.to.actor && watch.second.actor == down->actor;
      });
      if (it->second.empty()) remote_watches.erase(it);
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

  // Caller holds mutex. An empty slot when `peer` is at its limit; otherwise one that frees
  // itself when the letter holding it is destroyed (handled or dropped).
  InFlightSlot take_in_flight_slot(const std::string& peer, std::size_t bytes) {
    if (in_flight.size() > 65536 && !in_flight.count(peer)) {
      // Bounded like the transport's routes: forget peers with nothing waiting.
      std::erase_if(in_flight, [](const auto& entry) { return entry.second->messages == 0; });
    }
    auto& counter = in_flight[peer];
    if (!counter) counter = std::make_shared<InFlightCounter>();
    if (counter->messages.load() >= options.max_in_flight_per_peer ||
        (counter->messages.load() > 0 &&
         counter->bytes.load() + bytes > options.max_in_flight_bytes_per_peer)) {
      return {};
    }
    return InFlightSlot(counter, bytes);
  }

  void handle_system_message(const Envelope& envelope) {
    if (envelope.kind == MessageKind::kMonitor) {
      auto request = unpack_payload<MonitorRequest>(envelope.payload);
      if (!request) return owner->refuse_undecodable(envelope);
      add_watcher(ActorAddress{envelope.from.system, request->watcher_actor},
                  request->target_actor);
    } else if (envelope.kind == MessageKind::kPing) {
      auto ping = unpack_payload<Ping>(envelope.payload);
      if (!ping) return owner->refuse_undecodable(envelope);
      if (envelope.correlation != 0) owner->reply(envelope, Pong{ping->sequence});
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

  // Queues `letter` for `cell`'s actor and schedules a turn if the actor was idle. False (and
  // `letter` untouched) when the actor has stopped. Any thread.
  bool deliver(const std::shared_ptr<Cell>& cell, Letter&& letter) {
    switch (cell->mailbox.push(std::move(letter))) {
      case Mailbox::Push::kRejected: return false;
      case Mailbox::Push::kQueued: return true;
      case Mailbox::Push::kClaimed:
        // Claimed on the I/O thread while it dispatches what it read: the turn runs there once
        // the round is dispatched, rather than on a pool thread that would have to be woken and
        // would hand its replies back to this one (two thread hand-offs per message).
        if (t_current_cell == nullptr && Transport::on_io_thread() && transport->holds_io_role() &&
            cell->inline_after.load(std::memory_order_relaxed) <= steady_now_ns()) {
          claimed_on_io.push_back(cell);
        } else {
          schedule_turn(cell);
        }
        return true;
    }
    return true;
  }

  // The I/O thread, after a round of reads (Transport's burst handler): the turns of the actors
  // it claimed meanwhile, each watched by the transport's standby. What the round's budget does
  // not cover goes to the pool. When the role is taken over during a turn (it ran long or
  // blocked), the rest of the list is the new leader's: it runs them in its first round, so no
  // claimed actor is stranded behind a stuck one; the slow actor runs on the pool for a while.
  void run_claimed_on_io() {
    const auto round_end = std::chrono::steady_clock::now() + kInlineRoundBudget;
    while (claimed_next < claimed_on_io.size()) {
      if (std::chrono::steady_clock::now() >= round_end) {
        while (claimed_next < claimed_on_io.size()) schedule_turn(claimed_on_io[claimed_next++]);
        break;
      }
      std::shared_ptr<Cell> cell = std::move(claimed_on_io[claimed_next++]);
      if (!transport->run_inline([&] { run_turn(cell, /*inline_turn=*/true); })) {
        // Taken over: claimed_on_io belongs to the new leader now; touch only `cell`.
        if (!cell->runs_inline) {
          cell->inline_after.store(
              steady_now_ns() +
                  std::chrono::duration_cast<std::chrono::nanoseconds>(kPoolAfterTakeover).count(),
              std::memory_order_relaxed);
        }
        return;
      }
    }
    claimed_on_io.clear();  // keeps its capacity: no allocation per round
    claimed_next = 0;
  }

  // Only the holder of the cell's claim calls this.
  void schedule_turn(const std::shared_ptr<Cell>& cell) {
    scheduler->schedule([this, cell] { run_turn(cell); });
  }

  // One turn of an actor on a pool thread: on_start the first time, then up to a batch of
  // letters; then the actor goes back to the end of the run queue if it still holds its claim.
  // An inline turn (on the I/O thread, deliver()) is shorter, and leaves starting and finishing
  // to the pool: on_start and on_stop may block, and an actor's destruction may join threads.
  void run_turn(const std::shared_ptr<Cell>& cell, bool inline_turn = false) {
    struct CurrentCell {
      explicit CurrentCell(const void* cell) { t_current_cell = cell; }
      ~CurrentCell() { t_current_cell = nullptr; }
    } current(cell.get());
    auto& actor = *cell->actor;
    if (inline_turn && (!cell->started || cell->crashed)) {
      schedule_turn(cell);
      return;
    }
    if (cell->crashed) {
      finish(cell);
      return;
    }
    if (!cell->started) {
      cell->started = true;
      try {
        actor.on_start();
      } catch (const std::exception& e) {
        spdlog::error("actor {}: on_start failed: {}", cell->address.actor, e.what());
        set_reason(*cell, std::string("failed to start: ") + e.what());
        finish(cell);
        return;
      }
    }
    const std::size_t batch = scheduler->batch();
    for (std::size_t i = 0; i < batch; ++i) {
      Letter letter;
      switch (cell->mailbox.take(letter)) {
        case Mailbox::Take::kReleased: return;
        case Mailbox::Take::kFinished:
          if (inline_turn) {
            schedule_turn(cell);
          } else {
            finish(cell);
          }
          return;
        case Mailbox::Take::kLetter: break;
      }
      try {
        if (letter.envelope) {
          actor.on_message(*letter.envelope);
        } else if (letter.task) {
          letter.task();
        }
      } catch (const std::exception& e) {
        // Let it crash: the actor ends and its monitors learn why.
        spdlog::error("actor {}: handler failed: {}", cell->address.actor, e.what());
        set_reason(*cell, std::string("crashed: ") + e.what());
        if (letter.envelope && letter.envelope->correlation != 0 && !letter.envelope->is_reply()) {
          owner->reply(*letter.envelope, ErrorReply{"internal", e.what()});
        }
        cell->crashed = true;
        cell->mailbox.close();
        if (inline_turn) {
          schedule_turn(cell);
        } else {
          finish(cell);
        }
        return;
      }
    }
    // Still claimed: another turn if letters wait (or it must finish), else let go of it here,
    // without a trip through the run queue.
    if (!cell->mailbox.release_if_empty()) schedule_turn(cell);
  }

  // The actor's last turn: no more letters, on_stop, unregister, tell the watchers.
  void finish(const std::shared_ptr<Cell>& cell) {
    cell->mailbox.close();
    try {
      cell->actor->on_stop();
    } catch (const std::exception& e) {
      spdlog::error("actor {}: on_stop failed: {}", cell->address.actor, e.what());
    }
    retire(cell);
  }

  void set_reason(Cell& cell, std::string reason) {
    std::lock_guard lock(mutex);
    cell.stop_reason = std::move(reason);
  }

  // Runs on the actor's last turn: unregister, notify watchers.
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
  check_message_types();  // a name collision stops the process here, at start
  impl_->options = std::move(options);
  std::size_t threads = impl_->options.actor_threads;
  if (threads == 0) threads = std::max<std::size_t>(2, std::thread::hardware_concurrency());
  impl_->scheduler = std::make_unique<ActorScheduler>(threads);
  impl_->owner = this;
  impl_->id = impl_->options.system_id.empty() ? new_system_id() : impl_->options.system_id;
  TransportOptions transport_options;
  transport_options.system_id = impl_->id;
  transport_options.limits = impl_->options.limits;
  transport_options.credentials = impl_->options.credentials;
  transport_options.inline_takeover = impl_->options.inline_takeover;
  impl_->transport = std::make_unique<Transport>(
      transport_options, [impl = impl_.get()](Envelope&& e) { impl->dispatch(std::move(e)); },
      [impl = impl_.get()](const Envelope& e, const std::string& why) {
        impl->undeliverable(e, why);
      },
      [impl = impl_.get()] { impl->run_claimed_on_io(); });
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
  cell->runs_inline = cell->actor->runs_inline();
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->shut_down) throw std::runtime_error("actor system is shut down");
    if (!impl_->cells.emplace(name, cell).second) {
      throw std::invalid_argument("an actor named '" + name + "' already exists");
    }
  }
  impl_->schedule_turn(cell);  // a new mailbox is claimed: its first turn runs on_start
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
  if (cell->mailbox.close()) impl_->schedule_turn(cell);
  if (t_current_cell != cell.get()) {
    // Waiting for another actor's on_stop from a pool thread: the pool keeps a thread free to
    // run it.
    ActorScheduler::BlockingScope blocking;
    cell->finished_future.wait();
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
  if (request.from.actor.empty()) request.from.actor = "$ask";
  impl_->register_ask(request, timeout, std::move(promise));
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
  impl_->register_ask(request, timeout,
                      std::make_pair(std::weak_ptr<Impl::Cell>(cell), std::move(on_reply)));
  send(std::move(request));
}

void ActorSystem::ask_then(Envelope request, std::chrono::milliseconds timeout,
                           AskCallback on_reply) {
  if (request.from.actor.empty()) request.from.actor = "$ask";
  impl_->register_ask(request, timeout, Impl::InlineCallback{std::move(on_reply)});
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
  return impl_->timers.schedule(delay, [impl = impl_.get(), weak_cell,
                                        task = std::move(task)]() mutable {
    if (auto cell = weak_cell.lock()) impl->deliver(cell, Letter{std::nullopt, std::move(task), {}});
  });
}

void ActorSystem::cancel_timer(TimerId id) { impl_->timers.cancel(id); }

const TransportStats& ActorSystem::transport_stats() const { return impl_->transport->stats(); }

void ActorSystem::set_send_fence(Transport::SendFence fence) {
  impl_->transport->set_send_fence(std::move(fence));
}

void ActorSystem::refuse_undecodable(const Envelope& request, bool answer) {
  impl_->transport->count_malformed_payload();
  if (!answer || request.correlation == 0 || request.is_reply()) return;
  reply(request, ErrorReply{"bad-request",
                            fmt::format("system {} could not decode the {} payload ({} bytes) "
                                        "sent to actor '{}': a malformed message, or a sender "
                                        "built from another version",
                                        impl_->id, kind_name(request.kind), request.payload.size(),
                                        request.to.actor)});
}

SystemStats ActorSystem::stats() const {
  SystemStats stats;
  // Outside the system's lock: the timer service takes it under its own (lock order: timers,
  // then the system).
  stats.actor_threads = impl_->scheduler->threads();
  stats.timer_entries = impl_->timers.heap_size();
  std::lock_guard lock(impl_->mutex);
  for (const auto& [system, set] : impl_->remote_watches) stats.remote_watches += set.size();
  stats.dead_letters = impl_->dead_letters.load();
  stats.actors = impl_->cells.size();
  stats.pending_asks = impl_->pending.size();
  stats.refused_in_flight = impl_->refused_in_flight.load();
  stats.mismatched_replies = impl_->mismatched_replies.load();
  return stats;
}

void ActorSystem::shutdown() {
  std::vector<std::shared_ptr<Impl::Cell>> cells;
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->shut_down) return;
    impl_->shut_down = true;
    for (auto& [name, cell] : impl_->cells) cells.push_back(cell);
  }
  for (auto& cell : cells) {
    if (cell->mailbox.close()) impl_->schedule_turn(cell);
  }
  {
    ActorScheduler::BlockingScope blocking;
    for (auto& cell : cells) {
      // Called from an actor's handler: that actor ends on its own after this letter.
      if (cell.get() != t_current_cell) cell->finished_future.wait();
    }
  }
  impl_->scheduler->stop();
  impl_->timers.stop();
  impl_->transport->stop();
  // Whoever still waits on an ask learns that no reply will come.
  std::unordered_map<std::uint64_t, Impl::PendingAsk> orphans;
  {
    std::lock_guard lock(impl_->mutex);
    orphans.swap(impl_->pending);
  }
  for (auto& [correlation, entry] : orphans) {
    AskResult result;
    result.status = AskResult::Status::kError;
    result.error = "actor system shut down";
    if (auto* promise = std::get_if<std::promise<AskResult>>(&entry.waiter)) {
      promise->set_value(std::move(result));
    } else if (auto* inline_callback = std::get_if<Impl::InlineCallback>(&entry.waiter)) {
      inline_callback->callback(std::move(result));
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
  // The actor finishes after the current letter and whatever is already queued.
  system_->stop(self_.actor, reason);
}

}  // namespace omnilearn::runtime
