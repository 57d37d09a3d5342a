// ASP parameter-server push/pull throughput against raw ZeroMQ moving the same
// bytes, side by side in one run, with CURVE on and off, for 1 and 2 shards.
//
// One update is what an ASP worker does per batch with the gradient compute left out: pull
// every shard (a small request, the shard's N_s float32 bytes back), then push every shard (the
// N_s-byte gradient slice, a small reply). The shards' requests go out together and the replies
// are awaited after, per step, as the trainer's worker does (pull_all, then the pushes).
//
//   actor  the servers are jobs/asp_server_actor (AspServerActor, ServerCore, the shard
//          copied once into the pull's frame) in their own processes, one per shard; the worker
//          is this process, asking them from outside any actor with ActorSystem::ask_envelope
//          exactly as the trainer's worker does: the push's attachment a runtime::Bytes::view
//          into one shared gradient buffer (no copy on the send side), each pulled frame
//          copied once into a flat parameter buffer (the trainer copies it into the model).
//   raw    the same pattern over cppzmq: one ROUTER process per shard, one DEALER per shard
//          here, the same frames (the runtime's encoded headers for each message, then the
//          float32 frame), the gradient sent zero-copy, the same copies on both sides.
//
// Both servers do the same work per push: plain SGD over the shard (p -= lr g, a loop over the
// floats), standing for the optimizer step a real server pays; the figures printed first say
// what that loop and the pull's copy cost alone. What differs between the two paths is the
// runtime: envelopes, mailboxes, the actor's turn, ServerCore's bookkeeping, asks.
//
// CURVE: the actor systems get the cluster's CurveKeys through SystemOptions::credentials (as
// every process of a closed cluster does); the raw sockets use the same keys (a ROUTER with
// curve_server, DEALERs with the server's public key); the ROUTER there has no ZAP handler,
// which only matters at the handshake, not per message.
//
// Every run starts every configuration's processes and connections afresh; within a run,
// blocks of the raw and the actor path alternate per configuration, so both see the same
// machine load; a run reports the medians of its blocks, the summary the median and min..max
// over runs.
//
// Usage: asp_bench [--rounds RUNS] [--blocks N] [--updates PER_BLOCK] [--parameters N]
//                  [--shards 1,2] [--security plain,curve]
// Default N: 235,146, the project's MLP 784-256-128-10 (0.94 MB float32).

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "wire/asp_protocol.hpp"
#include "jobs/asp_server_actor.hpp"
#include "asp/shard_layout.hpp"
#include "bench/runtime/bench_stats.hpp"
#include "runtime/actor_system.hpp"
#include "runtime/codec.hpp"
#include "runtime/security.hpp"
#include "runtime/shutdown.hpp"
#include "tests/support/child_process.hpp"

namespace {

using namespace omnilearn;
using runtime::ActorAddress;
using runtime::Envelope;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::int64_t kDefaultParameters = 235146;  // MLP 784-256-128-10
constexpr float kLr = 1e-4f;
constexpr float kGradient = 1e-3f;  // every gradient entry: parameters drift slowly, stay finite
constexpr std::int64_t kBatch = 32;
const char* const kJob = "bench";

using bench::median;
using bench::min_max;
using bench::seconds_since;

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) items.push_back(item);
  return items;
}

// The server work both paths do per push: SGD over the shard.
void sgd(float* parameters, const float* gradient, std::size_t n, float step) {
  for (std::size_t i = 0; i < n; ++i) parameters[i] -= step * gradient[i];
}

// The runtime's header frame for a message like those the actor path sends: the raw path
// puts the same bytes on the wire.
template <class M>
std::string header(const M& message, bool reply) {
  Envelope e;
  e.kind = runtime::kind_of<M>();
  e.to.actor = reply ? "" : actors::kAspServerActor;
  e.from = ActorAddress{"s-0123456789abcde", reply ? actors::kAspServerActor : ""};
  e.correlation = 1234567;
  e.flags = reply ? Envelope::kReply : Envelope::kNone;
  e.payload = runtime::pack_payload(message);
  return runtime::encode_header(e);
}

// CURVE keys reach the server processes through the environment (fresh per run).
constexpr const char* kKeyVars[4] = {"ASP_BENCH_SERVER_PUBLIC", "ASP_BENCH_SERVER_SECRET",
                                     "ASP_BENCH_CLIENT_PUBLIC", "ASP_BENCH_CLIENT_SECRET"};

std::vector<std::string> key_env(const runtime::ClusterCredentials& c) {
  const std::string values[4] = {c.server.public_key, c.server.secret_key, c.client.public_key,
                                 c.client.secret_key};
  std::vector<std::string> env;
  for (int i = 0; i < 4; ++i) env.push_back(std::string(kKeyVars[i]) + "=" + values[i]);
  return env;
}

runtime::ClusterCredentials keys_from_env() {
  std::string values[4];
  for (int i = 0; i < 4; ++i) {
    const char* v = std::getenv(kKeyVars[i]);
    if (!v) throw std::runtime_error(std::string("--curve 1 needs ") + kKeyVars[i]);
    values[i] = v;
  }
  return runtime::ClusterCredentials{{values[0], values[1]}, {values[2], values[3]}};
}

void print_endpoint(const std::string& endpoint) {
  std::printf("endpoint %s\n", endpoint.c_str());
  std::fflush(stdout);
}

// ---------------------------------------------------------------------------------------------
// Server roles (the second processes): shard `shard` of `shards` over `parameters` floats.

int serve_actor(const asp::ShardSlice& slice, int shard, bool curve) {
  runtime::block_shutdown_signals();
  spdlog::set_level(spdlog::level::warn);
  runtime::SystemOptions options;
  if (curve) options.credentials = keys_from_env();
  runtime::ActorSystem system(options);
  auto parameters =
      std::make_shared<std::vector<float>>(static_cast<std::size_t>(slice.size), 0.5f);
  actors::AspServerConfig config;
  config.job = kJob;
  config.trainer = "bench-s" + std::to_string(shard);
  config.shard = shard;
  config.slice = slice;  // linear lr scaling (the default): every push names B and n
  auto apply = [parameters](std::int64_t, double scale, std::span<const float> g) {
    sgd(parameters->data(), g.data(), g.size(), kLr * static_cast<float>(scale));
  };
  system.spawn(actors::kAspServerActor, std::make_unique<actors::AspServerActor>(
                                            config, std::span<float>(*parameters), apply));
  print_endpoint(system.listen("tcp://127.0.0.1:0"));
  runtime::wait_for_shutdown_signal(std::chrono::hours(24));
  return 0;
}

int serve_raw(const asp::ShardSlice& slice, int shard, bool curve) {
  std::vector<float> parameters(static_cast<std::size_t>(slice.size), 0.5f);
  const std::size_t bytes = parameters.size() * sizeof(float);
  actors::AspPullReply pulled;
  pulled.ok = true;
  pulled.shard = shard;
  pulled.offset = slice.offset;
  pulled.size = slice.size;
  const std::string pull_reply = header(pulled, true);
  actors::AspPushReply pushed;
  pushed.status = actors::AspPushReply::kApplied;
  pushed.scale = 1;
  const std::string push_reply = header(pushed, true);

  zmq::context_t context(1);
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  if (curve) {
    const auto keys = keys_from_env();
    router.set(zmq::sockopt::curve_server, true);
    router.set(zmq::sockopt::curve_secretkey, keys.server.secret_key);
  }
  router.bind("tcp://127.0.0.1:*");
  print_endpoint(router.get(zmq::sockopt::last_endpoint));
  std::vector<zmq::message_t> frames;
  while (true) {
    frames.clear();
    if (!zmq::recv_multipart(router, std::back_inserter(frames))) continue;
    if (frames.size() == 2) {  // identity, pull: the shard, copied once into the frame
      router.send(frames[0], zmq::send_flags::sndmore);
      router.send(zmq::buffer(pull_reply), zmq::send_flags::sndmore);
      router.send(zmq::message_t(parameters.data(), bytes), zmq::send_flags::none);
    } else if (frames.size() == 3 && frames[2].size() == bytes) {  // identity, push, gradient
      sgd(parameters.data(), static_cast<const float*>(frames[2].data()), parameters.size(), kLr);
      router.send(frames[0], zmq::send_flags::sndmore);
      router.send(zmq::buffer(push_reply), zmq::send_flags::none);
    } else {
      std::fprintf(stderr, "raw server: unexpected message of %zu frames\n", frames.size());
      return 1;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The worker side (this process).

struct Server {
  omnilearn::testing::ChildProcess process;
  std::string endpoint;
};

Server start_server(const std::string& role, std::int64_t parameters, int shards, int shard,
                    const std::optional<runtime::ClusterCredentials>& keys) {
  omnilearn::testing::ProcessOptions options;
  options.name = role + "-s" + std::to_string(shard) + "/" + std::to_string(shards);
  if (keys) options.env = key_env(*keys);
  omnilearn::testing::ChildProcess process(
      {std::filesystem::read_symlink("/proc/self/exe").string(), "--serve", role, "--parameters",
       std::to_string(parameters), "--shards", std::to_string(shards), "--shard",
       std::to_string(shard), "--curve", keys ? "1" : "0"},
      options);
  auto line = process.wait_for_output("endpoint ", 20s);
  if (!line) throw std::runtime_error("server " + role + " did not start:\n" + process.describe());
  return Server{std::move(process), line->substr(9)};
}

// What both workers share: the flat vector pulled into, the gradient pushed from.
struct WorkerBuffers {
  explicit WorkerBuffers(std::int64_t n)
      : parameters(static_cast<std::size_t>(n)),
        gradient(std::make_shared<std::vector<float>>(static_cast<std::size_t>(n), kGradient)) {}
  std::vector<float> parameters;
  std::shared_ptr<std::vector<float>> gradient;  // views of it travel as push attachments
};

class ActorWorker {
 public:
  ActorWorker(const std::vector<std::string>& endpoints, const asp::ShardLayout& layout,
              const std::optional<runtime::ClusterCredentials>& keys, WorkerBuffers& buffers)
      : system_([&] {
          runtime::SystemOptions options;
          options.credentials = keys;
          return options;
        }()),
        endpoints_(endpoints),
        layout_(layout),
        buffers_(buffers) {
    run(20);  // connect (the CURVE handshake) and warm up
  }

  // Seconds for `updates` updates.
  double run(int updates) {
    const auto start = Clock::now();
    for (int u = 0; u < updates; ++u) update();
    return seconds_since(start);
  }

 private:
  Envelope to_server(std::size_t s, runtime::MessageKind kind, std::string payload) {
    return system_.make_envelope(ActorAddress{endpoints_[s], actors::kAspServerActor}, kind,
                                 std::move(payload), {});
  }

  void update() {
    const std::size_t shards = endpoints_.size();
    std::vector<std::future<runtime::AskResult>> asks;
    for (std::size_t s = 0; s < shards; ++s) {
      asks.push_back(system_.ask_envelope(
          to_server(s, runtime::kind_of<actors::AspPull>(),
                    runtime::pack_payload(actors::AspPull{kJob, static_cast<std::int32_t>(s)})),
          5s));
    }
    std::vector<asp::Version> versions(shards);
    for (std::size_t s = 0; s < shards; ++s) {
      const runtime::AskResult result = asks[s].get();
      auto r = result.as<actors::AspPullReply>();
      const asp::ShardSlice slice = layout_.slice(static_cast<int>(s));
      const std::size_t bytes = static_cast<std::size_t>(slice.size) * sizeof(float);
      if (!r || !r->ok || result.reply.attachments.size() != 1 ||
          result.reply.attachments[0].size() != bytes) {
        throw std::runtime_error("actor pull from shard " + std::to_string(s) +
                                 " failed: " + (r ? r->error : result.error));
      }
      // As the trainer's worker: one copy, from the received frame into the parameters.
      std::memcpy(buffers_.parameters.data() + slice.offset, result.reply.attachments[0].data(),
                  bytes);
      versions[s] = asp::Version{r->incarnation, r->version};
    }
    asks.clear();
    for (std::size_t s = 0; s < shards; ++s) {
      const asp::ShardSlice slice = layout_.slice(static_cast<int>(s));
      actors::AspPush push{kJob,         static_cast<std::int32_t>(s),
                           /*worker=*/1, versions[s].incarnation,      versions[s].number, kBatch,
                           kBatch,
                           /*workers=*/1};
      auto envelope =
          to_server(s, runtime::kind_of<actors::AspPush>(), runtime::pack_payload(push));
      // The trainer's push path: a view of the shared gradient buffer, no copy.
      envelope.attachments.push_back(runtime::Bytes::view(
          buffers_.gradient,
          reinterpret_cast<const char*>(buffers_.gradient->data() + slice.offset),
          static_cast<std::size_t>(slice.size) * sizeof(float)));
      asks.push_back(system_.ask_envelope(std::move(envelope), 5s));
    }
    for (std::size_t s = 0; s < shards; ++s) {
      const runtime::AskResult result = asks[s].get();
      auto r = result.as<actors::AspPushReply>();
      if (!r || r->status != actors::AspPushReply::kApplied) {
        throw std::runtime_error("actor push to shard " + std::to_string(s) +
                                 " failed: " + (r ? r->error : result.error));
      }
    }
  }

  runtime::ActorSystem system_;
  std::vector<std::string> endpoints_;
  asp::ShardLayout layout_;
  WorkerBuffers& buffers_;
};

class RawWorker {
 public:
  RawWorker(const std::vector<std::string>& endpoints, const asp::ShardLayout& layout,
            const std::optional<runtime::ClusterCredentials>& keys, WorkerBuffers& buffers)
      : layout_(layout), buffers_(buffers) {
    pull_ = header(actors::AspPull{kJob, 0}, false);
    push_ = header(actors::AspPush{kJob, 0, 1, 0, 0, kBatch, kBatch, 1}, false);
    for (const auto& endpoint : endpoints) {
      dealers_.emplace_back(context_, zmq::socket_type::dealer);
      auto& dealer = dealers_.back();
      dealer.set(zmq::sockopt::linger, 0);
      dealer.set(zmq::sockopt::rcvtimeo, 30000);
      if (keys) {
        dealer.set(zmq::sockopt::curve_serverkey, keys->server.public_key);
        dealer.set(zmq::sockopt::curve_publickey, keys->client.public_key);
        dealer.set(zmq::sockopt::curve_secretkey, keys->client.secret_key);
      }
      dealer.connect(endpoint);
    }
    run(20);
  }

  double run(int updates) {
    const auto start = Clock::now();
    for (int u = 0; u < updates; ++u) update();
    return seconds_since(start);
  }

 private:
  void update() {
    const std::size_t shards = dealers_.size();
    for (auto& dealer : dealers_) dealer.send(zmq::buffer(pull_), zmq::send_flags::none);
    std::vector<zmq::message_t> frames;
    for (std::size_t s = 0; s < shards; ++s) {
      frames.clear();
      const asp::ShardSlice slice = layout_.slice(static_cast<int>(s));
      const std::size_t bytes = static_cast<std::size_t>(slice.size) * sizeof(float);
      if (!zmq::recv_multipart(dealers_[s], std::back_inserter(frames)) || frames.size() != 2 ||
          frames[1].size() != bytes) {
        throw std::runtime_error("raw pull from shard " + std::to_string(s) + " failed");
      }
      std::memcpy(buffers_.parameters.data() + slice.offset, frames[1].data(), bytes);
    }
    for (std::size_t s = 0; s < shards; ++s) {
      const asp::ShardSlice slice = layout_.slice(static_cast<int>(s));
      dealers_[s].send(zmq::buffer(push_), zmq::send_flags::sndmore);
      // Zero-copy, as the runtime hands a Bytes to the socket: ZeroMQ references the buffer
      // (it outlives the run and is never written) instead of copying it.
      zmq::message_t body(
          buffers_.gradient->data() + slice.offset,
          static_cast<std::size_t>(slice.size) * sizeof(float), [](void*, void*) {}, nullptr);
      dealers_[s].send(body, zmq::send_flags::none);
    }
    for (std::size_t s = 0; s < shards; ++s) {
      zmq::message_t reply;
      if (!dealers_[s].recv(reply)) {
        throw std::runtime_error("raw push to shard " + std::to_string(s) + " got no reply");
      }
    }
  }

  zmq::context_t context_{1};
  std::vector<zmq::socket_t> dealers_;
  asp::ShardLayout layout_;
  WorkerBuffers& buffers_;
  std::string pull_, push_;
};

// One configuration: its servers (both kinds) and both workers, started afresh for every run
// (new processes, new connections): how fast a path goes depended on the setup as well (on this
// 2-core VM, one setup's raw CURVE path ran 15-25% slower than another's, block after block),
// so the spread over runs includes the setups'.
struct Setup {
  int shards = 1;
  bool curve = false;
  std::vector<Server> actor_servers, raw_servers;
  std::unique_ptr<ActorWorker> actor;
  std::unique_ptr<RawWorker> raw;
  // Per run: the medians of the blocks.
  std::vector<double> run_raw, run_actor, run_ratio;

  std::string name() const {
    return std::to_string(shards) + (shards == 1 ? " shard, " : " shards, ") +
           (curve ? "CURVE" : "plain");
  }

  void start(std::int64_t parameters, const std::optional<runtime::ClusterCredentials>& keys,
             WorkerBuffers& buffers) {
    const asp::ShardLayout layout(parameters, shards);
    std::vector<std::string> actor_endpoints, raw_endpoints;
    for (int s = 0; s < shards; ++s) {
      actor_servers.push_back(start_server("actor", parameters, shards, s, keys));
      actor_endpoints.push_back(actor_servers.back().endpoint);
      raw_servers.push_back(start_server("raw", parameters, shards, s, keys));
      raw_endpoints.push_back(raw_servers.back().endpoint);
    }
    actor = std::make_unique<ActorWorker>(actor_endpoints, layout, keys, buffers);
    raw = std::make_unique<RawWorker>(raw_endpoints, layout, keys, buffers);
  }
  // The workers first (their systems shut down while the servers still answer), then the
  // servers (killed and reaped by ChildProcess).
  void stop() {
    actor.reset();
    raw.reset();
    actor_servers.clear();
    raw_servers.clear();
  }
};

// Microseconds of `work` (median of 51 runs).
template <class Work>
double time_us(Work&& work) {
  std::vector<double> us;
  for (int i = 0; i < 51; ++i) {
    const auto start = Clock::now();
    work();
    us.push_back(seconds_since(start) * 1e6);
  }
  return median(us);
}

std::string load_average() {
  std::ifstream l("/proc/loadavg");
  std::string a, b, c;
  l >> a >> b >> c;
  return a + " " + b + " " + c;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  for (int i = 1; i + 1 < argc; i += 2) flags[argv[i]] = argv[i + 1];
  auto flag = [&](const char* name, const std::string& fallback) {
    return flags.count(name) ? flags[name] : fallback;
  };
  try {
    const std::int64_t parameters =
        std::stoll(flag("--parameters", std::to_string(kDefaultParameters)));
    if (flags.count("--serve")) {
      const int shards = std::stoi(flag("--shards", "1"));
      const int shard = std::stoi(flag("--shard", "0"));
      const bool curve = flag("--curve", "0") == "1";
      const asp::ShardSlice slice = asp::ShardLayout(parameters, shards).slice(shard);
      if (flags["--serve"] == "actor") return serve_actor(slice, shard, curve);
      if (flags["--serve"] == "raw") return serve_raw(slice, shard, curve);
      std::fprintf(stderr, "unknown role %s (actor or raw)\n", flags["--serve"].c_str());
      return 2;
    }
    spdlog::set_level(spdlog::level::warn);
    const int rounds = std::stoi(flag("--rounds", "5"));
    const int blocks = std::stoi(flag("--blocks", "4"));
    const int updates = std::stoi(flag("--updates", "100"));
    if (rounds < 1 || blocks < 1 || updates < 1 || parameters < 2) {
      std::fprintf(stderr, "--rounds, --blocks and --updates need >= 1, --parameters >= 2\n");
      return 2;
    }
    std::vector<int> shard_counts;
    for (const auto& s : split(flag("--shards", "1,2"))) shard_counts.push_back(std::stoi(s));
    std::vector<bool> securities;
    for (const auto& s : split(flag("--security", "plain,curve"))) {
      if (s != "plain" && s != "curve") {
        std::fprintf(stderr, "--security takes plain and/or curve, not %s\n", s.c_str());
        return 2;
      }
      if (s == "curve" && !runtime::curve_available()) {
        std::fprintf(stderr, "this libzmq has no CURVE: measuring plain only\n");
        continue;
      }
      securities.push_back(s == "curve");
    }
    const double mb_per_update = 2.0 * static_cast<double>(parameters) * sizeof(float) / 1e6;

    std::printf("asp_bench: %" PRId64
                " parameters (%.2f MB float32; %.2f MB moved per update, pull + "
                "push), %d runs of %d blocks x %d updates, %ld CPUs online, load average %s\n",
                parameters, mb_per_update / 2, mb_per_update, rounds, blocks, updates,
                sysconf(_SC_NPROCESSORS_ONLN), load_average().c_str());
    {
      // What both paths' servers and workers do besides messaging, for scale.
      std::vector<float> p(static_cast<std::size_t>(parameters), 0.5f), g(p.size(), kGradient),
          q(p.size());
      const double sgd_us = time_us([&] { sgd(p.data(), g.data(), p.size(), kLr); });
      const double copy_us = time_us([&] { std::memcpy(q.data(), p.data(), p.size() * 4); });
      std::printf(
          "work besides messaging, per update, both paths (here, one core): SGD over all shards "
          "%.0f us, the pull's copy into the frame %.0f us and out of it %.0f us\n",
          sgd_us, copy_us, copy_us);
    }

    const auto keys = runtime::curve_available()
                          ? std::optional(runtime::generate_cluster_credentials())
                          : std::nullopt;
    WorkerBuffers buffers(parameters);
    std::vector<Setup> setups;
    for (int shards : shard_counts) {
      for (bool curve : securities) {
        Setup setup;
        setup.shards = shards;
        setup.curve = curve;
        setups.push_back(std::move(setup));
      }
    }

    std::printf("\n== per run: medians of the blocks (updates/s; MB/s = updates/s x %.2f)\n",
                mb_per_update);
    std::printf("%4s  %-18s %10s %10s %10s %10s %10s   %s\n", "run", "config", "raw upd/s",
                "actor upd/s", "raw MB/s", "actor MB/s", "actor/raw", "(block ratios)");
    for (int r = 0; r < rounds; ++r) {
      for (auto& setup : setups) {
        setup.start(parameters, setup.curve ? keys : std::nullopt, buffers);
      }
      for (auto& setup : setups) {
        std::vector<double> raw, actor, ratio;
        for (int b = 0; b < blocks; ++b) {
          double z = 0, a = 0;
          auto do_raw = [&] { z = updates / setup.raw->run(updates); };
          auto do_actor = [&] { a = updates / setup.actor->run(updates); };
          if ((r + b) % 2 == 0) {  // alternate which path goes first
            do_raw();
            do_actor();
          } else {
            do_actor();
            do_raw();
          }
          raw.push_back(z);
          actor.push_back(a);
          ratio.push_back(a / z);
        }
        setup.run_raw.push_back(median(raw));
        setup.run_actor.push_back(median(actor));
        setup.run_ratio.push_back(median(ratio));
        std::printf("%4d  %-18s %10.1f %10.1f %10.0f %10.0f %10.2f   (%s)\n", r + 1,
                    setup.name().c_str(), setup.run_raw.back(), setup.run_actor.back(),
                    setup.run_raw.back() * mb_per_update, setup.run_actor.back() * mb_per_update,
                    setup.run_ratio.back(), min_max(ratio).c_str());
        std::fflush(stdout);
      }
      for (auto& setup : setups) setup.stop();
    }

    std::printf("\n== summary: median over %d runs (min..max)\n", rounds);
    std::printf("%-18s %22s %22s %10s %10s %20s\n", "config", "raw upd/s", "actor upd/s",
                "raw MB/s", "actor MB/s", "actor/raw");
    for (const auto& setup : setups) {
      std::printf("%-18s %8.1f (%s) %8.1f (%s) %10.0f %10.0f %6.2f (%s)\n", setup.name().c_str(),
                  median(setup.run_raw), min_max(setup.run_raw, "%.0f").c_str(),
                  median(setup.run_actor), min_max(setup.run_actor, "%.0f").c_str(),
                  median(setup.run_raw) * mb_per_update, median(setup.run_actor) * mb_per_update,
                  median(setup.run_ratio), min_max(setup.run_ratio).c_str());
    }
    std::printf("load average at the end: %s\n", load_average().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "asp_bench: %s\n", e.what());
    return 1;
  }
}
