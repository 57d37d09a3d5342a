#pragma once
// Client side of jobs, shared by `submit`, `run`, `stop`, `drain`, `node set`: bounded asks to
// the head, following a job's events, and the final summary.

#include <chrono>
#include <string>

#include "cli/command.hpp"
#include "cli/common.hpp"
#include "runtime/actor_system.hpp"

namespace omnilearn::cli {

// Asks `to` and decodes the reply as Reply; CliError naming the head and the cause otherwise.
template <class Reply, class Request>
Reply ask_or_fail(runtime::ActorSystem& system, const runtime::ActorAddress& to,
                  const Request& request, std::chrono::milliseconds timeout,
                  const std::string& what) {
  auto answer = system.ask(to, request, timeout).get();
  if (auto reply = answer.template as<Reply>()) return *reply;
  std::string why = answer.error.empty() ? "unexpected reply" : answer.error;
  throw CliError("cannot " + what + ": no answer from the head at " + to.system + " (" + why +
                     handshake_hint(system) + "); is `omnilearn head` running there?",
                 no_answer_exit_code(system));
}

// How follow_job shows a job.
struct FollowOptions {
  bool follow = true;  // until the job ends; false: the events there are now, then return
  bool json = false;   // events.jsonl's lines as they are, then summary.json on one line
  // The head answered this client already (submit): a silent head is then waited for (30 s),
  // not at once an unreachable one.
  bool head_answered = true;
  // The job's run directory as the head named it: once the job has ended, its report is
  // written there (report.html, and a PNG per chart when Chromium is installed: write_report)
  // and named under the summary, when this machine can read it.
  std::string run_dir;
  // Redraw one progress line for the steps instead of printing step lines: on a terminal
  // (stdout a TTY, not --json) unless $OMNILEARN_PROGRESS=plain.
  bool live_progress = false;
  // SIGINT and SIGTERM end the following with exit code 130 (the job goes on): the caller
  // blocked them (runtime::block_shutdown_signals) before any thread started.
  bool interruptible = false;
};

// Whether follow_job should redraw a progress line: stdout is a terminal, no --json, and
// $OMNILEARN_PROGRESS is not "plain" ("live" forces it).
bool want_live_progress(bool json);

// Prints the job's events from its first (one line each, steps thinned to about one a second,
// or one redrawn progress line with options.live_progress) and, once it has finished, its
// summary and where its report is. Returns 0 if the job succeeded or, not following,
// has not finished yet; 1 if it failed or was stopped. Throws CliError: no such job (exit 1),
// no answer from the head at all or contact lost while following (3), interrupted (130).
int follow_job(runtime::ActorSystem& system, const runtime::ActorAddress& jobs,
               const std::string& job_id, std::chrono::milliseconds head_timeout,
               const FollowOptions& options = {});

}  // namespace omnilearn::cli
