#pragma once
// The actors a head runs, in one place for `omnilearn head` and the embedded cluster of
// `omnilearn run --local`.

#include <memory>
#include <string>

#include "wire/membership_protocol.hpp"
#include "cluster/membership_table.hpp"
#include "cluster/head_state.hpp"
#include "runtime/actor_system.hpp"
#include "state/state_store.hpp"

namespace omnilearn::actors {

struct HeadOptions {
  MembershipConfig membership;
  std::string runs_root = "runs";
  std::size_t max_jobs = 256;
  // Where the head keeps what it must not forget (nodes, jobs, its epoch); null: in memory,
  // forgotten when the head stops (`run --local`, tests of one head's life).
  std::shared_ptr<state::StateStore> store;
  // The head's dashboard, told to whoever asks the registry for the status ("" : none).
  std::string dashboard_url;
  bool dashboard_token = false;
  // How the head's actors learn that it stops gracefully (prepare_head_stop sets it).
  std::shared_ptr<HeadStop> stop = std::make_shared<HeadStop>();
};

// Reads the head's state from options.store (a previous head's nodes and jobs), raises its
// epoch, and spawns the registry, the rendezvous store and the job manager on `system` with
// that state. Throws state::StateStoreError when the state cannot be read; then nothing is
// spawned and nothing is written. Returns what the start restored.
HeadInfo spawn_head_actors(runtime::ActorSystem& system, const HeadOptions& options);

// Before a graceful stop (SIGTERM, SIGINT), ahead of the actor system's shutdown: with a durable
// store the running jobs are left to the next head, which resumes them (their trainers keep
// running, as through a kill -9); with none (in memory) their trainers are told to stop. Returns
// what happens to them, for the head's log line.
std::string prepare_head_stop(const HeadOptions& options);

}  // namespace omnilearn::actors
