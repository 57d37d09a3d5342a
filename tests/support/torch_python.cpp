#include "tests/support/torch_python.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

namespace omnilearn::testing {
namespace {

// `name` looked up in $PATH (run_command execs a path); `name` itself when it holds a '/'.
std::string on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  std::istringstream dirs(std::getenv("PATH") ? std::getenv("PATH") : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::filesystem::path candidate = std::filesystem::path(dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return name;
}

}  // namespace

std::optional<std::string> find_torch_python(std::string* why) {
  std::string python;
  if (const char* env = std::getenv("OMNILEARN_PYTHON"); env && *env) {
    python = on_path(env);
  } else if (std::filesystem::exists("/usr/bin/python3")) {
    python = "/usr/bin/python3";
  } else {
    python = on_path("python3");
  }
  CommandResult probe;
  try {
    probe = run_command({python, "-c", "import torch"}, std::chrono::seconds(60));
  } catch (const std::exception& e) {
    if (why) *why = python + " cannot be started (" + e.what() + ")";
    return std::nullopt;
  }
  if (probe.status.code != 0) {
    if (why) {
      *why = python + " cannot import torch (" + probe.status.to_string() +
             "); install Debian's python3-torch (scripts/install-deps.sh) or point "
             "OMNILEARN_PYTHON at a Python that has PyTorch";
    }
    return std::nullopt;
  }
  return python;
}

CommandResult run_python(const std::string& python, const std::vector<std::string>& args,
                         std::chrono::milliseconds timeout) {
  std::vector<std::string> argv = {python};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, timeout);
}

}  // namespace omnilearn::testing
