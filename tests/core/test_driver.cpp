// A driver program for core_remote_test: connects, calls Counter::slow_add on the named actor,
// writes READY_FILE once the call is sent, and waits for the answer (the test kills it first).
// Usage: core_test_driver CLUSTER_FILE ADDRESS ACTOR_NAME READY_FILE
#include <cstdio>
#include <fstream>

#include <omnilearn/omnilearn.hpp>

#include "tests/core/remote_test_lib.hpp"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s CLUSTER_FILE ADDRESS ACTOR_NAME READY_FILE\n", argv[0]);
    return 2;
  }
  try {
    omnilearn::ConnectOptions options;
    options.cluster_file = argv[1];
    options.address = argv[2];
    auto cluster = omnilearn::Cluster::connect(options);
    auto actor = cluster.get_actor<remote_test::Counter>(argv[3]);
    auto pending = actor.call(&remote_test::Counter::slow_add, 1000, 1500);
    std::ofstream(argv[4]) << "sent\n";
    std::printf("%d\n", pending.get(std::chrono::seconds(30)));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "core_test_driver: %s\n", e.what());
    return 1;
  }
}
