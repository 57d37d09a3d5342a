#pragma once
// OmniLearn: remote tasks and actors over a cluster, from C++ (the public API).
//
// The one header a user includes. Functions and actor classes are registered by name with
// OMNILEARN_REMOTE / OMNILEARN_ACTOR in a shared library that workers load
// (`omnilearn worker --load libmy.so`) and that the driver links; a driver connects with the
// cluster file and submits tasks, spawns actors and calls them:
//
//   int square(int x) { return x * x; }
//   OMNILEARN_REMOTE(square);
//   struct Counter { explicit Counter(int start) : n(start) {} int add(int d) { return n += d; } int n; };
//   OMNILEARN_ACTOR(Counter, int);
//   OMNILEARN_REMOTE(&Counter::add);
//
//   auto cluster = omnilearn::Cluster::connect();          // ~/.omnilearn/cluster.toml
//   int nine = cluster.submit(square, 3).get();
//   auto counter = cluster.spawn<Counter>(omnilearn::ActorOptions{.name = "c"}, 10);
//   int eleven = counter.call(&Counter::add, 1).get();
//
// Arguments and results are any types with a msgpack adaptor (MSGPACK_DEFINE for a struct, or
// the standard containers and scalars); that is the only part of msgpack a user sees. Decoding
// is bounded: a malformed or oversized value is an Error, never a crash.
//
// Threads: a Cluster, its handles and futures may be used from any thread.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <typeindex>
#include <utility>
#include <vector>

#include <msgpack.hpp>

// The library is built with hidden symbols; these are what it exports.
#define OMNILEARN_API __attribute__((visibility("default")))

// The plugin boundary's revision. A worker calls into the registry of a library it loaded (the
// std::function entries of Registry, the Outcome and Error they produce), so both sides must be
// compiled from the same definitions of those types: bump this with any change to them. A
// worker refuses a library built against another number, saying so (core/executor.cpp).
#define OMNILEARN_PLUGIN_ABI 2

namespace omnilearn {

// ---------------------------------------------------------------------------------------------
// Errors: one vocabulary, thrown by Future::get and the Cluster's calls.
enum class ErrorCode : int {
  kOk = 0,
  kRemoteException = 1,  // the remote function, constructor or method (or a then() function)
                         // threw; message is its what()
  kTimeout = 2,          // no answer within the time asked for
  kNodeDied = 3,         // the node running it died (after max_retries / max_restarts)
  kInfeasible = 4,       // no node can ever satisfy the resources asked for; says what is missing
  kDisconnected = 5,     // the head cannot be reached, or this client shut down
  kNoSuchActor = 6,      // no actor with that name or id (or it died for good)
  kNotRegistered = 7,    // function, class or method unknown on this side or on the worker
  kBadValue = 8,         // arguments or result could not be decoded as the expected types
  kRefused = 9,          // the head refused the request (name taken, overloaded, ...)
  kEmptyHandle = 10,     // a default-constructed Future or ActorHandle was used
};
OMNILEARN_API std::string_view to_string(ErrorCode code);

class OMNILEARN_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(std::string(to_string(code)) + ": " + message),
        code_(code),
        message_(message) {}
  ErrorCode code() const { return code_; }
  // what() without the code's name in front.
  const std::string& message() const { return message_; }

 private:
  ErrorCode code_;
  std::string message_;
};

// ---------------------------------------------------------------------------------------------
// What a task or an actor needs from a node. Labels must all match the node's labels.
struct Resources {
  double cpus = 0;
  double gpus = 0;
  std::map<std::string, std::string> labels;
};

// How an actor is placed relative to the other actors of its `group`.
enum class Placement : int {
  kLeastLoaded = 0,  // the least-loaded feasible node
  kSpread = 1,       // prefer nodes holding no actor of the group yet
  kPack = 2,         // prefer nodes already holding actors of the group
};

struct TaskOptions {
  Resources resources{1, 0, {}};  // a task holds one CPU while it runs unless told otherwise
  int max_retries = 0;            // re-run elsewhere this many times if its node dies
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};  // the whole task, retries included
};

struct ActorOptions {
  std::string name;           // non-empty: findable with Cluster::get_actor, unique while alive
  Resources resources{};      // held for the actor's life
  int max_restarts = 0;       // re-create it (same constructor arguments) if its node dies
  Placement placement = Placement::kLeastLoaded;
  std::string group;          // actors sharing a group are spread or packed together
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};  // placement + construction
};

struct ConnectOptions {
  std::string cluster_file;  // "": $OMNILEARN_CLUSTER_FILE, else ~/.omnilearn/cluster.toml
  std::string address;       // "HOST:PORT"; "": $OMNILEARN_ADDRESS, else the cluster file's
  bool insecure = false;     // plain TCP, no cluster file (a head started with --insecure)
  std::chrono::milliseconds timeout{std::chrono::seconds(10)};  // to reach the head
};

struct NodeInfo {
  std::string name;
  Resources total;
  Resources used;
  std::vector<std::string> libraries;  // what its worker loaded (--load)
  std::vector<std::string> functions;  // registered functions, classes and methods it can run
  int running_tasks = 0;
  int actors = 0;
};

namespace detail {

// The outcome of a remote operation: a msgpack value, or an error.
struct Outcome {
  ErrorCode code = ErrorCode::kOk;
  std::string message;
  std::string value;  // msgpack bytes when code == kOk
};

// Wakes a wait_any caller when any of its futures completes.
struct Notifier {
  std::mutex mutex;
  std::condition_variable changed;
  std::uint64_t generation = 0;  // guarded by mutex
  void notify() {
    {
      std::lock_guard lock(mutex);
      ++generation;
    }
    changed.notify_all();
  }
};

// The shared state behind a Future: set once, by any thread; read by any thread.
class FutureState {
 public:
  // The first outcome wins (a reply racing a timeout); wakes the waiters, then runs the
  // completion callbacks on this thread.
  void set(Outcome outcome) {
    std::vector<std::shared_ptr<Notifier>> notify;
    std::vector<std::function<void(const Outcome&)>> callbacks;
    {
      std::lock_guard lock(mutex_);
      if (outcome_) return;
      outcome_ = std::move(outcome);
      notify.swap(notifiers_);
      callbacks.swap(callbacks_);
    }
    done_.notify_all();
    for (auto& notifier : notify) notifier->notify();
    // outcome_ never changes once set: read without the lock.
    for (auto& callback : callbacks) callback(*outcome_);
  }
  bool ready() const {
    std::lock_guard lock(mutex_);
    return outcome_.has_value();
  }
  // The outcome, or nullopt if none within `timeout`.
  std::optional<Outcome> wait_for(std::chrono::milliseconds timeout) const {
    std::unique_lock lock(mutex_);
    if (!done_.wait_for(lock, timeout, [&] { return outcome_.has_value(); })) return std::nullopt;
    return outcome_;
  }
  // Registers `notifier` to be woken once when the outcome arrives; false, registering nothing,
  // when it is here already. Whoever registers removes it again (remove_notifier).
  bool add_notifier(const std::shared_ptr<Notifier>& notifier) {
    std::lock_guard lock(mutex_);
    if (outcome_) return false;
    notifiers_.push_back(notifier);
    return true;
  }
  void remove_notifier(const Notifier* notifier) {
    std::lock_guard lock(mutex_);
    for (std::size_t i = 0; i < notifiers_.size(); ++i) {
      if (notifiers_[i].get() == notifier) {
        notifiers_[i] = std::move(notifiers_.back());
        notifiers_.pop_back();
        return;
      }
    }
  }
  // Notifiers registered now (what a waiting loop leaves behind: tests check it stays bounded).
  std::size_t notifier_count() const {
    std::lock_guard lock(mutex_);
    return notifiers_.size();
  }
  // Runs `callback` with the outcome once it is here: now, on this thread, if it is already;
  // else on the thread that sets it (an I/O or timer thread), so it must be quick and must not
  // block.
  void on_complete(std::function<void(const Outcome&)> callback) {
    {
      std::lock_guard lock(mutex_);
      if (!outcome_) {
        callbacks_.push_back(std::move(callback));
        return;
      }
    }
    callback(*outcome_);
  }
  // Set by then(): a state that only the continuation thread completes (see Future::get).
  void mark_continuation() { continuation_ = true; }
  bool is_continuation() const { return continuation_; }

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable done_;
  std::optional<Outcome> outcome_;                               // guarded by mutex_
  std::vector<std::shared_ptr<Notifier>> notifiers_;             // guarded by mutex_
  std::vector<std::function<void(const Outcome&)>> callbacks_;  // guarded by mutex_
  bool continuation_ = false;  // written before the state is shared
};

// Runs `work` on the library's continuation thread (one thread, in the order posted): where
// Future::then's functions run, never on the thread that delivered a result.
OMNILEARN_API void post_continuation(std::function<void()> work);
// True on that thread.
OMNILEARN_API bool on_continuation_thread();

// Bounded decoding of a value produced by a peer: Error(kBadValue) on any problem.
template <class T>
T decode(std::string_view bytes) {
  constexpr std::size_t kMaxItems = 1u << 20;
  constexpr std::size_t kMaxBytes = 64u << 20;
  try {
    const std::size_t items = std::min(kMaxItems, bytes.size() + 1);
    msgpack::unpack_limit limit(items, items, kMaxBytes, kMaxBytes, kMaxBytes, 32);
    std::size_t offset = 0;
    msgpack::object_handle handle =
        msgpack::unpack(bytes.data(), bytes.size(), offset, nullptr, nullptr, limit);
    if (offset != bytes.size()) throw Error(ErrorCode::kBadValue, "trailing bytes after a value");
    T value{};
    handle.get().convert(value);
    return value;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kBadValue,
                std::string("cannot decode a value as the expected type: ") + e.what());
  }
}

struct StringSink {
  std::string& out;
  void write(const char* data, std::size_t size) { out.append(data, size); }
};

template <class T>
std::string encode(const T& value) {
  std::string bytes;
  StringSink sink{bytes};
  msgpack::pack(sink, value);
  return bytes;
}

template <class T>
struct FunctionTraits;
template <class R, class... A>
struct FunctionTraits<R (*)(A...)> {
  using Result = R;
  using ArgTuple = std::tuple<std::decay_t<A>...>;
};
template <class R, class C, class... A>
struct FunctionTraits<R (C::*)(A...)> {
  using Result = R;
  using Class = C;
  using ArgTuple = std::tuple<std::decay_t<A>...>;
};
template <class R, class C, class... A>
struct FunctionTraits<R (C::*)(A...) const> : FunctionTraits<R (C::*)(A...)> {};

// Calls `fn` with the arguments decoded from `args` and returns the encoded result (nil for
// void). Throws Error(kBadValue) for undecodable arguments; the function's own exceptions pass.
template <class Result, class Args, class Call>
std::string invoke_encoded(std::string_view args, Call&& call) {
  auto decoded = decode<Args>(args);
  if constexpr (std::is_void_v<Result>) {
    std::apply(call, std::move(decoded));
    return encode(msgpack::type::nil_t());
  } else {
    return encode(std::apply(call, std::move(decoded)));
  }
}

// What a library offers: functions, actor classes and their methods, by name.
struct Registry {
  struct Function {
    std::string name;
    const void* address;
    std::function<std::string(std::string_view)> invoke;
  };
  struct Class {
    std::string name;
    std::type_index type;
    std::function<std::shared_ptr<void>(std::string_view)> create;
  };
  struct Method {
    std::string name;          // "Class::method"
    std::type_index type;      // the class
    std::string pointer;       // the member pointer's bytes: how a call site finds the name
    std::function<std::string(void*, std::string_view)> invoke;
  };
  std::mutex mutex;
  std::vector<Function> functions;  // guarded by mutex
  std::vector<Class> classes;       // guarded by mutex
  std::vector<Method> methods;      // guarded by mutex

  const Function* function(std::string_view name) {
    std::lock_guard lock(mutex);
    for (auto& f : functions) if (f.name == name) return &f;
    return nullptr;
  }
  const Class* find_class(std::string_view name) {
    std::lock_guard lock(mutex);
    for (auto& c : classes) if (c.name == name) return &c;
    return nullptr;
  }
  const Method* method(std::string_view name) {
    std::lock_guard lock(mutex);
    for (auto& m : methods) if (m.name == name) return &m;
    return nullptr;
  }
  std::string function_name(const void* address) {
    std::lock_guard lock(mutex);
    for (auto& f : functions) if (f.address == address) return f.name;
    return {};
  }
  std::string class_name(std::type_index type) {
    std::lock_guard lock(mutex);
    for (auto& c : classes) if (c.type == type) return c.name;
    return {};
  }
  std::string method_name(std::type_index type, const std::string& pointer) {
    std::lock_guard lock(mutex);
    for (auto& m : methods) if (m.type == type && m.pointer == pointer) return m.name;
    return {};
  }
  std::vector<std::string> names() {
    std::lock_guard lock(mutex);
    std::vector<std::string> all;
    for (auto& f : functions) all.push_back(f.name);
    for (auto& c : classes) all.push_back(c.name);
    for (auto& m : methods) all.push_back(m.name);
    return all;
  }
};

// One registry per program (the driver and the libraries it links share it); a library a worker
// loads with dlopen has its own, found through its plugin table (omnilearn_plugin_table).
inline Registry& registry() {
  static Registry instance;
  return instance;
}

// What a worker reads first from a library it loads: fixed-width fields in a layout that never
// changes, so that it can be read whatever header the library was built against, and a library
// the worker cannot use is refused before anything else of it is touched (core/executor.cpp).
struct PluginTable {
  std::uint32_t magic;  // kPluginMagic
  std::uint32_t abi;    // OMNILEARN_PLUGIN_ABI of the library's header
  // The layout of what crosses the boundary as the library's compiler laid it out: catches a
  // changed header whose number was not bumped, and another standard-library ABI.
  std::uint32_t registry_size;
  std::uint32_t entry_sizes;  // sizeof Registry::Function | Class << 10 | Method << 20
  std::uint32_t outcome_size;
  std::uint32_t std_abi;  // _GLIBCXX_USE_CXX11_ABI, or kUnknownStdAbi
  void* registry;
};
inline constexpr std::uint32_t kPluginMagic = 0x4c4e4d4f;  // "OMNL"
inline constexpr std::uint32_t kUnknownStdAbi = 0xffffffffu;

inline PluginTable make_plugin_table() {
  return PluginTable{
      kPluginMagic,
      OMNILEARN_PLUGIN_ABI,
      static_cast<std::uint32_t>(sizeof(Registry)),
      static_cast<std::uint32_t>(sizeof(Registry::Function) | sizeof(Registry::Class) << 10 |
                                 sizeof(Registry::Method) << 20),
      static_cast<std::uint32_t>(sizeof(Outcome)),
#ifdef _GLIBCXX_USE_CXX11_ABI
      static_cast<std::uint32_t>(_GLIBCXX_USE_CXX11_ABI),
#else
      kUnknownStdAbi,
#endif
      &registry()};
}

inline std::string remote_name(std::string_view spelled) {
  std::string name;
  for (char c : spelled) {
    if (c != '&' && c != ' ') name += c;
  }
  if (name.rfind("::", 0) == 0) name.erase(0, 2);
  return name;
}

template <class M>
std::string pointer_bytes(M pointer) {
  return std::string(reinterpret_cast<const char*>(&pointer), sizeof pointer);
}

template <class F>
bool register_remote(std::string_view spelled, F fn) {
  auto name = remote_name(spelled);
  auto& r = registry();
  if constexpr (std::is_member_function_pointer_v<F>) {
    using Traits = FunctionTraits<F>;
    using C = typename Traits::Class;
    std::lock_guard lock(r.mutex);
    r.methods.push_back(Registry::Method{
        name, std::type_index(typeid(C)), pointer_bytes(fn),
        [fn](void* self, std::string_view args) {
          return invoke_encoded<typename Traits::Result, typename Traits::ArgTuple>(
              args, [&](auto&&... a) { return (static_cast<C*>(self)->*fn)(std::move(a)...); });
        }});
  } else {
    using Traits = FunctionTraits<F>;
    std::lock_guard lock(r.mutex);
    r.functions.push_back(Registry::Function{
        name, reinterpret_cast<const void*>(fn), [fn](std::string_view args) {
          return invoke_encoded<typename Traits::Result, typename Traits::ArgTuple>(
              args, [&](auto&&... a) { return fn(std::move(a)...); });
        }});
  }
  return true;
}

template <class C, class... A>
bool register_actor(std::string_view spelled) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  r.classes.push_back(Registry::Class{
      remote_name(spelled), std::type_index(typeid(C)), [](std::string_view args) {
        auto decoded = decode<std::tuple<std::decay_t<A>...>>(args);
        return std::shared_ptr<void>(std::apply(
            [](auto&&... a) { return std::make_shared<C>(std::move(a)...); }, std::move(decoded)));
      }});
  return true;
}

// The transport to the cluster, implemented by the library.
class OMNILEARN_API Client {
 public:
  virtual ~Client() = default;
  virtual std::shared_ptr<FutureState> submit(const std::string& function, std::string args,
                                              const TaskOptions& options) = 0;
  // Places and constructs an actor; returns its id. Throws Error.
  virtual std::string spawn(const std::string& class_name, std::string args,
                            const ActorOptions& options) = 0;
  virtual std::shared_ptr<FutureState> call(const std::string& actor_id, const std::string& method,
                                            std::string args, std::chrono::milliseconds timeout,
                                            bool oneway) = 0;
  // (actor id, class name) of a named actor. Throws Error(kNoSuchActor).
  virtual std::pair<std::string, std::string> get_actor(const std::string& name) = 0;
  virtual void kill(const std::string& actor_id) = 0;
  // Resolves with the reason once the actor has ended for good.
  virtual std::shared_ptr<FutureState> monitor(const std::string& actor_id,
                                               std::chrono::milliseconds timeout) = 0;
  virtual std::vector<NodeInfo> nodes() = 0;
};

[[noreturn]] inline void throw_outcome(const Outcome& outcome) {
  throw Error(outcome.code, outcome.message);
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
namespace detail {

[[noreturn]] inline void throw_empty(const std::string& what) {
  throw Error(ErrorCode::kEmptyHandle,
              what + " on an empty Future (default-constructed): assign it the result of "
                     "submit, call or then first");
}

// What `fn` returns when given a Future<R>'s value (nothing for R = void).
template <class R, class F>
struct ThenResultOf {
  using type = std::invoke_result_t<F&, R>;
};
template <class F>
struct ThenResultOf<void, F> {
  using type = std::invoke_result_t<F&>;
};

// Runs a then() function on the continuation thread: `value` decoded as R in, its result
// encoded out, an exception as an error outcome.
template <class R, class U, class F>
Outcome run_continuation(F& fn, const std::string& value) {
  try {
    auto call = [&]() -> decltype(auto) {
      if constexpr (std::is_void_v<R>) {
        return fn();
      } else {
        return fn(decode<R>(value));
      }
    };
    if constexpr (std::is_void_v<U>) {
      call();
      return Outcome{ErrorCode::kOk, {}, encode(msgpack::type::nil_t())};
    } else {
      return Outcome{ErrorCode::kOk, {}, encode(call())};
    }
  } catch (const Error& e) {
    return Outcome{e.code(), e.message(), {}};
  } catch (const std::exception& e) {
    return Outcome{ErrorCode::kRemoteException, std::string("a then() function threw: ") + e.what(),
                   {}};
  } catch (...) {
    return Outcome{ErrorCode::kRemoteException, "a then() function threw a non-standard exception",
                   {}};
  }
}

}  // namespace detail

// A result that arrives later. Copyable; every copy sees the same outcome. A default-constructed
// Future is empty: every use but ready() and valid() throws Error(kEmptyHandle).
template <class R>
class [[nodiscard]] Future {
 public:
  Future() = default;
  explicit Future(std::shared_ptr<detail::FutureState> state) : state_(std::move(state)) {}

  // The result; throws Error (the remote error, or kTimeout if none arrives within `timeout`).
  R get(std::chrono::milliseconds timeout = std::chrono::hours(24)) const {
    const auto& state = checked("get()");
    // then() functions run one at a time on one thread: one that waited for another's result
    // would wait for itself.
    if (state->is_continuation() && detail::on_continuation_thread() && !state->ready()) {
      throw Error(ErrorCode::kRefused,
                  "a then() function waits for the result of another then(), which runs on the "
                  "same continuation thread after it: chain the two with then() instead");
    }
    auto outcome = state->wait_for(timeout);
    if (!outcome) {
      throw Error(ErrorCode::kTimeout,
                  "no result within " + std::to_string(timeout.count()) + " ms");
    }
    if (outcome->code != ErrorCode::kOk) detail::throw_outcome(*outcome);
    if constexpr (!std::is_void_v<R>) return detail::decode<R>(outcome->value);
  }
  bool ready() const { return state_ && state_->ready(); }
  // False for a default-constructed Future.
  bool valid() const { return state_ != nullptr; }

  // A Future of `fn(value)` (of `fn()` for Future<void>), called once this one's result is here,
  // on the library's continuation thread: never on the thread that delivered the result, so
  // `fn` may take its time, call the cluster and wait on other futures (not on another then()'s:
  // Error kRefused). An error, this one's or one `fn` throws, passes to the returned Future (and
  // `fn` is not called for an error). `fn`'s result type needs a msgpack adaptor, as a remote
  // function's does.
  template <class F>
  auto then(F fn) const -> Future<typename detail::ThenResultOf<R, F>::type> {
    using U = typename detail::ThenResultOf<R, F>::type;
    const auto& state = checked("then()");
    auto next = std::make_shared<detail::FutureState>();
    next->mark_continuation();
    state->on_complete([next, fn = std::move(fn)](const detail::Outcome& outcome) mutable {
      if (outcome.code != ErrorCode::kOk) {
        next->set(outcome);
        return;
      }
      detail::post_continuation([next, fn = std::move(fn), value = outcome.value]() mutable {
        next->set(detail::run_continuation<R, U>(fn, value));
      });
    });
    return Future<U>(std::move(next));
  }

  // The shared state; throws Error(kEmptyHandle) for an empty Future.
  const std::shared_ptr<detail::FutureState>& state() const { return checked("state()"); }

 private:
  const std::shared_ptr<detail::FutureState>& checked(const char* what) const {
    if (!state_) detail::throw_empty(what);
    return state_;
  }
  std::shared_ptr<detail::FutureState> state_;
};

// Waits until one of `futures` is ready; its index, or nullopt after `timeout`. The call
// registers with the pending futures for its own duration only, so a loop that waits and removes
// the ready one leaves nothing behind in the others. Throws Error(kEmptyHandle) for an empty one.
template <class R>
[[nodiscard]] std::optional<std::size_t> wait_any(const std::vector<Future<R>>& futures,
                                                  std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (std::size_t i = 0; i < futures.size(); ++i) {
    if (futures[i].state()->ready()) return i;
  }
  auto notifier = std::make_shared<detail::Notifier>();
  // Removes the notifier from every future it was added to, on every way out.
  struct Registrations {
    const detail::Notifier* notifier;
    std::vector<detail::FutureState*> states;
    ~Registrations() {
      for (auto* state : states) state->remove_notifier(notifier);
    }
  } registrations{notifier.get(), {}};
  registrations.states.reserve(futures.size());
  for (std::size_t i = 0; i < futures.size(); ++i) {
    auto* state = futures[i].state().get();
    if (!state->add_notifier(notifier)) return i;  // completed meanwhile
    registrations.states.push_back(state);
  }
  std::unique_lock lock(notifier->mutex);
  while (true) {
    // A completion from here on bumps the generation under this lock: none is missed.
    auto seen = notifier->generation;
    for (std::size_t i = 0; i < futures.size(); ++i) {
      if (futures[i].ready()) return i;
    }
    if (!notifier->changed.wait_until(lock, deadline,
                                      [&] { return notifier->generation != seen; })) {
      for (std::size_t i = 0; i < futures.size(); ++i) {
        if (futures[i].ready()) return i;
      }
      return std::nullopt;
    }
  }
}

// Waits until every future is ready; false if `timeout` passed first. Throws
// Error(kEmptyHandle) for an empty one.
template <class R>
[[nodiscard]] bool wait_all(const std::vector<Future<R>>& futures,
                            std::chrono::milliseconds timeout) {
  for (const auto& f : futures) (void)f.state();  // an empty one throws before any wait
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const auto& f : futures) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (!f.state()->wait_for(std::max(left, std::chrono::milliseconds(0)))) return false;
  }
  return true;
}

// A Future of every result, in order (nothing for Future<void>s), ready once all are; it fails
// as soon as one of them fails, with that one's error. Throws Error(kEmptyHandle) for an empty
// one.
template <class R>
auto when_all(const std::vector<Future<R>>& futures)
    -> Future<std::conditional_t<std::is_void_v<R>, void, std::vector<R>>> {
  using All = std::conditional_t<std::is_void_v<R>, void, std::vector<R>>;
  struct Join {
    std::atomic<std::size_t> left;
    std::vector<std::string> values;  // each written once, by its own future's callback
  };
  auto all = std::make_shared<detail::FutureState>();
  auto join = std::make_shared<Join>();
  join->left = futures.size();
  join->values.resize(futures.size());
  // An array of the values: msgpack's encoding of the vector, without decoding any of them.
  auto finish = [all, join] {
    if constexpr (std::is_void_v<R>) {
      all->set(detail::Outcome{ErrorCode::kOk, {}, detail::encode(msgpack::type::nil_t())});
    } else {
      std::string bytes;
      detail::StringSink sink{bytes};
      msgpack::packer<detail::StringSink> packer(sink);
      packer.pack_array(static_cast<std::uint32_t>(join->values.size()));
      for (const auto& value : join->values) bytes += value;
      all->set(detail::Outcome{ErrorCode::kOk, {}, std::move(bytes)});
    }
  };
  std::vector<detail::FutureState*> states;
  for (const auto& f : futures) states.push_back(f.state().get());  // all checked first
  if (states.empty()) finish();
  for (std::size_t i = 0; i < states.size(); ++i) {
    // Runs on the completing thread: a copy and a count, no user code.
    states[i]->on_complete([all, join, finish, i](const detail::Outcome& outcome) {
      if (outcome.code != ErrorCode::kOk) {
        all->set(outcome);
        return;
      }
      join->values[i] = outcome.value;
      if (join->left.fetch_sub(1, std::memory_order_acq_rel) == 1) finish();
    });
  }
  return Future<All>(std::move(all));
}

// ---------------------------------------------------------------------------------------------
// A reference to a remote actor. Copyable; valid across the actor's restarts. A
// default-constructed handle is empty: call, tell, kill and monitor throw Error(kEmptyHandle).
template <class A>
class ActorHandle {
 public:
  ActorHandle() = default;
  ActorHandle(std::shared_ptr<detail::Client> client, std::string id)
      : client_(std::move(client)), id_(std::move(id)) {}

  // Calls `method` on the actor; calls from one handle run in the order they were made.
  template <class M, class... Args>
  auto call(M method, Args&&... args) const
      -> Future<typename detail::FunctionTraits<M>::Result> {
    return call_with(std::chrono::minutes(10), method, std::forward<Args>(args)...);
  }
  template <class M, class... Args>
  auto call_with(std::chrono::milliseconds timeout, M method, Args&&... args) const
      -> Future<typename detail::FunctionTraits<M>::Result> {
    using Traits = detail::FunctionTraits<M>;
    static_assert(std::is_base_of_v<typename Traits::Class, A>, "a method of another class");
    check("call");
    typename Traits::ArgTuple packed{std::forward<Args>(args)...};
    return Future<typename Traits::Result>(
        client_->call(id_, name_of(method), detail::encode(packed), timeout, false));
  }
  // Fire and forget: no reply, no error report.
  template <class M, class... Args>
  void tell(M method, Args&&... args) const {
    using Traits = detail::FunctionTraits<M>;
    check("tell");
    typename Traits::ArgTuple packed{std::forward<Args>(args)...};
    // Answered at once by the client (no reply comes for a tell): nothing to wait for.
    (void)client_->call(id_, name_of(method), detail::encode(packed), std::chrono::seconds(0),
                        true);
  }
  // Ends the actor (no restart).
  void kill() const {
    check("kill");
    client_->kill(id_);
  }
  // A monitor, across nodes: resolves with why the actor ended once it has ended for good
  // (killed, or its node died or it crashed with no restarts left; a restart is not an end). At
  // once, with a reason saying so, when no such actor is running. Not ended within `timeout`:
  // get() fails with kTimeout; the head gone: kDisconnected. Any number of drivers may watch.
  Future<std::string> monitor(std::chrono::milliseconds timeout = std::chrono::hours(24)) const {
    check("monitor");
    return Future<std::string>(client_->monitor(id_, timeout));
  }
  const std::string& id() const { return id_; }
  // False for a default-constructed handle.
  bool valid() const { return client_ != nullptr; }

 private:
  void check(const char* what) const {
    if (!client_) {
      throw Error(ErrorCode::kEmptyHandle,
                  std::string(what) + " on an empty ActorHandle (default-constructed): assign "
                                      "it the result of Cluster::spawn or get_actor first");
    }
  }
  template <class M>
  static std::string name_of(M method) {
    using C = typename detail::FunctionTraits<M>::Class;
    auto name = detail::registry().method_name(std::type_index(typeid(C)),
                                               detail::pointer_bytes(method));
    if (name.empty()) {
      throw Error(ErrorCode::kNotRegistered,
                  "this method is not registered: add OMNILEARN_REMOTE(&Class::method)");
    }
    return name;
  }
  std::shared_ptr<detail::Client> client_;
  std::string id_;
};

// ---------------------------------------------------------------------------------------------
// A driver's connection to a cluster.
class OMNILEARN_API Cluster {
 public:
  // Connects to the head named by the cluster file (see ConnectOptions). Throws Error
  // (kDisconnected with the reason when it cannot be reached or the file is unusable).
  static Cluster connect(const ConnectOptions& options = {});

  template <class F, class... Args>
  auto submit(F fn, Args&&... args) -> Future<typename detail::FunctionTraits<F>::Result> {
    return submit_with(TaskOptions{}, fn, std::forward<Args>(args)...);
  }
  template <class F, class... Args>
  auto submit_with(const TaskOptions& options, F fn, Args&&... args)
      -> Future<typename detail::FunctionTraits<F>::Result> {
    using Traits = detail::FunctionTraits<F>;
    F pointer = fn;
    auto name = detail::registry().function_name(reinterpret_cast<const void*>(pointer));
    if (name.empty()) {
      throw Error(ErrorCode::kNotRegistered,
                  "this function is not registered: add OMNILEARN_REMOTE(function)");
    }
    typename Traits::ArgTuple packed{std::forward<Args>(args)...};
    return Future<typename Traits::Result>(
        client_->submit(name, detail::encode(packed), options));
  }

  // Places and constructs an actor of class A (registered with OMNILEARN_ACTOR); returns once it
  // exists. Throws Error: kInfeasible (what is missing), kRemoteException (the constructor
  // threw), kRefused (name taken), kTimeout.
  template <class A, class... Args>
  ActorHandle<A> spawn(const ActorOptions& options, Args&&... args) {
    auto name = detail::registry().class_name(std::type_index(typeid(A)));
    if (name.empty()) {
      throw Error(ErrorCode::kNotRegistered,
                  "this class is not registered: add OMNILEARN_ACTOR(Class, constructor args...)");
    }
    auto packed = std::make_tuple(std::forward<Args>(args)...);
    return ActorHandle<A>(client_, client_->spawn(name, detail::encode(packed), options));
  }

  // The named actor (alive, or being restarted). Throws Error(kNoSuchActor).
  template <class A>
  ActorHandle<A> get_actor(const std::string& name) {
    auto [id, class_name] = client_->get_actor(name);
    auto expected = detail::registry().class_name(std::type_index(typeid(A)));
    if (!expected.empty() && expected != class_name) {
      throw Error(ErrorCode::kNoSuchActor,
                  "actor '" + name + "' is a " + class_name + ", not a " + expected);
    }
    return ActorHandle<A>(client_, id);
  }

  std::vector<NodeInfo> nodes() { return client_->nodes(); }

  explicit Cluster(std::shared_ptr<detail::Client> client) : client_(std::move(client)) {}

 private:
  std::shared_ptr<detail::Client> client_;
};

}  // namespace omnilearn

// What a worker looks up in a library it loads: the library's plugin table, which says which
// revision of this header it was built against, and its registry. Weak and not inline: every
// translation unit that includes this header emits it, the linker keeps one per library, and
// dlsym finds it.
extern "C" __attribute__((weak, visibility("default"))) const omnilearn::detail::PluginTable*
omnilearn_plugin_table() {
  static const omnilearn::detail::PluginTable table = omnilearn::detail::make_plugin_table();
  return &table;
}

#define OMNILEARN_API_CONCAT_INNER(a, b) a##b
#define OMNILEARN_API_CONCAT(a, b) OMNILEARN_API_CONCAT_INNER(a, b)
// Registers a free function (`OMNILEARN_REMOTE(train)`) or a method (`OMNILEARN_REMOTE(&C::m)`)
// under its spelled name, at namespace scope.
#define OMNILEARN_REMOTE(fn)                                          \
  [[maybe_unused]] static const bool OMNILEARN_API_CONCAT(            \
      omnilearn_remote_, __COUNTER__) = ::omnilearn::detail::register_remote(#fn, fn)
// Registers an actor class constructible from the listed argument types, at namespace scope.
#define OMNILEARN_ACTOR(Class, ...)                                   \
  [[maybe_unused]] static const bool OMNILEARN_API_CONCAT(            \
      omnilearn_actor_, __COUNTER__) =                                \
      ::omnilearn::detail::register_actor<Class __VA_OPT__(, ) __VA_ARGS__>(#Class)
