// Drivers sharing a stateful actor: the first creates the named replay buffer, any other finds
// it by name; each adds transitions and reads the shared totals.
//
//   omnilearn worker --load build-examples/libreplay_buffer.so
//   build-examples/replay create NAME N      # spawn NAME (capacity 10000), add N transitions
//   build-examples/replay add NAME N         # add N more to the existing NAME
//   build-examples/replay stats NAME         # print "size=S total=T"
// Each takes [--cluster-file F] [--address HOST:PORT] [--insecure] after its arguments.
#include <cstdio>
#include <string>
#include <vector>

#include "replay_buffer.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s create|add|stats NAME [N] [--cluster-file F] [--address A]\n",
                 argv[0]);
    return 2;
  }
  std::string verb = argv[1], name = argv[2];
  int count = 0;
  omnilearn::ConnectOptions options;
  for (int i = 3; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--cluster-file" && i + 1 < argc) options.cluster_file = argv[++i];
    else if (arg == "--address" && i + 1 < argc) options.address = argv[++i];
    else if (arg == "--insecure") options.insecure = true;
    else count = std::stoi(arg);
  }
  try {
    auto cluster = omnilearn::Cluster::connect(options);
    omnilearn::ActorHandle<replay::ReplayBuffer> buffer;
    if (verb == "create") {
      omnilearn::ActorOptions actor;
      actor.name = name;
      buffer = cluster.spawn<replay::ReplayBuffer>(actor, 10000);
    } else {
      buffer = cluster.get_actor<replay::ReplayBuffer>(name);
    }
    if (verb == "create" || verb == "add") {
      std::vector<replay::Transition> batch;
      for (int i = 0; i < count; ++i) {
        batch.push_back({{static_cast<float>(i), 1.0f}, i % 4, static_cast<float>(i) / 10});
      }
      int size = buffer.call(&replay::ReplayBuffer::add, batch).get(std::chrono::seconds(30));
      std::printf("added %d: size=%d\n", count, size);
    }
    int size = buffer.call(&replay::ReplayBuffer::size).get(std::chrono::seconds(30));
    auto total = buffer.call(&replay::ReplayBuffer::total_added).get(std::chrono::seconds(30));
    auto sample = buffer.call(&replay::ReplayBuffer::sample, 4, 42).get(std::chrono::seconds(30));
    std::printf("size=%d total=%lld sampled=%zu\n", size, static_cast<long long>(total),
                sample.size());
    return 0;
  } catch (const omnilearn::Error& e) {
    std::fprintf(stderr, "replay: %s\n", e.what());
    return 1;
  }
}
