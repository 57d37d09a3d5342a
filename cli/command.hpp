#pragma once
// How a subcommand of `omnilearn` plugs into the one binary: each command file defines one
// add_*_command function that registers its flags and a callback on the shared CLI11 app.
// Errors are thrown as CliError: main prints the message on one line and exits with its code.
// Exit codes, the same for every command: 0 success; 1 the head answered no (refused a job, no
// such job or node) or the job followed failed or was stopped; 2 bad input (flags, job file,
// address, cluster file, a worker name another machine holds) or an unreachable head.

#include <stdexcept>
#include <string>

namespace CLI {
class App;
}

namespace omnilearn::cli {

class CliError : public std::runtime_error {
 public:
  explicit CliError(const std::string& message, int exit_code = 2)
      : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// Each callback stores the process exit code in `exit_code` (0 on success).
void add_head_command(CLI::App& app, int& exit_code);
void add_worker_command(CLI::App& app, int& exit_code);
void add_status_command(CLI::App& app, int& exit_code);
void add_simulate_command(CLI::App& app, int& exit_code);
// submit, logs, stop, drain, node set
void add_job_commands(CLI::App& app, int& exit_code);
void add_run_command(CLI::App& app, int& exit_code);
// report RUN_DIR [-o FILE]
void add_report_command(CLI::App& app, int& exit_code);
void add_dashboard_token_command(CLI::App& app, int& exit_code);

// Reads a job file and validates it; CliError with file:line:column otherwise.
std::string read_valid_job_file(const std::string& path);

}  // namespace omnilearn::cli
