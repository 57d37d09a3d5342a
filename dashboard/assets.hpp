#pragma once
// The dashboard's pages and scripts (dashboard/assets/, compiled in) and Debian's Chart.js.

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace omnilearn::dashboard {

// The compiled-in file `name` (e.g. "job.html"); nullopt if there is none.
std::optional<std::string_view> asset(const std::string& name);

// The Content-Type to serve `name` with, from its extension.
std::string content_type_for(const std::string& name);

// Where Chart.js is: $OMNILEARN_CHART_JS if set, else Debian's libjs-chart.js
// (/usr/share/javascript/chart.js/chart.min.js).
std::filesystem::path chart_js_path();

// Chart.js's text, read from chart_js_path(). Throws std::runtime_error naming the path and
// the package to install when it cannot be read.
std::string load_chart_js();

}  // namespace omnilearn::dashboard
