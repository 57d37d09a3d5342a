#pragma once
// Prometheus text exposition (format 0.0.4) of the head's state: what /metrics serves. Pure:
// the cluster's status and the jobs' timelines in, text out.

#include <string>
#include <utility>
#include <vector>

#include "wire/membership_protocol.hpp"
#include "dashboard/histogram.hpp"
#include "dashboard/job_timeline.hpp"

namespace omnilearn::dashboard {

using Labels = std::vector<std::pair<std::string, std::string>>;

struct MetricSample {
  std::string suffix;  // "" or "_bucket", "_sum", "_count" for histograms
  Labels labels;
  double value = 0;
};

// One metric family: its name, type (counter, gauge, histogram), help line and samples.
struct MetricFamily {
  std::string name;
  std::string type;
  std::string help;
  std::vector<MetricSample> samples;

  void add(Labels labels, double value) { samples.push_back({"", std::move(labels), value}); }
  // The _bucket (with le), _sum and _count samples of `histogram` under `labels`.
  void add_histogram(const Labels& labels, const Histogram& histogram);
};

// Renders families in order, each with its HELP and TYPE; families without samples are left
// out. Throws std::invalid_argument for a metric or label name Prometheus would reject.
std::string render_exposition(const std::vector<MetricFamily>& families);

// Escapes a label value (backslash, double quote, newline) as the format requires.
std::string escape_label_value(const std::string& value);

// Every metric the head exports: nodes (up, heartbeat age, load), live workers (batch,
// samples/s), jobs (step, loss, generation; plan changes, generations, recoveries, lost steps
// and step/all-reduce histograms from their timelines), and the head's transport counters
// (messages in/out, dropped frames by reason, refused peers, failed handshakes, ...).
std::vector<MetricFamily> head_metrics(const actors::StatusReply& status,
                                       const std::vector<const JobTimeline*>& timelines);

}  // namespace omnilearn::dashboard
