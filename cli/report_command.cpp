// omnilearn report RUN_DIR [-o FILE]: one self-contained HTML file with a finished (or running)
// run's charts, and a PNG of each chart when a headless Chromium is installed.
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli/command.hpp"
#include "cli/report.hpp"
#include "dashboard/assets.hpp"
#include "dashboard/report.hpp"

namespace omnilearn::cli {
namespace {

namespace fs = std::filesystem;

struct ReportFlags {
  std::string run_dir;
  std::string output;
  bool png = true;
};

std::optional<fs::path> find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (!path) return std::nullopt;
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    fs::path candidate = fs::path(dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

// Runs `argv` with stdout into `out_file` and stderr discarded, in its own process group,
// killed (the whole group: a browser starts helpers) if it outlasts `timeout`. Returns the exit
// status, or -1 if it could not start or timed out.
int run_bounded(const std::vector<std::string>& argv, const fs::path& out_file,
                std::chrono::seconds timeout) {
  pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    ::setpgid(0, 0);
    int out = ::open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int null = ::open("/dev/null", O_RDWR);
    if (out < 0 || null < 0) ::_exit(127);
    ::dup2(null, 0);
    ::dup2(out, 1);
    ::dup2(null, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (true) {
    pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0) return -1;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // The browser's helpers leave with it; any still there are ended with their group.
  ::kill(-pid, SIGKILL);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

std::optional<std::filesystem::path> find_chromium() {
  if (const char* env = std::getenv("OMNILEARN_CHROMIUM"); env && *env) {
    if (::access(env, X_OK) == 0) return fs::path(env);
    return std::nullopt;
  }
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    if (auto found = find_on_path(name)) return found;
  }
  return std::nullopt;
}

ReportResult write_report(const fs::path& run_dir, const fs::path& output, bool png) {
  ReportResult result;
  dashboard::RunRecord run = dashboard::load_run(run_dir);
  std::string chart_js;
  try {
    chart_js = dashboard::load_chart_js();
  } catch (const std::runtime_error& e) {
    throw dashboard::ReportError(e.what());
  }
  result.html = output.empty() ? run_dir / "report.html" : output;
  const auto temp = fs::path(result.html.string() + ".tmp");
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << dashboard::render_report(run, chart_js);
    if (!out) throw dashboard::ReportError("cannot write " + temp.string());
  }
  std::error_code ec;
  fs::rename(temp, result.html, ec);
  if (ec)
    throw dashboard::ReportError("cannot write " + result.html.string() + ": " + ec.message());
  if (!png) return result;
  auto chromium = find_chromium();
  if (!chromium) {
    result.png_note = "no PNGs: no headless Chromium found (install Debian's chromium)";
    return result;
  }
  // The page draws its charts and, opened as #png, adds a PNG copy of each to its DOM, which
  // the browser prints.
  auto profile = fs::temp_directory_path() / fmt::format("omnilearn-report-{}", ::getpid());
  auto dom_file = profile / "dom.html";
  fs::create_directories(profile, ec);
  std::vector<std::string> argv{chromium->string(),
                                "--headless",
                                "--disable-gpu",
                                "--user-data-dir=" + profile.string(),
                                "--no-first-run",
                                "--window-size=1400,1000",
                                "--virtual-time-budget=10000",
                                "--dump-dom",
                                "file://" + fs::absolute(result.html).string() + "#png"};
  if (::geteuid() == 0) argv.insert(argv.begin() + 1, "--no-sandbox");
  int code = run_bounded(argv, dom_file, std::chrono::seconds(90));
  std::ifstream dom_in(dom_file, std::ios::binary);
  std::ostringstream dom;
  dom << dom_in.rdbuf();
  auto pngs = dashboard::extract_png_exports(dom.str());
  fs::remove_all(profile, ec);
  if (pngs.empty()) {
    result.png_note = fmt::format("no PNGs: {} {} and drew no chart", chromium->string(),
                                  code == 0 ? "ran" : "failed or timed out");
    return result;
  }
  auto stem = result.html;
  stem.replace_extension();
  for (const auto& [name, bytes] : pngs) {
    fs::path file = stem.string() + "-" + name + ".png";
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << bytes;
    if (out) result.pngs.push_back(file);
  }
  return result;
}

void add_report_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<ReportFlags>();
  auto* command = app.add_subcommand(
      "report", "Write one self-contained HTML report (charts, summary) of a run directory");
  command->add_option("RUN_DIR", flags->run_dir, "The job's run directory (events.jsonl)")
      ->required();
  command->add_option("-o,--output", flags->output, "The HTML file (default RUN_DIR/report.html)");
  command->add_flag("!--no-png", flags->png,
                    "Skip the PNG copies of the charts (made with a headless Chromium if present)");
  command->callback([flags, &exit_code] {
    ReportResult result;
    try {
      result = write_report(flags->run_dir, flags->output, flags->png);
    } catch (const dashboard::ReportError& e) {
      throw CliError(e.what());
    }
    std::printf("report: %s\n", fs::absolute(result.html).string().c_str());
    for (const auto& png : result.pngs) std::printf("chart: %s\n", png.string().c_str());
    if (!result.png_note.empty()) std::fprintf(stderr, "%s\n", result.png_note.c_str());
    exit_code = 0;
  });
}

}  // namespace omnilearn::cli
