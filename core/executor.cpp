#include "core/executor.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <omnilearn/omnilearn.hpp>

#include "runtime/actor_system.hpp"

namespace omnilearn::core {
namespace {

TaskResult error_result(ErrorCode code, std::string message) {
  return TaskResult{static_cast<int>(code), std::move(message), {}};
}

// Runs `invoke` and turns its outcome into a TaskResult: a value, or the exception's message.
template <class F>
TaskResult guarded(F&& invoke) {
  try {
    return TaskResult{0, {}, invoke()};
  } catch (const omnilearn::Error& e) {
    return error_result(e.code() == ErrorCode::kBadValue ? ErrorCode::kBadValue
                                                         : ErrorCode::kRemoteException,
                        e.what());
  } catch (const std::exception& e) {
    return error_result(ErrorCode::kRemoteException, e.what());
  } catch (...) {
    return error_result(ErrorCode::kRemoteException, "a non-standard exception was thrown");
  }
}

// The first entry `lookup` finds in the loaded libraries' registries, in load order; nullptr if
// none has it.
template <class Lookup>
auto find_registered(const std::vector<LoadedLibrary>& libraries, Lookup lookup)
    -> decltype(lookup(*libraries.front().registry)) {
  for (const auto& library : libraries) {
    if (auto* found = lookup(*library.registry)) return found;
  }
  return nullptr;
}

}  // namespace

LoadedLibrary load_library(const std::string& path) {
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = ::dlerror();
    throw std::runtime_error(fmt::format("cannot load library {}: {}", path, why ? why : "?"));
  }
  auto refuse = [&](const std::string& why) {
    ::dlclose(handle);
    throw std::runtime_error(fmt::format("cannot use library {}: {}", path, why));
  };
  using Entry = const omnilearn::detail::PluginTable* (*)();
  auto entry = reinterpret_cast<Entry>(::dlsym(handle, "omnilearn_plugin_table"));
  if (!entry) {
    if (::dlsym(handle, "omnilearn_registry_v1")) {
      refuse(fmt::format("it was built against an older OmniLearn header (plugin ABI 1; this "
                         "worker's is {}): rebuild it against the header installed with this "
                         "OmniLearn",
                         OMNILEARN_PLUGIN_ABI));
    }
    ::dlclose(handle);
    throw std::runtime_error(fmt::format(
        "library {} registers no remote functions (it does not include "
        "<omnilearn/omnilearn.hpp>, or was not built against OmniLearn)",
        path));
  }
  // Read field by field before anything else: the table's layout is the one thing every
  // revision of the header shares.
  const omnilearn::detail::PluginTable* table = entry();
  const omnilearn::detail::PluginTable ours = omnilearn::detail::make_plugin_table();
  if (!table || table->magic != omnilearn::detail::kPluginMagic) {
    refuse("its omnilearn_plugin_table is not an OmniLearn plugin table");
  }
  if (table->abi != ours.abi) {
    refuse(fmt::format("it was built against an OmniLearn header of plugin ABI {}, and this "
                       "worker runs ABI {}: rebuild the library against the header installed "
                       "with this OmniLearn (the one `omnilearn --version` belongs to)",
                       table->abi, ours.abi));
  }
  if (table->registry_size != ours.registry_size || table->entry_sizes != ours.entry_sizes ||
      table->outcome_size != ours.outcome_size || table->std_abi != ours.std_abi) {
    refuse(fmt::format(
        "its compiler laid out the header's types differently (registry {} bytes, entries "
        "{:#x}, outcome {} bytes, _GLIBCXX_USE_CXX11_ABI {}; this worker: {}, {:#x}, {}, {}): "
        "rebuild it with the same compiler and standard-library settings as OmniLearn, from "
        "the header installed with it",
        table->registry_size, table->entry_sizes, table->outcome_size, table->std_abi,
        ours.registry_size, ours.entry_sizes, ours.outcome_size, ours.std_abi));
  }
  auto* registry = static_cast<omnilearn::detail::Registry*>(table->registry);
  if (registry->names().empty()) {
    ::dlclose(handle);
    throw std::runtime_error(fmt::format(
        "library {} registers no remote functions or actors (use OMNILEARN_REMOTE / "
        "OMNILEARN_ACTOR)",
        path));
  }
  return LoadedLibrary{path, registry, handle};
}

struct Executor::Hosted {
  std::string class_name;
  std::shared_ptr<void> instance;  // written and read only on `queue`
  std::shared_ptr<SerialQueue> queue;
};

Executor::Executor(ExecutorOptions options) : options_(std::move(options)) {
  std::size_t threads = options_.threads;
  if (threads == 0) {
    threads = std::max<std::size_t>(2, static_cast<std::size_t>(std::ceil(options_.resources.cpus)));
  }
  pool_ = std::make_unique<WorkPool>(threads);
}

Executor::~Executor() {
  // Instances first, on this thread: the pool finishes what is queued, then joins.
  pool_.reset();
  hosted_.clear();
}

void Executor::on_start() { hello(); }

void Executor::hello() {
  ExecutorHello message;
  message.node = options_.node;
  message.total = options_.resources;
  for (const auto& library : options_.libraries) {
    message.libraries.push_back(library.path);
    for (auto& name : library.registry->names()) message.functions.push_back(name);
  }
  // Sent again every interval: a restarted head (or one that declared this node dead and saw it
  // come back) learns about this executor without any handshake state here.
  tell(options_.router, message);
  after(options_.hello_interval, [this] { hello(); });
}

void Executor::on_message(const runtime::Envelope& message) {
  using runtime::MessageKind;
  switch (message.kind) {
    case MessageKind::kSubmitTask:
      if (auto task = decode<SubmitTask>(message)) {
        run_task(message, std::move(*task));
      }
      break;
    case MessageKind::kCreateActor:
      if (auto request = decode<CreateActor>(message)) {
        create_actor(message, std::move(*request));
      }
      break;
    case MessageKind::kActorCall:
      if (auto call = decode<ActorCall>(message)) {
        call_actor(message, std::move(*call));
      }
      break;
    case MessageKind::kKillActor:
      if (auto kill = decode<KillActor>(message)) {
        std::shared_ptr<Hosted> hosted;
        {
          std::lock_guard lock(mutex_);
          auto it = hosted_.find(kill->actor_id);
          if (it != hosted_.end()) {
            hosted = it->second;
            hosted_.erase(it);
          }
        }
        // Destroyed on its own queue, after the calls already queued.
        if (hosted) hosted->queue->post([hosted] { hosted->instance.reset(); });
      }
      break;
    default:
      break;
  }
}

void Executor::run_task(const runtime::Envelope& message, SubmitTask task) {
  const auto* function = find_registered(
      options_.libraries, [&](auto& registry) { return registry.function(task.function); });
  auto* system = &this->system();
  if (!function) {
    system->reply(message, error_result(ErrorCode::kNotRegistered,
                                        fmt::format("node {} has no function '{}' (load the "
                                                    "library that registers it with --load)",
                                                    options_.node, task.function)));
    return;
  }
  pool_->post([system, request = reply_handle(message), function, args = std::move(task.args)] {
    system->reply(request, guarded([&] { return function->invoke(args); }));
  });
}

void Executor::create_actor(const runtime::Envelope& message, CreateActor request) {
  const auto* cls = find_registered(
      options_.libraries, [&](auto& registry) { return registry.find_class(request.class_name); });
  auto* system = &this->system();
  if (!cls) {
    system->reply(message, error_result(ErrorCode::kNotRegistered,
                                        fmt::format("node {} has no actor class '{}'",
                                                    options_.node, request.class_name)));
    return;
  }
  auto hosted = std::make_shared<Hosted>();
  hosted->class_name = request.class_name;
  hosted->queue = std::make_shared<SerialQueue>(*pool_);
  {
    std::lock_guard lock(mutex_);
    hosted_[request.actor_id] = hosted;  // a re-creation (restart) replaces a stale instance
  }
  hosted->queue->post([this, system, message = reply_handle(message), cls, hosted,
                       id = request.actor_id,
                       args = std::move(request.args)] {
    auto result = guarded([&] {
      hosted->instance = cls->create(args);
      return std::string();
    });
    if (result.code != 0) {
      std::lock_guard lock(mutex_);
      auto it = hosted_.find(id);
      if (it != hosted_.end() && it->second == hosted) hosted_.erase(it);
    }
    system->reply(message, result);
  });
}

void Executor::call_actor(const runtime::Envelope& message, ActorCall call) {
  std::shared_ptr<Hosted> hosted;
  {
    std::lock_guard lock(mutex_);
    auto it = hosted_.find(call.actor_id);
    if (it != hosted_.end()) hosted = it->second;
  }
  auto* system = &this->system();
  if (!hosted) {
    if (!call.oneway) {
      system->reply(message, error_result(ErrorCode::kNoSuchActor,
                                          fmt::format("no actor {} on node {}", call.actor_id,
                                                      options_.node)));
    }
    return;
  }
  const auto* method = find_registered(
      options_.libraries, [&](auto& registry) { return registry.method(call.method); });
  if (!method) {
    if (!call.oneway) {
      system->reply(message, error_result(ErrorCode::kNotRegistered,
                                          fmt::format("node {} has no method '{}'", options_.node,
                                                      call.method)));
    }
    return;
  }
  hosted->queue->post([system, message = reply_handle(message), method, hosted,
                       oneway = call.oneway, args = std::move(call.args)] {
    auto result = guarded([&] {
      if (!hosted->instance) throw std::runtime_error("the actor was stopped");
      return method->invoke(hosted->instance.get(), args);
    });
    if (!oneway) system->reply(message, result);
  });
}

}  // namespace omnilearn::core
