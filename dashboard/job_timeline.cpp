#include "dashboard/job_timeline.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace omnilearn::dashboard {
namespace {

using Json = nlohmann::json;

double number(const Json& e, const char* key, double fallback = 0) {
  auto it = e.find(key);
  return it != e.end() && it->is_number() ? it->get<double>() : fallback;
}
std::int64_t integer(const Json& e, const char* key, std::int64_t fallback = 0) {
  auto it = e.find(key);
  return it != e.end() && it->is_number() ? it->get<std::int64_t>() : fallback;
}
std::string text(const Json& e, const char* key) {
  auto it = e.find(key);
  return it != e.end() && it->is_string() ? it->get<std::string>() : std::string();
}
std::string compact(const Json& e, const char* key) {
  auto it = e.find(key);
  return it != e.end() ? it->dump() : std::string("[]");
}

// Which lane of the timeline an event belongs to.
std::string category_of(const std::string& kind, const Json& e) {
  if (kind == "spawn" || kind == "trainer_ready" || kind == "worker_joined" ||
      kind == "server_ready") {
    return "join";
  }
  if (kind == "generation" || kind == "generation_formed") return "generation";
  if (kind == "plan") return "plan";
  if (kind == "drain" || kind == "server_handed_over") return "leave";
  if (kind == "trainer_exited") return integer(e, "exit_code", -1) == 0 ? "leave" : "death";
  if (kind == "trainer_gone" || kind == "server_gone") return "death";
  if (kind == "recovered" || kind == "server_recovered" || kind == "batch_fenced" ||
      kind == "trainer_back") {
    return "recovery";
  }
  if (kind == "formation_failed" || kind == "lease_refused" || kind == "superseded_step" ||
      kind == "node_held_back") {
    return "problem";
  }
  return "job";
}

std::string describe(const std::string& kind, const Json& e) {
  const auto trainer = text(e, "trainer");
  if (kind == "submitted") {
    return fmt::format("submitted: policy {}, global batch {}", text(e, "policy"),
                       integer(e, "global_batch"));
  }
  if (kind == "spawn") return fmt::format("{} starting on {}", trainer, text(e, "node"));
  if (kind == "trainer_ready") {
    return fmt::format("{} ready ({:.1f} s to start)", trainer, number(e, "startup_s"));
  }
  if (kind == "generation") {
    return fmt::format("generation {}: {} batches {} ({})", integer(e, "generation"),
                       compact(e, "members"), compact(e, "batches"), text(e, "reason"));
  }
  if (kind == "generation_formed") {
    return fmt::format("generation {} formed", integer(e, "generation"));
  }
  if (kind == "plan") {
    return fmt::format("plan v{}: batches {}", integer(e, "version"), compact(e, "batches"));
  }
  if (kind == "drain") return fmt::format("{} drained (node {})", trainer, text(e, "node"));
  if (kind == "trainer_exited") {
    auto reason = text(e, "reason");
    if (reason.empty()) reason = fmt::format("exited with code {}", integer(e, "exit_code", -1));
    return fmt::format("{} {}", trainer, reason);
  }
  if (kind == "trainer_gone") return fmt::format("{} gone: {}", trainer, text(e, "reason"));
  if (kind == "trainer_back") return fmt::format("{} back: {}", trainer, text(e, "reason"));
  if (kind == "node_held_back") {
    return fmt::format("node {} gets no trainer for {:.1f} s: {} lost there lately, the last {}",
                       text(e, "node"), number(e, "held_back_s"), integer(e, "losses"), trainer);
  }
  if (kind == "server_gone") {
    return fmt::format("server of shard {} gone: {}", integer(e, "shard"), text(e, "reason"));
  }
  if (kind == "server_recovered") {
    return fmt::format("shard {} serving again from version {} ({}), {} updates lost",
                       integer(e, "shard"), integer(e, "resumed_at"), text(e, "resumed_from"),
                       integer(e, "updates_lost"));
  }
  if (kind == "server_handed_over") {
    return e.value("ok", false)
               ? fmt::format("shard {} handed over at version {} (its node drained)",
                             integer(e, "shard"), integer(e, "version"))
               : fmt::format("shard {} did not hand over: {}", integer(e, "shard"),
                             text(e, "error"));
  }
  if (kind == "batch_fenced") {
    return fmt::format("batch {} of worker {} ({} samples) fenced off the servers: {}",
                       integer(e, "batch"), integer(e, "worker"), integer(e, "samples"),
                       text(e, "outcome"));
  }
  if (kind == "recovered") {
    return fmt::format("training again {:.2f} s after the failure, {} steps lost",
                       number(e, "recovery_s"), integer(e, "lost_steps"));
  }
  if (kind == "finished") {
    auto reason = text(e, "reason");
    return fmt::format("job {}{}{}", text(e, "status"), reason.empty() ? "" : ": ", reason);
  }
  auto reason = text(e, "reason");
  return reason.empty() ? kind : kind + ": " + reason;
}

}  // namespace

double ideal_compute_seconds(const std::vector<WorkerSample>& workers) {
  double batch = 0;
  double throughput = 0;
  for (const auto& w : workers) {
    if (w.batch <= 0) continue;  // a worker with no slice costs nothing
    if (w.compute_time_s <= 0) return 0;
    batch += w.batch;
    throughput += w.batch / w.compute_time_s;
  }
  return throughput > 0 ? batch / throughput : 0;
}

JobTimeline::JobTimeline(std::string job_id, TimelineLimits limits)
    : job_id_(std::move(job_id)),
      limits_(limits),
      step_seconds_(seconds_buckets()),
      allreduce_seconds_(seconds_buckets()),
      steps_(limits.max_step_points),
      evals_(limits.max_eval_points) {}

bool JobTimeline::add_line(const std::string& line) {
  auto event = Json::parse(line, nullptr, false);
  if (event.is_discarded() || !event.is_object() || !event.contains("event") ||
      !event["event"].is_string()) {
    ++malformed_;
    return false;
  }
  add(event);
  return true;
}

void JobTimeline::add(const Json& e) {
  ++events_seen_;
  const auto kind = text(e, "event");
  if (started_ == 0) started_ = number(e, "time");
  if (kind == "step") {
    add_step(e);
    return;
  }
  if (kind == "asp_interval") {
    add_asp_interval(e);
    return;
  }
  if (kind == "synced") return;  // one per member per generation: the generation says it
  if (kind == "submitted") {
    name_ = text(e, "name");
    policy_ = text(e, "policy");
    global_batch_ = integer(e, "global_batch");
  } else if (kind == "plan") {
    ++plan_changes_;
  } else if (kind == "generation") {
    ++generations_;
  } else if (kind == "recovered") {
    ++recoveries_;
    lost_steps_ += static_cast<std::uint64_t>(std::max<std::int64_t>(0, integer(e, "lost_steps")));
  } else if (kind == "trainer_exited" && integer(e, "exit_code", -1) != 0) {
    ++trainer_failures_;
  } else if (kind == "finished") {
    status_ = text(e, "status");
    if (status_.empty()) status_ = "finished";
  }
  add_timeline(e, kind);
}

void JobTimeline::add_step(const Json& e) {
  StepPoint p;
  p.step = integer(e, "step");
  p.time = number(e, "time");
  p.loss = number(e, "loss");
  p.step_time_s = number(e, "step_time_s");
  p.allreduce_time_s = number(e, "allreduce_time_s");
  p.generation = integer(e, "generation");
  if (auto it = e.find("workers"); it != e.end() && it->is_array()) {
    for (const auto& w : *it) {
      if (!w.is_object()) continue;
      WorkerSample s;
      s.trainer = text(w, "trainer");
      s.node = text(w, "node");
      s.rank = static_cast<std::int32_t>(integer(w, "rank", -1));
      s.batch = static_cast<std::int32_t>(integer(w, "batch"));
      s.samples_per_s = number(w, "samples_per_s");
      s.compute_time_s = number(w, "compute_time_s");
      p.workers.push_back(std::move(s));
    }
  }
  ++steps_committed_;
  last_step_ = std::max(last_step_, p.step);
  step_seconds_.observe(p.step_time_s);
  allreduce_seconds_.observe(p.allreduce_time_s);
  if (e.contains("test_accuracy")) {
    evals_.add(EvalPoint{p.step, number(e, "test_accuracy"), number(e, "test_loss")});
  }
  steps_.add(std::move(p));
}

// An asynchronous job has no steps: each second's asp_interval event becomes one point, its
// step the server updates so far, its step time the mean time between updates in the interval,
// and each worker's batch and compute time as in a step (so the same charts draw it); its
// staleness and each worker's updates in the interval, and an evaluation it carries, too.
void JobTimeline::add_asp_interval(const Json& e) {
  asp_ = true;
  StepPoint p;
  p.step = integer(e, "step");
  p.time = number(e, "time");
  p.loss = number(e, "loss");
  const std::int64_t updates = integer(e, "updates");
  const double interval_s = number(e, "interval_s");
  p.step_time_s = updates > 0 ? interval_s / static_cast<double>(updates) : 0.0;
  if (auto it = e.find("staleness"); it != e.end() && it->is_object()) {
    p.staleness = StalenessPoint{number(*it, "mean"), integer(*it, "p95"), integer(*it, "max")};
  }
  if (auto it = e.find("workers"); it != e.end() && it->is_object()) {
    std::int32_t rank = 0;
    for (const auto& [name, w] : it->items()) {
      if (!w.is_object() || !w.value("live", true)) continue;
      WorkerSample s;
      s.trainer = name;
      s.rank = rank++;
      s.batch = static_cast<std::int32_t>(integer(w, "batch"));
      s.compute_time_s = number(w, "compute_time_s");
      s.samples_per_s = s.compute_time_s > 0 ? s.batch / s.compute_time_s : 0.0;
      s.updates_per_s =
          interval_s > 0 ? static_cast<double>(integer(w, "updates")) / interval_s : 0.0;
      p.workers.push_back(std::move(s));
    }
  }
  ++steps_committed_;
  last_step_ = std::max(last_step_, p.step);
  if (p.step_time_s > 0) step_seconds_.observe(p.step_time_s);
  if (e.contains("test_accuracy")) {
    // The parameters evaluated were pulled at eval_version updates, not at this point's.
    evals_.add(EvalPoint{integer(e, "eval_version", p.step), number(e, "test_accuracy"),
                         number(e, "test_loss")});
  }
  steps_.add(std::move(p));
}

void JobTimeline::add_timeline(const Json& e, const std::string& kind) {
  if (timeline_.size() >= limits_.max_timeline_entries) {
    // Keep the first entries (how the job started) and the newest: drop the second-oldest.
    timeline_.erase(timeline_.begin() + 1);
    ++timeline_dropped_;
  }
  TimelineEntry entry;
  entry.time = number(e, "time");
  entry.step = e.contains("step") ? integer(e, "step", -1) : -1;
  entry.kind = kind;
  entry.category = category_of(kind, e);
  entry.text = describe(kind, e);
  timeline_.push_back(std::move(entry));
}

Json JobTimeline::chart_data() const {
  const auto& points = steps_.points();
  Json steps = Json::array(), times = Json::array(), loss = Json::array(),
       step_time = Json::array(), allreduce = Json::array(), slowest = Json::array(),
       ideal = Json::array();
  // Workers in the order they first appear (rank order of the first generation, then joiners).
  std::vector<std::string> order;
  std::map<std::string, std::size_t> index;
  std::map<std::string, std::string> node_of;
  for (const auto& p : points) {
    for (const auto& w : p.workers) {
      if (index.emplace(w.trainer, order.size()).second) order.push_back(w.trainer);
      node_of[w.trainer] = w.node;
    }
  }
  std::vector<Json> batch(order.size(), Json::array()), rate(order.size(), Json::array()),
      updates_rate(order.size(), Json::array());
  Json staleness_mean = Json::array(), staleness_p95 = Json::array(),
       staleness_max = Json::array();
  for (const auto& p : points) {
    steps.push_back(p.step);
    times.push_back(p.time - started_);
    loss.push_back(p.loss);
    step_time.push_back(p.step_time_s);
    allreduce.push_back(p.allreduce_time_s);
    double slowest_compute = 0;
    for (const auto& w : p.workers) {
      if (w.batch > 0) slowest_compute = std::max(slowest_compute, w.compute_time_s);
    }
    slowest.push_back(slowest_compute);
    double ideal_compute = ideal_compute_seconds(p.workers);
    ideal.push_back(ideal_compute > 0 ? Json(ideal_compute + p.allreduce_time_s) : Json());
    if (asp_) {
      staleness_mean.push_back(p.staleness ? Json(p.staleness->mean) : Json());
      staleness_p95.push_back(p.staleness ? Json(p.staleness->p95) : Json());
      staleness_max.push_back(p.staleness ? Json(p.staleness->max) : Json());
    }
    std::vector<bool> present(order.size(), false);
    for (const auto& w : p.workers) {
      auto i = index.at(w.trainer);
      present[i] = true;
      batch[i].push_back(w.batch);
      rate[i].push_back(w.samples_per_s);
      updates_rate[i].push_back(w.updates_per_s >= 0 ? Json(w.updates_per_s) : Json());
    }
    for (std::size_t i = 0; i < order.size(); ++i) {
      if (!present[i]) {
        batch[i].push_back(nullptr);
        rate[i].push_back(nullptr);
        updates_rate[i].push_back(nullptr);
      }
    }
  }
  Json workers = Json::array();
  for (std::size_t i = 0; i < order.size(); ++i) {
    Json w{{"trainer", order[i]},
           {"node", node_of[order[i]]},
           {"batch", std::move(batch[i])},
           {"samples_per_s", std::move(rate[i])}};
    if (asp_) w["updates_per_s"] = std::move(updates_rate[i]);
    workers.push_back(std::move(w));
  }
  Json eval_steps = Json::array(), accuracy = Json::array(), eval_loss = Json::array();
  for (const auto& e : evals_.points()) {
    eval_steps.push_back(e.step);
    accuracy.push_back(e.accuracy);
    eval_loss.push_back(e.loss);
  }
  Json timeline = Json::array();
  for (const auto& t : timeline_) {
    timeline.push_back({{"time", t.time - started_},
                        {"step", t.step},
                        {"kind", t.kind},
                        {"category", t.category},
                        {"text", t.text}});
  }
  Json data{{"job_id", job_id_},
          {"name", name_},
          {"asp", asp_},
          {"policy", policy_},
          {"global_batch", global_batch_},
          {"status", status_.empty() ? "running" : status_},
          {"steps", std::move(steps)},
          {"time_s", std::move(times)},
          {"loss", std::move(loss)},
          {"step_time_s", std::move(step_time)},
          {"allreduce_time_s", std::move(allreduce)},
          {"slowest_compute_s", std::move(slowest)},
          {"ideal_step_s", std::move(ideal)},
          {"workers", std::move(workers)},
          {"evals",
           {{"steps", std::move(eval_steps)},
            {"accuracy", std::move(accuracy)},
            {"loss", std::move(eval_loss)}}},
          {"timeline", std::move(timeline)},
          {"timeline_dropped", timeline_dropped_},
          {"stride", steps_.stride()},
          {"counters",
           {{"events", events_seen_},
            {"steps_committed", steps_committed_},
            {"last_step", last_step_},
            {"plan_changes", plan_changes_},
            {"generations", generations_},
            {"recoveries", recoveries_},
            {"lost_steps", lost_steps_},
            {"trainer_failures", trainer_failures_}}}};
  if (asp_) {
    data["staleness"] = {{"mean", std::move(staleness_mean)},
                         {"p95", std::move(staleness_p95)},
                         {"max", std::move(staleness_max)}};
  }
  return data;
}

}  // namespace omnilearn::dashboard
