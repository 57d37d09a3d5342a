// Ray's core microbenchmarks (ray/_private/ray_perf.py and the many_actors release test), with
// the same definitions, on the public API (include/omnilearn/omnilearn.hpp):
//
//   tasks sync          submit(noop).get() in a loop, one client
//   tasks async         batches of 1,000 submits, then wait for all, one client
//   1:1 actor sync      handle.call(noop).get() in a loop
//   1:1 actor async     batches of 1,000 calls to one actor, then wait for all
//   n:n actor async     n clients (threads with their own connection), each calling its own
//                       actor in batches; n = the number of CPUs
//   create 10k actors   10,000 spawns (0 CPUs each) from 8 client threads; wall time
//
// The cluster is real but in one process: a head ActorSystem with the TaskRouter, one worker
// ActorSystem with an Executor (this program's registry), and drivers connected through
// Cluster::connect, all over TCP on 127.0.0.1. Each figure is the median of --rounds runs.
//
// Usage: remote_bench [--rounds N] [--seconds S] [--actors N] [--only NAME]
//   NAME: tasks-sync, tasks-async, actor-sync, actor-async, nn-async, create (for profiling one)

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <omnilearn/omnilearn.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/executor.hpp"
#include "core/protocol.hpp"
#include "core/task_router.hpp"
#include "runtime/actor_system.hpp"
#include "runtime/endpoint.hpp"

namespace bench {

int noop(int x) { return x; }

class Echo {
 public:
  int noop(int x) { return x; }
};

}  // namespace bench

OMNILEARN_REMOTE(bench::noop);
OMNILEARN_ACTOR(bench::Echo);
OMNILEARN_REMOTE(&bench::Echo::noop);

namespace {

using namespace omnilearn;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

struct Options {
  int rounds = 3;
  double seconds = 2.0;
  int actors = 10000;
  std::string only;  // run just this measurement
  bool runs(const char* name) const { return only.empty() || only == name; }
};

// Runs `one` repeatedly for about `seconds`; returns operations per second.
template <class F>
double rate(double seconds, F&& batch) {
  auto start = Clock::now();
  std::size_t done = 0;
  while (seconds_since(start) < seconds) done += batch();
  return static_cast<double>(done) / seconds_since(start);
}

// A batch that does not finish would make its round's figure a lie: stop the benchmark.
template <class R>
void require_all(const std::vector<Future<R>>& batch) {
  if (!wait_all(batch, std::chrono::minutes(1))) {
    throw std::runtime_error("a batch did not finish within a minute");
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--rounds" && i + 1 < argc)
      options.rounds = std::atoi(argv[++i]);
    else if (arg == "--seconds" && i + 1 < argc)
      options.seconds = std::atof(argv[++i]);
    else if (arg == "--actors" && i + 1 < argc)
      options.actors = std::atoi(argv[++i]);
    else if (arg == "--only" && i + 1 < argc)
      options.only = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--rounds N] [--seconds S] [--actors N] [--only NAME]\n",
                   argv[0]);
      return 2;
    }
  }
  spdlog::set_level(spdlog::level::warn);
  const unsigned cpus = std::max(2u, std::thread::hardware_concurrency());

  runtime::ActorSystem head;
  auto head_endpoint = head.listen("tcp://127.0.0.1:0");
  head.spawn<core::TaskRouter>(core::kTaskRouterActor);
  runtime::ActorSystem worker;
  core::ExecutorOptions executor;
  executor.router = runtime::ActorAddress{head_endpoint, core::kTaskRouterActor};
  executor.node = "bench-worker";
  executor.resources = core::ResourceSpec{1e6, 0, {}};  // never the bottleneck
  executor.threads = cpus;
  executor.libraries.push_back(core::LoadedLibrary{"(this program)", &detail::registry(), nullptr});
  worker.spawn<core::Executor>(core::kExecutorActor, std::move(executor));

  ConnectOptions connect;
  connect.insecure = true;
  connect.address = "127.0.0.1:" + std::to_string(runtime::endpoint_port(head_endpoint));
  auto driver = Cluster::connect(connect);
  while (driver.nodes().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));

  std::printf("remote_bench: %u CPUs, %d rounds of %.1f s, loopback TCP, one worker\n", cpus,
              options.rounds, options.seconds);
  auto report = [&](const char* name, std::vector<double> figures, const char* unit) {
    std::printf("%-22s %12.0f %s   (min %.0f, max %.0f)\n", name, median(figures), unit,
                *std::min_element(figures.begin(), figures.end()),
                *std::max_element(figures.begin(), figures.end()));
    std::fflush(stdout);
  };
  TaskOptions no_cpu;
  no_cpu.resources.cpus = 0;

  std::vector<double> figures;
  if (options.runs("tasks-sync")) {
    for (int r = 0; r < options.rounds; ++r) {
      figures.push_back(rate(options.seconds, [&] {
        driver.submit_with(no_cpu, bench::noop, 1).get();
        return 1;
      }));
    }
    report("tasks sync", figures, "tasks/s");
  }

  if (options.runs("tasks-async")) {
    figures.clear();
    for (int r = 0; r < options.rounds; ++r) {
      figures.push_back(rate(options.seconds, [&] {
        std::vector<Future<int>> batch;
        batch.reserve(1000);
        for (int i = 0; i < 1000; ++i) batch.push_back(driver.submit_with(no_cpu, bench::noop, i));
        require_all(batch);
        return 1000;
      }));
    }
    report("tasks async", figures, "tasks/s");
    // How much bundling (runtime/codec.hpp) did: envelopes received per bundle received (an
    // upper bound of the bundle size: single messages count in the numerator only).
    const auto& h = head.transport_stats();
    const auto& w = worker.transport_stats();
    std::printf("%-22s received: head %.1f, worker %.1f envelopes per bundle\n", "",
                static_cast<double>(h.messages_in.load()) / std::max<double>(1, h.bundles_in.load()),
                static_cast<double>(w.messages_in.load()) / std::max<double>(1, w.bundles_in.load()));
  }

  auto actor = driver.spawn<bench::Echo>(ActorOptions{});
  if (options.runs("actor-sync")) {
    figures.clear();
    for (int r = 0; r < options.rounds; ++r) {
      figures.push_back(rate(options.seconds, [&] {
        actor.call(&bench::Echo::noop, 1).get();
        return 1;
      }));
    }
    report("1:1 actor calls sync", figures, "calls/s");
  }

  if (options.runs("actor-async")) {
    figures.clear();
    for (int r = 0; r < options.rounds; ++r) {
      figures.push_back(rate(options.seconds, [&] {
        std::vector<Future<int>> batch;
        batch.reserve(1000);
        for (int i = 0; i < 1000; ++i) batch.push_back(actor.call(&bench::Echo::noop, i));
        require_all(batch);
        return 1000;
      }));
    }
    report("1:1 actor calls async", figures, "calls/s");
  }

  if (options.runs("nn-async")) {
    figures.clear();
    for (int r = 0; r < options.rounds; ++r) {
      std::vector<Cluster> clients;
      std::vector<ActorHandle<bench::Echo>> actors;
      for (unsigned i = 0; i < cpus; ++i) {
        clients.push_back(Cluster::connect(connect));
        actors.push_back(clients.back().spawn<bench::Echo>(ActorOptions{}));
      }
      std::atomic<std::size_t> total{0};
      auto start = Clock::now();
      std::vector<std::thread> threads;
      for (unsigned i = 0; i < cpus; ++i) {
        threads.emplace_back([&, i] {
          while (seconds_since(start) < options.seconds) {
            std::vector<Future<int>> batch;
            for (int k = 0; k < 500; ++k) batch.push_back(actors[i].call(&bench::Echo::noop, k));
            require_all(batch);
            total += 500;
          }
        });
      }
      for (auto& t : threads) t.join();
      figures.push_back(static_cast<double>(total.load()) / seconds_since(start));
      for (auto& a : actors) a.kill();
    }
    report("n:n actor calls async", figures, "calls/s");
  }

  if (!options.runs("create")) return 0;
  // Creating actors: 8 client threads share the count.
  std::vector<double> create_seconds;
  for (int r = 0; r < std::min(options.rounds, 2); ++r) {
    std::vector<std::vector<ActorHandle<bench::Echo>>> made(8);
    auto start = Clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        for (int i = t; i < options.actors; i += 8) {
          made[t].push_back(driver.spawn<bench::Echo>(ActorOptions{}));
        }
      });
    }
    for (auto& t : threads) t.join();
    create_seconds.push_back(seconds_since(start));
    // Every one of them answers.
    std::vector<Future<int>> pings;
    for (auto& list : made) {
      for (auto& a : list) pings.push_back(a.call(&bench::Echo::noop, 7));
    }
    if (!wait_all(pings, std::chrono::minutes(2))) {
      std::fprintf(stderr, "remote_bench: not every actor answered\n");
      return 1;
    }
    for (auto& list : made) {
      for (auto& a : list) a.kill();
    }
  }
  std::printf("%-22s %12.2f s for %d actors (%.0f actors/s)\n", "create actors",
              median(create_seconds), options.actors, options.actors / median(create_seconds));
  return 0;
}
