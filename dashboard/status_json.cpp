#include "dashboard/status_json.hpp"

namespace omnilearn::dashboard {

nlohmann::json to_json(const actors::NodeInfo& node) {
  nlohmann::json actors = nlohmann::json::array();
  for (const auto& actor : node.actors) {
    actors.push_back({{"actor", actor.actor},
                      {"job", actor.job_id},
                      {"rank", actor.rank},
                      {"steps", actor.steps},
                      {"batch", actor.batch},
                      {"samples_per_s", actor.samples_per_s},
                      {"step_time_s", actor.step_time_s}});
  }
  return {{"id", node.id},
          {"name", node.name},
          {"state", node.state},
          {"drained", node.drained},
          {"incarnation", node.incarnation},
          {"last_heartbeat_ms", node.last_heartbeat_ms},
          {"resources",
           {{"cpus", node.resources.cpus},
            {"memory_bytes", node.resources.memory_bytes},
            {"gpus", node.resources.gpus},
            {"labels", node.resources.labels}}},
          {"usage",
           {{"load_average", node.usage.load_average},
            {"rss_bytes", node.usage.rss_bytes},
            {"slowdown", node.usage.slowdown},
            {"cpu_quota", node.usage.cpu_quota}}},
          {"actors", actors}};
}

nlohmann::json to_json(const actors::JobInfo& job) {
  nlohmann::json workers = nlohmann::json::array();
  for (const auto& worker : job.workers) {
    workers.push_back({{"node", worker.node},
                       {"actor", worker.actor},
                       {"rank", worker.rank},
                       {"batch", worker.batch},
                       {"samples_per_s", worker.samples_per_s},
                       {"step_time_s", worker.step_time_s}});
  }
  return {{"id", job.id},
          {"name", job.name},
          {"state", job.state},
          {"reason", job.reason},
          {"step", job.step},
          {"total_steps", job.total_steps},
          {"generation", job.generation},
          {"loss", job.loss},
          {"workers", workers},
          {"checkpoint", job.checkpoint},
          {"checkpoint_node", job.checkpoint_node}};
}

nlohmann::json status_json(const actors::StatusReply& status) {
  nlohmann::json out{{"nodes", nlohmann::json::array()}, {"jobs", nlohmann::json::array()}};
  for (const auto& node : status.nodes) out["nodes"].push_back(to_json(node));
  for (const auto& job : status.jobs) out["jobs"].push_back(to_json(job));
  out["counters"] = status.counters;
  const auto& head = status.head;
  auto or_null = [](double value) { return value < 0 ? nlohmann::json(nullptr) : nlohmann::json(value); };
  out["head"] = {{"store", head.store},
                 {"role", head.role},
                 {"epoch", head.epoch},
                 {"started_at", head.started_at},
                 {"outage_s", or_null(head.outage_s)},
                 {"restored_nodes", head.restored_nodes},
                 {"restored_jobs", head.restored_jobs},
                 {"failed_jobs", head.failed_jobs},
                 {"resumed_jobs", head.resumed_jobs},
                 {"restore_ms", head.restore_ms},
                 {"nodes_back_ms", or_null(head.nodes_back_ms)}};
  return out;
}

}  // namespace omnilearn::dashboard
