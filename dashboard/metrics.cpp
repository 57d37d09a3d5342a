#include "dashboard/metrics.hpp"

#include <fmt/format.h>

#include <cmath>
#include <deque>
#include <iterator>
#include <map>
#include <set>
#include <stdexcept>

namespace omnilearn::dashboard {
namespace {

bool valid_name(const std::string& name, bool allow_colon) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              (allow_colon && c == ':') || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    return fmt::format("{}", static_cast<long long>(v));
  return fmt::format("{}", v);  // shortest representation that reads back exactly
}

std::string escape_help(const std::string& help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// Transport and head counters from StatusReply::counters: which are Prometheus counters (and
// under what name); any other entry is exported as a gauge omnilearn_head_<name>.
struct KnownCounter {
  const char* metric;
  const char* help;
  const char* reason;  // for omnilearn_dropped_frames_total: the reason label
};
const std::map<std::string, KnownCounter>& known_counters() {
  static const std::map<std::string, KnownCounter> known{
      {"messages_in", {"omnilearn_messages_received_total", "Messages the head received.", ""}},
      {"messages_out", {"omnilearn_messages_sent_total", "Messages the head sent.", ""}},
      {"dropped_malformed", {"omnilearn_dropped_frames_total", "", "malformed"}},
      {"dropped_oversized", {"omnilearn_dropped_frames_total", "", "oversized"}},
      {"dropped_unknown_kind", {"omnilearn_dropped_frames_total", "", "unknown_kind"}},
      {"dropped_bad_version", {"omnilearn_dropped_frames_total", "", "bad_version"}},
      {"dropped_unroutable", {"omnilearn_dropped_frames_total", "", "unroutable"}},
      {"dropped_send_full", {"omnilearn_dropped_frames_total", "", "send_full"}},
      {"refused_peers",
       {"omnilearn_refused_peers_total",
        "Connections refused because the peer did not hold the cluster's key.", ""}},
      {"failed_handshakes",
       {"omnilearn_failed_handshakes_total",
        "Inbound connections whose security handshake failed before any message.", ""}},
      {"failed_handshakes_out",
       {"omnilearn_failed_outbound_handshakes_total",
        "The head's own outbound handshakes that failed.", ""}},
      {"refused_in_flight",
       {"omnilearn_refused_in_flight_total",
        "Messages refused because their peer had too many waiting (--max-in-flight).", ""}},
      {"dead_letters",
       {"omnilearn_dead_letters_total", "Messages to actors that did not exist.", ""}},
  };
  return known;
}

std::string sanitize_metric_suffix(const std::string& name) {
  std::string out;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    out += ok ? c : '_';
  }
  return out;
}

bool job_is_live(const std::string& state) { return state == "running" || state == "pending"; }

}  // namespace

std::string escape_label_value(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void MetricFamily::add_histogram(const Labels& labels, const Histogram& histogram) {
  auto cumulative = histogram.cumulative_counts();
  const auto& bounds = histogram.upper_bounds();
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    Labels with_le = labels;
    with_le.emplace_back("le", format_value(bounds[i]));
    samples.push_back({"_bucket", std::move(with_le), static_cast<double>(cumulative[i])});
  }
  Labels inf = labels;
  inf.emplace_back("le", "+Inf");
  samples.push_back({"_bucket", std::move(inf), static_cast<double>(histogram.count())});
  samples.push_back({"_sum", labels, histogram.sum()});
  samples.push_back({"_count", labels, static_cast<double>(histogram.count())});
}

std::string render_exposition(const std::vector<MetricFamily>& families) {
  std::string out;
  std::set<std::string> seen;
  for (const auto& family : families) {
    if (family.samples.empty()) continue;
    if (!valid_name(family.name, true)) {
      throw std::invalid_argument("metric name '" + family.name + "' is not valid");
    }
    if (!seen.insert(family.name).second) {
      throw std::invalid_argument("metric family '" + family.name + "' rendered twice");
    }
    out += "# HELP " + family.name + " " + escape_help(family.help) + "\n";
    out += "# TYPE " + family.name + " " + family.type + "\n";
    for (const auto& sample : family.samples) {
      out += family.name + sample.suffix;
      if (!sample.labels.empty()) {
        out += "{";
        bool first = true;
        for (const auto& [key, value] : sample.labels) {
          if (!valid_name(key, false) || key.rfind("__", 0) == 0) {
            throw std::invalid_argument("label name '" + key + "' of " + family.name +
                                        " is not valid");
          }
          out += (first ? "" : ",") + key + "=\"" + escape_label_value(value) + "\"";
          first = false;
        }
        out += "}";
      }
      out += " " + format_value(sample.value) + "\n";
    }
  }
  return out;
}

std::vector<MetricFamily> head_metrics(const actors::StatusReply& status,
                                       const std::vector<const JobTimeline*>& timelines) {
  // A deque: the references `family` hands out stay valid while more families are added.
  std::deque<MetricFamily> out;
  auto family = [&out](const char* name, const char* type, const char* help) -> MetricFamily& {
    out.push_back(MetricFamily{name, type, help, {}});
    return out.back();
  };

  // Nodes: every incarnation the head remembers, each with its own id.
  auto& up = family("omnilearn_node_up", "gauge",
                    "1 while the node incarnation is alive, 0 once suspect, dead or left.");
  auto& age = family("omnilearn_node_heartbeat_age_seconds", "gauge",
                     "Seconds since the node's last heartbeat.");
  auto& load =
      family("omnilearn_node_load_average", "gauge", "The node machine's 1-minute load average.");
  auto& cpus = family("omnilearn_node_cpus", "gauge", "CPUs the node offers.");
  auto& incarnation = family("omnilearn_node_incarnation", "gauge",
                             "The node's incarnation (grows with every restart of its name).");
  for (const auto& node : status.nodes) {
    Labels labels{{"node", node.name}, {"id", node.id}};
    up.add(labels, node.state == "alive" ? 1 : 0);
    age.add(labels, node.last_heartbeat_ms / 1000.0);
    load.add(labels, node.usage.load_average);
    cpus.add(labels, node.resources.cpus);
    incarnation.add(labels, static_cast<double>(node.incarnation));
  }

  // Jobs and their live workers.
  auto& running = family("omnilearn_job_running", "gauge",
                         "1 while the job is pending or running, 0 once it has ended.");
  auto& step = family("omnilearn_job_step", "gauge", "Steps the job has committed.");
  auto& total = family("omnilearn_job_total_steps", "gauge", "Steps the job will train.");
  auto& loss = family("omnilearn_job_loss", "gauge", "Training loss of the job's last step.");
  auto& generation = family("omnilearn_job_generation", "gauge",
                            "The job's current generation (its training group).");
  auto& batch =
      family("omnilearn_worker_batch", "gauge", "Mini-batch size the controller gives the worker.");
  auto& rate = family("omnilearn_worker_samples_per_second", "gauge",
                      "Samples per second the worker trains at.");
  auto& worker_step = family("omnilearn_worker_step_seconds", "gauge",
                             "Mean wall time of the worker's recent steps.");
  for (const auto& job : status.jobs) {
    Labels labels{{"job", job.id}, {"name", job.name}};
    running.add(labels, job_is_live(job.state) ? 1 : 0);
    step.add(labels, static_cast<double>(job.step));
    total.add(labels, static_cast<double>(job.total_steps));
    loss.add(labels, job.loss);
    generation.add(labels, static_cast<double>(job.generation));
    if (!job_is_live(job.state)) continue;  // an ended job's workers are gone
    for (const auto& w : job.workers) {
      Labels worker{{"job", job.id},
                    {"trainer", w.actor},
                    {"node", w.node},
                    {"rank", std::to_string(w.rank)}};
      batch.add(worker, w.batch);
      rate.add(worker, w.samples_per_s);
      worker_step.add(worker, w.step_time_s);
    }
  }

  auto& plans = family("omnilearn_job_plan_changes_total", "counter",
                       "Batch plans the controller changed during the job.");
  auto& generations = family("omnilearn_job_generations_total", "counter",
                             "Generations (training groups) the job formed.");
  auto& recoveries = family("omnilearn_job_recoveries_total", "counter",
                            "Times the job trained again after losing a member.");
  auto& lost = family("omnilearn_job_lost_steps_total", "counter",
                      "Steps trained again after a failure (work lost).");
  auto& failures = family("omnilearn_job_trainer_failures_total", "counter",
                          "Trainer processes of the job that exited with an error.");
  auto& steps_seconds = family("omnilearn_job_step_seconds", "histogram",
                               "Wall time of the job's committed steps, all-reduce included.");
  auto& allreduce_seconds = family("omnilearn_job_allreduce_seconds", "histogram",
                                   "Time the job's committed steps spent in the all-reduce.");
  for (const auto* timeline : timelines) {
    Labels labels{{"job", timeline->job_id()}};
    plans.add(labels, static_cast<double>(timeline->plan_changes()));
    generations.add(labels, static_cast<double>(timeline->generations()));
    recoveries.add(labels, static_cast<double>(timeline->recoveries()));
    lost.add(labels, static_cast<double>(timeline->lost_steps()));
    failures.add(labels, static_cast<double>(timeline->trainer_failures()));
    steps_seconds.add_histogram(labels, timeline->step_seconds());
    allreduce_seconds.add_histogram(labels, timeline->allreduce_seconds());
  }

  // The head's own counters.
  auto& dropped = family("omnilearn_dropped_frames_total", "counter",
                         "Frames the head dropped, by reason (never a crash).");
  std::map<std::string, MetricFamily> counters;
  std::vector<MetricFamily> gauges;
  for (const auto& [name, value] : status.counters) {
    auto it = known_counters().find(name);
    if (it == known_counters().end()) {
      std::string metric = "omnilearn_head_" + sanitize_metric_suffix(name);
      gauges.push_back(
          MetricFamily{metric, "gauge", "The head's '" + name + "' (status --json counters).", {}});
      gauges.back().add({}, static_cast<double>(value));
      continue;
    }
    const auto& known = it->second;
    if (*known.reason) {
      dropped.add({{"reason", known.reason}}, static_cast<double>(value));
      continue;
    }
    auto& counter = counters[known.metric];
    counter.name = known.metric;
    counter.type = "counter";
    counter.help = known.help;
    counter.add({}, static_cast<double>(value));
  }
  for (auto& [name, counter] : counters) out.push_back(std::move(counter));
  for (auto& gauge : gauges) out.push_back(std::move(gauge));
  return {std::make_move_iterator(out.begin()), std::make_move_iterator(out.end())};
}

}  // namespace omnilearn::dashboard
