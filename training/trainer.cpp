#include "training/trainer.hpp"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <time.h>
#include <unistd.h>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#ifdef OMNILEARN_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "runtime/atomic_file.hpp"
#include "training/models.hpp"

namespace omnilearn::training {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kCheckpointFormat = 1;
constexpr int64_t kStateMagic = 0x4F4C5354;  // "OLST": first word of the sync header
constexpr int64_t kControlInline = 63;       // control words carried by the first broadcast
constexpr int64_t kMaxControlWords = int64_t{1} << 20;
// Control words carried in a step's exchange travel as 16-bit chunks, one floating-point element
// each: every chunk is exactly representable in float32, and a SUM of rank 0's chunk with the
// other ranks' zeros is exact in any order.
constexpr int kChunkBits = 16;
constexpr int kChunksPerWord = 64 / kChunkBits;
// Words a step's exchange carries beyond a plan of world batches (kind, generation, version, one
// spare); longer ones follow in a broadcast.
constexpr int64_t kCarriedWordsOverWorld = 4;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int64_t optimizer_code(const std::string& kind) {
  return kind == "sgd" ? 1 : kind == "adam" ? 2 : 3;
}

// One tensor's place in a flat bucket.
struct Slot {
  at::Tensor tensor;  // live tensor (a parameter's grad is looked up at fill time)
  size_t bucket = 0;
  int64_t offset = 0;
};

// Throws CheckpointError(`what`) if `cond` fails.
void expect(bool cond, const std::string& path, const std::string& what) {
  if (!cond) throw CheckpointError("checkpoint " + path + ": " + what);
}


// Writes [length, words...] (words beyond `capacity` left out) into `region` as chunks.
void encode_words(at::Tensor& region, const std::vector<int64_t>& words, int64_t capacity) {
  std::vector<double> chunks(static_cast<size_t>(region.numel()), 0.0);
  auto put = [&](int64_t index, uint64_t word) {
    for (int c = 0; c < kChunksPerWord; ++c) {
      chunks[static_cast<size_t>(index * kChunksPerWord + c)] =
          static_cast<double>((word >> (kChunkBits * c)) & ((uint64_t{1} << kChunkBits) - 1));
    }
  };
  put(0, static_cast<uint64_t>(words.size()));
  const int64_t n = std::min<int64_t>(capacity, static_cast<int64_t>(words.size()));
  for (int64_t i = 0; i < n; ++i) put(1 + i, static_cast<uint64_t>(words[static_cast<size_t>(i)]));
  region.copy_(at::tensor(chunks, at::TensorOptions().dtype(at::kDouble)).to(region.options()));
}

// Reads what encode_words wrote (after the SUM): the length, and the words if it fits. False if
// a chunk is not a 16-bit integer (the ranks disagreed on the layout).
bool decode_words(const at::Tensor& region, int64_t capacity, int64_t* length,
                  std::vector<int64_t>* words) {
  const at::Tensor cpu = region.to(at::kCPU, at::kDouble).contiguous();
  const double* v = cpu.data_ptr<double>();
  bool ok = true;
  auto get = [&](int64_t index) {
    uint64_t word = 0;
    for (int c = 0; c < kChunksPerWord; ++c) {
      const double x = v[index * kChunksPerWord + c];
      if (!(x >= 0 && x < static_cast<double>(uint64_t{1} << kChunkBits)) || x != std::floor(x)) {
        ok = false;
        return uint64_t{0};
      }
      word |= static_cast<uint64_t>(x) << (kChunkBits * c);
    }
    return word;
  };
  *length = static_cast<int64_t>(get(0));
  words->clear();
  if (ok && *length >= 0 && *length <= capacity) {
    for (int64_t i = 0; i < *length; ++i) words->push_back(static_cast<int64_t>(get(1 + i)));
  }
  return ok && *length >= 0;
}

std::vector<NamedTensor> detached_copies(const std::vector<NamedTensor>& in) {
  std::vector<NamedTensor> out;
  out.reserve(in.size());
  for (const auto& [name, t] : in) out.emplace_back(name, t.detach().to(at::kCPU).clone());
  return out;
}

}  // namespace

struct Trainer::Impl {
  TrainerConfig config;
  DatasetPair data;
  at::Device device{at::kCPU};
  std::optional<Model> model;
  std::vector<NamedTensor> params;        // live parameters, model order
  std::vector<NamedTensor> trainable;     // those that require grad: what the optimizer updates
  std::vector<NamedTensor> buffers;       // live buffers, model order
  std::vector<at::Tensor> float_buffers;  // averaged across ranks each step (BatchNorm stats)
  std::vector<at::Tensor> int_buffers;    // counters (num_batches_tracked)
  std::unique_ptr<Optimizer> optimizer;
  EpochSampler sampler;
  int64_t step = 0;
  int64_t commit_generation = -1;  // generation of the group that committed the last step
  std::function<bool()> commit_gate;  // set_commit_gate()
  Cursor cursor;
  std::atomic<double> slowdown{1.0};
  std::atomic<bool> slowdown_spins{false};

  // The current group; null when training alone.
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  int rank = 0;
  int world = 1;
  int generation = -1;
  std::chrono::milliseconds timeout{0};
  std::string broken;  // why the group is unusable; empty while it is healthy
  std::function<bool()> abandon;  // set_abandon_check(): another thread says "give up now"
  // Broken groups being destroyed off the training thread: a group whose collective was
  // abandoned still has that collective queued, and its destructor waits for it (up to the
  // group timeout). Finished ones are dropped when the next group is built; the rest are
  // waited for when the trainer goes.
  std::vector<std::future<void>> reaping;

  // The step's exchange. Bucket 0: float buffers, one element for the loss, then the control
  // region (sized per group: it depends on the world). Buckets 1..: gradients in reverse
  // parameter order (backward produces the last layers' gradients first), about bucket_bytes
  // each, as DDP's reducer lays them out. With `extras_with_gradients` bucket 0 is the tail of
  // the last gradient bucket's tensor and travels in its all-reduce: a small all-reduce is far
  // from free on a small machine (latency, wake-ups of every rank), and one launched after
  // forward runs during backward, its threads preempting the compute.
  std::vector<Slot> grad_slots;                  // per trainable parameter
  std::vector<std::vector<size_t>> grad_members;  // per gradient bucket: trainable indices
  std::vector<Slot> buffer_slots;
  Slot loss_slot;
  int64_t extras_size = 0;       // bucket 0 without the control region
  int64_t control_capacity = 0;  // words the control region carries (this group)
  std::vector<int64_t> bucket_sizes;  // bucket 0 without the control region, then gradients
  std::vector<at::Tensor> buckets;  // reallocated per group: a failed op may still write old ones
  // What bucket i's all-reduce sends: buckets[i] itself, or for the last gradient bucket, when
  // bucket 0 rides in it, the whole tensor both are views of (undefined for bucket 0 then).
  std::vector<at::Tensor> wires;
  bool extras_ride = false;  // bucket 0 travels with the last gradient bucket (this group)
  // Kept alive so that their hooks stay registered (a parameter holds only a weak reference).
  std::vector<std::shared_ptr<torch::autograd::Node>> grad_accumulators;

  // One step's exchange in flight: what the gradient hooks launch. Guarded by `exchange_mutex`
  // (hooks run on the thread that runs backward, the training thread on the CPU; the lock
  // does not assume it).
  struct Exchange {
    bool active = false;
    double scale = 0;
    std::vector<int64_t> waiting;  // per gradient bucket: gradients not yet accumulated
    size_t next = 0;               // the next gradient bucket to launch (they go in order)
    // Launch order: bucket 0 (unless it rides in the last), 1, 2, ...
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    std::string error;             // a launch that threw (a hook must not throw into autograd)
    bool in_backward = false;
    int64_t launched_in_backward = 0;
    // Slowdown emulation, spread over the step so that a slowed rank's buckets are ready as
    // late as a slower CPU's would be: at each launch it sleeps (factor - 1) x the compute
    // since the last one.
    double factor = 1.0;
    bool spins = false;
    Clock::time_point mark;
    double cpu_mark = 0;  // the process's CPU time at `mark` (spinning emulation)
    double active_s = 0;   // compute time measured between the sleeps
    double slept_s = 0;    // requested sleep (what the emulation adds to compute time)
    double slept_wall_s = 0;
  };
  Exchange ex;
  std::mutex exchange_mutex;

  at::ScalarType real() const {
    return config.precision == Precision::kFloat64 ? at::kDouble : at::kFloat;
  }
  int64_t real_bytes() const { return config.precision == Precision::kFloat64 ? 8 : 4; }

  // Moves a batch to the replica's device, and its floating-point inputs to its precision.
  at::Tensor to_replica(const at::Tensor& t) const {
    return t.is_floating_point() ? t.to(device, real()) : t.to(device);
  }

  Impl(const TrainerConfig& cfg, DatasetPair d)
      : config(cfg), data(std::move(d)), sampler(checked_train_size(data, cfg), cfg.data.seed) {}

  static int64_t checked_train_size(DatasetPair& d, const TrainerConfig& cfg) {
    validate(cfg.model);
    validate(cfg.optimizer);
    validate_loss(cfg.loss, cfg.model);
    if (!d.train || !d.test) d = load_datasets(cfg.data);
    return d.train->size();
  }

  void build() {
    device = at::Device(config.device);
    if (config.bucket_bytes < 1024) {
      throw std::invalid_argument("bucket_bytes must be >= 1024, got " +
                                  std::to_string(config.bucket_bytes));
    }
    // The data must fit the loss (a file's wrong label is reported here, naming the file).
    const SplitFacts train_facts = data.train->facts();
    const int64_t classes = check_splits(
        train_facts, data.test->facts(), config.loss,
        config.data.dataset == "tensors" ? config.data.tensors.classes : data.train->num_classes);
    const bool script = config.model.kind == "torchscript";
    const bool pixels = train_facts.x.dtype == "uint8" || train_facts.x.dtype == "float32" ||
                        train_facts.x.dtype == "float64";
    if (!script && (train_facts.x.shape.size() != 4 || !pixels)) {
      throw DatasetError(train_facts.x.origin + ": the built-in models take images [N, C, H, W] "
                         "of uint8 or floating-point pixels; this holds " + train_facts.x.dtype +
                         " " + c10::str(data.train->inputs.sizes()) +
                         ": use model.kind = \"torchscript\" for other inputs");
    }
    model.emplace(build_model(config.model, data.train->sample_shape(), classes));
    model->to(device, real());
    model->set_training(true);
    params = model->named_parameters();
    for (const auto& [name, p] : params) {
      if (p.requires_grad()) trainable.emplace_back(name, p);
    }
    if (trainable.empty()) {
      throw ModelError(config.model.path + ": the model has no parameter that requires grad");
    }
    for (const auto& [name, b] : model->named_buffers()) {
      buffers.emplace_back(name, b);
      (b.is_floating_point() ? float_buffers : int_buffers).push_back(b);
    }
    for (auto& [name, p] : trainable) p.mutable_grad() = at::zeros_like(p);
    optimizer = std::make_unique<Optimizer>(config.optimizer, trainable);
    if (script) check_output(classes);
    layout_buckets();
    for (size_t k = 0; k < trainable.size(); ++k) {
      std::shared_ptr<torch::autograd::Node> acc =
          torch::autograd::impl::grad_accumulator(trainable[k].second);
      if (!acc) throw ModelError("parameter " + trainable[k].first + " has no gradient accumulator");
      // Runs after the accumulator wrote this step's gradient into .grad().
      acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this, k](const torch::autograd::variable_list& outputs,
                    const torch::autograd::variable_list&) {
            on_gradient_ready(k);
            return outputs;
          }));
      grad_accumulators.push_back(std::move(acc));
    }
  }

  // A user's model must map the data's inputs to what the loss compares with its targets; one
  // forward of two samples (evaluation mode: nothing changes) says so at start, with the file,
  // instead of a shape error in the first step.
  void check_output(int64_t classes) {
    const int64_t n = std::min<int64_t>(2, data.train->size());
    auto [x, y] = data.train->range(0, n);
    x = to_replica(x);
    y = to_replica(y);
    const std::string& file = config.model.path;
    at::Tensor out;
    {
      c10::NoGradGuard no_grad;
      model->set_training(false);
      try {
        out = model->forward(x);
      } catch (const ModelError& e) {
        throw ModelError(file + ": " + e.what());
      } catch (const std::exception& e) {
        std::string why = e.what();
        why = why.substr(0, why.find('\n'));
        throw ModelError(file + ": forward failed on inputs of shape " + c10::str(x.sizes()) +
                         " (" + data.train->inputs_origin + "): " + why);
      }
      model->set_training(true);
    }
    if (config.loss == "mse") {
      if (out.sizes() != y.sizes()) {
        throw ModelError(file + ": outputs of shape " + c10::str(out.sizes()) +
                         " for targets of shape " + c10::str(y.sizes()) + " (" +
                         data.train->labels_origin + "): loss = \"mse\" needs them equal");
      }
    } else if (out.dim() != 2 || out.size(0) != n || out.size(1) < classes) {
      throw ModelError(file + ": outputs of shape " + c10::str(out.sizes()) + " for " +
                       std::to_string(n) + " samples; loss = \"cross_entropy\" needs [" +
                       std::to_string(n) + ", C] class scores with C >= " +
                       std::to_string(classes) + ", the number of classes ([data] classes, or "
                       "the largest label + 1 of " + data.train->labels_origin +
                       " and the test split)");
    }
  }

  // The loss of a batch (Mean: what a step trains with; Sum: what evaluate adds up).
  at::Tensor loss_of(const at::Tensor& out, const at::Tensor& y,
                     at::Reduction::Reduction reduction = at::Reduction::Mean) const {
    if (config.loss == "mse") return at::mse_loss(out, y, reduction);
    return at::cross_entropy_loss(out, y, {}, reduction);
  }

  void layout_buckets() {
    int64_t used = 0;
    for (auto& b : float_buffers) {
      buffer_slots.push_back(Slot{b, 0, used});
      used += b.numel();
    }
    loss_slot = Slot{at::Tensor(), 0, used};
    extras_size = used + 1;
    bucket_sizes = {extras_size};
    const int64_t capacity = std::max<int64_t>(1, config.bucket_bytes / real_bytes());
    grad_slots.resize(trainable.size());
    int64_t fill = 0;
    for (size_t k = trainable.size(); k-- > 0;) {
      const at::Tensor& p = trainable[k].second;
      if (grad_members.empty() || (fill > 0 && fill + p.numel() > capacity)) {
        grad_members.emplace_back();
        bucket_sizes.push_back(0);
        fill = 0;
      }
      grad_slots[k] = Slot{p, grad_members.size(), fill};
      grad_members.back().push_back(k);
      fill += p.numel();
      bucket_sizes.back() = fill;
    }
  }

  // The control region of bucket 0 (this group's layout).
  at::Tensor control_region() {
    return buckets[0].narrow(0, extras_size, kChunksPerWord * (1 + control_capacity));
  }

  // Slowdown emulation: sleeps (factor - 1) x the compute since the last call. Exchange lock
  // held (or no exchange running).
  void pace() {
    const Clock::time_point now = Clock::now();
    const double active = std::chrono::duration<double>(now - ex.mark).count();
    ex.active_s += active;
    if (ex.factor > 1.0 && ex.spins) {
      // (factor - 1) x the compute's CPU time more, burnt here: throttled by a quota as the
      // compute is. The wall time it took is what the emulation added.
      const double cpu_now = process_cpu_seconds();
      const double until = cpu_now + (ex.factor - 1.0) * (cpu_now - ex.cpu_mark);
      while (process_cpu_seconds() < until) {
      }
      ex.slept_s += std::chrono::duration<double>(Clock::now() - now).count();
    } else if (ex.factor > 1.0) {
      const double extra = (ex.factor - 1.0) * active;
      std::this_thread::sleep_for(std::chrono::duration<double>(extra));
      ex.slept_s += extra;
    }
    ex.mark = Clock::now();
    if (ex.spins) ex.cpu_mark = process_cpu_seconds();
    ex.slept_wall_s += std::chrono::duration<double>(ex.mark - now).count();
  }

  static double process_cpu_seconds() {
    timespec t{};
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  }

  void launch_locked(size_t bucket) {
    if (!ex.error.empty()) return;  // the group is failing; the step will report it
    std::vector<at::Tensor> one{wires[bucket]};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    try {
      ex.works.push_back(group->allreduce(one, opts));
    } catch (const std::exception& e) {
      ex.error = std::string("gradient all-reduce failed: ") + e.what();
    }
  }

  // Bucket 0, right after forward: BatchNorm statistics and the loss (scaled by b_r / B), and
  // rank 0's control words (not scaled). Launched here only when it travels on its own.
  void launch_extras(double local_loss, const StepControl* control) {
    std::lock_guard lock(exchange_mutex);
    c10::NoGradGuard no_grad;
    at::Tensor& b = buckets[0];
    for (const Slot& slot : buffer_slots) {
      b.narrow(0, slot.offset, slot.tensor.numel()).copy_(slot.tensor.reshape({-1}));
    }
    b.narrow(0, loss_slot.offset, 1).fill_(local_loss);
    b.narrow(0, 0, extras_size).mul_(ex.scale);
    at::Tensor region = control_region();
    if (rank == 0) {
      encode_words(region, control ? control->words : std::vector<int64_t>{}, control_capacity);
    } else {
      region.zero_();
    }
    if (!extras_ride) launch_locked(0);  // else the last gradient bucket's launch sends them
  }

  // A gradient accumulator's hook: parameter k's gradient for this step is in its .grad().
  void on_gradient_ready(size_t k) {
    std::lock_guard lock(exchange_mutex);
    if (!ex.active) return;  // alone, or a backward outside step()
    const size_t j = grad_slots[k].bucket - 1;
    if (ex.waiting[j] > 0) --ex.waiting[j];
    launch_ready_locked();
  }

  // Launches, in order, the gradient buckets whose gradients are all there.
  void launch_ready_locked() {
    if (ex.in_backward && !config.overlap_allreduce) return;
    while (ex.next < grad_members.size() && ex.waiting[ex.next] == 0) {
      if (ex.in_backward) pace();
      c10::NoGradGuard no_grad;
      at::Tensor& b = buckets[ex.next + 1];
      for (size_t k : grad_members[ex.next]) {
        const Slot& slot = grad_slots[k];
        b.narrow(0, slot.offset, slot.tensor.numel()).copy_(slot.tensor.grad().reshape({-1}));
      }
      b.mul_(ex.scale);
      launch_locked(ex.next + 1);
      if (ex.in_backward) ++ex.launched_in_backward;
      ++ex.next;
    }
  }

  // After backward: the buckets whose hooks did not all fire (an empty slice, parameters the
  // forward did not use: their gradients are the zeros step() set).
  void launch_remaining() {
    std::lock_guard lock(exchange_mutex);
    std::fill(ex.waiting.begin(), ex.waiting.end(), 0);
    launch_ready_locked();
  }

  void begin_exchange(double scale, double factor) {
    std::lock_guard lock(exchange_mutex);
    ex = Exchange{};
    ex.active = !alone();
    ex.scale = scale;
    ex.factor = factor;
    ex.spins = slowdown_spins.load();
    ex.mark = Clock::now();
    if (ex.spins) ex.cpu_mark = process_cpu_seconds();
    for (const auto& members : grad_members) {
      ex.waiting.push_back(static_cast<int64_t>(members.size()));
    }
  }

  void end_exchange() {
    std::lock_guard lock(exchange_mutex);
    ex.active = false;
  }

  // Sums of the loss (Sum reduction) and correct predictions over test samples [begin, end).
  std::pair<double, int64_t> eval_sums(int64_t begin, int64_t end) {
    constexpr int64_t kChunk = 1000;
    const Dataset& test = *data.test;
    const bool regression = config.loss == "mse";
    c10::NoGradGuard no_grad;
    model->set_training(false);
    double loss_sum = 0;
    int64_t correct = 0;
    for (int64_t from = begin; from < end; from += kChunk) {
      auto [x, y] = test.range(from, std::min(end, from + kChunk));
      x = to_replica(x);
      y = to_replica(y);
      const at::Tensor out = model->forward(x);
      loss_sum += loss_of(out, y, at::Reduction::Sum).item<double>();
      if (!regression) correct += out.argmax(1).eq(y).sum().item<int64_t>();
    }
    model->set_training(true);
    return {loss_sum, correct};
  }

  EvalResult eval_result(double loss_sum, int64_t correct, int64_t n) const {
    const bool regression = config.loss == "mse";
    EvalResult r;
    r.samples = n;
    // mse's mean is over target elements, as in training; cross-entropy's over samples.
    const int64_t per_sample =
        regression ? std::max<int64_t>(1, data.test->labels[0].numel()) : 1;
    r.loss = n > 0 ? loss_sum / static_cast<double>(n * per_sample) : 0.0;
    r.accuracy = regression ? -1.0
                 : n > 0    ? static_cast<double>(correct) / static_cast<double>(n)
                            : 0.0;
    return r;
  }

  bool alone() const { return !group; }

  CollectiveStatus fail(const std::string& what) {
    broken = what;
    return CollectiveStatus{false, what};
  }

  // Waits for `work` within the group timeout, or until the abandon check says to give up
  // (checked every kAbandonSlice); a failure marks the group broken.
  CollectiveStatus wait(const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
    constexpr std::chrono::milliseconds kAbandonSlice{50};
    const Clock::time_point deadline = Clock::now() + timeout;
    while (true) {
      // Work::wait(0) waits forever: every slice is at least 1 ms.
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      left = std::max(left, std::chrono::milliseconds(1));
      try {
        work->wait(abandon ? std::min(left, kAbandonSlice) : left);
        return {};
      } catch (const std::exception& e) {
        // A slice ran out (the work is still running) or the collective failed. The work may
        // also have completed just after the slice ran out: then its own outcome decides
        // (wait() returns at once, or rethrows the collective's real error).
        if (work->isCompleted()) {
          try {
            work->wait();
            return {};
          } catch (const std::exception& failed) {
            return fail(std::string(what) + " failed in generation " +
                        std::to_string(generation) + ": " + failed.what());
          }
        }
        if (Clock::now() >= deadline) {
          return fail(std::string(what) + " failed in generation " + std::to_string(generation) +
                      ": " + e.what());
        }
        if (abandon && abandon()) {
          return fail(std::string(what) + " abandoned in generation " +
                      std::to_string(generation) + ": a newer generation replaces it");
        }
      }
    }
  }

  CollectiveStatus usable() const {
    if (!broken.empty()) {
      return {false, "process group is broken (" + broken + "); join a new generation"};
    }
    return {};
  }

  CollectiveStatus broadcast(at::Tensor& t, const char* what, int root = 0) {
    std::vector<at::Tensor> tensors{t};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    c10::intrusive_ptr<c10d::Work> work;
    try {
      work = group->broadcast(tensors, opts);
    } catch (const std::exception& e) {
      return fail(std::string(what) + " failed: " + e.what());
    }
    return wait(work, what);
  }

  CollectiveStatus allreduce(std::vector<at::Tensor> tensors, c10d::ReduceOp op, const char* what) {
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    try {
      // One call per tensor: Gloo queues them and its worker threads overlap them.
      for (auto& t : tensors) {
        std::vector<at::Tensor> one{t};
        c10d::AllreduceOptions opts;
        opts.reduceOp = op;
        works.push_back(group->allreduce(one, opts));
      }
    } catch (const std::exception& e) {
      return fail(std::string(what) + " failed: " + e.what());
    }
    for (auto& w : works) {
      CollectiveStatus s = wait(w, what);
      if (!s) return s;
    }
    return {};
  }

  std::vector<at::Tensor> float_state() const {
    std::vector<at::Tensor> out;
    for (const auto& [name, p] : params) out.push_back(p);
    for (const auto& b : float_buffers) out.push_back(b);
    for (const auto& [name, s] : optimizer->state()) out.push_back(s);
    return out;
  }

  static int64_t total_numel(const std::vector<at::Tensor>& ts) {
    int64_t n = 0;
    for (const auto& t : ts) n += t.numel();
    return n;
  }

  // What must be equal across ranks for a state broadcast to make sense.
  std::vector<int64_t> layout_fingerprint() const {
    return {kStateMagic,
            total_numel(float_state()),
            total_numel(int_buffers),
            static_cast<int64_t>(params.size()),
            static_cast<int64_t>(trainable.size()),
            optimizer_code(config.optimizer.kind),
            sampler.dataset_size(),
            static_cast<int64_t>(sampler.seed()),
            real_bytes()};
  }
};

Trainer::Trainer(const TrainerConfig& config, DatasetPair data)
    : impl_(std::make_unique<Impl>(config, std::move(data))) {
  impl_->build();
}

Trainer::~Trainer() = default;

CollectiveStatus Trainer::join_group(c10::intrusive_ptr<c10d::Store> store, int generation,
                                     int rank, int world, std::chrono::milliseconds timeout,
                                     const GroupOptions& options) {
  if (!store) throw std::invalid_argument("join_group needs a store");
  if (world < 1 || rank < 0 || rank >= world) {
    throw std::invalid_argument(
        "join_group: rank " + std::to_string(rank) +
        " must be in [0, world) with world >= 1, world = " + std::to_string(world));
  }
  if (generation < 0) throw std::invalid_argument("join_group: generation must be >= 0");
  if (world > 4096) {
    throw std::invalid_argument("join_group: at most 4096 ranks (the state election packs the "
                                "rank into 12 bits), got " + std::to_string(world));
  }
  if (timeout.count() <= 0) throw std::invalid_argument("join_group: timeout must be > 0");
  leave_group();
  Impl& s = *impl_;
  auto prefixed =
      c10::make_intrusive<c10d::PrefixStore>("gen/" + std::to_string(generation), store);
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  try {
    if (options.backend == Backend::kNccl) {
#ifdef OMNILEARN_WITH_NCCL
      if (!s.device.is_cuda()) {
        throw std::invalid_argument("the NCCL backend needs a CUDA device (config.device)");
      }
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = timeout;
      group = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, rank, world, opts);
#else
      throw std::invalid_argument(
          "the NCCL backend needs a build with -DOMNILEARN_WITH_NCCL=ON and CUDA LibTorch");
#endif
    } else {
      if (s.device.is_cuda()) {
        throw std::invalid_argument("use Backend::kNccl for a CUDA device");
      }
      auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
      if (!options.gloo_hostname.empty()) {
        opts->devices.push_back(
            c10d::ProcessGroupGloo::createDeviceForHostname(options.gloo_hostname));
      } else if (!options.gloo_interface.empty()) {
        opts->devices.push_back(
            c10d::ProcessGroupGloo::createDeviceForInterface(options.gloo_interface));
      } else {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      }
      opts->threads = std::max(1, options.gloo_threads);
      group = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, world, opts);
    }
  } catch (const std::invalid_argument&) {
    throw;
  } catch (const std::exception& e) {
    return CollectiveStatus{false, "rendezvous of generation " + std::to_string(generation) +
                                       " as rank " + std::to_string(rank) + "/" +
                                       std::to_string(world) + " failed: " + e.what()};
  }
  s.group = std::move(group);
  s.rank = rank;
  s.world = world;
  s.generation = generation;
  s.timeout = timeout;
  s.broken.clear();
  s.buckets.clear();
  s.wires.clear();
  s.control_capacity = world + kCarriedWordsOverWorld;
  const auto like = at::TensorOptions().dtype(s.real()).device(s.device);
  const int64_t extras = s.bucket_sizes[0] + kChunksPerWord * (1 + s.control_capacity);
  const size_t last = s.bucket_sizes.size() - 1;
  s.extras_ride = s.config.extras_with_gradients && last > 0;
  s.buckets.resize(s.bucket_sizes.size());
  s.wires.resize(s.bucket_sizes.size());
  for (size_t i = 1; i < s.bucket_sizes.size(); ++i) {
    s.buckets[i] = s.wires[i] = at::zeros({s.bucket_sizes[i]}, like);
  }
  if (s.extras_ride) {
    s.wires[last] = at::zeros({s.bucket_sizes[last] + extras}, like);
    s.buckets[last] = s.wires[last].narrow(0, 0, s.bucket_sizes[last]);
    s.buckets[0] = s.wires[last].narrow(0, s.bucket_sizes[last], extras);
  } else {
    s.buckets[0] = s.wires[0] = at::zeros({extras}, like);
  }
  return {};
}

void Trainer::leave_group() {
  Impl& s = *impl_;
  // The destructor waits for queued work; a hung op ends within the group timeout. A broken
  // group may have one queued: it goes away on another thread, so that the next generation
  // does not wait for it.
  std::erase_if(s.reaping, [](const std::future<void>& f) {
    return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  });
  if (s.group && !s.broken.empty()) {
    s.reaping.push_back(std::async(std::launch::async, [group = std::move(s.group)]() mutable {
      group.reset();
    }));
  }
  s.group.reset();
  s.buckets.clear();
  s.wires.clear();
  s.rank = 0;
  s.world = 1;
  s.generation = -1;
  s.broken.clear();
}

void Trainer::set_commit_gate(std::function<bool()> gate) { impl_->commit_gate = std::move(gate); }

void Trainer::set_abandon_check(std::function<bool()> abandon) {
  impl_->abandon = std::move(abandon);
}

bool Trainer::in_group() const { return !impl_->alone(); }
int Trainer::rank() const { return impl_->rank; }
int Trainer::world() const { return impl_->world; }
int Trainer::generation() const { return impl_->generation; }

CollectiveStatus Trainer::sync_state_from_rank0() { return sync_state_from(0); }

CollectiveStatus Trainer::sync_state_from_most_advanced(int* root) {
  Impl& s = *impl_;
  if (root) *root = 0;
  if (s.alone()) return {};
  if (CollectiveStatus u = s.usable(); !u) return u;
  // One all-reduce finds the most committed steps; on a tie, the state committed by the newest
  // generation (a superseded group's straggler may have committed the same step number: the
  // newer one is the job's, as in Raft's "last log term"); then the lowest rank. Packed into
  // one integer for MAX: step (31 bits), commit generation + 1 (20 bits), 4095 - rank (12).
  constexpr int64_t kRankBits = 12, kGenerationBits = 20;
  const auto longs = at::TensorOptions().dtype(at::kLong).device(s.device);
  const int64_t generation_field =
      std::min<int64_t>(s.commit_generation + 1, (int64_t{1} << kGenerationBits) - 1);
  const int64_t packed = (s.step << (kRankBits + kGenerationBits)) |
                         (generation_field << kRankBits) |
                         ((int64_t{1} << kRankBits) - 1 - s.rank);
  at::Tensor key = at::full({1}, packed, longs);
  if (CollectiveStatus st = s.allreduce({key}, c10d::ReduceOp::MAX, "state holder election"); !st) {
    return st;
  }
  const int64_t rank_field = key.to(at::kCPU).item<int64_t>() & ((int64_t{1} << kRankBits) - 1);
  const int chosen = static_cast<int>((int64_t{1} << kRankBits) - 1 - rank_field);
  if (root) *root = chosen;
  return sync_state_from(chosen);
}

CollectiveStatus Trainer::sync_state_from(int root) {
  Impl& s = *impl_;
  if (s.alone()) return {};
  if (CollectiveStatus u = s.usable(); !u) return u;
  if (root < 0 || root >= s.world) {
    throw std::invalid_argument("sync_state_from: root " + std::to_string(root) +
                                " is not a rank of a world of " + std::to_string(s.world));
  }
  const auto cpu_long = at::TensorOptions().dtype(at::kLong).device(s.device);

  // 1. Header: the root's counters and layout; every rank checks the layout matches its own.
  const std::vector<int64_t> fingerprint = s.layout_fingerprint();
  std::vector<int64_t> header_words = fingerprint;
  header_words.insert(header_words.end(),
                      {s.step, s.cursor.epoch, s.cursor.position, s.commit_generation});
  at::Tensor header = at::tensor(header_words, at::TensorOptions().dtype(at::kLong)).to(s.device);
  if (CollectiveStatus st = s.broadcast(header, "state header broadcast", root); !st) return st;
  header = header.to(at::kCPU);
  const int64_t* h = header.data_ptr<int64_t>();
  bool layout_ok = true;
  for (size_t i = 0; i < fingerprint.size(); ++i) layout_ok = layout_ok && h[i] == fingerprint[i];
  at::Tensor agree = at::full({1}, layout_ok ? 1 : 0, cpu_long);
  if (CollectiveStatus st = s.allreduce({agree}, c10d::ReduceOp::MIN, "state layout check"); !st) {
    return st;
  }
  if (agree.item<int64_t>() == 0) {
    // Every rank saw the same verdict, so the group is still in step and usable.
    return CollectiveStatus{false, layout_ok ? "another rank's model/optimizer/data layout "
                                               "differs from the root's; state not synced"
                                             : "this rank's model/optimizer/data layout differs "
                                               "from the root's; state not synced"};
  }
  const size_t n = fingerprint.size();
  const int64_t step = h[n], epoch = h[n + 1], position = h[n + 2], commit_generation = h[n + 3];

  // 2. Float state (parameters, BatchNorm statistics, optimizer state) in bucket-sized chunks,
  // then integer buffers. Copied into the live tensors only once everything has arrived.
  const std::vector<at::Tensor> live = s.float_state();
  std::vector<at::Tensor> flat_parts;
  for (const auto& t : live) flat_parts.push_back(t.detach().reshape({-1}));
  at::Tensor flat = at::cat(flat_parts);
  const int64_t chunk = std::max<int64_t>(1, s.config.bucket_bytes / s.real_bytes());
  for (int64_t off = 0; off < flat.numel(); off += chunk) {
    at::Tensor part = flat.narrow(0, off, std::min(chunk, flat.numel() - off)).clone();
    if (CollectiveStatus st = s.broadcast(part, "state broadcast", root); !st) return st;
    flat.narrow(0, off, part.numel()).copy_(part);
  }
  at::Tensor ints;
  if (!s.int_buffers.empty()) {
    std::vector<at::Tensor> parts;
    for (const auto& t : s.int_buffers) parts.push_back(t.reshape({-1}).to(at::kLong));
    ints = at::cat(parts);
    if (CollectiveStatus st = s.broadcast(ints, "buffer broadcast", root); !st) return st;
  }

  c10::NoGradGuard no_grad;
  int64_t off = 0;
  for (const auto& t : live) {
    t.detach().view({-1}).copy_(flat.narrow(0, off, t.numel()));
    off += t.numel();
  }
  off = 0;
  for (auto& t : s.int_buffers) {
    t.view({-1}).copy_(ints.narrow(0, off, t.numel()));
    off += t.numel();
  }
  s.step = step;
  s.cursor = Cursor{epoch, position};
  s.commit_generation = commit_generation;
  return {};
}

CollectiveStatus Trainer::broadcast_control(std::vector<int64_t>& words) {
  Impl& s = *impl_;
  if (s.alone()) return {};
  if (CollectiveStatus u = s.usable(); !u) return u;
  if (s.rank == 0 && static_cast<int64_t>(words.size()) > kMaxControlWords) {
    throw std::invalid_argument("broadcast_control: at most " + std::to_string(kMaxControlWords) +
                                " words, got " + std::to_string(words.size()));
  }
  const auto longs = at::TensorOptions().dtype(at::kLong);
  // One broadcast in the common case: [length, up to kControlInline words]; a second one carries
  // the rest of a longer message (every rank learns from the first whether it follows).
  at::Tensor frame = at::zeros({kControlInline + 1}, longs);
  if (s.rank == 0) {
    int64_t* f = frame.data_ptr<int64_t>();
    f[0] = static_cast<int64_t>(words.size());
    std::copy_n(words.begin(), std::min<int64_t>(kControlInline, f[0]), f + 1);
  }
  at::Tensor frame_dev = frame.to(s.device);
  if (CollectiveStatus st = s.broadcast(frame_dev, "control broadcast"); !st) return st;
  frame = frame_dev.to(at::kCPU);
  const int64_t* f = frame.data_ptr<int64_t>();
  const int64_t length = f[0];
  if (length < 0 || length > kMaxControlWords) {
    return s.fail("control broadcast carried an invalid length " + std::to_string(length));
  }
  std::vector<int64_t> received(f + 1, f + 1 + std::min(kControlInline, length));
  if (length > kControlInline) {
    at::Tensor rest = at::zeros({length - kControlInline}, longs);
    if (s.rank == 0)
      std::copy(words.begin() + kControlInline, words.end(), rest.data_ptr<int64_t>());
    at::Tensor rest_dev = rest.to(s.device);
    if (CollectiveStatus st = s.broadcast(rest_dev, "control broadcast"); !st) return st;
    rest = rest_dev.to(at::kCPU);
    received.insert(received.end(), rest.data_ptr<int64_t>(),
                    rest.data_ptr<int64_t>() + rest.numel());
  }
  if (s.rank != 0) words = std::move(received);
  return {};
}

CollectiveStatus Trainer::barrier() {
  Impl& s = *impl_;
  if (s.alone()) return {};
  if (CollectiveStatus u = s.usable(); !u) return u;
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = s.group->barrier();
  } catch (const std::exception& e) {
    return s.fail(std::string("barrier failed: ") + e.what());
  }
  return s.wait(work, "barrier");
}

StepResult Trainer::step(const std::vector<int>& batches) { return step(batches, nullptr); }

StepResult Trainer::step(const std::vector<int>& batches, StepControl* control) {
  Impl& s = *impl_;
  const int64_t global = checked_global_batch(batches);
  if (static_cast<int>(batches.size()) != s.world) {
    throw std::invalid_argument("step: batch vector has " + std::to_string(batches.size()) +
                                " entries for a world of " + std::to_string(s.world));
  }
  StepResult result;
  result.step = s.step;
  result.cursor = s.cursor;
  result.global_samples = global;
  const int64_t mine = batches[static_cast<size_t>(s.rank)];
  result.samples = mine;
  if (CollectiveStatus u = s.usable(); !u) {
    result.error = u.error;
    return result;
  }
  const bool exchange = !s.alone();
  // Rank 0 knows before computing whether its words will confirm the step: if not, every rank
  // will drop it, and rank 0 only carries the words.
  bool compute = mine > 0;
  if (control && s.rank == 0 && control->accept && !control->accept(control->words)) {
    if (!exchange) {
      // Alone, rank 0's words are the only ones: nothing to compute, nothing to commit.
      result.control_rejected = true;
      result.error = "rank 0's control words did not confirm the batches of this step";
      return result;
    }
    compute = false;
  }

  // Buffers change in forward; keep a copy so a step that is not committed changes nothing.
  std::vector<at::Tensor> saved_buffers;
  for (const auto& [name, b] : s.buffers) saved_buffers.push_back(b.clone());
  auto restore_buffers = [&] {
    c10::NoGradGuard no_grad;
    for (size_t i = 0; i < s.buffers.size(); ++i) s.buffers[i].second.copy_(saved_buffers[i]);
  };

  const double scale = compute ? static_cast<double>(mine) / static_cast<double>(global) : 0.0;
  s.begin_exchange(scale, s.slowdown.load());
  for (auto& [name, p] : s.trainable) p.mutable_grad().zero_();
  double local_loss = 0;
  if (compute) {
    Clock::time_point t = Clock::now();
    const std::vector<int64_t> indices = s.sampler.slice(s.cursor, batches, s.rank);
    auto [x, y] = s.data.train->gather(indices);
    x = s.to_replica(x);
    y = s.to_replica(y);
    result.data_time_s = seconds_since(t);
    t = Clock::now();
    at::Tensor loss = s.loss_of(s.model->forward(x), y);
    local_loss = loss.item<double>();
    result.forward_time_s = seconds_since(t);
    if (exchange) {
      {
        std::lock_guard lock(s.exchange_mutex);
        s.pace();
      }
      s.launch_extras(local_loss, control);
    }
    t = Clock::now();
    double slept_before = 0;
    {
      std::lock_guard lock(s.exchange_mutex);
      s.ex.in_backward = true;
      slept_before = s.ex.slept_wall_s;
    }
    loss.backward();
    {
      std::lock_guard lock(s.exchange_mutex);
      s.ex.in_backward = false;
      result.backward_time_s = seconds_since(t) - (s.ex.slept_wall_s - slept_before);
    }
  } else if (exchange) {
    s.launch_extras(0.0, control);
  }
  {
    std::lock_guard lock(s.exchange_mutex);
    s.pace();
    result.slowdown_time_s = s.ex.slept_s;
    result.compute_time_s = s.ex.active_s + s.ex.slept_s;
  }

  double global_loss = local_loss;
  if (exchange) {
    s.launch_remaining();
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    std::string launch_error;
    {
      std::lock_guard lock(s.exchange_mutex);
      works = s.ex.works;
      launch_error = s.ex.error;
      result.buckets = static_cast<int64_t>(s.grad_members.size());
      result.buckets_launched_in_backward = s.ex.launched_in_backward;
    }
    s.end_exchange();
    const Clock::time_point reduce_start = Clock::now();
    CollectiveStatus st;
    for (const auto& w : works) {
      st = s.wait(w, "gradient all-reduce");
      if (!st) break;
    }
    if (st && !launch_error.empty()) st = s.fail(launch_error);
    result.allreduce_time_s = seconds_since(reduce_start);
    if (!st) {
      restore_buffers();
      result.error = st.error;
      return result;
    }
    if (control) {
      int64_t length = 0;
      std::vector<int64_t> words;
      if (!decode_words(s.control_region(), s.control_capacity, &length, &words)) {
        restore_buffers();
        result.error = s.fail("the gradient exchange carried malformed control words in "
                              "generation " + std::to_string(s.generation))
                           .error;
        return result;
      }
      bool accepted = true;
      if (length > s.control_capacity) {
        // Too long for the exchange: rank 0 sends them whole, and nobody commits this step
        // (words that confirm a plan always fit; longer ones are a command of another kind).
        if (s.rank == 0) words = control->words;
        if (CollectiveStatus bc = broadcast_control(words); !bc) {
          restore_buffers();
          result.error = bc.error;
          return result;
        }
        accepted = false;
      }
      control->words = words;
      if (accepted && control->accept) accepted = control->accept(control->words);
      if (!accepted) {
        restore_buffers();
        result.control_rejected = true;
        result.error = "rank 0's control words did not confirm the batches of this step";
        return result;
      }
    }
    if (s.commit_gate && !s.commit_gate()) {
      // The all-reduce completed, but the protocol may not commit now (a leader whose lease ran
      // out while the step ran). Nothing changes; the group is out of step: broken.
      restore_buffers();
      result.error = s.fail("commit refused in generation " + std::to_string(s.generation) +
                            ": the elastic protocol did not allow it (lease ran out)")
                         .error;
      return result;
    }
  }

  if (!exchange && s.commit_gate && !s.commit_gate()) {
    // Alone the protocol asks the same question before anything changes.
    restore_buffers();
    result.error = "commit refused: the elastic protocol did not allow it (lease ran out)";
    return result;
  }

  const Clock::time_point update_start = Clock::now();
  if (exchange) {
    c10::NoGradGuard no_grad;
    for (const Slot& slot : s.grad_slots) {
      slot.tensor.mutable_grad().view({-1}).copy_(
          s.buckets[slot.bucket].narrow(0, slot.offset, slot.tensor.numel()));
    }
    for (const Slot& slot : s.buffer_slots) {
      slot.tensor.view({-1}).copy_(
          s.buckets[slot.bucket].narrow(0, slot.offset, slot.tensor.numel()));
    }
    global_loss = s.buckets[s.loss_slot.bucket][s.loss_slot.offset].item<double>();
    // A rank with an empty slice ran no forward; keep its counters in step with the others.
    if (!compute) {
      for (auto& t : s.int_buffers) t.add_(1);
    }
  }
  s.optimizer->step(scheduled_lr(s.config.optimizer, s.step), s.step + 1);
  result.optimizer_time_s = seconds_since(update_start);
  s.step += 1;
  if (exchange) s.commit_generation = s.generation;
  s.cursor = s.sampler.advance(s.cursor, global);
  result.committed = true;
  result.loss = global_loss;
  result.step = s.step;
  result.cursor = s.cursor;
  return result;
}

int64_t Trainer::flat_parameter_count() const {
  int64_t n = 0;
  for (const auto& [name, p] : impl_->trainable) n += p.numel();
  return n;
}

void Trainer::copy_flat_parameters(float* out) const {
  c10::NoGradGuard no_grad;
  int64_t offset = 0;
  for (const auto& [name, p] : impl_->trainable) {
    at::Tensor dst = at::from_blob(out + offset, {p.numel()}, at::TensorOptions().dtype(at::kFloat));
    dst.copy_(p.detach().reshape({-1}));
    offset += p.numel();
  }
}

void Trainer::set_flat_parameters(const float* data, int64_t offset, int64_t count) {
  const int64_t total = flat_parameter_count();
  if (offset < 0 || count < 0 || offset + count > total) {
    throw std::invalid_argument("set_flat_parameters: [" + std::to_string(offset) + ", " +
                                std::to_string(offset + count) + ") outside a model of " +
                                std::to_string(total) + " parameters");
  }
  c10::NoGradGuard no_grad;
  int64_t start = 0;  // of the current parameter in the flat vector
  for (auto& [name, p] : impl_->trainable) {
    const int64_t end = start + p.numel();
    const int64_t from = std::max(start, offset);
    const int64_t to = std::min(end, offset + count);
    if (from < to) {
      // from_blob does not copy: the one copy is copy_ into the parameter.
      at::Tensor src = at::from_blob(const_cast<float*>(data) + (from - offset), {to - from},
                                     at::TensorOptions().dtype(at::kFloat));
      p.view({-1}).narrow(0, from - start, to - from).copy_(src);
    }
    start = end;
  }
}

namespace {

// Shared in an asynchronous job: floating-point buffers (statistics) and BatchNorm's counters;
// any other integer buffer (an id, a seed) stays with each replica.
bool shared_buffer(const std::string& name, const at::Tensor& b) {
  return b.is_floating_point() || name.ends_with("num_batches_tracked");
}

bool counter_buffer(const std::string& name, const at::Tensor& b) {
  return !b.is_floating_point() || name.ends_with("num_batches_tracked");
}

}  // namespace

int64_t Trainer::flat_buffer_count() const {
  int64_t n = 0;
  for (const auto& [name, b] : impl_->buffers) {
    if (shared_buffer(name, b)) n += b.numel();
  }
  return n;
}

std::vector<bool> Trainer::flat_buffer_counters() const {
  std::vector<bool> out;
  for (const auto& [name, b] : impl_->buffers) {
    if (shared_buffer(name, b)) out.insert(out.end(), b.numel(), counter_buffer(name, b));
  }
  return out;
}

void Trainer::copy_flat_buffers(float* out) const {
  c10::NoGradGuard no_grad;
  int64_t offset = 0;
  for (const auto& [name, b] : impl_->buffers) {
    if (!shared_buffer(name, b)) continue;
    at::Tensor dst = at::from_blob(out + offset, {b.numel()}, at::TensorOptions().dtype(at::kFloat));
    dst.copy_(b.detach().reshape({-1}));  // converts integer counters
    offset += b.numel();
  }
}

void Trainer::set_flat_buffers(const float* data) {
  c10::NoGradGuard no_grad;
  int64_t offset = 0;
  for (auto& [name, b] : impl_->buffers) {
    if (!shared_buffer(name, b)) continue;
    at::Tensor src = at::from_blob(const_cast<float*>(data) + offset, {b.numel()},
                                   at::TensorOptions().dtype(at::kFloat));
    if (b.is_floating_point()) {
      b.copy_(src.view(b.sizes()));
    } else {
      b.copy_(src.round().view(b.sizes()));  // a counter summed from differences in float
    }
    offset += b.numel();
  }
}

void Trainer::refresh_statistics(int64_t passes, int64_t batch, uint64_t seed) {
  Impl& s = *impl_;
  if (batch < 1) throw std::invalid_argument("refresh_statistics: batch must be at least 1");
  const int64_t count = flat_buffer_count();
  const int64_t train_size = s.data.train->size();
  if (passes <= 0 || count == 0 || train_size == 0) return;
  std::vector<float> before(static_cast<size_t>(count));
  copy_flat_buffers(before.data());
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> pick(0, train_size - 1);
  std::vector<int64_t> indices(static_cast<size_t>(std::min(batch, train_size)));
  c10::NoGradGuard no_grad;
  s.model->set_training(true);
  for (int64_t pass = 0; pass < passes; ++pass) {
    for (int64_t& i : indices) i = pick(rng);
    const at::Tensor x = s.data.train->gather(indices).first;
    s.model->forward(s.to_replica(x));
  }
  // The counters count applied updates (what the servers kept), not these passes.
  std::vector<float> after(before.size());
  copy_flat_buffers(after.data());
  const std::vector<bool> counters = flat_buffer_counters();
  for (size_t i = 0; i < after.size(); ++i) {
    if (counters[i]) after[i] = before[i];
  }
  set_flat_buffers(after.data());
}

Trainer::GradientResult Trainer::flat_gradient(const std::vector<int64_t>& indices, float* out) {
  Impl& s = *impl_;
  if (indices.empty()) throw std::invalid_argument("flat_gradient: an empty batch");
  GradientResult result;
  result.samples = static_cast<int64_t>(indices.size());
  // It only times the compute: the caller sends the gradient itself, so the hooks must not
  // launch bucket all-reduces even if this trainer is in a group.
  s.begin_exchange(1.0, s.slowdown.load());
  {
    std::lock_guard lock(s.exchange_mutex);
    s.ex.active = false;
  }
  for (auto& [name, p] : s.trainable) p.mutable_grad().zero_();
  auto [x, y] = s.data.train->gather(indices);
  x = s.to_replica(x);
  y = s.to_replica(y);
  at::Tensor loss = s.loss_of(s.model->forward(x), y);
  result.loss = loss.item<double>();
  loss.backward();
  {
    std::lock_guard lock(s.exchange_mutex);
    s.pace();
    result.slowdown_time_s = s.ex.slept_s;
    result.compute_time_s = s.ex.active_s + s.ex.slept_s;
  }
  s.end_exchange();
  c10::NoGradGuard no_grad;
  int64_t offset = 0;
  for (const auto& [name, p] : s.trainable) {
    at::Tensor dst = at::from_blob(out + offset, {p.numel()}, at::TensorOptions().dtype(at::kFloat));
    dst.copy_(p.grad().reshape({-1}));
    offset += p.numel();
  }
  return result;
}

EvalResult Trainer::evaluate(int64_t max_samples) {
  Impl& s = *impl_;
  const Dataset& test = *s.data.test;
  const int64_t n = max_samples > 0 ? std::min(max_samples, test.size()) : test.size();
  const auto [loss_sum, correct] = s.eval_sums(0, n);
  return s.eval_result(loss_sum, correct, n);
}

CollectiveStatus Trainer::evaluate_sharded(EvalResult* out, int64_t max_samples,
                                           std::span<const int> shares) {
  Impl& s = *impl_;
  if (s.alone()) {
    *out = evaluate(max_samples);
    return {};
  }
  if (CollectiveStatus u = s.usable(); !u) return u;
  const Dataset& test = *s.data.test;
  const int64_t n = max_samples > 0 ? std::min(max_samples, test.size()) : test.size();
  int64_t total = 0, before = 0;
  if (static_cast<int64_t>(shares.size()) == s.world) {
    for (int64_t r = 0; r < s.world; ++r) {
      const int64_t w = std::max(shares[static_cast<std::size_t>(r)], 0);
      total += w;
      if (r < s.rank) before += w;
    }
  }
  int64_t begin = n * s.rank / s.world;
  int64_t end = n * (s.rank + 1) / s.world;
  if (total > 0) {
    begin = n * before / total;
    end = n * (before + std::max(shares[static_cast<std::size_t>(s.rank)], 0)) / total;
  }
  // The slowdown emulation paces the evaluation as it paces a step's compute: an emulated slow
  // machine evaluates slowly too, which is why its share follows its batch.
  s.begin_exchange(1.0, s.slowdown.load());
  const auto [loss_sum, correct] = s.eval_sums(begin, end);
  {
    std::lock_guard lock(s.exchange_mutex);
    s.pace();
  }
  s.end_exchange();
  at::Tensor sums = at::tensor({loss_sum, static_cast<double>(correct)},
                               at::TensorOptions().dtype(at::kDouble))
                        .to(s.device);
  if (CollectiveStatus st = s.allreduce({sums}, c10d::ReduceOp::SUM, "sharded evaluation"); !st) {
    return st;
  }
  sums = sums.to(at::kCPU);
  *out = s.eval_result(sums[0].item<double>(), static_cast<int64_t>(sums[1].item<double>()), n);
  return {};
}

void Trainer::save_checkpoint(const std::string& path) const {
  const Impl& s = *impl_;
  c10::Dict<std::string, at::Tensor> model;
  for (const auto& [name, t] : s.params) model.insert(name, t.detach().to(at::kCPU).clone());
  for (const auto& [name, t] : s.buffers) model.insert(name, t.detach().to(at::kCPU).clone());
  c10::Dict<std::string, at::Tensor> optimizer;
  for (const auto& [name, t] : s.optimizer->state()) optimizer.insert(name, t.to(at::kCPU).clone());
  c10::Dict<std::string, int64_t> trainer;
  trainer.insert("format", kCheckpointFormat);
  trainer.insert("step", s.step);
  trainer.insert("epoch", s.cursor.epoch);
  trainer.insert("position", s.cursor.position);
  trainer.insert("dataset_size", s.sampler.dataset_size());
  trainer.insert("data_seed", static_cast<int64_t>(s.sampler.seed()));
  // Top level is {"model": state_dict, "optimizer": ..., "trainer": ..., "optimizer_kind": ...}:
  // in Python, torch.load(path)["model"] feeds load_state_dict of the equivalent Sequential
  // (of the same module, for a TorchScript model).
  c10::impl::GenericDict top(c10::StringType::get(), c10::AnyType::get());
  top.insert("model", model);
  top.insert("optimizer", optimizer);
  top.insert("optimizer_kind", s.config.optimizer.kind);
  top.insert("trainer", trainer);
  std::vector<char> bytes;
  try {
    bytes = torch::jit::pickle_save(top);
  } catch (const std::exception& e) {
    throw CheckpointError("cannot serialize checkpoint " + path + ": " + e.what());
  }
  try {
    runtime::write_file_atomically(path, std::string_view(bytes.data(), bytes.size()));
  } catch (const runtime::AtomicWriteError& e) {
    throw CheckpointError(e.what());
  }
}

void Trainer::load_checkpoint(const std::string& path) {
  Impl& s = *impl_;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError("cannot open checkpoint " + path + ": " + std::strerror(errno));
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  c10::IValue value;
  try {
    value = torch::jit::pickle_load(bytes);
  } catch (const std::exception& e) {
    throw CheckpointError("checkpoint " + path + " is not a readable archive: " + e.what());
  }
  expect(value.isGenericDict(), path, "top level is not a dict");
  const c10::impl::GenericDict top = value.toGenericDict();
  for (const char* key : {"model", "optimizer", "optimizer_kind", "trainer"}) {
    expect(top.contains(key), path, std::string("missing entry \"") + key + "\"");
  }
  auto tensors = [&](const char* key) {
    const c10::IValue v = top.at(key);
    expect(v.isGenericDict(), path, std::string("\"") + key + "\" is not a dict");
    std::map<std::string, at::Tensor> out;
    for (const auto& entry : v.toGenericDict()) {
      expect(entry.key().isString() && entry.value().isTensor(), path,
             std::string("\"") + key + "\" must map names to tensors");
      out.emplace(entry.key().toStringRef(), entry.value().toTensor());
    }
    return out;
  };
  const std::map<std::string, at::Tensor> model = tensors("model");
  const std::map<std::string, at::Tensor> optimizer = tensors("optimizer");
  const c10::IValue kind = top.at("optimizer_kind");
  expect(kind.isString() && kind.toStringRef() == s.config.optimizer.kind, path,
         "optimizer kind differs from this trainer's \"" + s.config.optimizer.kind + "\"");
  std::map<std::string, int64_t> counters;
  const c10::IValue trainer = top.at("trainer");
  expect(trainer.isGenericDict(), path, "\"trainer\" is not a dict");
  for (const auto& entry : trainer.toGenericDict()) {
    expect(entry.key().isString() && entry.value().isInt(), path,
           "\"trainer\" must map names to integers");
    counters[entry.key().toStringRef()] = entry.value().toInt();
  }
  for (const char* key : {"format", "step", "epoch", "position", "dataset_size", "data_seed"}) {
    expect(counters.count(key) == 1, path, std::string("missing trainer field \"") + key + "\"");
  }
  expect(counters["format"] == kCheckpointFormat, path,
         "format " + std::to_string(counters["format"]) + " is not " +
             std::to_string(kCheckpointFormat));
  expect(counters["dataset_size"] == s.sampler.dataset_size() &&
             counters["data_seed"] == static_cast<int64_t>(s.sampler.seed()),
         path, "it was written for another dataset size or data seed");
  const Cursor cursor{counters["epoch"], counters["position"]};
  expect(counters["step"] >= 0 && cursor.epoch >= 0 && cursor.position >= 0 &&
             cursor.position < s.sampler.dataset_size(),
         path, "step or cursor out of range");

  auto match = [&](const std::vector<NamedTensor>& live,
                   const std::map<std::string, at::Tensor>& saved, const char* what) {
    expect(live.size() == saved.size(), path,
           std::string(what) + " has " + std::to_string(saved.size()) + " entries, expected " +
               std::to_string(live.size()));
    for (const auto& [name, t] : live) {
      auto it = saved.find(name);
      expect(it != saved.end(), path, std::string(what) + " lacks \"" + name + "\"");
      expect(it->second.sizes() == t.sizes() && it->second.scalar_type() == t.scalar_type(), path,
             std::string(what) + " entry \"" + name + "\" has another shape or type");
    }
  };
  std::vector<NamedTensor> all = s.params;
  all.insert(all.end(), s.buffers.begin(), s.buffers.end());
  match(all, model, "model");
  match(s.optimizer->state(), optimizer, "optimizer");

  c10::NoGradGuard no_grad;
  for (auto& [name, t] : all) t.copy_(model.at(name));
  for (const auto& [name, t] : s.optimizer->state()) {
    at::Tensor live = t;
    live.copy_(optimizer.at(name));
  }
  s.step = counters["step"];
  s.cursor = cursor;
}

void Trainer::set_slowdown(double factor) {
  if (!(factor >= 1.0) || !std::isfinite(factor)) {
    throw std::invalid_argument("slowdown factor must be a finite number >= 1, got " +
                                std::to_string(factor));
  }
  impl_->slowdown.store(factor);
}

double Trainer::slowdown() const { return impl_->slowdown.load(); }
void Trainer::set_slowdown_spins(bool spins) { impl_->slowdown_spins.store(spins); }
int64_t Trainer::step_count() const { return impl_->step; }
Cursor Trainer::cursor() const { return impl_->cursor; }
double Trainer::current_lr() const { return scheduled_lr(impl_->config.optimizer, impl_->step); }
const DatasetPair& Trainer::data() const { return impl_->data; }
const TrainerConfig& Trainer::config() const { return impl_->config; }

std::vector<NamedTensor> Trainer::named_parameters() const {
  return detached_copies(impl_->params);
}
std::vector<NamedTensor> Trainer::named_buffers() const { return detached_copies(impl_->buffers); }
std::vector<NamedTensor> Trainer::named_optimizer_state() const {
  return detached_copies(impl_->optimizer->state());
}

int64_t Trainer::parameter_bytes() const {
  int64_t bytes = 0;
  for (const auto& [name, p] : impl_->trainable) bytes += p.numel() * p.element_size();
  return bytes;
}

}  // namespace omnilearn::training
