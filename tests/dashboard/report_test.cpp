#include "dashboard/report.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

namespace omnilearn::dashboard {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

struct RunDir {
  fs::path path = fs::temp_directory_path() / ("report-test-" + std::to_string(::getpid()));
  RunDir() { fs::create_directories(path); }
  ~RunDir() { fs::remove_all(path); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
  }
};

TEST(Report, NeedsARunDirectoryWithEvents) {
  RunDir dir;
  EXPECT_THROW(load_run(dir.path / "missing"), ReportError);
  EXPECT_THROW(load_run(dir.path), ReportError);  // no events.jsonl
  dir.write("events.jsonl", "{\"event\":\"step\",\"step\":1}\n");
  dir.write("summary.json", "{not json");
  try {
    load_run(dir.path);
    FAIL() << "a summary that is not JSON must be an error";
  } catch (const ReportError& e) {
    EXPECT_NE(std::string(e.what()).find("summary.json"), std::string::npos);
  }
}

TEST(Report, IsOneFileThatAsksForNothing) {
  RunDir dir;
  std::string events;
  for (int s = 1; s <= 3; ++s) {
    events += Json{{"event", "step"},
                   {"step", s},
                   {"time", 1.0 * s},
                   {"loss", 1.0},
                   {"workers", {{{"trainer", "t</script>0"}, {"batch", 8}}}}}
                  .dump() +
              "\n";
  }
  dir.write("events.jsonl", events + "garbage line\n");
  dir.write("summary.json", Json{{"job_id", "j9"}, {"status", "succeeded"}}.dump());
  auto run = load_run(dir.path);
  EXPECT_EQ(run.timeline.steps_committed(), 3u);
  EXPECT_EQ(run.timeline.malformed_lines(), 1u);
  const std::string chart_js = "window.Chart = function(){}; /* </script> in a comment */";
  auto html = render_report(run, chart_js);
  EXPECT_NE(html.find("Content-Security-Policy"), std::string::npos);
  EXPECT_NE(html.find("default-src 'none'"), std::string::npos);
  EXPECT_NE(html.find("window.Chart = function(){}"), std::string::npos);
  // No element loads anything from elsewhere.
  EXPECT_FALSE(std::regex_search(html, std::regex(R"((src|href)\s*=\s*["']?(https?:)?//)")));
  EXPECT_FALSE(std::regex_search(html, std::regex(R"(<link\b)")));
  // The only closing script tags are the four the report writes (three libraries, the data).
  std::size_t closes = 0;
  for (auto at = html.find("</script>"); at != std::string::npos;
       at = html.find("</script>", at + 1)) {
    ++closes;
  }
  EXPECT_EQ(closes, 4u);
  EXPECT_NE(html.find("OmniDashboard.reportPage"), std::string::npos);
  EXPECT_NE(html.find("job j9"), std::string::npos);
}

TEST(Report, PngExportsAreDecodedFromTheDom) {
  // "\x89PNG\r\n\x1a\n" + "abc", base64.
  const std::string dom =
      "<html><body><canvas data-chart=\"loss\"></canvas>"
      "<img class=\"png-export\" data-chart=\"loss\" "
      "src=\"data:image/png;base64,iVBORw0KGgphYmM=\">"
      "<img class=\"png-export\" data-chart=\"bad\" src=\"data:image/png;base64,!!!\">"
      "<img class=\"png-export\" data-chart=\"notpng\" src=\"data:image/png;base64,YWJj\">"
      "<img data-chart=\"other\" src=\"data:image/png;base64,iVBORw0KGgphYmM=\">"
      "</body></html>";
  auto pngs = extract_png_exports(dom);
  ASSERT_EQ(pngs.size(), 1u);
  EXPECT_EQ(pngs["loss"], std::string("\x89PNG\r\n\x1a\nabc", 11));
}

}  // namespace
}  // namespace omnilearn::dashboard
