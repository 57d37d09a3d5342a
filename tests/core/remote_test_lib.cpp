#include "remote_test_lib.hpp"

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <numeric>
#include <stdexcept>
#include <thread>

namespace remote_test {

int square(int x) { return x * x; }

Summary summarize(Sample sample) {
  return Summary{sample.text + "!", std::accumulate(sample.values.begin(), sample.values.end(), 0.0),
                 sample.label, static_cast<int>(::getpid())};
}

int fail_with(std::string message) { throw std::runtime_error(message); }

int record_pid_then_sleep(std::string pid_file, int ms) {
  {
    std::ofstream out(pid_file + ".tmp");
    out << ::getpid() << "\n";
  }
  std::rename((pid_file + ".tmp").c_str(), pid_file.c_str());
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return static_cast<int>(::getpid());
}

int worker_pid() { return static_cast<int>(::getpid()); }

Counter::Counter(std::string name, int start) : name_(std::move(name)), value_(start) {}
int Counter::add(int delta) {
  history_.push_back(delta);
  return value_ += delta;
}
std::vector<int> Counter::history() const { return history_; }
int Counter::pid() const { return static_cast<int>(::getpid()); }
int Counter::slow_add(int delta, int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return add(delta);
}

Refuser::Refuser(std::string why) { throw std::invalid_argument(why); }
int Refuser::ping() { return 1; }

}  // namespace remote_test

OMNILEARN_REMOTE(remote_test::square);
OMNILEARN_REMOTE(remote_test::summarize);
OMNILEARN_REMOTE(remote_test::fail_with);
OMNILEARN_REMOTE(remote_test::record_pid_then_sleep);
OMNILEARN_REMOTE(remote_test::worker_pid);
OMNILEARN_ACTOR(remote_test::Counter, std::string, int);
OMNILEARN_REMOTE(&remote_test::Counter::add);
OMNILEARN_REMOTE(&remote_test::Counter::history);
OMNILEARN_REMOTE(&remote_test::Counter::pid);
OMNILEARN_REMOTE(&remote_test::Counter::slow_add);
OMNILEARN_ACTOR(remote_test::Refuser, std::string);
OMNILEARN_REMOTE(&remote_test::Refuser::ping);
