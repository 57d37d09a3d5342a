#include "training/gradient_exchange.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>

#include "training/models.hpp"
#include "training/step_control.hpp"

namespace omnilearn::training::internal {

GradientExchange::GradientExchange(const std::vector<NamedTensor>& trainable,
                                   const std::vector<at::Tensor>& float_buffers,
                                   const Layout& layout)
    : layout_(layout) {
  int64_t used = 0;
  for (const auto& b : float_buffers) {
    buffer_slots_.push_back(Slot{b, 0, used});
    used += b.numel();
  }
  loss_slot_ = Slot{at::Tensor(), 0, used};
  extras_size_ = used + 1;
  bucket_sizes_ = {extras_size_};
  const int64_t capacity = std::max<int64_t>(1, layout_.bucket_bytes / layout_.real_bytes);
  grad_members_ = plan_buckets(trainable, capacity, layout_.first_layer_alone);
  grad_slots_.resize(trainable.size());
  for (size_t j = 0; j < grad_members_.size(); ++j) {
    int64_t fill = 0;
    for (size_t k : grad_members_[j]) {
      grad_slots_[k] = Slot{trainable[k].second, j + 1, fill};
      fill += trainable[k].second.numel();
    }
    bucket_sizes_.push_back(fill);
  }
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

std::vector<std::vector<size_t>> GradientExchange::plan_buckets(
    const std::vector<NamedTensor>& trainable, int64_t capacity, bool first_layer_alone) {
  capacity = std::max<int64_t>(1, capacity);
  // The first layer: parameters [0, first) share the first parameter's module.
  size_t first = 0;
  if (first_layer_alone && !trainable.empty()) {
    const std::string module = module_of(trainable[0].first);
    while (first < trainable.size() && module_of(trainable[first].first) == module) ++first;
    // A model that is one layer has nothing to launch before it.
    if (first == trainable.size()) first = 0;
  }
  std::vector<std::vector<size_t>> buckets;
  int64_t fill = 0;
  for (size_t k = trainable.size(); k-- > 0;) {
    const int64_t n = trainable[k].second.numel();
    const bool first_layer_starts = first > 0 && k == first - 1;
    if (buckets.empty() || first_layer_starts || (fill > 0 && fill + n > capacity)) {
      buckets.emplace_back();
      fill = 0;
    }
    buckets.back().push_back(k);
    fill += n;
  }
  return buckets;
}

void GradientExchange::attach(c10d::ProcessGroup* group, int rank, int world,
                              const at::TensorOptions& like) {
  detach();
  group_ = group;
  rank_ = rank;
  control_capacity_ = carried_words(world);
  const int64_t extras = bucket_sizes_[0] + control_elements(control_capacity_);
  const size_t last = bucket_sizes_.size() - 1;
  extras_ride_ = layout_.extras_with_gradients && last > 0;
  buckets_.resize(bucket_sizes_.size());
  wires_.resize(bucket_sizes_.size());
  for (size_t i = 1; i < bucket_sizes_.size(); ++i) {
    buckets_[i] = wires_[i] = at::zeros({bucket_sizes_[i]}, like);
  }
  if (extras_ride_) {
    wires_[last] = at::zeros({bucket_sizes_[last] + extras}, like);
    buckets_[last] = wires_[last].narrow(0, 0, bucket_sizes_[last]);
    buckets_[0] = wires_[last].narrow(0, bucket_sizes_[last], extras);
  } else {
    buckets_[0] = wires_[0] = at::zeros({extras}, like);
  }
}

void GradientExchange::detach() {
  group_ = nullptr;
  rank_ = 0;
  buckets_.clear();
  wires_.clear();
}

void GradientExchange::begin(double scale, ComputeMeter* meter) {
  std::lock_guard lock(mutex_);
  ex_ = InFlight{};
  ex_.active = group_ != nullptr;
  ex_.scale = scale;
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
  if (!extras_ride_) launch_locked(0);  // else the last gradient bucket's launch sends them
}

bool GradientExchange::next_ready_locked() const {
  return ex_.next < grad_members_.size() && ex_.waiting[ex_.next] == 0;
}

void GradientExchange::on_gradient_ready(size_t k) {
  {
    std::lock_guard lock(mutex_);
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
    launch_locked(ex_.next + 1);
    if (ex_.in_backward) ++ex_.launched_in_backward;
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

}  // namespace omnilearn::training::internal
