#pragma once
// The Python interpreter with PyTorch that the "bring your own model" tests drive: it writes
// the scripted models and tensor files a user would, and loads checkpoints back.
//
// Threads: plain functions; any thread.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/child_process.hpp"

namespace omnilearn::testing {

// $OMNILEARN_PYTHON if set; else Debian's /usr/bin/python3 (where python3-torch installs; a
// python3 earlier on PATH, such as a pyenv shim, usually lacks torch); else `python3` on PATH.
// nullopt, with *why set, when that interpreter cannot import torch: the caller skips with it.
std::optional<std::string> find_torch_python(std::string* why);

// Runs `python args...` (bounded by `timeout`).
CommandResult run_python(const std::string& python, const std::vector<std::string>& args,
                         std::chrono::milliseconds timeout = std::chrono::seconds(120));

}  // namespace omnilearn::testing
