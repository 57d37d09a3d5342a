#pragma once
// The head's durable state: what a head must not forget across a crash or a restart (nodes and
// their incarnations, jobs with their specs and run directories, the head's own epoch). A flat
// map from keys to values, read in full at start and changed by atomic batches that are on disk
// before commit() returns, so whatever the head acknowledges survives a kill -9 or a power cut.
//
// Keys are '/'-separated paths ("nodes/<id>", "jobs/<id>", "head/epoch"); values are opaque to
// the store (the head writes JSON, so `sqlite3 state.db 'select * from kv'` is readable).

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace omnilearn::state {

// The store cannot be opened, read or written: the message names the store and says what to do.
class StateStoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One change of a batch: `value` set writes the key, empty deletes it.
struct Write {
  std::string key;
  std::optional<std::string> value;
};

class StateStore {
 public:
  virtual ~StateStore() = default;

  // What the store is, for status and logs ("sqlite:/var/lib/omnilearn/state.db").
  virtual std::string describe() const = 0;

  // Whether what is committed outlives this process (a file or etcd; not the in-memory store):
  // whether a later head can take over from it.
  virtual bool durable() const = 0;

  // Every key starting with `prefix`, with its value, in key order.
  virtual std::map<std::string, std::string> load(const std::string& prefix) = 0;

  // Applies `writes` atomically (all or none) and durably: on disk when it returns. Throws
  // StateStoreError when it cannot, with nothing applied. Thread-safe.
  virtual void commit(const std::vector<Write>& writes) = 0;

  // Why this head may no longer act as the active one, if so: for a store that elects heads
  // (etcd), its lease is lost or may have run out by the clock, whether or not the thread that
  // deposes it has run yet. Cheap, lock-free, any thread: the head's send fence asks it before
  // every message leaves (ActorSystem::set_send_fence). A store that elects no one: never.
  virtual std::optional<std::string> lapsed() const { return std::nullopt; }

  // One key's value, if set.
  std::optional<std::string> get(const std::string& key);
  void put(const std::string& key, std::string value);
  void erase(const std::string& key);
};

// The embedded store: an SQLite database `<dir>/state.db` in WAL mode with synchronous=FULL
// (every commit fsyncs the write-ahead log before it returns). The directory is created if
// missing. A file that is not an OmniLearn state database, is corrupt or truncated, or was
// written by a newer schema is refused with StateStoreError naming it, and nothing in it is
// changed.
std::unique_ptr<StateStore> open_sqlite_store(const std::filesystem::path& dir);

// An in-memory store with the same contract less durability: for tests and `run --local`.
std::unique_ptr<StateStore> open_memory_store();

// The store named by a `--store` value: "sqlite:DIR" or a plain directory for the embedded
// store, "memory:" for none that lasts. Anything else is refused with what is accepted.
std::unique_ptr<StateStore> open_state_store(const std::string& spec);

}  // namespace omnilearn::state
