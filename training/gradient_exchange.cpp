#include "training/gradient_exchange.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "training/models.hpp"
#include "training/step_control.hpp"

namespace omnilearn::training::internal {

GradientExchange::GradientExchange(const std::vector<NamedTensor>& trainable,
                                   const std::vector<at::Tensor>& float_buffers,
                                   const Layout& layout)
    : layout_(layout), trainable_(trainable) {
  int64_t used = 0;
  for (const auto& b : float_buffers) {
    buffer_slots_.push_back(Slot{b, 0, used});
    used += b.numel();
  }
  loss_slot_ = Slot{at::Tensor(), 0, used};
  extras_size_ = used + 1;
  plan(registration_order(trainable.size()));
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
    grad_accumulators_.push_back(std::move(acc));
  }
}

GradientExchange::~GradientExchange() = default;

namespace {

// "0" of "0.weight", "layer1.0.conv1" of "layer1.0.conv1.weight", "" of "weight".
std::string module_of(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? std::string() : name.substr(0, dot);
}

}  // namespace

std::vector<size_t> GradientExchange::registration_order(size_t n) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = n - 1 - i;
  return order;
}

bool GradientExchange::is_order_of(const std::vector<size_t>& order, size_t n) {
  if (order.size() != n) return false;
  std::vector<char> seen(n, 0);
  for (size_t k : order) {
    if (k >= n || seen[k]) return false;
    seen[k] = 1;
  }
  return true;
}

std::vector<std::vector<size_t>> GradientExchange::plan_buckets(
    const std::vector<NamedTensor>& trainable, const std::vector<size_t>& order, int64_t capacity,
    bool last_module_alone) {
  if (!is_order_of(order, trainable.size())) {
    throw std::invalid_argument("plan_buckets: the order is not a permutation of the " +
                                std::to_string(trainable.size()) + " trainable parameters");
  }
  capacity = std::max<int64_t>(1, capacity);
  // The module made ready last: order[tail, end) share the last parameter's module.
  size_t tail = order.size();
  if (last_module_alone && !order.empty()) {
    const std::string module = module_of(trainable[order.back()].first);
    while (tail > 0 && module_of(trainable[order[tail - 1]].first) == module) --tail;
    // A model that is one module has nothing to launch before it.
    if (tail == 0) tail = order.size();
  }
  std::vector<std::vector<size_t>> buckets;
  int64_t fill = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const size_t k = order[i];
    const int64_t n = trainable[k].second.numel();
    const bool last_module_starts = i == tail && tail < order.size();
    if (buckets.empty() || last_module_starts || (fill > 0 && fill + n > capacity)) {
      buckets.emplace_back();
      fill = 0;
    }
    buckets.back().push_back(k);
    fill += n;
  }
  return buckets;
}

std::vector<std::vector<size_t>> GradientExchange::plan_buckets(
    const std::vector<NamedTensor>& trainable, int64_t capacity, bool first_layer_alone) {
  return plan_buckets(trainable, registration_order(trainable.size()), capacity, first_layer_alone);
}

std::vector<int64_t> GradientExchange::encode_order(const std::optional<std::vector<size_t>>& order,
                                                    size_t n) {
  std::vector<int64_t> words(n + 1, 0);
  if (!order || order->size() != n) return words;
  words[0] = 1;
  for (size_t i = 0; i < n; ++i) words[i + 1] = static_cast<int64_t>((*order)[i]);
  return words;
}

std::vector<size_t> GradientExchange::decode_order(const std::vector<int64_t>& words, size_t n,
                                                   bool* malformed) {
  *malformed = false;
  if (words.size() == n + 1 && words[0] == 0) return registration_order(n);
  std::vector<size_t> order;
  if (words.size() == n + 1 && words[0] == 1) {
    for (size_t i = 1; i < words.size(); ++i) {
      if (words[i] < 0) break;
      order.push_back(static_cast<size_t>(words[i]));
    }
  }
  if (is_order_of(order, n)) return order;
  *malformed = true;
  return registration_order(n);
}

void GradientExchange::plan(const std::vector<size_t>& order) {
  order_ = order;
  const int64_t capacity = std::max<int64_t>(1, layout_.bucket_bytes / layout_.real_bytes);
  grad_members_ = plan_buckets(trainable_, order_, capacity, layout_.first_layer_alone);
  grad_slots_.assign(trainable_.size(), Slot{});
  bucket_sizes_ = {extras_size_};
  for (size_t j = 0; j < grad_members_.size(); ++j) {
    int64_t fill = 0;
    for (size_t k : grad_members_[j]) {
      grad_slots_[k] = Slot{trainable_[k].second, j + 1, fill};
      fill += trainable_[k].second.numel();
    }
    bucket_sizes_.push_back(fill);
  }
}

void GradientExchange::attach(c10d::ProcessGroup* group, int rank, int world,
                              const at::TensorOptions& like) {
  detach();
  group_ = group;
  rank_ = rank;
  like_ = like;
  control_capacity_ = carried_words(world);
  world_ = world;
  if (order_ != registration_order(trainable_.size())) plan(registration_order(trainable_.size()));
  allocate();
}

void GradientExchange::allocate() {
  const int64_t extras = bucket_sizes_[0] + control_elements(control_capacity_) + world_;
  const size_t last = bucket_sizes_.size() - 1;
  extras_ride_ = layout_.extras_with_gradients && last > 0;
  buckets_.assign(bucket_sizes_.size(), at::Tensor());
  wires_.assign(bucket_sizes_.size(), at::Tensor());
  for (size_t i = 1; i < bucket_sizes_.size(); ++i) {
    buckets_[i] = wires_[i] = at::zeros({bucket_sizes_[i]}, like_);
  }
  if (extras_ride_) {
    wires_[last] = at::zeros({bucket_sizes_[last] + extras}, like_);
    buckets_[last] = wires_[last].narrow(0, 0, bucket_sizes_[last]);
    buckets_[0] = wires_[last].narrow(0, bucket_sizes_[last], extras);
  } else {
    buckets_[0] = wires_[0] = at::zeros({extras}, like_);
  }
}

std::optional<std::vector<size_t>> GradientExchange::recorded_order() const {
  std::lock_guard lock(mutex_);
  return recorded_;
}

bool GradientExchange::agree_order(const std::vector<int64_t>& words) {
  const size_t n = trainable_.size();
  bool malformed = false;
  std::vector<size_t> order = decode_order(words, n, &malformed);
  if (malformed && !malformed_logged_) {
    malformed_logged_ = true;
    std::fprintf(stderr,
                 "omnilearn: the gradient bucket order rank 0 sent is not a permutation of this "
                 "replica's %zu trainable parameters (do all ranks build the same model?); "
                 "keeping buckets in reverse registration order\n",
                 n);
  }
  if (!layout_.observed_order) order = registration_order(n);
  if (order != order_) {
    plan(order);
    if (group_) allocate();
  }
  return !malformed;
}

void GradientExchange::detach() {
  group_ = nullptr;
  rank_ = 0;
  world_ = 0;
  buckets_.clear();
  wires_.clear();
}

void GradientExchange::begin(double scale, ComputeMeter* meter) {
  std::lock_guard lock(mutex_);
  ex_ = InFlight{};
  ex_.active = group_ != nullptr;
  ex_.scale = scale;
  ex_.recording = true;
  ex_.fired.assign(trainable_.size(), 0);
  ex_.fired_order.reserve(trainable_.size());
  ex_.still_to_fire = trainable_.size();
  for (const auto& members : grad_members_) {
    ex_.waiting.push_back(static_cast<int64_t>(members.size()));
  }
  meter_ = meter;
}

void GradientExchange::set_in_backward(bool in_backward) {
  std::lock_guard lock(mutex_);
  ex_.in_backward = in_backward;
}

void GradientExchange::end() {
  std::lock_guard lock(mutex_);
  ex_.active = false;
  meter_ = nullptr;
  if (ex_.recording && !ex_.fired_order.empty()) {
    // A backward ran: its order, then the parameters it gave no gradient (their buckets are
    // launched after backward anyway) in reverse registration order.
    std::vector<size_t> order = std::move(ex_.fired_order);
    for (size_t k : registration_order(trainable_.size())) {
      if (!ex_.fired[k]) order.push_back(k);
    }
    recorded_ = std::move(order);
  }
  ex_.recording = false;
}

void GradientExchange::launch_locked(size_t bucket) {
  if (!ex_.error.empty()) return;  // the group is failing; the step will report it
  std::vector<at::Tensor> one{wires_[bucket]};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::SUM;
  try {
    ex_.works.push_back(group_->allreduce(one, opts));
  } catch (const std::exception& e) {
    ex_.error = std::string("gradient all-reduce failed: ") + e.what();
  }
}

void GradientExchange::launch_extras(double local_loss, const std::vector<int64_t>* words) {
  std::lock_guard lock(mutex_);
  c10::NoGradGuard no_grad;
  at::Tensor& b = buckets_[0];
  for (const Slot& slot : buffer_slots_) {
    b.narrow(0, slot.offset, slot.tensor.numel()).copy_(slot.tensor.reshape({-1}));
  }
  b.narrow(0, loss_slot_.offset, 1).fill_(local_loss);
  b.narrow(0, 0, extras_size_).mul_(ex_.scale);
  at::Tensor region = control_region();
  if (rank_ == 0) {
    encode_words(region, words ? *words : std::vector<int64_t>{}, control_capacity_);
  } else {
    region.zero_();
  }
  // Each rank fills its own slot when the bucket carrying it launches, with its compute up to
  // then: riding in the last gradient bucket, that is the step's compute; launched on its own
  // after forward, the compute is not known yet and every slot stays zero (not measured).
  timing_region().zero_();
  if (!extras_ride_) launch_locked(0);  // else the last gradient bucket's launch sends them
}

bool GradientExchange::next_ready_locked() const {
  return ex_.next < grad_members_.size() && ex_.waiting[ex_.next] == 0;
}

void GradientExchange::on_gradient_ready(size_t k) {
  {
    std::lock_guard lock(mutex_);
    if (ex_.recording && !ex_.fired[k]) {
      ex_.fired[k] = 1;
      ex_.fired_order.push_back(k);
      --ex_.still_to_fire;
    }
    if (!ex_.active) return;  // alone, or a backward outside a step
    const size_t j = grad_slots_[k].bucket - 1;
    if (ex_.waiting[j] > 0) --ex_.waiting[j];
    if (!ex_.in_backward) {
      launch_ready_locked();
      return;
    }
    if (!layout_.overlap || !next_ready_locked()) return;
  }
  // A bucket is complete: the compute that produced it is over. The throttle delays its launch
  // as a slower machine's backward would, outside the lock.
  if (meter_) meter_->mark();
  std::lock_guard lock(mutex_);
  if (ex_.active) launch_ready_locked();
}

void GradientExchange::launch_ready_locked() {
  while (next_ready_locked()) {
    c10::NoGradGuard no_grad;
    at::Tensor& b = buckets_[ex_.next + 1];
    for (size_t k : grad_members_[ex_.next]) {
      const Slot& slot = grad_slots_[k];
      b.narrow(0, slot.offset, slot.tensor.numel()).copy_(slot.tensor.grad().reshape({-1}));
    }
    b.mul_(ex_.scale);
    if (extras_ride_ && ex_.next + 2 == buckets_.size() && meter_ != nullptr && world_ > 0 &&
        ex_.scale > 0) {
      timing_region()[rank_].fill_(meter_->compute_s());
    }
    launch_locked(ex_.next + 1);
    if (ex_.in_backward) {
      ++ex_.launched_in_backward;
      if (ex_.still_to_fire > 0) ++ex_.launched_before_last_gradient;
    }
    ++ex_.next;
  }
}

GradientExchange::Launched GradientExchange::launch_remaining() {
  std::lock_guard lock(mutex_);
  std::fill(ex_.waiting.begin(), ex_.waiting.end(), 0);
  launch_ready_locked();
  Launched out;
  out.works = ex_.works;
  out.error = ex_.error;
  out.buckets = static_cast<int64_t>(grad_members_.size());
  out.launched_in_backward = ex_.launched_in_backward;
  out.launched_before_last_gradient = ex_.launched_before_last_gradient;
  return out;
}

double GradientExchange::apply_sums() {
  c10::NoGradGuard no_grad;
  for (const Slot& slot : grad_slots_) {
    slot.tensor.mutable_grad().view({-1}).copy_(
        buckets_[slot.bucket].narrow(0, slot.offset, slot.tensor.numel()));
  }
  for (const Slot& slot : buffer_slots_) {
    slot.tensor.view({-1}).copy_(buckets_[slot.bucket].narrow(0, slot.offset, slot.tensor.numel()));
  }
  return buckets_[loss_slot_.bucket][loss_slot_.offset].item<double>();
}

at::Tensor GradientExchange::control_region() {
  return buckets_[0].narrow(0, extras_size_, control_elements(control_capacity_));
}

at::Tensor GradientExchange::timing_region() {
  return buckets_[0].narrow(0, extras_size_ + control_elements(control_capacity_), world_);
}

std::vector<double> GradientExchange::compute_times() {
  if (!extras_ride_ || world_ <= 0) return {};
  at::Tensor region = timing_region().to(at::kDouble).contiguous();
  const double* data = region.data_ptr<double>();
  return std::vector<double>(data, data + world_);
}

}  // namespace omnilearn::training::internal
