#pragma once
// Helpers for the training tests: ranks as threads over a real loopback TCPStore on a port the
// OS picks, and parameter comparisons.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "training/trainer.hpp"

namespace omnilearn::training::testing {

using namespace std::chrono_literals;

// A TCPStore server on 127.0.0.1 with an OS-picked port; each rank connects its own client
// (a TCPStore client serializes its operations, so ranks must not share one).
class LoopbackStore {
 public:
  LoopbackStore() {
    c10d::TCPStoreOptions opts;
    opts.port = 0;
    opts.isServer = true;
    opts.waitWorkers = false;
    opts.timeout = 30s;
    server_ = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", opts);
  }
  uint16_t port() const { return server_->getPort(); }
  c10::intrusive_ptr<c10d::Store> client() const { return connect(port()); }
  static c10::intrusive_ptr<c10d::Store> connect(uint16_t port) {
    c10d::TCPStoreOptions opts;
    opts.port = port;
    opts.isServer = false;
    opts.waitWorkers = false;
    opts.timeout = 30s;
    return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", opts);
  }

 private:
  c10::intrusive_ptr<c10d::TCPStore> server_;
};

inline GroupOptions loopback() {
  GroupOptions o;
  o.gloo_hostname = "127.0.0.1";
  return o;
}

// Runs fn(rank) on n threads and rethrows the first exception after all have joined.
inline void run_ranks(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::mutex mu;
  std::exception_ptr first;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

// max |a - b| / max |b| over one tensor (0 when both are zero).
inline double relative_diff(const at::Tensor& a, const at::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  const double diff = (a - b).abs().max().item<double>();
  return scale == 0 ? diff : diff / scale;
}

// ||a - b||_2 / ||b||_2 over one tensor (||a - b||_2 when b is zero). Norm-wise, so that a
// parameter near zero, whose elementwise relative error means nothing, cannot dominate.
inline double relative_l2(const at::Tensor& a, const at::Tensor& b) {
  const double scale = b.to(at::kDouble).norm().item<double>();
  const double diff = (a.to(at::kDouble) - b.to(at::kDouble)).norm().item<double>();
  return scale == 0 ? diff : diff / scale;
}

// The largest relative_l2 over matching tensors of two lists (names and shapes must match).
inline double max_relative_l2(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.sizes(), b[i].second.sizes()) << a[i].first;
    if (a[i].second.sizes() != b[i].second.sizes()) return INFINITY;
    worst = std::max(worst, relative_l2(a[i].second, b[i].second));
  }
  return worst;
}

// Expects equal names and shapes and values within `rtol` (relative_diff) tensor by tensor.
inline void expect_close(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b,
                         double rtol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].first, b[i].first) << what;
    ASSERT_EQ(a[i].second.sizes(), b[i].second.sizes()) << what << " " << a[i].first;
    EXPECT_LE(relative_diff(a[i].second, b[i].second), rtol) << what << " " << a[i].first;
  }
}

// Expects bit-for-bit equal tensors.
inline void expect_equal(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b,
                         const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].first, b[i].first) << what;
    EXPECT_TRUE(at::equal(a[i].second, b[i].second)) << what << " " << a[i].first;
  }
}

// A small, fast config on the synthetic set (SGD with momentum).
inline TrainerConfig synthetic_config(int64_t train_size = 2000, int64_t side = 28) {
  TrainerConfig c;
  c.data.dataset = "synthetic";
  c.data.synthetic.train_size = train_size;
  c.data.synthetic.test_size = 500;
  c.data.synthetic.height = side;
  c.data.synthetic.width = side;
  c.data.seed = 7;
  c.model.kind = "mlp";
  c.model.hidden = {64, 32};
  c.model.seed = 11;
  c.optimizer.kind = "sgd";
  c.optimizer.lr = 0.05;
  c.optimizer.momentum = 0.9;
  return c;
}

}  // namespace omnilearn::training::testing
