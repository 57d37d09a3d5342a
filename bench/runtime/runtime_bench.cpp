// Cross-process runtime benchmarks, each measured side by side with its baseline in one run:
//
//   pingpong   round trip actor -> remote actor -> actor, vs a raw ZeroMQ DEALER/ROUTER
//              ping-pong with the same bytes on the wire (target: actor <= 1.5 x raw); also
//              ActorSystem::ask from a plain thread to the remote $system actor
//   oneway     small actor messages from one process to another, vs raw ZeroMQ
//              (target: actor >= 0.40 x raw, and >= 200,000 msg/s)
//   heartbeat  CPU time of a real `omnilearn head` while simulated nodes heartbeat it
//              (reported per 1,000 heartbeats/s), and the wall time to register them, with
//              the head's state in memory, in its SQLite store and in etcd (when installed),
//              run alternately
//
// The far side of each measurement is a real second process: this binary re-executed with
// --serve ROLE. Within a run, short blocks of the baseline and the actor path alternate, so both
// see the same machine load; a run reports the medians of its blocks and of the per-block
// ratios, and the summary the median and min..max over runs.
//
// Usage: runtime_bench [--rounds RUNS] [--blocks N] [--only pingpong|oneway|heartbeat]
//                      [--pingpong-iters ROUND_TRIPS_PER_BLOCK] [--oneway-messages PER_RUN]
//                      [--nodes N,N,...] [--heartbeat-seconds S] [--heartbeat-tell 1]
//                      [--omnilearn PATH] [--inline-actors 1]

#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "wire/membership_protocol.hpp"
#include "bench/runtime/bench_stats.hpp"
#include "runtime/actor_system.hpp"
#include "runtime/shutdown.hpp"
#include "runtime/system_messages.hpp"
#include "tests/support/child_process.hpp"
#include "tests/support/etcd.hpp"

namespace {

using namespace omnilearn;
using runtime::ActorAddress;
using runtime::Envelope;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

using bench::median;
using bench::min_max;
using bench::seconds_since;

// A Ping envelope encoded exactly as the actor path puts it on the wire; the raw baselines send
// the same bytes so both sides move the same amount of data.
std::string encoded_ping() {
  Envelope e;
  e.kind = runtime::MessageKind::kPing;
  e.to.actor = "echo";
  e.from = ActorAddress{"s-0123456789abcdef", "pinger"};
  e.payload = runtime::pack_payload(runtime::Ping{123456});
  return runtime::encode_envelope(e)[0];
}

// ---------------------------------------------------------------------------------------------
// Server roles (the second process).

void print_endpoint(const std::string& endpoint) {
  std::printf("endpoint %s\n", endpoint.c_str());
  std::fflush(stdout);
}

// Both one-way sinks acknowledge every kAckEvery messages, and senders keep at most kWindow
// unacknowledged: sustained throughput under flow control, well below the runtime's per-peer
// send queue (TransportOptions::send_high_water_mark, 10,000 messages; ZeroMQ may enforce its
// high-water mark 60-70% earlier), beyond which tells are dropped (and counted).
constexpr std::uint64_t kAckEvery = 500;
constexpr std::uint64_t kWindow = 2000;

// Raw ZeroMQ: a ROUTER that echoes every message back to its sender. In "sink" mode it counts
// messages instead, acknowledging every kAckEvery (an 8-byte count) and the last one.
int serve_raw(bool sink) {
  zmq::context_t context(1);
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.bind("tcp://127.0.0.1:*");
  print_endpoint(router.get(zmq::sockopt::last_endpoint));
  std::uint64_t count = 0, expect = 0;
  while (true) {
    zmq::message_t identity, body;
    if (!router.recv(identity)) continue;
    if (!router.recv(body)) continue;
    if (!sink) {
      router.send(identity, zmq::send_flags::sndmore);
      router.send(body, zmq::send_flags::none);
      continue;
    }
    if (body.size() == sizeof(std::uint64_t)) {  // "expect N" control message starts a run
      std::memcpy(&expect, body.data(), sizeof expect);
      count = 0;
      continue;
    }
    if (++count % kAckEvery == 0 || count == expect) {
      router.send(identity, zmq::send_flags::sndmore);
      router.send(zmq::buffer(&count, sizeof count), zmq::send_flags::none);
    }
  }
}

// --inline-actors 1: every actor of the benchmark declares itself non-blocking
// (Actor::runs_inline), so messages from the network are handled on the I/O thread; the
// default measures actors on the pool, as most actors run.
bool g_inline_actors = false;

// Actor echo: replies to every Ping with a Pong to the sender.
class EchoActor : public runtime::Actor {
 public:
  bool runs_inline() const override { return g_inline_actors; }
  void on_message(const Envelope& message) override {
    if (message.kind != runtime::MessageKind::kPing) return;
    auto ping = runtime::unpack_payload<runtime::Ping>(message.payload);
    if (ping) tell(message.from, runtime::Pong{ping->sequence});
  }
};

// Actor sink: counts Pings after a Blob announced how many will come; answers Pong{count}
// every kAckEvery and at the last one.
class SinkActor : public runtime::Actor {
 public:
  bool runs_inline() const override { return g_inline_actors; }
  void on_message(const Envelope& message) override {
    if (message.kind == runtime::MessageKind::kBlob) {
      expect_ = runtime::unpack_payload<std::uint64_t>(message.payload).value_or(0);
      count_ = 0;
      return;
    }
    if (message.kind != runtime::MessageKind::kPing) return;
    if (++count_ % kAckEvery == 0 || count_ == expect_) tell(message.from, runtime::Pong{count_});
  }

 private:
  std::uint64_t count_ = 0;
  std::uint64_t expect_ = 0;
};

int serve_actors() {
  runtime::block_shutdown_signals();
  spdlog::set_level(spdlog::level::warn);
  runtime::ActorSystem system;
  system.spawn<EchoActor>("echo");
  system.spawn<SinkActor>("sink");
  print_endpoint(system.listen("tcp://127.0.0.1:0"));
  runtime::wait_for_shutdown_signal(std::chrono::hours(24));
  return 0;
}

// ---------------------------------------------------------------------------------------------
// The measuring side.

struct Server {
  omnilearn::testing::ChildProcess process;
  std::string endpoint;
};

Server start_server(const std::string& role) {
  omnilearn::testing::ProcessOptions options;
  options.name = role;
  omnilearn::testing::ChildProcess process(
      {std::filesystem::read_symlink("/proc/self/exe").string(), "--serve", role}, options);
  auto line = process.wait_for_output("endpoint ", 20s);
  if (!line) throw std::runtime_error("server " + role + " did not start:\n" + process.describe());
  return Server{std::move(process), line->substr(9)};
}

// On-CPU time and voluntary context switches of every thread of a process, from
// /proc/PID/task/*/{schedstat,status}: nanosecond CPU accounting, and the switch count is the
// number of times a thread blocked — i.e. how many thread wake-ups a message path needs.
struct ProcStats {
  double cpu_s = 0;
  double switches = 0;
  ProcStats operator-(const ProcStats& o) const { return {cpu_s - o.cpu_s, switches - o.switches}; }
  ProcStats& operator+=(const ProcStats& o) {
    cpu_s += o.cpu_s;
    switches += o.switches;
    return *this;
  }
};

ProcStats proc_stats(pid_t pid) {
  ProcStats stats;
  std::error_code ec;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream schedstat(task.path() / "schedstat");
    unsigned long long on_cpu_ns = 0;
    if (schedstat >> on_cpu_ns) stats.cpu_s += on_cpu_ns / 1e9;
    std::ifstream status(task.path() / "status");
    std::string key;
    while (status >> key) {
      if (key == "voluntary_ctxt_switches:") {
        unsigned long long n = 0;
        status >> n;
        stats.switches += static_cast<double>(n);
        break;
      }
      std::getline(status, key);
    }
  }
  return stats;
}

// Runs `block` and adds the CPU and switches it cost this process and `server` to `total`.
template <class Block>
double measured(pid_t server, ProcStats& total, Block&& block) {
  auto self0 = proc_stats(::getpid());
  auto server0 = proc_stats(server);
  double result = block();
  total += proc_stats(::getpid()) - self0;
  total += proc_stats(server) - server0;
  return result;
}

// Each measured path is set up once (connections made, warmed up) and then run in short blocks;
// blocks of the different paths alternate, so every ratio compares runs a few hundred
// milliseconds apart on the same (shared, noisy) machine.

// Raw ZeroMQ ping-pong: a DEALER sends the bytes of an encoded Ping and waits for the echo.
class RawPingPong {
 public:
  explicit RawPingPong(const std::string& endpoint) : dealer_(context_, zmq::socket_type::dealer) {
    dealer_.set(zmq::sockopt::linger, 0);
    dealer_.set(zmq::sockopt::rcvtimeo, 30000);
    dealer_.connect(endpoint);
    run(500);  // connect and warm up
  }
  // Microseconds per round trip over `iterations` round trips.
  double run(int iterations) {
    auto start = Clock::now();
    for (int i = 0; i < iterations; ++i) {
      dealer_.send(zmq::buffer(ping_), zmq::send_flags::none);
      zmq::message_t reply;
      if (!dealer_.recv(reply)) throw std::runtime_error("raw pingpong: no echo");
    }
    return seconds_since(start) * 1e6 / iterations;
  }

 private:
  zmq::context_t context_{1};
  zmq::socket_t dealer_;
  const std::string ping_ = encoded_ping();
};

// Completion signal from an actor to the measuring thread.
struct Counter {
  std::mutex mutex;
  std::condition_variable changed;
  std::uint64_t value = 0;  // guarded by mutex

  void raise_to(std::uint64_t v) {
    {
      std::lock_guard lock(mutex);
      value = std::max(value, v);
    }
    changed.notify_all();
  }
  bool wait_for_at_least(std::uint64_t v, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, timeout, [&] { return value >= v; });
  }
  // The value once it is at least `v` (0 after `timeout` without).
  std::uint64_t value_once_at_least(std::uint64_t v, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, timeout, [&] { return value >= v; }) ? value : 0;
  }
};

// Actor ping-pong: a local actor tells the remote echo actor a Ping and sends the next one when
// the Pong comes back. A Blob{n} from the measuring thread starts a block of n round trips.
class PingerActor : public runtime::Actor {
 public:
  PingerActor(ActorAddress echo, Counter* done) : echo_(std::move(echo)), done_(done) {}
  bool runs_inline() const override { return g_inline_actors; }
  void on_message(const Envelope& message) override {
    if (message.kind == runtime::MessageKind::kBlob) {
      remaining_ = runtime::unpack_payload<std::uint64_t>(message.payload).value_or(0);
      tell(echo_, runtime::Ping{++sequence_});
      return;
    }
    if (message.kind != runtime::MessageKind::kPong) return;
    if (--remaining_ == 0) {
      done_->raise_to(sequence_);
      return;
    }
    tell(echo_, runtime::Ping{++sequence_});
  }

 private:
  ActorAddress echo_;
  Counter* done_;
  std::uint64_t remaining_ = 0;
  std::uint64_t sequence_ = 0;
};

class ActorPingPong {
 public:
  explicit ActorPingPong(const std::string& endpoint) {
    pinger_ = system_.spawn<PingerActor>("pinger", ActorAddress{endpoint, "echo"}, &done_);
    run(500);
  }
  double run(int iterations) {
    auto start = Clock::now();
    std::uint64_t target;
    {
      std::lock_guard lock(done_.mutex);
      target = done_.value + iterations;
    }
    system_.send(system_.make_envelope(pinger_, runtime::MessageKind::kBlob,
                                       runtime::pack_payload(std::uint64_t(iterations)), {}));
    if (!done_.wait_for_at_least(target, 60s)) throw std::runtime_error("actor pingpong stalled");
    return seconds_since(start) * 1e6 / iterations;
  }

 private:
  Counter done_;
  runtime::ActorSystem system_;  // after done_: its actors use it until the system is gone
  ActorAddress pinger_;
};

// Ask from outside any actor (the future form) to the remote system's $system actor.
class AskPingPong {
 public:
  explicit AskPingPong(const std::string& endpoint) : target_{endpoint, "$system"} { run(500); }
  double run(int iterations) {
    auto start = Clock::now();
    for (int i = 0; i < iterations; ++i) {
      if (!system_.ask(target_, runtime::Ping{1}, 10s).get().ok()) {
        throw std::runtime_error("ask pingpong: no reply");
      }
    }
    return seconds_since(start) * 1e6 / iterations;
  }

 private:
  runtime::ActorSystem system_;
  ActorAddress target_;
};

// Raw one-way: a DEALER sends to the sink ROUTER under the same window as the actor path.
class RawOneway {
 public:
  explicit RawOneway(const std::string& endpoint) : dealer_(context_, zmq::socket_type::dealer) {
    dealer_.set(zmq::sockopt::linger, 0);
    dealer_.set(zmq::sockopt::rcvtimeo, 30000);
    dealer_.connect(endpoint);
    run(20000);
  }
  // Messages per second over a block of `messages`.
  double run(std::uint64_t messages) {
    dealer_.send(zmq::buffer(&messages, sizeof messages), zmq::send_flags::none);  // announce
    std::uint64_t acked = 0;
    auto read_ack = [&] {
      zmq::message_t ack;
      if (!dealer_.recv(ack) || ack.size() != sizeof acked) {
        throw std::runtime_error("raw oneway: no acknowledgement");
      }
      std::memcpy(&acked, ack.data(), sizeof acked);
    };
    auto start = Clock::now();
    for (std::uint64_t sent = 0; sent < messages; ++sent) {
      while (sent - acked >= kWindow) read_ack();
      dealer_.send(zmq::buffer(ping_), zmq::send_flags::none);
    }
    while (acked < messages) read_ack();
    return messages / seconds_since(start);
  }

 private:
  zmq::context_t context_{1};
  zmq::socket_t dealer_;
  const std::string ping_ = encoded_ping();
};

// Takes the sink's acknowledgements (Pong{count}).
class AckActor : public runtime::Actor {
 public:
  explicit AckActor(Counter* acks) : acks_(acks) {}
  bool runs_inline() const override { return g_inline_actors; }
  void on_message(const Envelope& message) override {
    auto pong = runtime::unpack_payload<runtime::Pong>(message.payload);
    if (message.kind == runtime::MessageKind::kPong && pong) acks_->raise_to(pong->sequence);
  }

 private:
  Counter* acks_;
};

// Actor one-way: the measuring thread tells the remote sink actor small Pings (what any thread
// may do with ActorSystem::tell) under the window; the clock stops at the last acknowledgement.
class ActorOneway {
 public:
  explicit ActorOneway(const std::string& endpoint)
      : sink_{endpoint, "sink"}, remote_system_{endpoint, "$system"} {
    reporter_ = system_.spawn<AckActor>("reporter", &acks_);
    run(20000);
  }
  // Messages per second over a block of `messages`; 0 if the acknowledgements stopped (a
  // message was lost: see dropped()).
  double run(std::uint64_t messages) {
    // Announce the block, and make sure the sink has the announcement before timing: the remote
    // $system answers a ping on the same connection only after everything sent before it.
    {
      std::lock_guard lock(acks_.mutex);
      acks_.value = 0;
    }
    system_.send(system_.make_envelope(sink_, runtime::MessageKind::kBlob,
                                       runtime::pack_payload(messages), reporter_));
    system_.ask(remote_system_, runtime::Ping{1}, 10s).get();
    auto start = Clock::now();
    // As the raw path does: look at the acknowledgements only when the window is full.
    std::uint64_t acked = 0;
    for (std::uint64_t sent = 0; sent < messages; ++sent) {
      if (sent - acked >= kWindow) {
        acked = acks_.value_once_at_least(sent - kWindow + 1, 10s);
        if (acked == 0) return 0;
      }
      system_.tell(sink_, runtime::Ping{sent + 1}, reporter_);
    }
    if (!acks_.wait_for_at_least(messages, 10s)) return 0;
    return messages / seconds_since(start);
  }
  std::uint64_t dropped() const { return system_.transport_stats().dropped_send_full.load(); }

 private:
  Counter acks_;
  runtime::ActorSystem system_;
  ActorAddress sink_, remote_system_, reporter_;
};

struct HeartbeatResult {
  double register_s = 0;  // wall time from the first registration sent to the last answered
  double rate = 0;      // heartbeats per second actually sent
  double head_cpu = 0;  // head CPU seconds per wall second while they were sent
  double idle_cpu = 0;  // the same nodes registered but silent (sweeps only)
};

// `nodes` simulated nodes register with a real head, then each heartbeats every `interval`
// (staggered evenly), for `seconds`. The head's CPU time over that window is the cost.
// `store_args`: how the head keeps its state (--store memory:, or --state-dir DIR).
HeartbeatResult heartbeat_cost(const std::string& omnilearn, int nodes,
                               std::chrono::milliseconds interval, double seconds,
                               bool with_reply, const std::vector<std::string>& store_args) {
  omnilearn::testing::ProcessOptions options;
  options.name = "head";
  options.env = {"OMNILEARN_LOG=warn"};
  // --insecure: the simulated nodes speak plain TCP (the figures before the closed cluster
  // were plain TCP too); this measures the messaging, not CURVE.
  std::vector<std::string> argv{omnilearn, "head", "--insecure", "--host", "127.0.0.1", "--port",
                                "0", "--heartbeat-interval-ms", std::to_string(interval.count()),
                                "--heartbeat-timeout-ms", std::to_string(60000), "--max-nodes",
                                std::to_string(nodes + 10)};
  argv.insert(argv.end(), store_args.begin(), store_args.end());
  omnilearn::testing::ChildProcess head(argv, options);
  std::smatch match;
  auto line = head.wait_for_output(std::regex("listening on (\\S+)"), 20s);
  static const std::regex kAddress("listening on (\\S+)");
  if (!line || !std::regex_search(*line, match, kAddress)) {
    throw std::runtime_error("head did not start:\n" + head.describe());
  }
  std::string endpoint = "tcp://" + match[1].str();

  runtime::ActorSystem system;
  // Replies carry correlation ids nobody waits for: the system drops them on arrival, as cheaply
  // as a real agent handles its heartbeat replies.
  class ReplySink : public runtime::Actor {
   public:
    void on_message(const Envelope&) override {}
  };
  auto sink = system.spawn<ReplySink>("sink");
  ActorAddress registry{endpoint, actors::kRegistryActor};

  // Register every node (pipelined asks).
  const auto register_start = Clock::now();
  std::vector<std::future<runtime::AskResult>> pending;
  for (int i = 0; i < nodes; ++i) {
    actors::RegisterNode request;
    request.name = "sim-" + std::to_string(i);
    request.resources.cpus = 8;
    request.resources.memory_bytes = 32ll << 30;
    pending.push_back(system.ask(registry, request, 30s));
  }
  std::vector<actors::RegisterNodeReply> registered;
  for (auto& future : pending) {
    auto reply = future.get().as<actors::RegisterNodeReply>();
    if (!reply || !reply->accepted) throw std::runtime_error("a simulated node was refused");
    registered.push_back(*reply);
  }
  HeartbeatResult result;
  result.register_s = seconds_since(register_start);

  // One heartbeat per node, encoded once: what a node hosting one trainer sends.
  std::vector<std::string> payloads;
  for (const auto& node : registered) {
    actors::Heartbeat beat;
    beat.node_id = node.node_id;
    beat.incarnation = node.incarnation;
    beat.usage = actors::NodeUsage{0.7, 200ll << 20, 1.0, 0};
    beat.actors.push_back(
        actors::ActorCounters{"trainer-0", "job-1", 0, 100, 64, 512.0, 0.125, 0.1});
    payloads.push_back(runtime::pack_payload(beat));
  }
  std::uint64_t correlation = 1ull << 62;  // replies are for nobody: dropped on arrival
  auto send_beat = [&](int node) {
    auto envelope =
        system.make_envelope(registry, runtime::MessageKind::kHeartbeat, payloads[node], sink);
    if (with_reply) envelope.correlation = correlation++;  // an ask, as NodeAgent sends it
    system.send(std::move(envelope));
  };

  // Heartbeats: node i beats at phase i/nodes of every interval, paced on a 1 ms grid. The
  // first second warms up (every node heard from, queues in steady state) and is not measured.
  const double per_second = nodes * 1000.0 / interval.count();
  std::uint64_t sent = 0;
  const double warmup = 1.0;
  double cpu0 = 0;
  Clock::time_point start = Clock::now(), measured_from;
  bool measuring = false;
  while (true) {
    double elapsed = seconds_since(start);
    if (!measuring && elapsed >= warmup) {
      measuring = true;
      cpu0 = proc_stats(head.pid()).cpu_s;
      measured_from = Clock::now();
      result.rate = -static_cast<double>(sent);
    }
    if (elapsed >= warmup + seconds) break;
    auto due = static_cast<std::uint64_t>(elapsed * per_second);
    for (; sent < due; ++sent) send_beat(static_cast<int>(sent % nodes));
    std::this_thread::sleep_for(1ms);
  }
  double window = seconds_since(measured_from);
  result.head_cpu = (proc_stats(head.pid()).cpu_s - cpu0) / window;
  result.rate = (result.rate + static_cast<double>(sent)) / window;

  auto status = system.ask(registry, actors::StatusRequest{false}, 10s).get();
  if (auto reply = status.as<actors::StatusReply>()) {
    std::size_t alive = 0;
    for (const auto& node : reply->nodes) alive += node.state == "alive";
    if (alive != static_cast<std::size_t>(nodes)) {
      std::fprintf(stderr,
                   "warning: only %zu of %d simulated nodes alive at the end (%" PRIu64
                   " heartbeats dropped by the sender)\n",
                   alive, nodes, system.transport_stats().dropped_send_full.load());
    }
  }

  // Idle: the same nodes registered and alive, no heartbeats (the failure detector's sweep
  // alone), ending before a silent node turns suspect (after two intervals, 1 s).
  cpu0 = proc_stats(head.pid()).cpu_s;
  auto t0 = Clock::now();
  std::this_thread::sleep_for(300ms);
  result.idle_cpu = (proc_stats(head.pid()).cpu_s - cpu0) / seconds_since(t0);

  return result;
}

std::filesystem::path default_omnilearn() {
  if (const char* dir = std::getenv("OMNILEARN_BIN"))
    return std::filesystem::path(dir) / "omnilearn";
  // bench/runtime/runtime_bench -> bin/omnilearn in the same build tree.
  auto self = std::filesystem::read_symlink("/proc/self/exe");
  return self.parent_path().parent_path().parent_path() / "bin" / "omnilearn";
}

std::vector<int> parse_list(const std::string& text) {
  std::vector<int> values;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) values.push_back(std::stoi(item));
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  for (int i = 1; i + 1 < argc; i += 2) flags[argv[i]] = argv[i + 1];
  if (flags.count("--serve")) {
    const auto& role = flags["--serve"];
    if (role == "raw-echo") return serve_raw(false);
    if (role == "raw-sink") return serve_raw(true);
    if (role == "actors") return serve_actors();
    if (role == "actors-inline") {
      g_inline_actors = true;
      return serve_actors();
    }
    std::fprintf(stderr, "unknown role %s\n", role.c_str());
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  g_inline_actors = flags.count("--inline-actors") && flags["--inline-actors"] == "1";
  const char* actor_role = g_inline_actors ? "actors-inline" : "actors";
  const int rounds = flags.count("--rounds") ? std::stoi(flags["--rounds"]) : 5;
  const std::string only = flags.count("--only") ? flags["--only"] : "";
  const int blocks = flags.count("--blocks") ? std::stoi(flags["--blocks"]) : 10;
  const int block_iters =
      flags.count("--pingpong-iters") ? std::stoi(flags["--pingpong-iters"]) : 2000;
  const std::uint64_t oneway_messages =
      flags.count("--oneway-messages") ? std::stoull(flags["--oneway-messages"]) : 500000;
  const auto node_counts = parse_list(flags.count("--nodes") ? flags["--nodes"] : "500,2000,5000");
  const double hb_seconds =
      flags.count("--heartbeat-seconds") ? std::stod(flags["--heartbeat-seconds"]) : 5.0;
  // Heartbeats as tells (no HeartbeatReply): what the head would pay if agents did not ask.
  const bool heartbeat_tell = flags.count("--heartbeat-tell") && flags["--heartbeat-tell"] == "1";
  const std::string omnilearn =
      flags.count("--omnilearn") ? flags["--omnilearn"] : default_omnilearn().string();

  std::printf("runtime_bench: %d rounds, actors %s, %ld CPUs online, load average %s", rounds,
              g_inline_actors ? "inline on the I/O thread" : "on the pool",
              sysconf(_SC_NPROCESSORS_ONLN), [] {
                std::ifstream l("/proc/loadavg");
                std::string a, b, c;
                l >> a >> b >> c;
                static std::string s;
                s = a + " " + b + " " + c + "\n";
                return s.c_str();
              }());

  if (only.empty() || only == "pingpong") {
    auto raw_server = start_server("raw-echo");
    auto actor_server = start_server(actor_role);
    RawPingPong raw_path(raw_server.endpoint);
    ActorPingPong actor_path(actor_server.endpoint);
    AskPingPong ask_path(actor_server.endpoint);
    std::printf(
        "\n== ping-pong round trip: %d runs of %d blocks x %d round trips, raw / actor / "
        "ask blocks interleaved (us per round trip)\n",
        rounds, blocks, block_iters);
    std::printf("%5s %10s %10s %10s %10s %10s\n", "run", "raw-zmq", "actor", "ask", "actor/raw",
                "ask/raw");
    std::vector<double> run_raw, run_actor, run_ask, run_ratio, run_ask_ratio;
    ProcStats raw_cost, actor_cost, ask_cost;
    const pid_t raw_pid = raw_server.process.pid(), actor_pid = actor_server.process.pid();
    for (int r = 0; r < rounds; ++r) {
      std::vector<double> raw, actor, ask, ratio, ask_ratio;
      for (int b = 0; b < blocks; ++b) {
        double z = 0, a = 0, k = 0;
        auto do_raw = [&] {
          z = measured(raw_pid, raw_cost, [&] { return raw_path.run(block_iters); });
        };
        auto do_actor = [&] {
          a = measured(actor_pid, actor_cost, [&] { return actor_path.run(block_iters); });
        };
        auto do_ask = [&] {
          k = measured(actor_pid, ask_cost, [&] { return ask_path.run(block_iters); });
        };
        switch ((r * blocks + b) % 3) {  // rotate which path goes first
          case 0:
            do_raw();
            do_actor();
            do_ask();
            break;
          case 1:
            do_actor();
            do_ask();
            do_raw();
            break;
          default:
            do_ask();
            do_raw();
            do_actor();
            break;
        }
        raw.push_back(z);
        actor.push_back(a);
        ask.push_back(k);
        ratio.push_back(a / z);
        ask_ratio.push_back(k / z);
      }
      run_raw.push_back(median(raw));
      run_actor.push_back(median(actor));
      run_ask.push_back(median(ask));
      run_ratio.push_back(median(ratio));
      run_ask_ratio.push_back(median(ask_ratio));
      std::printf("%5d %10.1f %10.1f %10.1f %10.2f %10.2f   (block ratios %s)\n", r + 1,
                  run_raw.back(), run_actor.back(), run_ask.back(), run_ratio.back(),
                  run_ask_ratio.back(), min_max(ratio).c_str());
      std::fflush(stdout);
    }
    std::printf("median %9.1f %10.1f %10.1f %10.2f %10.2f   (run ratios min..max %s, ask %s)\n",
                median(run_raw), median(run_actor), median(run_ask), median(run_ratio),
                median(run_ask_ratio), min_max(run_ratio).c_str(), min_max(run_ask_ratio).c_str());
    std::printf("target: actor/raw <= 1.5 -> %s\n", median(run_ratio) <= 1.5 ? "met" : "MISSED");
    const double trips = static_cast<double>(rounds) * blocks * block_iters;
    std::printf(
        "cost per round trip, both processes (all runs): raw %.1f us CPU, %.1f thread "
        "wake-ups; actor %.1f us CPU, %.1f wake-ups; ask %.1f us CPU, %.1f wake-ups\n",
        raw_cost.cpu_s * 1e6 / trips, raw_cost.switches / trips, actor_cost.cpu_s * 1e6 / trips,
        actor_cost.switches / trips, ask_cost.cpu_s * 1e6 / trips, ask_cost.switches / trips);
  }

  if (only.empty() || only == "oneway") {
    auto raw_server = start_server("raw-sink");
    auto actor_server = start_server(actor_role);
    RawOneway raw_path(raw_server.endpoint);
    ActorOneway actor_path(actor_server.endpoint);
    const std::uint64_t block = std::max<std::uint64_t>(oneway_messages / blocks, kWindow * 2);
    std::printf("\n== one-way small messages: %d runs of %d blocks x %" PRIu64
                " messages, window %" PRIu64 ", raw / actor blocks interleaved (messages/s)\n",
                rounds, blocks, block, kWindow);
    std::printf("%5s %12s %12s %10s %10s\n", "run", "raw-zmq", "actor", "actor/raw", "dropped");
    std::vector<double> run_raw, run_actor, run_ratio;
    ProcStats raw_cost, actor_cost;
    const pid_t raw_pid = raw_server.process.pid(), actor_pid = actor_server.process.pid();
    for (int r = 0; r < rounds; ++r) {
      std::vector<double> raw, actor, ratio;
      for (int b = 0; b < blocks; ++b) {
        double z = 0, a = 0;
        auto do_raw = [&] { z = measured(raw_pid, raw_cost, [&] { return raw_path.run(block); }); };
        auto do_actor = [&] {
          a = measured(actor_pid, actor_cost, [&] { return actor_path.run(block); });
        };
        if ((r + b) % 2 == 0) {
          do_raw();
          do_actor();
        } else {
          do_actor();
          do_raw();
        }
        if (a == 0) {
          std::printf("  block stalled: %" PRIu64 " messages dropped by the sender so far\n",
                      actor_path.dropped());
          continue;
        }
        raw.push_back(z);
        actor.push_back(a);
        ratio.push_back(a / z);
      }
      run_raw.push_back(median(raw));
      run_actor.push_back(median(actor));
      run_ratio.push_back(median(ratio));
      std::printf("%5d %12.0f %12.0f %10.2f %10" PRIu64 "   (block ratios %s)\n", r + 1,
                  run_raw.back(), run_actor.back(), run_ratio.back(), actor_path.dropped(),
                  min_max(ratio).c_str());
      std::fflush(stdout);
    }
    std::printf("median %11.0f %12.0f %10.2f   (run ratios min..max %s; actor runs %s msg/s)\n",
                median(run_raw), median(run_actor), median(run_ratio), min_max(run_ratio).c_str(),
                min_max(run_actor, "%.0f").c_str());
    std::printf("target: actor/raw >= 0.40 -> %s; actor >= 200000 msg/s -> %s\n",
                median(run_ratio) >= 0.40 ? "met" : "MISSED",
                median(run_actor) >= 200000 ? "met" : "MISSED");
    const double total = static_cast<double>(rounds) * blocks * block;
    std::printf(
        "cost per message, both processes (all runs): raw %.2f us CPU, %.3f wake-ups; "
        "actor %.2f us CPU, %.3f wake-ups\n",
        raw_cost.cpu_s * 1e6 / total, raw_cost.switches / total, actor_cost.cpu_s * 1e6 / total,
        actor_cost.switches / total);
  }

  if (only.empty() || only == "heartbeat") {
    std::printf(
        "\n== head CPU per 1,000 heartbeats/s (real `omnilearn head`, nodes beat every "
        "500 ms as %s, one trainer's counters each, %.0f s windows)\n",
        heartbeat_tell ? "tells (no reply)" : "asks (the head replies, as to NodeAgent)",
        hb_seconds);
    // The head's state in memory and in the embedded store (SQLite, fsync per batch), run
    // alternately, so that the cost of durability is a ratio measured side by side.
    const auto state_dir = std::filesystem::temp_directory_path() /
                           ("omnilearn-runtime-bench-state-" + std::to_string(::getpid()));
    struct StoreCase {
      const char* name;
      std::vector<std::string> args;
    };
    std::vector<StoreCase> stores = {{"memory", {"--store", "memory:"}},
                                     {"sqlite", {"--state-dir", state_dir.string()}}};
    // etcd too where Debian's etcd-server is installed: one member on loopback, a fresh prefix
    // for every run.
    std::unique_ptr<omnilearn::testing::EtcdCluster> etcd;
    if (omnilearn::testing::EtcdCluster::unavailable().empty()) {
      etcd = std::make_unique<omnilearn::testing::EtcdCluster>(1, state_dir.string() + "-etcd");
      stores.push_back({"etcd", {"--store", ""}});
    } else {
      std::printf("(no etcd row: %s)\n", omnilearn::testing::EtcdCluster::unavailable().c_str());
    }
    int etcd_runs = 0;
    std::printf("%6s %7s %5s %10s %12s %12s %18s %14s %12s\n", "nodes", "store", "run", "hb/s",
                "head CPU %", "idle CPU %", "CPU % per 1k hb/s", "us CPU per hb",
                "register s");
    for (int nodes : node_counts) {
      std::map<std::string, std::vector<double>> per_k, registering;
      for (int r = 0; r < std::max(3, rounds / 2); ++r) {
        for (auto& store : stores) {
          std::filesystem::remove_all(state_dir);  // every run registers its nodes anew
          if (std::string(store.name) == "etcd") {
            store.args[1] = etcd->store("bench-" + std::to_string(++etcd_runs));
          }
          auto result =
              heartbeat_cost(omnilearn, nodes, 500ms, hb_seconds, !heartbeat_tell, store.args);
          double cost = (result.head_cpu - result.idle_cpu) * 100 / (result.rate / 1000);
          per_k[store.name].push_back(cost);
          registering[store.name].push_back(result.register_s);
          std::printf("%6d %7s %5d %10.0f %12.2f %12.2f %18.3f %14.1f %12.3f\n", nodes,
                      store.name, r + 1, result.rate, result.head_cpu * 100,
                      result.idle_cpu * 100, cost, result.head_cpu / result.rate * 1e6,
                      result.register_s);
          std::fflush(stdout);
        }
      }
      for (const auto& store : stores) {
        std::printf("%6d %7s median CPU %% of one core per 1,000 heartbeats/s: %.3f (min..max "
                    "%s); registering every node %.3f s\n",
                    nodes, store.name, median(per_k[store.name]),
                    min_max(per_k[store.name], "%.3f").c_str(), median(registering[store.name]));
      }
      for (const auto& store : stores) {
        if (std::string(store.name) == "memory") continue;
        std::printf("%6d %s/memory: heartbeat CPU %.2fx, registration time %.2fx\n", nodes,
                    store.name, median(per_k[store.name]) / median(per_k["memory"]),
                    median(registering[store.name]) / median(registering["memory"]));
      }
    }
    etcd.reset();
    std::filesystem::remove_all(state_dir);
    std::filesystem::remove_all(state_dir.string() + "-etcd");
  }
  return 0;
}
