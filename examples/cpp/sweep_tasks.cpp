#include "sweep_tasks.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace sweep {
namespace {

constexpr int kFeatures = 16;

// Samples whose label follows a fixed linear rule with label noise (the same for every trial:
// the data seed is fixed; the trial's seed only shuffles the training order).
struct Data {
  std::vector<std::vector<double>> x;
  std::vector<int> y;
};

Data make_data(int n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> uniform;
  std::vector<double> rule(kFeatures);
  std::mt19937_64 rule_rng(12345);
  for (auto& w : rule) w = normal(rule_rng);
  Data data;
  for (int i = 0; i < n; ++i) {
    std::vector<double> x(kFeatures);
    double score = 0;
    for (int f = 0; f < kFeatures; ++f) score += rule[f] * (x[f] = normal(rng));
    int label = score > 0 ? 1 : 0;
    if (uniform(rng) < 0.05) label = 1 - label;  // 5% label noise
    data.x.push_back(std::move(x));
    data.y.push_back(label);
  }
  return data;
}

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

}  // namespace

TrialResult train(Trial trial) {
  static const Data train_set = make_data(4000, 7);
  static const Data test_set = make_data(1000, 8);
  std::vector<double> w(kFeatures, 0.0);
  double b = 0;
  std::vector<int> order(train_set.y.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::mt19937_64 rng(trial.seed);
  double loss = 0;
  for (int epoch = 0; epoch < trial.epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    loss = 0;
    for (int i : order) {
      const auto& x = train_set.x[i];
      double z = b;
      for (int f = 0; f < kFeatures; ++f) z += w[f] * x[f];
      double p = sigmoid(z);
      double error = p - train_set.y[i];
      loss += -(train_set.y[i] ? std::log(p + 1e-12) : std::log(1 - p + 1e-12));
      for (int f = 0; f < kFeatures; ++f) {
        w[f] -= trial.learning_rate * (error * x[f] + trial.l2 * w[f]);
      }
      b -= trial.learning_rate * error;
    }
    loss /= static_cast<double>(order.size());
  }
  int correct = 0;
  for (std::size_t i = 0; i < test_set.y.size(); ++i) {
    double z = b;
    for (int f = 0; f < kFeatures; ++f) z += w[f] * test_set.x[i][f];
    correct += (z > 0 ? 1 : 0) == test_set.y[i];
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return TrialResult{trial, static_cast<double>(correct) / static_cast<double>(test_set.y.size()),
                     loss, host + std::string(":") + std::to_string(::getpid())};
}

}  // namespace sweep

OMNILEARN_REMOTE(sweep::train);
