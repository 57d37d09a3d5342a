// omnilearn: one binary for the head, the workers and the clients of a cluster.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "cli/command.hpp"
#include "cli/common.hpp"

int main(int argc, char** argv) {
  CLI::App app{"OmniLearn: elastic, heterogeneity-aware training on an actor runtime"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "omnilearn 0.1.0");
  // Logs always go to stderr, so stdout stays machine-readable (status --json, submit).
  omnilearn::cli::setup_logging();
  int exit_code = 0;
  omnilearn::cli::add_head_command(app, exit_code);
  omnilearn::cli::add_worker_command(app, exit_code);
  omnilearn::cli::add_status_command(app, exit_code);
  omnilearn::cli::add_job_commands(app, exit_code);
  omnilearn::cli::add_run_command(app, exit_code);
  omnilearn::cli::add_simulate_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "omnilearn: error: %s (see 'omnilearn --help')\n", e.what());
    return 2;
  } catch (const omnilearn::cli::CliError& e) {
    std::fprintf(stderr, "omnilearn: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "omnilearn: error: %s\n", e.what());
    return 1;
  }
  return exit_code;
}
