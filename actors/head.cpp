#include "actors/head.hpp"

#include "actors/job_manager.hpp"
#include "actors/node_registry.hpp"
#include "actors/store_actor.hpp"
#include "core/protocol.hpp"
#include "core/task_router.hpp"

namespace omnilearn::actors {

void spawn_head_actors(runtime::ActorSystem& system, const HeadOptions& options) {
  auto store = std::make_shared<StoreStats>();
  system.spawn<NodeRegistry>(
      kRegistryActor, options.membership,
      [store] {
        return std::map<std::string, std::uint64_t>{{"store_keys", store->keys.load()},
                                                    {"store_waiting", store->waiting.load()}};
      },
      DashboardAddress{options.dashboard_url, options.dashboard_token});
  system.spawn<StoreActor>(kStoreActor, StoreLimits{}, store);
  JobManagerOptions jobs;
  jobs.runs_root = options.runs_root;
  jobs.max_jobs = options.max_jobs;
  jobs.heartbeat_timeout = options.membership.heartbeat_timeout;
  system.spawn<JobManager>(kJobsActor, jobs);
  // Remote tasks and actors of user libraries (include/omnilearn/omnilearn.hpp).
  system.spawn<core::TaskRouter>(core::kTaskRouterActor);
}

}  // namespace omnilearn::actors
