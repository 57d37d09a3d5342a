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
                 handshake_hint(system) + "); is `omnilearn head` running there?");
}

// Prints the job's events as they come until it finishes; returns 0 if it succeeded.
// `quiet_steps`: print every step (false) or a step line every few seconds (true).
int follow_job(runtime::ActorSystem& system, const runtime::ActorAddress& jobs,
               const std::string& job_id, std::chrono::milliseconds head_timeout);

}  // namespace omnilearn::cli
