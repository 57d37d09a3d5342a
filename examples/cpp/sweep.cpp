// A hyper-parameter sweep over the cluster: one task per (learning rate, L2, epochs) point,
// results collected as they finish, the best printed last.
//
//   omnilearn worker --load build-examples/libsweep_tasks.so     # on every worker
//   build-examples/sweep [--cluster-file F] [--address HOST:PORT] [--insecure]
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "sweep_tasks.hpp"

int main(int argc, char** argv) {
  omnilearn::ConnectOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--cluster-file" && i + 1 < argc) options.cluster_file = argv[++i];
    else if (arg == "--address" && i + 1 < argc) options.address = argv[++i];
    else if (arg == "--insecure") options.insecure = true;
    else {
      std::fprintf(stderr, "usage: %s [--cluster-file F] [--address HOST:PORT] [--insecure]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    auto cluster = omnilearn::Cluster::connect(options);
    std::vector<omnilearn::Future<sweep::TrialResult>> futures;
    omnilearn::TaskOptions task;
    task.max_retries = 2;  // a worker that dies costs a retry, not the sweep
    std::uint64_t seed = 1;
    for (double lr : {0.3, 0.1, 0.03, 0.01, 0.001}) {
      for (double l2 : {0.0, 0.001, 0.1}) {
        for (int epochs : {1, 3}) {
          futures.push_back(
              cluster.submit_with(task, sweep::train, sweep::Trial{lr, l2, epochs, seed++}));
        }
      }
    }
    if (!omnilearn::wait_all(futures, std::chrono::minutes(10))) {
      std::fprintf(stderr, "sweep: not every trial finished within 10 minutes\n");
      return 1;
    }
    sweep::TrialResult best;
    for (auto& future : futures) {
      auto result = future.get();
      std::printf("trial lr=%-6g l2=%-6g epochs=%d  accuracy=%.4f loss=%.4f  on %s\n",
                  result.trial.learning_rate, result.trial.l2, result.trial.epochs,
                  result.accuracy, result.loss, result.node.c_str());
      if (result.accuracy > best.accuracy) best = result;
    }
    std::printf("best: lr=%g l2=%g epochs=%d accuracy=%.4f (%zu trials)\n",
                best.trial.learning_rate, best.trial.l2, best.trial.epochs, best.accuracy,
                futures.size());
    return 0;
  } catch (const omnilearn::Error& e) {
    std::fprintf(stderr, "sweep: %s\n", e.what());
    return 1;
  }
}
