#pragma once
// The actors a head runs, in one place for `omnilearn head` and the embedded cluster of
// `omnilearn run --local`.

#include <string>

#include "actors/membership_table.hpp"
#include "runtime/actor_system.hpp"

namespace omnilearn::actors {

struct HeadOptions {
  MembershipConfig membership;
  std::string runs_root = "runs";
  std::size_t max_jobs = 256;
  // The head's dashboard, told to whoever asks the registry for the status ("" : none).
  std::string dashboard_url;
  bool dashboard_token = false;
};

// Spawns the registry, the rendezvous store and the job manager on `system`.
void spawn_head_actors(runtime::ActorSystem& system, const HeadOptions& options);

}  // namespace omnilearn::actors
