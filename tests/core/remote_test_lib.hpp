#pragma once
// Remote functions and an actor class for the core tests: built into a shared library that the
// test's workers load with --load and that the test (the driver) links, as a user's would be.

#include <string>
#include <vector>

#include <omnilearn/omnilearn.hpp>

namespace remote_test {

// A user message type: travels as a task's argument and result through its msgpack adaptor.
struct Sample {
  std::string text;
  std::vector<double> values;
  int label = 0;
  MSGPACK_DEFINE(text, values, label);
};

struct Summary {
  std::string text;
  double sum = 0;
  int label = 0;
  int pid = 0;
  MSGPACK_DEFINE(text, sum, label, pid);
};

int square(int x);
Summary summarize(Sample sample);
int fail_with(std::string message);
// Writes its pid to `pid_file`, sleeps `ms`, returns its pid.
int record_pid_then_sleep(std::string pid_file, int ms);
int worker_pid();

class Counter {
 public:
  Counter(std::string name, int start);
  int add(int delta);
  std::vector<int> history() const;
  int pid() const;
  int slow_add(int delta, int ms);  // sleeps, then adds

 private:
  std::string name_;
  int value_;
  std::vector<int> history_;
};

class Refuser {
 public:
  explicit Refuser(std::string why);
  int ping();
};

}  // namespace remote_test
