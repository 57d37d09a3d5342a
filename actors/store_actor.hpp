#pragma once
// StoreActor: the key-value store c10d needs to form a process group (rank addresses, barrier
// counters), served by the head over the runtime instead of an open TCPStore port. Gets and
// waits for missing keys are parked and answered when the keys arrive or their timeout runs out.

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "actors/job_protocol.hpp"
#include "runtime/actor_system.hpp"

namespace omnilearn::actors {

struct StoreLimits {
  std::size_t max_keys = 1 << 16;
  std::size_t max_value_bytes = 1 << 20;
  std::size_t max_parked = 4096;  // waiting requests
};

class StoreActor : public runtime::Actor {
 public:
  explicit StoreActor(StoreLimits limits = {});
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

  StoreLimits limits_;
  std::map<std::string, std::string> values_;
  std::map<std::uint64_t, Parked> parked_;  // by a local id
  std::uint64_t next_parked_ = 0;
};

}  // namespace omnilearn::actors
