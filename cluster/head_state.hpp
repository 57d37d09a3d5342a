#pragma once
// What the head keeps in its state store (state/state_store.hpp) and how a start reads it back:
// the live nodes with their identities and every name's last incarnation (so that a restarted
// head goes on recognising its workers, and a worker restarted meanwhile still gets a newer
// incarnation), the jobs with their specs, run directories and outcomes, and the head's epoch
// and last sign of life, and each running job's protocol state (its scheduler's snapshot,
// written per generation and membership change, or, for an asynchronous job, per batch dealt).
// Heartbeats and steps are not written: they change every second, and a restarted head hears them
// again from the workers and trainers.

#include <atomic>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "wire/membership_protocol.hpp"
#include "cluster/membership_table.hpp"
#include "state/state_store.hpp"

namespace omnilearn::actors {

// A job as the head keeps it.
struct StoredJob {
  JobInfo info;  // id, name, state, reason, step, total_steps, generation, checkpoint
  std::string run_dir;
  std::uint64_t events_skipped = 0;
  bool finished = false;
  std::string summary_json;  // once finished
  std::string toml;          // the job file as submitted
  std::string source_name;
  double submitted_at = 0;  // Unix time
  // The scheduler's last snapshot of a job that was pending or running (SchedulerActor's, or
  // AspSchedulerActor's for an asynchronous job): what a restarted head resumes it from. Empty
  // when the scheduler never wrote one (it had placed no trainer yet: the job starts afresh).
  std::string run_state;
};

// Keys of the store (one place, so that every writer and the reader agree).
std::string node_key(const std::string& node_id);
std::string name_key(const std::string& name);
std::string job_key(const std::string& job_id);
std::string drained_key(const std::string& node_name);  // a node drained for every job
std::string run_key(const std::string& job_id);         // a running job's protocol state
inline constexpr const char* kHeadEpochKey = "head/epoch";
inline constexpr const char* kHeadAliveKey = "head/alive_at";

std::string encode_node(const NodeRecord& node);
std::string encode_job(const StoredJob& job);

// What a head's start found in the store.
struct RestoredHead {
  std::vector<NodeRecord> nodes;                      // live when the previous head last wrote them
  std::map<std::string, std::uint64_t> incarnations;  // by name
  std::set<std::string> drained;  // names of the nodes drained for every job
  std::vector<StoredJob> jobs;                        // oldest submission first
  HeadInfo info;  // epoch, store, started_at, outage_s, restored_nodes, restored_jobs
};

// Reads everything, raises the head's epoch and records the start, all before the head takes
// its first message. A record that cannot be read is refused (StateStoreError naming its key):
// nothing the head did not write is guessed at.
RestoredHead start_head_epoch(state::StateStore& store, double now_unix);

// Shared by a head's actors and whoever stops the head (head/head.hpp: prepare_head_stop).
// Set before the actors stop when the head's store is durable: the running jobs outlive this
// head (a later one, restarted or a standby, resumes them from the store as after a kill -9),
// so their schedulers leave the trainers running and the JobManager ends none of them. Unset
// (an in-memory store: nothing to resume from), a stopping head stops its jobs' trainers.
struct HeadStop {
  std::atomic<bool> jobs_outlive_head{false};
};

}  // namespace omnilearn::actors
