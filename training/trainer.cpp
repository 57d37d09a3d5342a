// The replica: model, optimizer, data and the step loop. What a step's parts do lives beside
// it, one file each (training/trainer_impl.hpp lists them): this file builds the replica, joins
// and leaves groups, and runs a step from gathering the batch to the commit.
#include "training/trainer.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "training/trainer_impl.hpp"

namespace omnilearn::training {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<NamedTensor> detached_copies(const std::vector<NamedTensor>& in) {
  std::vector<NamedTensor> out;
  out.reserve(in.size());
  for (const auto& [name, t] : in) out.emplace_back(name, t.detach().to(at::kCPU).clone());
  return out;
}

}  // namespace

Trainer::Impl::Impl(const TrainerConfig& cfg, DatasetPair d)
    : config(cfg), data(std::move(d)), sampler(checked_train_size(data, cfg), cfg.data.seed) {}

int64_t Trainer::Impl::checked_train_size(DatasetPair& d, const TrainerConfig& cfg) {
  validate(cfg.model);
  validate(cfg.optimizer);
  validate_loss(cfg.loss, cfg.model);
  if (!d.train || !d.test) d = load_datasets(cfg.data);
  return d.train->size();
}

// A user's model must map the data's inputs to what the loss compares with its targets; one
// forward of two samples (evaluation mode: nothing changes) says so at start, with the file,
// instead of a shape error in the first step.
void Trainer::Impl::check_output(int64_t classes) {
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
      throw ModelError(file + ": forward failed on inputs of shape " + c10::str(x.sizes()) + " (" +
                       data.train->inputs_origin + "): " + why);
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
                     std::to_string(n) + ", C] class scores with C >= " + std::to_string(classes) +
                     ", the number of classes ([data] classes, or "
                     "the largest label + 1 of " +
                     data.train->labels_origin + " and the test split)");
  }
}

at::Tensor Trainer::Impl::loss_of(const at::Tensor& out, const at::Tensor& y,
                                  at::Reduction::Reduction reduction) const {
  if (config.loss == "mse") return at::mse_loss(out, y, reduction);
  return at::cross_entropy_loss(out, y, {}, reduction);
}

std::pair<double, int64_t> Trainer::Impl::eval_sums(int64_t begin, int64_t end) {
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

EvalResult Trainer::Impl::eval_result(double loss_sum, int64_t correct, int64_t n) const {
  const bool regression = config.loss == "mse";
  EvalResult r;
  r.samples = n;
  // mse's mean is over target elements, as in training; cross-entropy's over samples.
  const int64_t per_sample = regression ? std::max<int64_t>(1, data.test->labels[0].numel()) : 1;
  r.loss = n > 0 ? loss_sum / static_cast<double>(n * per_sample) : 0.0;
  r.accuracy = regression ? -1.0
               : n > 0    ? static_cast<double>(correct) / static_cast<double>(n)
                          : 0.0;
  return r;
}

void Trainer::Impl::build() {
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
    throw DatasetError(train_facts.x.origin +
                       ": the built-in models take images [N, C, H, W] "
                       "of uint8 or floating-point pixels; this holds " +
                       train_facts.x.dtype + " " + c10::str(data.train->inputs.sizes()) +
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
  internal::GradientExchange::Layout layout;
  layout.bucket_bytes = config.bucket_bytes;
  layout.real_bytes = real_bytes();
  layout.overlap = config.overlap_allreduce;
  layout.extras_with_gradients = config.extras_with_gradients;
  layout.first_layer_alone = config.first_layer_bucket;
  layout.observed_order = config.observed_bucket_order;
  exchange = std::make_unique<internal::GradientExchange>(trainable, float_buffers, layout);
}

bool Trainer::Impl::settle_exchange(StepControl* control, StepResult* result) {
  const internal::GradientExchange::Launched launched = exchange->launch_remaining();
  result->buckets = launched.buckets;
  result->buckets_launched_in_backward = launched.launched_in_backward;
  result->buckets_launched_before_last_gradient = launched.launched_before_last_gradient;
  exchange->end();
  const Clock::time_point reduce_start = Clock::now();
  CollectiveStatus st;
  for (const auto& w : launched.works) {
    st = group.wait(w, "gradient all-reduce");
    if (!st) break;
  }
  if (st && !launched.error.empty()) st = group.fail(launched.error);
  result->allreduce_time_s = seconds_since(reduce_start);
  if (!st) {
    result->error = st.error;
    return false;
  }
  if (control && !settle_control(control, &result->control_rejected, &result->error)) {
    return false;
  }
  if (commit_gate && !commit_gate()) {
    // The all-reduce completed, but the protocol may not commit now (a leader whose lease ran
    // out while the step ran). Nothing changes; the group is out of step: broken.
    result->error = group
                        .fail("commit refused in generation " + std::to_string(group.generation()) +
                              ": the elastic protocol did not allow it (lease ran out)")
                        .error;
    return false;
  }
  return true;
}

// Once per group, at its second step: by then rank 0 has run a backward in this group (unless it
// computed nothing in the first: an empty slice, words that refused the step; then its order
// from an earlier group or from training alone, if any) and recorded the order its gradients
// became ready, so a group that keeps its members for a whole job re-plans too; at attach a
// fresh job's rank 0 would have recorded nothing. Rank 0's order, not each rank's own: every
// rank must lay its buckets out alike or the all-reduce would sum different parameters'
// gradients. One broadcast of n + 1 words per group, never per step; a rank that joins later
// is in a new group, which agrees the same way.
CollectiveStatus Trainer::Impl::agree_bucket_order() {
  const std::vector<int64_t> mine =
      internal::GradientExchange::encode_order(exchange->recorded_order(), trainable.size());
  at::Tensor words = at::tensor(mine, at::TensorOptions().dtype(at::kLong)).to(device);
  if (CollectiveStatus st = group.broadcast(words, "gradient bucket order broadcast"); !st) {
    return st;
  }
  words = words.to(at::kCPU).contiguous();
  const int64_t* w = words.data_ptr<int64_t>();
  exchange->agree_order(std::vector<int64_t>(w, w + words.numel()));
  return {};
}

bool Trainer::Impl::may_commit_alone(StepResult* result) {
  exchange->end();
  if (commit_gate && !commit_gate()) {
    // Alone the protocol asks the same question before anything changes.
    result->error = "commit refused: the elastic protocol did not allow it (lease ran out)";
    return false;
  }
  return true;
}

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
    throw std::invalid_argument(
        "join_group: at most 4096 ranks (the state election packs the "
        "rank into 12 bits), got " +
        std::to_string(world));
  }
  if (timeout.count() <= 0) throw std::invalid_argument("join_group: timeout must be > 0");
  leave_group();
  Impl& s = *impl_;
  CollectiveStatus joined =
      s.group.join(store, generation, rank, world, timeout, options, s.device);
  if (!joined) return joined;
  s.group_steps = 0;
  s.exchange->attach(&s.group.group(), rank, world,
                     at::TensorOptions().dtype(s.real()).device(s.device));
  return {};
}

void Trainer::leave_group() {
  Impl& s = *impl_;
  s.exchange->detach();
  s.group.leave();
}

void Trainer::set_commit_gate(std::function<bool()> gate) { impl_->commit_gate = std::move(gate); }

void Trainer::set_abandon_check(std::function<bool()> abandon) {
  impl_->group.set_abandon_check(std::move(abandon));
}

bool Trainer::in_group() const { return !impl_->alone(); }
int Trainer::rank() const { return impl_->group.rank(); }
int Trainer::world() const { return impl_->group.world(); }
int Trainer::generation() const { return impl_->group.generation(); }

CollectiveStatus Trainer::barrier() {
  Impl& s = *impl_;
  if (s.alone()) return {};
  if (CollectiveStatus u = s.group.usable(); !u) return u;
  return s.group.barrier();
}

StepResult Trainer::step(const std::vector<int>& batches) { return step(batches, nullptr); }

StepResult Trainer::step(const std::vector<int>& batches, StepControl* control) {
  Impl& s = *impl_;
  const int64_t global = checked_global_batch(batches);
  const int rank = s.group.rank();
  if (static_cast<int>(batches.size()) != s.group.world()) {
    throw std::invalid_argument("step: batch vector has " + std::to_string(batches.size()) +
                                " entries for a world of " + std::to_string(s.group.world()));
  }
  StepResult result;
  result.step = s.step;
  result.cursor = s.cursor;
  result.global_samples = global;
  const int64_t mine = batches[static_cast<size_t>(rank)];
  result.samples = mine;
  if (CollectiveStatus u = s.group.usable(); !u) {
    result.error = u.error;
    return result;
  }
  const bool exchange = !s.alone();
  if (exchange && s.group_steps++ == 1 && s.config.observed_bucket_order) {
    if (CollectiveStatus st = s.agree_bucket_order(); !st) {
      result.error = st.error;
      return result;
    }
  }
  // Rank 0 knows before computing whether its words will confirm the step: if not, every rank
  // will drop it, and rank 0 only carries the words.
  bool compute = mine > 0;
  if (control && rank == 0 && control->accept && !control->accept(control->words)) {
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

  // 1. Compute: my slice, forward, backward; the exchange's hooks launch each gradient bucket's
  // all-reduce as backward completes it (training/gradient_exchange.hpp).
  const double scale = compute ? static_cast<double>(mine) / static_cast<double>(global) : 0.0;
  ComputeMeter meter;
  meter.begin(s.throttle.get());
  s.exchange->begin(scale, &meter);
  // However the step ends (a forward that throws included), its exchange ends with it: no later
  // backward launches anything or paces a meter that is gone.
  struct EndExchange {
    internal::GradientExchange& exchange;
    ~EndExchange() { exchange.end(); }
  } end_exchange{*s.exchange};
  for (auto& [name, p] : s.trainable) p.mutable_grad().zero_();
  const std::vector<int64_t>* words = control ? &control->words : nullptr;
  double local_loss = 0;
  if (compute) {
    Clock::time_point t = Clock::now();
    const std::vector<int64_t> indices = s.sampler.slice(s.cursor, batches, rank);
    auto [x, y] = s.data.train->gather(indices);
    x = s.to_replica(x);
    y = s.to_replica(y);
    result.data_time_s = seconds_since(t);
    t = Clock::now();
    at::Tensor loss = s.loss_of(s.model->forward(x), y);
    local_loss = loss.item<double>();
    result.forward_time_s = seconds_since(t);
    if (exchange) {
      meter.mark();
      s.exchange->launch_extras(local_loss, words);
    }
    t = Clock::now();
    const double throttled_before = meter.throttle_wall_s();
    s.exchange->set_in_backward(true);
    loss.backward();
    s.exchange->set_in_backward(false);
    result.backward_time_s = seconds_since(t) - (meter.throttle_wall_s() - throttled_before);
  } else if (exchange) {
    s.exchange->launch_extras(0.0, words);
  }
  meter.mark();
  result.slowdown_time_s = meter.added_s();
  result.compute_time_s = meter.compute_s();

  // 2. Whether the step stands: alone, the commit gate; in a group, the rest of the buckets and
  // every all-reduce, then rank 0's words (step control) and the commit gate.
  if (!(exchange ? s.settle_exchange(control, &result) : s.may_commit_alone(&result))) {
    restore_buffers();
    return result;
  }

  // 3. Commit: the sums into the gradients and buffers, the optimizer step, the counters.
  const Clock::time_point update_start = Clock::now();
  double global_loss = local_loss;
  if (exchange) {
    global_loss = s.exchange->apply_sums();
    result.rank_compute_times_s = s.exchange->compute_times();
    // A rank with an empty slice ran no forward; keep its counters in step with the others.
    if (!compute) {
      c10::NoGradGuard no_grad;
      for (auto& t : s.int_buffers) t.add_(1);
    }
  }
  s.optimizer->step(scheduled_lr(s.config.optimizer, s.step), s.step + 1);
  result.optimizer_time_s = seconds_since(update_start);
  s.step += 1;
  if (exchange) s.commit_generation = s.group.generation();
  s.cursor = s.sampler.advance(s.cursor, global);
  result.committed = true;
  result.loss = global_loss;
  result.step = s.step;
  result.cursor = s.cursor;
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
  if (CollectiveStatus u = s.group.usable(); !u) return u;
  const Dataset& test = *s.data.test;
  const int64_t n = max_samples > 0 ? std::min(max_samples, test.size()) : test.size();
  int64_t total = 0, before = 0;
  if (static_cast<int64_t>(shares.size()) == s.group.world()) {
    for (int64_t r = 0; r < s.group.world(); ++r) {
      const int64_t w = std::max(shares[static_cast<std::size_t>(r)], 0);
      total += w;
      if (r < s.group.rank()) before += w;
    }
  }
  int64_t begin = n * s.group.rank() / s.group.world();
  int64_t end = n * (s.group.rank() + 1) / s.group.world();
  if (total > 0) {
    begin = n * before / total;
    end = n * (before + std::max(shares[static_cast<std::size_t>(s.group.rank())], 0)) / total;
  }
  // The slowdown emulation paces the evaluation as it paces a step's compute: an emulated slow
  // machine evaluates slowly too, which is why its share follows its batch.
  ComputeMeter meter;
  meter.begin(s.throttle.get());
  const auto [loss_sum, correct] = s.eval_sums(begin, end);
  meter.mark();
  at::Tensor sums =
      at::tensor({loss_sum, static_cast<double>(correct)}, at::TensorOptions().dtype(at::kDouble))
          .to(s.device);
  if (CollectiveStatus st = s.group.allreduce({sums}, c10d::ReduceOp::SUM, "sharded evaluation");
      !st) {
    return st;
  }
  sums = sums.to(at::kCPU);
  *out = s.eval_result(sums[0].item<double>(), static_cast<int64_t>(sums[1].item<double>()), n);
  return {};
}

void Trainer::set_slowdown(double factor) { impl_->slowdown->set_factor(factor); }
double Trainer::slowdown() const { return impl_->slowdown->factor(); }
void Trainer::set_slowdown_spins(bool spins) { impl_->slowdown->set_spins(spins); }
void Trainer::set_compute_throttle(std::shared_ptr<ComputeThrottle> throttle) {
  impl_->throttle = throttle ? std::move(throttle) : impl_->slowdown;
}
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
