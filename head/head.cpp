#include "head/head.hpp"

#include <spdlog/spdlog.h>

#include "cluster/head_state.hpp"
#include "jobs/job_manager.hpp"
#include "cluster/node_registry.hpp"
#include "cluster/store_actor.hpp"
#include "core/protocol.hpp"
#include "core/task_router.hpp"

namespace omnilearn::actors {

HeadInfo spawn_head_actors(runtime::ActorSystem& system, const HeadOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  std::shared_ptr<state::StateStore> durable =
      options.store ? options.store : std::shared_ptr<state::StateStore>(state::open_memory_store());
  auto restored = start_head_epoch(
      *durable,
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  for (const auto& job : restored.jobs) {
    if (job.finished) continue;
    // A job whose file no longer parses ends (JobManager).
    if (job_resumable(job)) {
      ++restored.info.resumed_jobs;
    } else {
      ++restored.info.failed_jobs;
    }
  }
  restored.info.restore_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
          .count();
  if (restored.info.epoch > 1) {
    spdlog::info(
        "head: epoch {} over {}: {} live nodes and {} jobs restored ({} resumed, {} "
        "ended as failed), outage {:.1f} s, read in {:.1f} ms",
        restored.info.epoch, restored.info.store, restored.info.restored_nodes,
        restored.info.restored_jobs, restored.info.resumed_jobs, restored.info.failed_jobs,
        restored.info.outage_s, restored.info.restore_ms);
  }
  auto store = std::make_shared<StoreStats>();
  RegistryState registry;
  registry.store = durable;
  registry.head = restored.info;
  registry.nodes = std::move(restored.nodes);
  registry.incarnations = std::move(restored.incarnations);
  registry.drained = std::move(restored.drained);
  system.spawn<NodeRegistry>(
      kRegistryActor, options.membership,
      [store] {
        return std::map<std::string, std::uint64_t>{{"store_keys", store->keys.load()},
                                                    {"store_waiting", store->waiting.load()}};
      },
      DashboardAddress{options.dashboard_url, options.dashboard_token}, std::move(registry));
  system.spawn<StoreActor>(kStoreActor, StoreLimits{}, store);
  JobManagerOptions jobs;
  jobs.store = durable;
  jobs.restored = std::move(restored.jobs);
  jobs.head = restored.info;
  jobs.runs_root = options.runs_root;
  jobs.max_jobs = options.max_jobs;
  jobs.heartbeat_timeout = options.membership.heartbeat_timeout;
  jobs.head_stop = options.stop;
  system.spawn<JobManager>(kJobsActor, jobs);
  // Remote tasks and actors of user libraries (include/omnilearn/omnilearn.hpp).
  system.spawn<core::TaskRouter>(core::kTaskRouterActor);
  return restored.info;
}

std::string prepare_head_stop(const HeadOptions& options) {
  if (options.store && options.store->durable()) {
    if (options.stop) options.stop->jobs_outlive_head = true;
    return "running jobs and their trainers go on; a head started over " +
           options.store->describe() + " resumes them";
  }
  return "running jobs are stopped (the state is in memory: no head can resume them)";
}

}  // namespace omnilearn::actors
