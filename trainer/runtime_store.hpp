#pragma once
// A c10d::Store whose keys live in the head's StoreActor, reached over the actor runtime. It
// replaces an open TCPStore port: process groups rendezvous over the same (authenticated)
// connection as every other message.

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>

#include "runtime/actor_system.hpp"

namespace omnilearn::actors {

class RuntimeStore : public c10d::Store {
 public:
  // Any thread may call the operations; each is one ask to `store`, bounded by the store's
  // timeout. Failures throw std::runtime_error (c10d's convention for stores).
  RuntimeStore(runtime::ActorSystem& system, runtime::ActorAddress store,
               std::chrono::milliseconds timeout);
  // The store's address asked anew for every operation: the head that serves it may change
  // (a standby took over).
  RuntimeStore(runtime::ActorSystem& system, std::function<runtime::ActorAddress()> store,
               std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

  // While an operation waits (a rendezvous waiting for its peers' keys), `abandon` is asked
  // about every 50 ms; true makes it throw at once: the scheduler formed a newer generation,
  // so this rendezvous will not complete, or this trainer was told to stop. Set it before the
  // store is shared with other threads.
  void set_abandon_check(std::function<bool()> abandon) { abandon_ = std::move(abandon); }

 private:
  struct Reply {
    std::string value;
    std::int64_t number = 0;
  };
  Reply call(int op, std::vector<std::string> keys, std::string value, std::string expected,
             std::int64_t delta, std::chrono::milliseconds wait_timeout);

  runtime::ActorSystem& system_;
  std::function<runtime::ActorAddress()> store_;
  std::function<bool()> abandon_;
};

}  // namespace omnilearn::actors
