// The flat-vector view asynchronous training uses: the trainable parameters and the shared
// buffers as flat float32 vectors in model order (what the parameter servers shard), and a
// batch's gradient written flat without touching the parameters.
#include <ATen/ATen.h>

#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "training/trainer_impl.hpp"

namespace omnilearn::training {

int64_t Trainer::flat_parameter_count() const {
  int64_t n = 0;
  for (const auto& [name, p] : impl_->trainable) n += p.numel();
  return n;
}

void Trainer::copy_flat_parameters(float* out) const {
  c10::NoGradGuard no_grad;
  int64_t offset = 0;
  for (const auto& [name, p] : impl_->trainable) {
    at::Tensor dst =
        at::from_blob(out + offset, {p.numel()}, at::TensorOptions().dtype(at::kFloat));
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
    at::Tensor dst =
        at::from_blob(out + offset, {b.numel()}, at::TensorOptions().dtype(at::kFloat));
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
  // Local: the caller sends the gradient itself, and the exchange's hooks launch nothing outside
  // a step. Only the compute is measured (and paced by the throttle).
  ComputeMeter meter;
  meter.begin(s.throttle.get());
  for (auto& [name, p] : s.trainable) p.mutable_grad().zero_();
  auto [x, y] = s.data.train->gather(indices);
  x = s.to_replica(x);
  y = s.to_replica(y);
  at::Tensor loss = s.loss_of(s.model->forward(x), y);
  result.loss = loss.item<double>();
  loss.backward();
  meter.mark();
  result.slowdown_time_s = meter.added_s();
  result.compute_time_s = meter.compute_s();
  c10::NoGradGuard no_grad;
  int64_t offset = 0;
  for (const auto& [name, p] : s.trainable) {
    at::Tensor dst =
        at::from_blob(out + offset, {p.numel()}, at::TensorOptions().dtype(at::kFloat));
    dst.copy_(p.grad().reshape({-1}));
    offset += p.numel();
  }
  return result;
}

}  // namespace omnilearn::training
