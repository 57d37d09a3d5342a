#include "cli/job_client.hpp"

#include <cstdio>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/job_protocol.hpp"
#include "runtime/system_messages.hpp"

namespace omnilearn::cli {
namespace {

using Json = nlohmann::json;

std::string list(const Json& values) {
  std::string out;
  for (const auto& v : values) out += (out.empty() ? "" : ",") + v.dump();
  return "[" + out + "]";
}

class EventPrinter {
 public:
  void print(const Json& e) {
    const std::string kind = e.value("event", "");
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

 private:
  double last_step_print_ = 0;
  std::string last_exited_;  // the trainer of the last trainer_exited event, and its reason
  std::string last_exited_reason_;
};

void print_summary(const Json& s) {
  std::printf("\n== summary: job %s %s ==\n", s.value("job_id", "").c_str(),
              s.value("status", "").c_str());
  std::printf("steps %lld, epochs %lld, wall time %.1f s, generations %lld\n",
              static_cast<long long>(s.value("steps", 0)),
              static_cast<long long>(s.value("epochs", 0)), s.value("wall_time_s", 0.0),
              static_cast<long long>(s.value("generations", 0)));
  // A summary may lack any field (the head writes a short one for a job whose scheduler
  // crashed): const operator[] on a missing key is undefined, so look fields up with field().
  static const Json kNull;
  auto field = [&s](const char* key) -> const Json& {
    auto it = s.find(key);
    return it != s.end() ? *it : kNull;
  };
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
  if (field("speedup_estimate").is_object()) {
    const auto& e = field("speedup_estimate");
    std::printf(
        "speed-up over uniform batches (from measured throughput): %.2fx (ideal %.2fx): "
        "slowest compute per step %.1f ms vs %.1f ms uniform\n",
        e.value("speedup_over_uniform", 0.0), e.value("ideal_speedup", 0.0),
        1000 * e.value("planned_compute_s", 0.0), 1000 * e.value("uniform_compute_s", 0.0));
  }
  if (!s.value("reason", "").empty()) std::printf("reason: %s\n", s.value("reason", "").c_str());
  std::fflush(stdout);
}

}  // namespace

int follow_job(runtime::ActorSystem& system, const runtime::ActorAddress& jobs,
               const std::string& job_id, std::chrono::milliseconds head_timeout,
               const FollowOptions& options) {
  EventPrinter printer;
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
                     "); is `omnilearn head` running there?");
    }
    if (!status) {
      // The head may be busy or restarting; give up only after a long silence.
      if (std::chrono::steady_clock::now() - last_answer > std::chrono::seconds(30)) {
        throw CliError("lost contact with the head while following job " + job_id + " (" +
                       answer.error + ")", 1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      continue;
    }
    answered = true;
    last_answer = std::chrono::steady_clock::now();
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
          print_summary(summary);
        }
      }
      return status->job.state == "succeeded" ? 0 : 1;
    }
    if (status->events.empty()) {
      if (!options.follow) return 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  }
}

}  // namespace omnilearn::cli
