#pragma once
// `omnilearn report` as a function, for `run` and `submit --follow`, which write the report of
// a run that has just ended, with its PNGs, and name it under the summary.

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace omnilearn::cli {

struct ReportResult {
  std::filesystem::path html;
  std::vector<std::filesystem::path> pngs;  // <html stem>-<chart>.png, when Chromium drew them
  std::string png_note;                     // why there are no PNGs, if there are none
};

// Writes `output` (default run_dir/report.html) and, with `png` and a Chromium installed, a PNG
// per chart beside it. Chromium gets report_chromium_timeout(); one that takes longer is killed
// (its process group, by PID), and the report keeps its HTML with png_note saying so. Throws
// dashboard::ReportError when the run directory cannot be read or the file not written.
ReportResult write_report(const std::filesystem::path& run_dir, const std::filesystem::path& output,
                          bool png);

// What `omnilearn report`, `run` and `submit --follow` print of a report: "report: HTML" and a
// "chart: PNG" line per chart on stdout, png_note (if any) on stderr.
void print_report(const ReportResult& report);

// $OMNILEARN_CHROMIUM, else chromium, chromium-browser or google-chrome on PATH.
std::optional<std::filesystem::path> find_chromium();

// How long Chromium may take to draw a report's PNGs: $OMNILEARN_REPORT_TIMEOUT_S (seconds, at
// least 1), else 60 s.
std::chrono::seconds report_chromium_timeout();

}  // namespace omnilearn::cli
