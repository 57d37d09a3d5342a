#pragma once
// StoreActor: the key-value store c10d needs to form a process group (rank addresses, barrier
// counters), served by the head over the runtime instead of an open TCPStore port. Gets and
// waits for missing keys are parked and answered when the keys arrive or their timeout runs out.

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "wire/job_protocol.hpp"
#include "runtime/actor_system.hpp"

namespace omnilearn::actors {

struct StoreLimits {
  std::size_t max_keys = 1 << 16;
  std::size_t max_value_bytes = 1 << 20;
  std::size_t max_parked = 4096;  // waiting requests
};

// What the store holds, published by the store's thread after every request, for any thread to
// read (the registry puts it in `omnilearn status --json` counters): keys that nobody deletes
// are how a long-lived head fills up (max_keys) and refuses every later rendezvous.
struct StoreStats {
  std::atomic<std::uint64_t> keys{0};
  std::atomic<std::uint64_t> waiting{0};  // parked gets and waits
};

class StoreActor : public runtime::Actor {
 public:
  // `stats`, when given, is kept up to date (see StoreStats).
  explicit StoreActor(StoreLimits limits = {}, std::shared_ptr<StoreStats> stats = nullptr);
  void on_message(const runtime::Envelope& message) override;

 private:
  struct Parked {
    runtime::Envelope request;
    StoreRequest body;
    runtime::TimerId timer = 0;
  };
  bool all_present(const std::vector<std::string>& keys) const;
  void answer(const runtime::Envelope& request, const StoreRequest& body);
  void wake_parked();
  void publish_stats();

  StoreLimits limits_;
  std::shared_ptr<StoreStats> stats_;
  std::map<std::string, std::string> values_;
  std::map<std::uint64_t, Parked> parked_;  // by a local id
  std::uint64_t next_parked_ = 0;
};

}  // namespace omnilearn::actors
