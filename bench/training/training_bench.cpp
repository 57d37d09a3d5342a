// Training-engine benchmark. Prints, from one run:
//   1. samples/s of one worker for the mlp and the cnn on Fashion-MNIST, torch threads = 1 and
//      = cores (configurations interleaved round by round; medians);
//   2. all-reduce time per step vs bytes at 2 and 4 ranks (real processes, Gloo on loopback);
//   3. the mlp at 4 ranks: per-step compute time, all-reduce time inside the step, and the
//      all-reduce of exactly the model's gradient bytes after a barrier, as % of compute;
//   4. where each millisecond of a step goes, the mlp at 4 ranks with slowdowns
//      1,1,2,4 and the controller's proportional plan, B = 256: data, forward, backward,
//      emulated slowdown, the exposed all-reduce (split into waiting for slower peers and the
//      rest), optimizer, control, per rank; before (all-reduce after backward, a control
//      broadcast per step) and after (buckets from the gradient hooks, control words in the
//      exchange), the four combinations interleaved round by round;
//   5. the slowdown emulation: process CPU per slowed step (factor 3), sleeping against
//      spinning (Trainer::set_slowdown_spins), interleaved round by round;
//   6. the gradient buckets' order: an MLP registered head first (save_head_first_mlp) at 2
//      ranks, the exposed all-reduce per step with the buckets in reverse registration order
//      against the order backward makes the gradients ready (TrainerConfig::
//      observed_bucket_order), interleaved round by round.
//
// usage: training_bench [--quick] [--data DIR] [--only profile|slowdown|bucket-order]
// Ranks are this program re-executed with --worker; every rank is pinned to cpu (rank % cores).
// glibc's malloc thresholds (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_) are set for every
// process (re-exec if needed).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <sched.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "training/models.hpp"
#include "training/trainer.hpp"

extern char** environ;

namespace {

using namespace omnilearn::training;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::map<std::string, std::string> parse(int argc, char** argv) {
  std::map<std::string, std::string> out;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) continue;
    if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) {
      out[a.substr(2)] = argv[++i];
    } else {
      out[a.substr(2)] = "1";
    }
  }
  return out;
}

TrainerConfig model_config(const std::string& kind, const std::string& data_dir) {
  TrainerConfig c;
  c.data.dataset = "fashion-mnist";
  c.data.path = data_dir;
  c.model.kind = kind;
  c.optimizer.kind = "sgd";
  c.optimizer.lr = 0.01;
  c.optimizer.momentum = 0.9;
  return c;
}

void pin(int rank) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(static_cast<int>(static_cast<unsigned>(rank) % cores), &set);
  sched_setaffinity(0, sizeof(set), &set);
}

// ---- workers (child processes) -----------------------------------------------------------

c10::intrusive_ptr<c10d::Store> connect(int port) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(port);
  o.isServer = false;
  o.waitWorkers = false;
  o.timeout = std::chrono::seconds(60);
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
}

// Times all-reduces of float tensors of several sizes; writes "bytes seconds_per_op" lines.
int allreduce_worker(int rank, int world, int port, int reps, std::ostream& out) {
  auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(60));
  opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(
      c10::make_intrusive<c10d::PrefixStore>("gen/0", connect(port)), rank, world, opts);
  for (int64_t bytes : {int64_t{4} << 10, int64_t{64} << 10, int64_t{256} << 10, int64_t{1} << 20,
                        int64_t{4} << 20, int64_t{16} << 20}) {
    std::vector<at::Tensor> t{at::ones({bytes / 4})};
    std::vector<double> times;
    for (int i = 0; i < reps + 3; ++i) {
      pg->barrier()->wait();
      const auto start = Clock::now();
      pg->allreduce(t)->wait();
      if (i >= 3) times.push_back(seconds_since(start));
    }
    out << bytes << " " << median(times) << "\n";
  }
  return 0;
}

// Trains the mlp with b per rank; writes compute/all-reduce medians and the isolated all-reduce
// of the gradient bytes.
int mlp_worker(int rank, int world, int port, int per_rank, int steps, const std::string& data,
               std::ostream& out) {
  Trainer t(model_config("mlp", data));
  GroupOptions g;
  g.gloo_hostname = "127.0.0.1";
  if (!t.join_group(connect(port), 0, rank, world, std::chrono::seconds(60), g).ok) return 2;
  if (!t.sync_state_from_rank0().ok) return 3;
  const std::vector<int> plan(static_cast<size_t>(world), per_rank);
  std::vector<double> compute, reduce, wall;
  for (int s = 0; s < steps + 10; ++s) {
    const auto start = Clock::now();
    const StepResult r = t.step(plan);
    if (!r.committed) return 4;
    if (s >= 10) {
      compute.push_back(r.compute_time_s);
      reduce.push_back(r.allreduce_time_s);
      wall.push_back(seconds_since(start));
    }
  }
  // The same bytes all-reduced after a barrier: the transfer cost without waiting for stragglers.
  auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(60));
  opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(
      c10::make_intrusive<c10d::PrefixStore>("gen/raw", connect(port)), rank, world, opts);
  std::vector<at::Tensor> grads{at::ones({t.parameter_bytes() / 4 + 1})};  // + the loss slot
  std::vector<double> isolated;
  for (int i = 0; i < 33; ++i) {
    pg->barrier()->wait();
    const auto start = Clock::now();
    pg->allreduce(grads)->wait();
    if (i >= 3) isolated.push_back(seconds_since(start));
  }
  out << median(compute) << " " << median(reduce) << " " << median(isolated) << " " << median(wall)
      << " " << t.parameter_bytes() << "\n";
  return 0;
}

std::vector<int> int_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoi(item));
  return out;
}

// One configuration of section 4: `steps` steps of `plan`, with a control round per step as the
// trainer process does (rank 0's words: continue, generation, version, plan). Writes one line
// per measured step: wall, data, forward, backward, slowdown, exposed all-reduce, optimizer,
// control (seconds), and the compute time.
int profile_worker(int rank, int world, int port, const std::map<std::string, std::string>& a,
                   std::ostream& out) {
  TrainerConfig config = model_config(a.at("model"), a.at("data"));
  config.overlap_allreduce = a.at("overlap") == "1";
  config.extras_with_gradients = a.at("extras") == "1";
  const bool carried = a.at("carried") == "1";
  const std::vector<int> slowdown = int_list(a.at("slowdown"));
  const std::vector<int> plan = int_list(a.at("plan"));
  const int steps = std::stoi(a.at("steps"));
  Trainer t(config);
  t.set_slowdown(slowdown[static_cast<size_t>(rank)]);
  GroupOptions g;
  g.gloo_hostname = "127.0.0.1";
  if (!t.join_group(connect(port), 0, rank, world, std::chrono::seconds(60), g).ok) return 2;
  if (!t.sync_state_from_rank0().ok) return 3;
  std::vector<int64_t> words = {0, 0, 1};
  words.insert(words.end(), plan.begin(), plan.end());
  for (int s = 0; s < steps + 10; ++s) {
    const auto start = Clock::now();
    StepResult r;
    double control = 0;
    if (carried) {
      StepControl c;
      if (rank == 0) c.words = words;
      c.accept = [&](const std::vector<int64_t>& w) { return w == words; };
      r = t.step(plan, &c);
    } else {
      std::vector<int64_t> w = rank == 0 ? words : std::vector<int64_t>{};
      if (!t.broadcast_control(w).ok) return 5;
      control = seconds_since(start);
      r = t.step(plan);
    }
    if (!r.committed) return 4;
    if (s >= 10) {
      out << seconds_since(start) << " " << r.data_time_s << " " << r.forward_time_s << " "
          << r.backward_time_s << " " << r.slowdown_time_s << " " << r.allreduce_time_s << " "
          << r.optimizer_time_s << " " << control << " " << r.compute_time_s << "\n";
    }
  }
  return 0;
}

// One configuration of section 6: `steps` steps (after 10 unmeasured ones, among them the
// group's second step, where the order is agreed) of b = 64 per rank on the synthetic set.
// Writes one line per measured step: exposed all-reduce, backward, step wall, data, forward,
// optimizer (seconds), buckets, buckets launched before the last gradient.
int order_worker(int rank, int world, int port, const std::map<std::string, std::string>& a,
                 std::ostream& out) {
  TrainerConfig config;
  config.data.dataset = "synthetic";
  config.data.synthetic.train_size = 8192;
  config.data.synthetic.test_size = 100;
  config.model.kind = "torchscript";
  config.model.path = a.at("model-path");
  config.optimizer.kind = "sgd";
  config.optimizer.lr = 0.01;
  config.bucket_bytes = 1 << 20;
  config.observed_bucket_order = a.at("observed") == "1";
  const int steps = std::stoi(a.at("steps"));
  Trainer t(config);
  GroupOptions g;
  g.gloo_hostname = "127.0.0.1";
  if (!t.join_group(connect(port), 0, rank, world, std::chrono::seconds(60), g).ok) return 2;
  if (!t.sync_state_from_rank0().ok) return 3;
  const std::vector<int> plan(static_cast<size_t>(world), 64);
  for (int s = 0; s < steps + 10; ++s) {
    const auto start = Clock::now();
    const StepResult r = t.step(plan);
    if (!r.committed) return 4;
    if (s >= 10) {
      out << r.allreduce_time_s << " " << r.backward_time_s << " " << seconds_since(start) << " "
          << r.data_time_s << " " << r.forward_time_s << " " << r.optimizer_time_s << " "
          << r.buckets << " " << r.buckets_launched_before_last_gradient << "\n";
    }
  }
  return 0;
}

int worker_main(std::map<std::string, std::string>& args) {
  at::set_num_threads(1);
  const int rank = std::stoi(args["rank"]), world = std::stoi(args["world"]);
  const int port = std::stoi(args["port"]);
  pin(rank);
  std::ofstream out(args["out"]);
  if (args["worker"] == "allreduce")
    return allreduce_worker(rank, world, port, std::stoi(args["reps"]), out);
  if (args["worker"] == "profile") return profile_worker(rank, world, port, args, out);
  if (args["worker"] == "order") return order_worker(rank, world, port, args, out);
  return mlp_worker(rank, world, port, std::stoi(args["batch"]), std::stoi(args["steps"]),
                    args["data"], out);
}

// ---- driver -----------------------------------------------------------------------------

// Spawns `world` workers of this program with `extra` arguments; returns each rank's output.
std::vector<std::string> run_ranks(int world, const std::vector<std::string>& extra) {
  c10d::TCPStoreOptions o;
  o.port = 0;
  o.isServer = true;
  o.waitWorkers = false;
  auto server = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
  const fs::path dir = fs::temp_directory_path() / ("ol_bench_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> args = {"/proc/self/exe",
                                     "--rank",
                                     std::to_string(r),
                                     "--world",
                                     std::to_string(world),
                                     "--port",
                                     std::to_string(server->getPort()),
                                     "--out",
                                     (dir / ("rank" + std::to_string(r))).string()};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0) {
      std::perror("posix_spawn");
      std::exit(1);
    }
    pids.push_back(pid);
  }
  std::vector<std::string> outputs;
  for (int r = 0; r < world; ++r) {
    int status = 0;
    waitpid(pids[static_cast<size_t>(r)], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "rank %d failed (status %d)\n", r, status);
      std::exit(1);
    }
    std::ifstream in(dir / ("rank" + std::to_string(r)));
    std::stringstream ss;
    ss << in.rdbuf();
    outputs.push_back(ss.str());
  }
  fs::remove_all(dir);
  return outputs;
}

double process_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Spinning should burn factor x the compute's CPU, sleeping about 1x; CPU time, so that the
// machine's load matters less than for wall time (it is still a measurement, hence here).
void slowdown_cpu(const std::string& data, bool quick) {
  constexpr double kFactor = 3.0;
  constexpr int kBatch = 512;
  at::set_num_threads(1);
  const DatasetPair pair = load_datasets(model_config("mlp", data).data);
  Trainer t(model_config("mlp", data), pair);
  for (int s = 0; s < 5; ++s) t.step({kBatch});
  auto cpu_per_step = [&](bool spins, double factor) {
    t.set_slowdown(factor);
    t.set_slowdown_spins(spins);
    const int steps = quick ? 5 : 20;
    const double before = process_cpu_seconds();
    for (int s = 0; s < steps; ++s) t.step({kBatch});
    return (process_cpu_seconds() - before) / steps;
  };
  std::vector<double> plain, sleeping, spinning;
  for (int round = 0; round < (quick ? 2 : 5); ++round) {
    plain.push_back(cpu_per_step(false, 1.0));
    sleeping.push_back(cpu_per_step(false, kFactor));
    spinning.push_back(cpu_per_step(true, kFactor));
  }
  std::printf("\n## 5. Slowdown emulation, mlp, batch %d, factor %.0f: process CPU per step "
              "(median of %zu interleaved rounds)\n",
              kBatch, kFactor, plain.size());
  std::printf("| emulation | CPU per step (ms) | x unslowed |\n|---|---|---|\n");
  const double base = median(plain);
  for (const auto& [name, v] : {std::pair{"none (factor 1)", &plain},
                                std::pair{"sleep", &sleeping}, std::pair{"spin", &spinning}}) {
    std::printf("| %s | %.2f | %.2f |\n", name, 1e3 * median(*v), median(*v) / base);
  }
}

void single_worker(const std::string& data, bool quick) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  struct Cfg {
    std::string model;
    int threads;
    int steps;
  };
  std::vector<Cfg> cfgs = {{"mlp", 1, quick ? 60 : 200},
                           {"mlp", cores, quick ? 60 : 200},
                           {"cnn", 1, quick ? 15 : 40},
                           {"cnn", cores, quick ? 15 : 40}};
  constexpr int kBatch = 128;
  const DatasetPair pair = load_datasets(model_config("mlp", data).data);
  std::vector<std::vector<double>> rates(cfgs.size());
  const int rounds = quick ? 2 : 3;
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < cfgs.size(); ++i) {
      at::set_num_threads(cfgs[i].threads);
      Trainer t(model_config(cfgs[i].model, data), pair);
      for (int s = 0; s < 5; ++s) t.step({kBatch});
      double compute = 0;
      for (int s = 0; s < cfgs[i].steps; ++s) compute += t.step({kBatch}).compute_time_s;
      rates[i].push_back(kBatch * cfgs[i].steps / compute);
    }
  }
  std::printf("\n## 1. One worker, Fashion-MNIST, batch %d (median of %d interleaved rounds)\n",
              kBatch, rounds);
  std::printf("| model | torch threads | samples/s | per-step compute (ms) |\n|---|---|---|---|\n");
  for (size_t i = 0; i < cfgs.size(); ++i) {
    const double r = median(rates[i]);
    std::printf("| %s | %d | %.0f | %.2f |\n", cfgs[i].model.c_str(), cfgs[i].threads, r,
                1000.0 * kBatch / r);
  }
  std::printf("speed-up from %d threads: mlp %.2fx, cnn %.2fx\n", cores,
              median(rates[1]) / median(rates[0]), median(rates[3]) / median(rates[2]));
}

void allreduce_sweep(bool quick) {
  std::printf(
      "\n## 2. All-reduce (SUM, float32) per call vs bytes, Gloo on loopback, ranks = "
      "processes pinned to cpu rank %% %u (median of %d after a barrier)\n",
      std::max(1u, std::thread::hardware_concurrency()), quick ? 10 : 30);
  std::map<int, std::vector<std::pair<long, double>>> table;
  for (int world : {2, 4}) {
    const auto outs =
        run_ranks(world, {"--worker", "allreduce", "--reps", std::to_string(quick ? 10 : 30)});
    std::istringstream in(outs[0]);
    long bytes;
    double s;
    while (in >> bytes >> s) table[world].emplace_back(bytes, s);
  }
  std::printf(
      "| bytes | 2 ranks (ms) | 4 ranks (ms) | 4 ranks MB/s per rank |\n|---|---|---|---|\n");
  for (size_t i = 0; i < table[2].size(); ++i) {
    const long bytes = table[2][i].first;
    std::printf("| %ld | %.3f | %.3f | %.0f |\n", bytes, 1e3 * table[2][i].second,
                1e3 * table[4][i].second, bytes / table[4][i].second / 1e6);
  }
}

void mlp_overhead(const std::string& data, bool quick) {
  std::printf(
      "\n## 3. mlp (784-256-128-10) at 4 ranks, Fashion-MNIST, torch threads = 1, ranks "
      "pinned (medians over ranks of per-rank medians)\n");
  std::printf(
      "| batch per rank | compute (ms) | all-reduce in step (ms) | in-step %% of compute | "
      "isolated all-reduce of grads (ms) | isolated %% of compute | gradient bytes |\n"
      "|---|---|---|---|---|---|---|\n");
  for (int per_rank : {64, 256}) {
    const auto outs = run_ranks(4, {"--worker", "mlp", "--batch", std::to_string(per_rank),
                                    "--steps", std::to_string(quick ? 40 : 150), "--data", data});
    std::vector<double> compute, reduce, isolated;
    long bytes = 0;
    for (const auto& o : outs) {
      std::istringstream in(o);
      double c, r, iso, wall;
      in >> c >> r >> iso >> wall >> bytes;
      compute.push_back(c);
      reduce.push_back(r);
      isolated.push_back(iso);
    }
    const double c = median(compute), r = median(reduce), iso = median(isolated);
    std::printf("| %d | %.2f | %.2f | %.1f%% | %.2f | %.1f%% | %ld |\n", per_rank, 1e3 * c, 1e3 * r,
                100 * r / c, 1e3 * iso, 100 * iso / c, bytes);
  }
}

// Section 4. The plan is what the proportional controller settles on for 1,1,2,4 at B = 256
// (measured in the heterogeneity benchmark's HL4 job: [92, 94, 48, 22]).
void step_profile(const std::string& data, bool quick) {
  const std::string slowdown = "1,1,2,4", plan = "92,94,48,22";
  const int steps = quick ? 40 : 120, rounds = quick ? 1 : 3;
  std::printf(
      "\n## 4. Where a step's milliseconds go: mlp at 4 ranks, slowdown %s, plan [%s] (B = 256), "
      "torch threads = 1, ranks pinned; medians over %d steps x %d interleaved rounds\n",
      slowdown.c_str(), plan.c_str(), steps, rounds);
  struct Variant {
    const char* name;
    bool overlap, carried, extras_with_gradients;
  };
  const std::vector<Variant> variants = {
      {"before: all-reduce after backward + control broadcast", false, false, false},
      {"overlap only", true, false, false},
      {"carried control only", false, true, false},
      {"overlap + control in the exchange, extras in a bucket of their own", true, true, false},
      {"after: the same, extras with the gradients (one all-reduce)", true, true, true}};
  constexpr int kFields = 9;
  // [variant][rank][field] -> samples; and per step, every rank's compute for the peer wait.
  std::vector<std::vector<std::vector<std::vector<double>>>> samples(
      variants.size(), std::vector<std::vector<std::vector<double>>>(
                           4, std::vector<std::vector<double>>(kFields + 1)));
  for (int round = 0; round < rounds; ++round) {
    for (size_t v = 0; v < variants.size(); ++v) {
      const auto outs = run_ranks(
          4, {"--worker", "profile", "--model", "mlp", "--data", data, "--slowdown", slowdown,
              "--plan", plan, "--steps", std::to_string(steps), "--overlap",
              variants[v].overlap ? "1" : "0", "--carried", variants[v].carried ? "1" : "0",
              "--extras", variants[v].extras_with_gradients ? "1" : "0"});
      std::vector<std::vector<std::vector<double>>> rows(4);
      for (int r = 0; r < 4; ++r) {
        std::istringstream in(outs[static_cast<size_t>(r)]);
        std::vector<double> row(kFields);
        while (true) {
          for (auto& x : row) in >> x;
          if (!in) break;
          rows[static_cast<size_t>(r)].push_back(row);
        }
      }
      const size_t n = std::min({rows[0].size(), rows[1].size(), rows[2].size(), rows[3].size()});
      for (size_t s = 0; s < n; ++s) {
        double slowest = 0;
        for (int r = 0; r < 4; ++r) slowest = std::max(slowest, rows[static_cast<size_t>(r)][s][8]);
        for (int r = 0; r < 4; ++r) {
          const auto& row = rows[static_cast<size_t>(r)][s];
          auto& out = samples[v][static_cast<size_t>(r)];
          for (int f = 0; f < kFields; ++f) out[static_cast<size_t>(f)].push_back(row[static_cast<size_t>(f)]);
          // Waiting for slower peers: the slowest rank's compute minus this rank's, at most the
          // exposed wait it is part of.
          out[kFields].push_back(std::min(row[5], slowest - row[8]));
        }
      }
    }
  }
  std::printf(
      "| variant | rank (slowdown) | step wall | data | forward | backward | slowdown sleep | "
      "exposed all-reduce | of it waiting for slower peers | optimizer | control broadcast | "
      "rest |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  const std::vector<int> factors = int_list(slowdown);
  for (size_t v = 0; v < variants.size(); ++v) {
    for (int r = 0; r < 4; ++r) {
      const auto& f = samples[v][static_cast<size_t>(r)];
      auto m = [&](int i) { return 1e3 * median(f[static_cast<size_t>(i)]); };
      const double rest = m(0) - m(1) - m(2) - m(3) - m(4) - m(5) - m(6) - m(7);
      std::printf("| %s | %d (x%d) | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | "
                  "%.1f | %.1f |\n",
                  variants[v].name, r, factors[static_cast<size_t>(r)], m(0), m(1), m(2), m(3),
                  m(4), m(5), m(kFields), m(6), m(7), rest);
    }
  }
}

// Section 6. fc1 (784 x 1024) is registered last and used first: in reverse registration order
// its buckets come first, so every bucket waits for the gradient backward makes last; in the
// observed order head, fc3 and fc2 are launched while fc1's backward runs.
void bucket_order(bool quick) {
  const std::vector<int64_t> widths = {1024, 512, 512};
  const int steps = quick ? 30 : 100, rounds = quick ? 1 : 3, world = 2;
  const fs::path dir = fs::temp_directory_path() / ("ol_bench_model_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string model = (dir / "head_first.pt").string();
  save_head_first_mlp(model, 28 * 28, widths, 10, 1);
  std::printf(
      "\n## 6. Bucket order: MLP 784-1024-512-512-10 registered head first (TorchScript), %d "
      "ranks, b = 64 each, synthetic 28x28, bucket_bytes 1 MiB, torch threads = 1, ranks pinned; "
      "%d steps x %d interleaved rounds per order\n",
      world, steps, rounds);
  struct Variant {
    const char* name;
    bool observed;
  };
  const std::vector<Variant> variants = {{"reverse registration order", false},
                                         {"observed ready order (default)", true}};
  constexpr int kFields = 8;
  // [variant][rank][field] -> samples
  std::vector<std::vector<std::vector<std::vector<double>>>> samples(
      variants.size(), std::vector<std::vector<std::vector<double>>>(
                           world, std::vector<std::vector<double>>(kFields)));
  std::vector<std::vector<double>> after_last(variants.size());
  for (int round = 0; round < rounds; ++round) {
    for (size_t v = 0; v < variants.size(); ++v) {
      const auto outs =
          run_ranks(world, {"--worker", "order", "--model-path", model, "--steps",
                            std::to_string(steps), "--observed", variants[v].observed ? "1" : "0"});
      std::vector<std::vector<double>> exposed(world);
      for (int r = 0; r < world; ++r) {
        std::istringstream in(outs[static_cast<size_t>(r)]);
        std::vector<double> row(kFields);
        while (true) {
          for (auto& x : row) in >> x;
          if (!in) break;
          for (int f = 0; f < kFields; ++f) {
            samples[v][static_cast<size_t>(r)][static_cast<size_t>(f)].push_back(
                row[static_cast<size_t>(f)]);
          }
          exposed[static_cast<size_t>(r)].push_back(row[0]);
        }
      }
      // Per step, the smallest exposed all-reduce over the ranks: the rank whose compute ended
      // last waits for nobody, so its wait is the all-reduce that followed the compute.
      for (size_t s = 0; s < exposed[0].size(); ++s) {
        double least = exposed[0][s];
        for (const auto& e : exposed) least = std::min(least, s < e.size() ? e[s] : least);
        after_last[v].push_back(least);
      }
    }
  }
  fs::remove_all(dir);
  std::printf(
      "| order | rank | exposed all-reduce (ms, median) | mean | data | forward | backward | "
      "optimizer | step wall (ms) | buckets | launched before the last gradient |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (size_t v = 0; v < variants.size(); ++v) {
    for (int r = 0; r < world; ++r) {
      const auto& f = samples[v][static_cast<size_t>(r)];
      double mean = 0;
      for (double x : f[0]) mean += x;
      mean /= std::max<size_t>(1, f[0].size());
      std::printf("| %s | %d | %.2f | %.2f | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f | %.0f |\n",
                  variants[v].name, r, 1e3 * median(f[0]), 1e3 * mean, 1e3 * median(f[3]),
                  1e3 * median(f[4]), 1e3 * median(f[1]), 1e3 * median(f[5]), 1e3 * median(f[2]),
                  median(f[6]), median(f[7]));
    }
  }
  std::printf(
      "| order | exposed all-reduce after the last rank's compute: per step the smallest over "
      "the ranks (ms, median) | mean | steps |\n|---|---|---|---|\n");
  for (size_t v = 0; v < variants.size(); ++v) {
    double mean = 0;
    for (double x : after_last[v]) mean += x;
    mean /= std::max<size_t>(1, after_last[v].size());
    std::printf("| %s | %.2f | %.2f | %zu |\n", variants[v].name, 1e3 * median(after_last[v]),
                1e3 * mean, after_last[v].size());
  }
}

}  // namespace

int main(int argc, char** argv) {
  auto args = parse(argc, argv);
  // docs: glibc's default mmap/trim thresholds make step times bimodal; fix them everywhere.
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr) {
    setenv("MALLOC_MMAP_THRESHOLD_", "33554432", 1);
    setenv("MALLOC_TRIM_THRESHOLD_", "1073741824", 1);
    execv("/proc/self/exe", argv);
  }
  if (args.count("worker")) return worker_main(args);
  const bool quick = args.count("quick") > 0;
  const std::string data = args.count("data") ? args["data"] : kDefaultFashionMnistPath;
  std::printf("# training_bench (%u cores)%s\n", std::max(1u, std::thread::hardware_concurrency()),
              quick ? " --quick" : "");
  if (args.count("only") && args["only"] == "profile") {
    step_profile(data, quick);
    return 0;
  }
  if (args.count("only") && args["only"] == "slowdown") {
    slowdown_cpu(data, quick);
    return 0;
  }
  if (args.count("only") && args["only"] == "bucket-order") {
    bucket_order(quick);
    return 0;
  }
  single_worker(data, quick);
  allreduce_sweep(quick);
  mlp_overhead(data, quick);
  step_profile(data, quick);
  slowdown_cpu(data, quick);
  bucket_order(quick);
  return 0;
}
