#include "dashboard/assets.hpp"

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace omnilearn::dashboard {
namespace internal {
const std::map<std::string, std::string_view>& embedded_assets();  // embedded_assets.cpp
}

std::optional<std::string_view> asset(const std::string& name) {
  const auto& assets = internal::embedded_assets();
  auto it = assets.find(name);
  if (it == assets.end()) return std::nullopt;
  return it->second;
}

std::string content_type_for(const std::string& name) {
  auto ends_with = [&name](std::string_view suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends_with(".html")) return "text/html; charset=utf-8";
  if (ends_with(".js")) return "text/javascript; charset=utf-8";
  if (ends_with(".css")) return "text/css; charset=utf-8";
  if (ends_with(".json")) return "application/json";
  return "application/octet-stream";
}

std::filesystem::path chart_js_path() {
  if (const char* env = std::getenv("OMNILEARN_CHART_JS"); env && *env) return env;
  return "/usr/share/javascript/chart.js/chart.min.js";
}

std::string load_chart_js() {
  auto path = chart_js_path();
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  if (!in || text.str().empty()) {
    throw std::runtime_error("cannot read Chart.js at " + path.string() +
                             ": install Debian's libjs-chart.js (scripts/install-deps.sh does) "
                             "or point $OMNILEARN_CHART_JS at chart.min.js");
  }
  return text.str();
}

}  // namespace omnilearn::dashboard
