#pragma once
// `omnilearn report` as a function, for `run` and `submit --follow`, which write the report of
// a run that has just ended and name it under the summary.

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
// per chart beside it. Throws dashboard::ReportError when the run directory cannot be read or
// the file not written.
ReportResult write_report(const std::filesystem::path& run_dir, const std::filesystem::path& output,
                          bool png);

// $OMNILEARN_CHROMIUM, else chromium, chromium-browser or google-chrome on PATH.
std::optional<std::filesystem::path> find_chromium();

}  // namespace omnilearn::cli
