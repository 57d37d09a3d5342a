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
#include <map>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/report.hpp"
#include "dashboard/assets.hpp"
#include "dashboard/report.hpp"
#include "runtime/atomic_file.hpp"

namespace omnilearn::cli {
namespace {

namespace fs = std::filesystem;

struct ReportFlags {
  std::string run_dir;
  std::string output;
  bool png = true;
  bool json = false;
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

// How a bounded child ended.
struct BoundedRun {
  pid_t pid = -1;          // -1: fork failed
  bool timed_out = false;  // outlasted the bound and was killed
  int exit_code = -1;      // its exit code when it exited by itself; -1 otherwise
};

// Runs `argv` with stdout into `out_file` and stderr discarded, in its own process group,
// killed by PID (the whole group: a browser starts helpers) if it outlasts `timeout`.
BoundedRun run_bounded(const std::vector<std::string>& argv, const fs::path& out_file,
                       std::chrono::seconds timeout) {
  // Everything the child uses is made before the fork: `run` and `submit --follow` call this
  // with the actor system's threads running, and the child of a multithreaded process may make
  // only async-signal-safe calls (a malloc could wait forever on a lock held at the fork).
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const std::string out_path = out_file.string();
  BoundedRun run;
  run.pid = ::fork();
  if (run.pid < 0) return run;
  if (run.pid == 0) {
    ::setpgid(0, 0);
    // `run` blocks SIGINT and SIGTERM to take them itself; the browser gets the default.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int null = ::open("/dev/null", O_RDWR);
    if (out < 0 || null < 0) ::_exit(127);
    ::dup2(null, 0);
    ::dup2(out, 1);
    ::dup2(null, 2);
    // Not the head's sockets: a browser that lingers must not hold the cluster's ports.
    ::close_range(3, ~0U, 0);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::setpgid(run.pid, run.pid);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (true) {
    pid_t done = ::waitpid(run.pid, &status, WNOHANG);
    if (done == run.pid) break;
    if (done < 0) return run;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(-run.pid, SIGKILL);
      ::waitpid(run.pid, &status, 0);
      run.timed_out = true;
      return run;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // The browser's helpers leave with it; any still there are ended with their group.
  ::kill(-run.pid, SIGKILL);
  if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  return run;
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

std::chrono::seconds report_chromium_timeout() {
  if (const char* env = std::getenv("OMNILEARN_REPORT_TIMEOUT_S"); env && *env) {
    char* end = nullptr;
    long seconds = std::strtol(env, &end, 10);
    if (end && *end == '\0' && seconds >= 1) return std::chrono::seconds(seconds);
  }
  return std::chrono::seconds(60);
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
  try {
    runtime::write_file_atomically(result.html, dashboard::render_report(run, chart_js));
  } catch (const runtime::AtomicWriteError& e) {
    throw dashboard::ReportError(e.what());
  }
  if (!png) return result;
  auto chromium = find_chromium();
  if (!chromium) {
    result.png_note = "no PNGs: no headless Chromium found (install Debian's chromium)";
    return result;
  }
  // The page draws its charts and, opened as #png, adds a PNG copy of each to its DOM, which
  // the browser prints.
  std::string pattern = (fs::temp_directory_path() / "omnilearn-report-XXXXXX").string();
  if (!::mkdtemp(pattern.data())) {
    result.png_note =
        "no PNGs: cannot create a browser profile under " + fs::temp_directory_path().string();
    return result;
  }
  const fs::path profile = pattern;
  const auto dom_file = profile / "dom.html";
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
  const auto timeout = report_chromium_timeout();
  const BoundedRun browser = run_bounded(argv, dom_file, timeout);
  std::map<std::string, std::string> pngs;
  if (!browser.timed_out) {
    std::ifstream dom_in(dom_file, std::ios::binary);
    std::ostringstream dom;
    dom << dom_in.rdbuf();
    pngs = dashboard::extract_png_exports(dom.str());
  }
  std::error_code ec;
  fs::remove_all(profile, ec);
  if (browser.timed_out) {
    result.png_note = fmt::format(
        "no PNGs: {} did not draw the charts within {} s and was killed (pid {}); the HTML "
        "report is complete ($OMNILEARN_REPORT_TIMEOUT_S gives the browser longer)",
        chromium->string(), timeout.count(), browser.pid);
    return result;
  }
  if (pngs.empty()) {
    result.png_note =
        browser.pid < 0 ? fmt::format("no PNGs: cannot start {} (fork failed)", chromium->string())
        : browser.exit_code == 0
            ? fmt::format("no PNGs: {} ran and drew no chart", chromium->string())
            : fmt::format("no PNGs: {} failed (exit code {}) and drew no chart", chromium->string(),
                          browser.exit_code);
    return result;
  }
  auto stem = result.html;
  stem.replace_extension();
  for (const auto& [name, bytes] : pngs) {
    fs::path file = stem.string() + "-" + name + ".png";
    try {
      runtime::write_file_atomically(file, bytes);
      result.pngs.push_back(file);
    } catch (const runtime::AtomicWriteError&) {
      // Left out of the list: print_report names only the charts that were written.
    }
  }
  return result;
}

void print_report(const ReportResult& report) {
  std::printf("report: %s\n", fs::absolute(report.html).string().c_str());
  for (const auto& png : report.pngs) {
    std::printf("chart: %s\n", fs::absolute(png).string().c_str());
  }
  std::fflush(stdout);
  if (!report.png_note.empty()) std::fprintf(stderr, "omnilearn: %s\n", report.png_note.c_str());
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
  command->add_flag("--json", flags->json,
                    "Machine-readable output: {\"report\": HTML, \"charts\": [PNG, ...], "
                    "\"note\": why there are no PNGs}");
  command->footer("Example: omnilearn report runs/1a2b3c4d -o report.html");
  command->callback([flags, &exit_code] {
    ReportResult result;
    try {
      result = write_report(flags->run_dir, flags->output, flags->png);
    } catch (const dashboard::ReportError& e) {
      throw CliError(e.what());
    }
    if (flags->json) {
      nlohmann::json charts = nlohmann::json::array();
      for (const auto& png : result.pngs) charts.push_back(fs::absolute(png).string());
      nlohmann::json out{{"report", fs::absolute(result.html).string()},
                         {"charts", charts},
                         {"note", result.png_note}};
      std::printf("%s\n", out.dump().c_str());
      std::fflush(stdout);
    } else {
      print_report(result);
    }
    exit_code = 0;
  });
}

}  // namespace omnilearn::cli
