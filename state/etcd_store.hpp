#pragma once
// The head's state in etcd (v3 API, over its HTTP/JSON gateway), shared by an active head and
// its standbys. The active head is elected with an etcd lease on one key; every write it makes
// is a transaction that holds only while that key is still the one it created (its create
// revision), so a head that lost the election (frozen past its lease, cut off from etcd) can
// no longer change the state, whatever its clocks say: fencing by the store's revision.

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "state/state_store.hpp"

namespace omnilearn::state {

struct EtcdOptions {
  std::vector<std::string> endpoints;  // "host:port" of etcd members' client URLs (http)
  std::string prefix = "/omnilearn";   // this cluster's keys: <prefix>/state/..., <prefix>/leader
  std::chrono::seconds lease_ttl{5};   // a dead or frozen active head is replaced after this
  std::string self;                    // this head's address, recorded in the leader key
  // true: wait until this head is elected; false: refuse to start while another is active.
  bool standby = false;
  // Called (on the store's own thread) when this head is no longer the active one: its lease
  // expired, or a write found the leader key replaced. The head must stop acting at once.
  std::function<void(const std::string& why)> on_deposed;
  // How a standby says whom it waits for, once per active head.
  std::function<void(const std::string& active)> on_waiting;
};

// Parses "etcd://h1:2379,h2:2379[/prefix]" into endpoints and prefix (other fields untouched).
// Throws StateStoreError on anything else.
void parse_etcd_spec(const std::string& spec, EtcdOptions& options);

// Connects, campaigns (waiting as a standby if asked) and returns the store once this head is
// the active one. Throws StateStoreError when etcd cannot be reached, or another head is active
// and options.standby is false.
std::unique_ptr<StateStore> open_etcd_store(EtcdOptions options);

}  // namespace omnilearn::state
