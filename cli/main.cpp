// omnilearn: one binary for the head, the workers and the clients of a cluster.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include "cli/command.hpp"
#include "cli/common.hpp"

namespace {

// The word that names no command, with the commands before it ("node frob"), or nullopt.
// CLI11 reports an unknown command as a missing one ("A subcommand is required") without
// naming the word; only the levels that require a command are checked, and an option ends the
// check (CLI11 judges options itself).
std::optional<std::string> unknown_command(const CLI::App& app, int argc, char** argv) {
  const CLI::App* current = &app;
  std::string path;
  for (int i = 1; i < argc && current->get_require_subcommand_min() > 0; ++i) {
    std::string word = argv[i];
    if (word.empty() || word.front() == '-') return std::nullopt;
    path += (path.empty() ? "" : " ") + word;
    try {
      current = current->get_subcommand(word);
    } catch (const CLI::OptionNotFound&) {
      return path;
    }
  }
  return std::nullopt;
}

// The commands named on the command line before the first option or other word ("job submit"),
// for pointing a parse error at that command's help.
std::string command_path(const CLI::App& app, int argc, char** argv) {
  const CLI::App* current = &app;
  std::string path;
  for (int i = 1; i < argc; ++i) {
    std::string word = argv[i];
    if (word.empty() || word.front() == '-') break;
    try {
      current = current->get_subcommand(word);
    } catch (const CLI::OptionNotFound&) {
      break;
    }
    path += " " + word;
  }
  return path;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"OmniLearn: elastic, heterogeneity-aware training on an actor runtime"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "omnilearn " OMNILEARN_VERSION);
  app.footer(
      "Example: omnilearn run examples/fashion_mnist_mlp.toml --local 4 --slowdowns "
      "1,1,2,4\nExit codes: 0 success, 1 the job or request failed, 2 usage or bad "
      "input, 3 the head or a worker could not be reached, 130 interrupted");
  // Logs always go to stderr, so stdout stays machine-readable (status --json, submit).
  try {
    omnilearn::cli::setup_logging();
  } catch (const omnilearn::cli::CliError& e) {
    std::fprintf(stderr, "omnilearn: error: %s\n", e.what());
    return e.exit_code();
  }
  int exit_code = 0;
  omnilearn::cli::add_head_command(app, exit_code);
  omnilearn::cli::add_worker_command(app, exit_code);
  omnilearn::cli::add_job_commands(app, exit_code);
  omnilearn::cli::add_status_command(app, exit_code);
  omnilearn::cli::add_run_command(app, exit_code);
  omnilearn::cli::add_simulate_command(app, exit_code);
  omnilearn::cli::add_report_command(app, exit_code);
  omnilearn::cli::add_dashboard_command(app, exit_code);
  omnilearn::cli::add_dashboard_token_command(app, exit_code);
  if (auto word = unknown_command(app, argc, argv)) {
    const auto space = word->rfind(' ');
    const std::string parent = space == std::string::npos ? "" : " " + word->substr(0, space);
    std::fprintf(stderr, "omnilearn: error: unknown command '%s'; see 'omnilearn%s --help'\n",
                 word->c_str(), parent.c_str());
    return omnilearn::cli::kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "omnilearn: error: %s (see 'omnilearn%s --help')\n", e.what(),
                 command_path(app, argc, argv).c_str());
    return omnilearn::cli::kExitUsage;
  } catch (const omnilearn::cli::CliError& e) {
    std::fprintf(stderr, "omnilearn: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "omnilearn: error: %s\n", e.what());
    return omnilearn::cli::kExitFailed;
  }
  return exit_code;
}
