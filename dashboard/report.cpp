#include "dashboard/report.hpp"

#include <sodium.h>

#include <fstream>
#include <sstream>

#include "dashboard/assets.hpp"

namespace omnilearn::dashboard {
namespace {

// Text placed inside <script> or <style> must not close the element early.
std::string inline_safe(std::string text, const std::string& closing) {
  const std::string escaped = "<\\/" + closing.substr(2);
  for (auto at = text.find(closing); at != std::string::npos;
       at = text.find(closing, at + escaped.size())) {
    text.replace(at, closing.size(), escaped);
  }
  return text;
}

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string required_asset(const std::string& name) {
  auto text = asset(name);
  if (!text) throw ReportError("the report asset " + name + " is not built in");
  return std::string(*text);
}

}  // namespace

const std::vector<std::string>& chart_names() {
  static const std::vector<std::string> names{"loss", "batches", "throughput", "steptime",
                                              "timeline"};
  return names;
}

RunRecord load_run(const std::filesystem::path& run_dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(run_dir, ec)) {
    throw ReportError(run_dir.string() +
                      " is not a run directory (it does not exist or is not "
                      "a directory)");
  }
  auto events_path = run_dir / "events.jsonl";
  std::ifstream events(events_path, std::ios::binary);
  if (!events) {
    throw ReportError("cannot read " + events_path.string() +
                      ": a run directory holds the events.jsonl its job wrote");
  }
  std::string job_id = run_dir.filename().string();
  if (job_id.empty()) job_id = run_dir.parent_path().filename().string();
  RunRecord run{JobTimeline(job_id), nullptr};
  std::string line;
  while (std::getline(events, line)) {
    if (!line.empty()) run.timeline.add_line(line);
  }
  auto summary_path = run_dir / "summary.json";
  if (std::filesystem::exists(summary_path, ec)) {
    std::ifstream in(summary_path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    run.summary = nlohmann::json::parse(text.str(), nullptr, false);
    if (run.summary.is_discarded()) {
      throw ReportError(summary_path.string() + " is not valid JSON");
    }
  }
  return run;
}

std::string render_report(const RunRecord& run, const std::string& chart_js) {
  auto charts = run.timeline.chart_data();
  if (run.summary.is_object()) {
    if (run.summary.contains("job_id")) charts["job_id"] = run.summary["job_id"];
    if (run.summary.contains("status")) charts["status"] = run.summary["status"];
  }
  nlohmann::json data{{"charts", charts}, {"summary", run.summary}};
  // ASCII-only JSON: no U+2028 or other characters that could end a script line.
  const std::string json = inline_safe(data.dump(-1, ' ', true), "</");
  const std::string job = charts.value("job_id", run.timeline.job_id());
  const std::string name = charts.value("name", "");
  std::string title = "OmniLearn report: job " + job + (name.empty() ? "" : " (" + name + ")");

  std::string html;
  html += "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  // No request of any kind: scripts, styles and images are all in this file.
  html +=
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
      "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">\n";
  html += "<title>" + html_escape(title) + "</title>\n";
  html += "<style>\n" + inline_safe(required_asset("style.css"), "</style") + "\n</style>\n";
  html += "<script>\n" + inline_safe(chart_js, "</script") + "\n</script>\n";
  html += "<script>\n" + inline_safe(required_asset("charts.js"), "</script") + "\n</script>\n";
  html += "<script>\n" + inline_safe(required_asset("dashboard.js"), "</script") + "\n</script>\n";
  html += "</head>\n<body>\n";
  html += "<header><h1>" + html_escape(title) + "</h1><span class=\"meta\">" +
          std::to_string(run.timeline.steps_committed()) + " steps, " +
          std::to_string(run.timeline.events_seen()) + " events</span></header>\n";
  html +=
      "<main>\n<section class=\"card\"><h2>Summary</h2><div class=\"kv\" id=\"summary\">"
      "</div>\n<table id=\"workers\"><thead><tr><th class=\"num\">Rank</th><th>Trainer</th>"
      "<th>Node</th><th class=\"num\">Final batch</th><th class=\"num\">Samples/s</th>"
      "<th class=\"num\">Compute</th></tr></thead><tbody></tbody></table></section>\n";
  html += "<div id=\"charts\"></div>\n</main>\n";
  html += "<script>\nconst OMNILEARN_REPORT = " + json +
          ";\n"
          "OmniDashboard.reportPage(OMNILEARN_REPORT);\n</script>\n</body>\n</html>\n";
  return html;
}

}  // namespace omnilearn::dashboard

namespace omnilearn::dashboard {

std::map<std::string, std::string> extract_png_exports(const std::string& dom) {
  static const std::string kChart = "data-chart=\"";
  static const std::string kSource = "data:image/png;base64,";
  static const std::string kPngMagic = "\x89PNG\r\n\x1a\n";
  std::map<std::string, std::string> out;
  for (auto at = dom.find("<img"); at != std::string::npos; at = dom.find("<img", at + 4)) {
    auto end = dom.find('>', at);
    if (end == std::string::npos) break;
    const std::string tag = dom.substr(at, end - at);
    if (tag.find("png-export") == std::string::npos) continue;
    auto name_at = tag.find(kChart);
    auto source_at = tag.find(kSource);
    if (name_at == std::string::npos || source_at == std::string::npos) continue;
    name_at += kChart.size();
    auto name_end = tag.find('"', name_at);
    source_at += kSource.size();
    auto source_end = tag.find('"', source_at);
    if (name_end == std::string::npos || source_end == std::string::npos) continue;
    const std::string base64 = tag.substr(source_at, source_end - source_at);
    std::string png(base64.size(), '\0');
    std::size_t length = 0;
    if (sodium_init() < 0 ||
        sodium_base642bin(reinterpret_cast<unsigned char*>(png.data()), png.size(), base64.data(),
                          base64.size(), nullptr, &length, nullptr,
                          sodium_base64_VARIANT_ORIGINAL) != 0) {
      continue;
    }
    png.resize(length);
    if (png.compare(0, kPngMagic.size(), kPngMagic) != 0) continue;
    out[tag.substr(name_at, name_end - name_at)] = std::move(png);
  }
  return out;
}

}  // namespace omnilearn::dashboard
