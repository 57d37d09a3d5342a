#pragma once
// `omnilearn report`: one self-contained HTML file for a run directory (events.jsonl and
// summary.json), with the dashboard's charts. Everything is inline (Chart.js included) and a
// Content-Security-Policy forbids the page any request: it opens offline, from anywhere.

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "dashboard/job_timeline.hpp"

namespace omnilearn::dashboard {

// A run directory that cannot be read: names the path and what is wrong.
class ReportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct RunRecord {
  JobTimeline timeline;
  nlohmann::json summary;  // summary.json; null when the run has none (still running, killed)
};

// Reads `run_dir`/events.jsonl (required) and summary.json (optional). Throws ReportError when
// the directory or events.jsonl is missing or unreadable, or summary.json is not JSON. Lines of
// events.jsonl that are not JSON objects are counted (timeline.malformed_lines()), not fatal.
RunRecord load_run(const std::filesystem::path& run_dir);

// The report's HTML. `chart_js` is Chart.js's source (assets.hpp: load_chart_js).
std::string render_report(const RunRecord& run, const std::string& chart_js);

// Names of the charts a report (and a job page) draws: loss, batches, throughput, steptime,
// timeline.
const std::vector<std::string>& chart_names();

}  // namespace omnilearn::dashboard

namespace omnilearn::dashboard {

// The PNG copies of the charts a report page adds to its DOM when opened as REPORT#png (img
// elements with class png-export, data-chart=NAME and a data:image/png;base64 source), decoded:
// chart name -> PNG bytes. Images that are not valid base64 PNGs are left out.
std::map<std::string, std::string> extract_png_exports(const std::string& dom);

}  // namespace omnilearn::dashboard
