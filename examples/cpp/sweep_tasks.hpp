#pragma once
// Remote functions of the sweep example: train a logistic-regression classifier on a synthetic
// problem with a learnable rule, for one set of hyper-parameters, and report its test accuracy.
#include <cstdint>
#include <string>

#include <omnilearn/omnilearn.hpp>

namespace sweep {

struct Trial {
  double learning_rate = 0.1;
  double l2 = 0.0;
  int epochs = 5;
  std::uint64_t seed = 1;
  MSGPACK_DEFINE(learning_rate, l2, epochs, seed);
};

struct TrialResult {
  Trial trial;
  double accuracy = 0;  // on held-out samples
  double loss = 0;      // final training loss
  std::string node;     // host name of the worker that ran it
  MSGPACK_DEFINE(trial, accuracy, loss, node);
};

TrialResult train(Trial trial);

}  // namespace sweep
