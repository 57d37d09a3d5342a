#pragma once
// Executor: the actor on a worker that runs remote functions and hosts remote actors for the
// cluster's task router. Functions come from libraries the worker loaded (LoadedLibrary) and
// run on a fixed WorkPool; each hosted actor instance has a SerialQueue on that pool, so its
// methods run one at a time, in arrival order, and thousands of actors share the pool's threads.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/protocol.hpp"
#include "core/work_pool.hpp"
#include "runtime/actor.hpp"

namespace omnilearn::detail {
struct Registry;
}

namespace omnilearn::core {

// A shared library a worker loaded with --load, and the registry it exports.
struct LoadedLibrary {
  std::string path;
  omnilearn::detail::Registry* registry = nullptr;
  void* handle = nullptr;  // from dlopen; kept open for the life of the process
};

// Loads `path` (dlopen) and finds its registry through its plugin table (omnilearn_plugin_table).
// Throws std::runtime_error with dlopen's reason, saying the library registers nothing, or
// refusing a library built against another revision of <omnilearn/omnilearn.hpp> (its plugin
// ABI number or the layout of the types it hands over differ from this worker's).
LoadedLibrary load_library(const std::string& path);

struct ExecutorOptions {
  runtime::ActorAddress router;  // {head endpoint, kTaskRouterActor}
  std::string node;              // the worker's name
  ResourceSpec resources;
  std::vector<LoadedLibrary> libraries;
  std::size_t threads = 0;       // 0: one per advertised CPU (at least 2)
  std::chrono::milliseconds hello_interval{1000};
};

class Executor : public runtime::Actor {
 public:
  explicit Executor(ExecutorOptions options);
  ~Executor() override;

  void on_start() override;
  void on_message(const runtime::Envelope& message) override;
  // Its handlers only hand work to the WorkPool: they may run on the I/O thread.
  bool runs_inline() const override { return true; }

 private:
  struct Hosted;
  void hello();
  void run_task(const runtime::Envelope& message, SubmitTask task);
  void create_actor(const runtime::Envelope& message, CreateActor request);
  void call_actor(const runtime::Envelope& message, ActorCall call);

  ExecutorOptions options_;
  std::unique_ptr<WorkPool> pool_;  // before hosted_: queues hold a reference to it
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Hosted>> hosted_;  // by actor id; guarded by mutex_
};

}  // namespace omnilearn::core
