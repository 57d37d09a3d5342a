#include "cli/job_client.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "wire/job_protocol.hpp"
#include "cli/report.hpp"
#include "dashboard/progress_line.hpp"
#include "dashboard/report.hpp"
#include "runtime/shutdown.hpp"
#include "runtime/system_messages.hpp"

namespace omnilearn::cli {
namespace {

using Json = nlohmann::json;

std::string list(const Json& values) {
  std::string out;
  for (const auto& v : values) out += (out.empty() ? "" : ",") + v.dump();
  return "[" + out + "]";
}

// "7", or "7..9" where pushes a dead server never answered may have been applied and lost too.
std::string lost_range(std::int64_t lost, std::int64_t at_most) {
  return at_most > lost ? std::to_string(lost) + ".." + std::to_string(at_most)
                        : std::to_string(lost);
}

std::size_t terminal_width() {
  winsize size{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 100;
}

class EventPrinter {
 public:
  explicit EventPrinter(bool live) : live_(live) {}

  void set_total_steps(std::int64_t total) { progress_.set_total_steps(total); }

  // Clears the progress line, so that what comes next starts on an empty line.
  void clear_progress() {
    if (!drawn_) return;
    std::printf("\r\x1b[2K");
    drawn_ = false;
  }

  void print(const Json& e) {
    const std::string kind = e.value("event", "");
    if (live_) {
      if (kind == "step" || kind == "asp_interval") {
        progress_.observe(e);
        // An evaluation stays on the screen; the progress line is redrawn under it.
        if (e.contains("test_accuracy")) {
          clear_progress();
          std::printf("step %lld: test accuracy %.4f, test loss %.4f\n",
                      static_cast<long long>(e.value("step", 0)), e.value("test_accuracy", 0.0),
                      e.value("test_loss", 0.0));
        }
        std::printf("\r\x1b[2K%s", progress_.render(terminal_width() - 1).c_str());
        drawn_ = true;
        std::fflush(stdout);
        return;
      }
      clear_progress();
      print_line(e, kind);
      if (progress_.has_step()) {
        std::printf("%s", progress_.render(terminal_width() - 1).c_str());
        drawn_ = true;
      }
      std::fflush(stdout);
      return;
    }
    print_line(e, kind);
  }

 private:
  void print_line(const Json& e, const std::string& kind) {
    if (kind == "step") {
      double now = e.value("time", 0.0);
      bool eval = e.contains("test_accuracy");
      // One line a second keeps a fast job readable; evaluations always show.
      if (!eval && now - last_step_print_ < 1.0 && e.value("step", 0) != 1) return;
      last_step_print_ = now;
      std::string workers;
      for (const auto& w : e["workers"]) {
        workers += fmt::format(" {}:{:.0f}ms", w.value("trainer", ""),
                               1000 * w.value("compute_time_s", 0.0));
      }
      std::printf("step %6lld  epoch %lld  loss %.4f  batches %s  step %.1f ms%s\n",
                  static_cast<long long>(e.value("step", 0)),
                  static_cast<long long>(e.value("epoch", 0)), e.value("loss", 0.0),
                  list(e["batches"]).c_str(), 1000 * e.value("step_time_s", 0.0),
                  eval ? fmt::format("  test accuracy {:.4f}", e.value("test_accuracy", 0.0)).c_str()
                       : "");
      if (!workers.empty() && e.value("step", 0) % 50 == 0) {
        std::printf("        compute per worker:%s\n", workers.c_str());
      }
    } else if (kind == "asp_interval") {
      const auto& st = e.contains("staleness") ? e["staleness"] : Json::object();
      std::printf("update %6lld  epoch %lld  loss %.4f  %.1f updates/s  staleness mean %.2f p95 "
                  "%lld max %lld%s\n",
                  static_cast<long long>(e.value("step", 0)),
                  static_cast<long long>(e.value("epoch", 0)), e.value("loss", 0.0),
                  e.value("updates_per_s", 0.0), st.value("mean", 0.0),
                  static_cast<long long>(st.value("p95", 0)),
                  static_cast<long long>(st.value("max", 0)),
                  // An evaluation runs beside training and reports when it is done: say which
                  // parameters it evaluated (a slow one can come hundreds of updates later).
                  e.contains("test_accuracy")
                      ? fmt::format("  test accuracy {:.4f} (of update {})",
                                    e.value("test_accuracy", 0.0),
                                    e.value("eval_version", e.value("step", std::int64_t{0})))
                            .c_str()
                      : "");
    } else if (kind == "server_gone") {
      std::printf("  parameter server %s (shard %d) gone: %s\n", e.value("trainer", "").c_str(),
                  e.value("shard", 0), e.value("reason", "").c_str());
    } else if (kind == "server_recovered") {
      std::printf("  shard %d back (incarnation %lld) from its checkpoint at update %lld; %lld "
                  "updates lost\n",
                  e.value("shard", 0), static_cast<long long>(e.value("incarnation", 0)),
                  static_cast<long long>(e.value("resumed_at", 0)),
                  static_cast<long long>(e.value("updates_lost", 0)));
    } else if (kind == "submitted") {
      std::printf("job %s '%s': policy %s, global batch %d, workers %d..%d\n",
                  e.value("job_id", "").c_str(), e.value("name", "").c_str(),
                  e.value("policy", "").c_str(), e.value("global_batch", 0),
                  e.value("min_workers", 0), e.value("max_workers", 0));
    } else if (kind == "spawn") {
      std::printf("  starting trainer %s on node %s\n", e.value("trainer", "").c_str(),
                  e.value("node", "").c_str());
    } else if (kind == "trainer_ready") {
      std::printf("  trainer %s ready (%.1f s to start)\n", e.value("trainer", "").c_str(),
                  e.value("startup_s", 0.0));
    } else if (kind == "generation") {
      std::printf("generation %lld at step %lld: %s batches %s (%s)\n",
                  static_cast<long long>(e.value("generation", 0)),
                  static_cast<long long>(e.value("step", 0)), list(e["members"]).c_str(),
                  list(e["batches"]).c_str(), e.value("reason", "").c_str());
    } else if (kind == "plan") {
      std::string times;
      for (const auto& t : e["compute_times"]) {
        times += (times.empty() ? "" : ",") + fmt::format("{:.1f}", 1000 * t.get<double>());
      }
      std::printf("plan v%lld at step %lld: batches %s (compute ms at old plan: %s)\n",
                  static_cast<long long>(e.value("version", 0)),
                  static_cast<long long>(e.value("step", 0)), list(e["batches"]).c_str(),
                  times.c_str());
    } else if (kind == "trainer_gone") {
      // Gone because it exited: the trainer_exited lines just before said so, and why.
      if (e.value("trainer", "") == last_exited_ &&
          e.value("reason", "").rfind(last_exited_reason_, 0) == 0) {
        return;
      }
      std::printf("trainer %s gone at step %lld: %s\n", e.value("trainer", "").c_str(),
                  static_cast<long long>(e.value("step", 0)), e.value("reason", "").c_str());
    } else if (kind == "node_held_back") {
      std::printf("node %s gets no trainer for %.1f s: %lld trainer(s) lost there lately\n",
                  e.value("node", "").c_str(), e.value("held_back_s", 0.0),
                  static_cast<long long>(e.value("losses", 0)));
    } else if (kind == "drain") {
      std::printf("draining trainer %s (node %s) at step %lld\n", e.value("trainer", "").c_str(),
                  e.value("node", "").c_str(), static_cast<long long>(e.value("step", 0)));
    } else if (kind == "trainer_exited") {
      // Why a trainer went: its exit and, for a failure, the last lines it wrote to stderr.
      std::string reason = e.value("reason", "");
      if (reason.empty()) reason = fmt::format("exited with code {}", e.value("exit_code", -1));
      std::printf("trainer %s %s\n", e.value("trainer", "").c_str(), reason.c_str());
      last_exited_ = e.value("trainer", "");
      last_exited_reason_ = reason;
      const std::string last_error = e.value("last_error", "");
      if (e.value("exit_code", -1) != 0 && !last_error.empty()) {
        std::size_t start = 0;
        while (start < last_error.size()) {
          auto end = last_error.find('\n', start);
          if (end == std::string::npos) end = last_error.size();
          std::printf("    | %s\n", last_error.substr(start, end - start).c_str());
          start = end + 1;
        }
      }
    } else if (kind == "recovered") {
      std::printf("training again at step %lld, %.2f s after the failure\n",
                  static_cast<long long>(e.value("step", 0)), e.value("recovery_s", 0.0));
    } else if (kind == "finished") {
      std::printf("job %s at step %lld%s%s\n", e.value("status", "").c_str(),
                  static_cast<long long>(e.value("step", 0)),
                  e.value("reason", "").empty() ? "" : ": ", e.value("reason", "").c_str());
    }
    std::fflush(stdout);
  }

  bool live_ = false;
  bool drawn_ = false;
  dashboard::ProgressLine progress_;
  double last_step_print_ = 0;
  std::string last_exited_;  // the trainer of the last trainer_exited event, and its reason
  std::string last_exited_reason_;
};

void print_summary(const Json& s) {
  std::printf("\n== summary: job %s %s ==\n", s.value("job_id", "").c_str(),
              s.value("status", "").c_str());
  // A summary may lack any field (the head writes a short one for a job whose scheduler
  // crashed): const operator[] on a missing key is undefined, so look fields up with field().
  static const Json kNull;
  auto field = [&s](const char* key) -> const Json& {
    auto it = s.find(key);
    return it != s.end() ? *it : kNull;
  };
  if (s.value("mode", "") == "asp") {
    // Asynchronous training: server updates, staleness, and each worker's updates.
    const Json& st = field("staleness");
    std::printf("updates %lld, epochs %lld, wall time %.1f s; staleness mean %.2f p95 %lld max "
                "%lld; dropped stale %lld; updates lost %s\n",
                static_cast<long long>(s.value("updates", 0)),
                static_cast<long long>(s.value("epochs", 0)), s.value("wall_time_s", 0.0),
                st.is_object() ? st.value("mean", 0.0) : 0.0,
                static_cast<long long>(st.is_object() ? st.value("p95", 0) : 0),
                static_cast<long long>(st.is_object() ? st.value("max", 0) : 0),
                static_cast<long long>(s.value("dropped_stale", 0)),
                lost_range(s.value("updates_lost", std::int64_t{0}),
                           s.value("updates_lost_at_most", s.value("updates_lost", std::int64_t{0})))
                    .c_str());
    if (field("final_test_accuracy").is_number() && field("final_test_loss").is_number()) {
      std::printf("test accuracy %.4f, test loss %.4f\n",
                  field("final_test_accuracy").get<double>(),
                  field("final_test_loss").get<double>());
    }
    std::printf("%-22s %-12s %7s %6s %12s %12s\n", "WORKER", "NODE", "UPDATES", "BATCH",
                "SAMPLES/S", "COMPUTE-MS");
    for (const auto& w : field("workers")) {
      std::printf("%-22s %-12s %7lld %6d %12.0f %12.2f\n", w.value("name", "").c_str(),
                  w.value("node", "").c_str(), static_cast<long long>(w.value("updates", 0)),
                  w.value("final_batch", 0), w.value("samples_per_s", 0.0),
                  1000 * w.value("compute_time_s", 0.0));
    }
    if (!s.value("reason", "").empty()) std::printf("reason: %s\n", s.value("reason", "").c_str());
    std::fflush(stdout);
    return;
  }
  std::printf("steps %lld, epochs %lld, wall time %.1f s, generations %lld\n",
              static_cast<long long>(s.value("steps", 0)),
              static_cast<long long>(s.value("epochs", 0)), s.value("wall_time_s", 0.0),
              static_cast<long long>(s.value("generations", 0)));
  if (field("final_test_accuracy").is_number() && field("final_test_loss").is_number()) {
    std::printf("test accuracy %.4f, test loss %.4f\n", field("final_test_accuracy").get<double>(),
                field("final_test_loss").get<double>());
  }
  std::printf("%-18s %-12s %4s %6s %12s %12s\n", "WORKER", "NODE", "RANK", "BATCH", "SAMPLES/S",
              "COMPUTE-MS");
  for (const auto& w : field("workers")) {
    std::printf("%-18s %-12s %4d %6d %12.0f %12.2f\n", w.value("name", "").c_str(),
                w.value("node", "").c_str(), w.value("rank", 0), w.value("final_batch", 0),
                w.value("samples_per_s", 0.0), 1000 * w.value("compute_time_s", 0.0));
  }
  // Speed-up wording: measured speeds and the ideal they imply; a speed-up over
  // uniform batches this run did not measure is printed as an estimate.
  if (field("measured_speeds").is_object()) {
    const auto& m = field("measured_speeds");
    std::printf("measured compute speeds (samples/s):");
    for (const auto& w : m.value("workers", Json::array())) {
      std::printf(" %s %.0f", w.value("name", "").c_str(), w.value("samples_per_s", 0.0));
    }
    std::printf("; ideal speed-up over uniform they imply: %.2fx\n",
                m.value("ideal_speedup_over_uniform", 0.0));
  }
  if (field("speedup_estimate").is_object()) {
    const auto& e = field("speedup_estimate");
    std::printf(
        "speed-up over uniform batches: %.2fx ESTIMATE, not measured (%s): slowest compute per "
        "step %.1f ms vs %.1f ms predicted for uniform\n",
        e.value("speedup_over_uniform", 0.0), e.value("basis", "").c_str(),
        1000 * e.value("planned_compute_s", 0.0), 1000 * e.value("uniform_compute_s", 0.0));
  }
  if (!s.value("reason", "").empty()) std::printf("reason: %s\n", s.value("reason", "").c_str());
  std::fflush(stdout);
}

// Writes the run's report (and its PNGs, as `omnilearn report` does) when its directory is
// readable here, and says where it is (or how to make it on the head's machine).
void print_report_link(const std::string& run_dir, const std::string& job_id) {
  if (run_dir.empty()) return;
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(run_dir) / "events.jsonl", ec)) {
    try {
      print_report(write_report(run_dir, {}, /*png=*/true));
      return;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "omnilearn: no report for job %s: %s\n", job_id.c_str(), e.what());
    }
  }
  std::printf("report: run `omnilearn report %s` where the run directory is\n", run_dir.c_str());
  std::fflush(stdout);
}

}  // namespace

bool want_live_progress(bool json) {
  if (json) return false;
  const char* mode = std::getenv("OMNILEARN_PROGRESS");
  if (mode && std::string(mode) == "plain") return false;
  if (mode && std::string(mode) == "live") return true;
  return ::isatty(STDOUT_FILENO) == 1;
}

int follow_job(runtime::ActorSystem& system, const runtime::ActorAddress& jobs,
               const std::string& job_id, std::chrono::milliseconds head_timeout,
               const FollowOptions& options) {
  EventPrinter printer(options.live_progress && !options.json);
  // A wait between asks; with options.interruptible, the one place a signal ends the command.
  auto pause = [&](std::chrono::milliseconds wait) {
    if (!options.interruptible) {
      std::this_thread::sleep_for(wait);
      return;
    }
    if (runtime::wait_for_shutdown_signal(wait) != 0) {
      printer.clear_progress();
      std::fflush(stdout);
      throw CliError(fmt::format("interrupted; job {} goes on (`omnilearn job stop {}` stops it, "
                                 "`omnilearn job logs {} -f` follows it again)",
                                 job_id, job_id, job_id),
                     kExitInterrupted);
    }
  };
  std::uint64_t since = 0;
  bool answered = options.head_answered;
  auto last_answer = std::chrono::steady_clock::now();
  while (true) {
    auto answer = system.ask(jobs, actors::JobStatusRequest{job_id, since}, head_timeout).get();
    auto status = answer.as<actors::JobStatusReply>();
    if (!status && answer.ok()) {
      // The head answered with an error: the job is unknown (or was forgotten, --max-jobs).
      auto error = runtime::unpack_payload<runtime::ErrorReply>(answer.reply.payload);
      if (error && error->code == "no-such-job") {
        throw CliError(error->message + " (omnilearn status lists the jobs the head knows)", 1);
      }
    }
    if (!status && !answered) {
      throw CliError("cannot read job " + job_id + ": no answer from the head at " + jobs.system +
                         " (" + answer.error + handshake_hint(system) +
                         "); is `omnilearn head` running there?",
                     no_answer_exit_code(system));
    }
    if (!status) {
      // The head may be busy or restarting; give up only after a long silence. No answer is
      // exit code 3, as for any head that cannot be reached: the job's fate is unknown here.
      const auto silent = std::chrono::steady_clock::now() - last_answer;
      if (silent > std::chrono::seconds(30)) {
        throw CliError(
            fmt::format("lost contact with the head at {} while following job {}: no answer for "
                        "{} s (the last ask: {}{}); is `omnilearn head` still running there? A "
                        "head that is back re-attaches with `omnilearn job logs {} -f` (a "
                        "restarted head ends the jobs that were running as failed; its run "
                        "directory keeps what was written)",
                        jobs.system, job_id,
                        std::chrono::duration_cast<std::chrono::seconds>(silent).count(),
                        answer.error, handshake_hint(system), job_id),
            // It answered before, so the credentials are right (a handshake cut short by the
            // head's end is no sign of the contrary): unreachable.
            kExitUnreachable);
      }
      pause(std::chrono::milliseconds(500));
      continue;
    }
    answered = true;
    last_answer = std::chrono::steady_clock::now();
    printer.set_total_steps(status->job.total_steps);
    if (status->dropped > 0) {
      // The head keeps recent events in memory and the rest in events.jsonl; where that file
      // could not be written, what is no longer in memory is gone from the head's answers.
      printer.clear_progress();
      std::fflush(stdout);
      std::fprintf(stderr,
                   "omnilearn: %llu events of job %s are no longer held by the head (its "
                   "events.jsonl could not be written; see the head's log): skipped\n",
                   static_cast<unsigned long long>(status->dropped), job_id.c_str());
    }
    for (const auto& line : status->events) {
      if (options.json) {
        std::printf("%s\n", line.c_str());
        continue;
      }
      auto event = Json::parse(line, nullptr, false);
      if (!event.is_discarded()) printer.print(event);
    }
    std::fflush(stdout);
    since = status->next;
    if (status->finished) {
      auto summary = Json::parse(status->summary_json, nullptr, false);
      if (!summary.is_discarded()) {
        if (options.json) {
          std::printf("%s\n", summary.dump().c_str());
          std::fflush(stdout);
        } else {
          printer.clear_progress();
          print_summary(summary);
          print_report_link(options.run_dir, job_id);
        }
      }
      return status->job.state == "succeeded" ? 0 : 1;
    }
    if (status->events.empty() && !options.follow) return 0;
    // While events flow, only a look for a signal; else a quarter of a second between asks.
    pause(std::chrono::milliseconds(status->events.empty() ? 250 : 0));
  }
}

}  // namespace omnilearn::cli
