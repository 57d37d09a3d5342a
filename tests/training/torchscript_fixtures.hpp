#pragma once
// The files of the "bring your own model" tests, written by tests/training/
// torchscript_fixtures.py with the Python a user would use (python3-torch), once per test
// program, into a temporary directory removed at exit.

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "tests/support/torch_python.hpp"

namespace omnilearn::training::testing {

class TorchScriptFixtures {
 public:
  // The directory holding the files, or nullopt with the reason to skip (no Python with torch;
  // the reason says how to install it). A script that fails is a test failure, not a skip.
  static const std::optional<std::filesystem::path>& dir(std::string* skip_reason) {
    static TorchScriptFixtures fixtures;
    if (skip_reason) *skip_reason = fixtures.skip_reason_;
    return fixtures.dir_;
  }
  ~TorchScriptFixtures() {
    std::error_code ec;
    if (dir_) std::filesystem::remove_all(*dir_, ec);
  }

 private:
  TorchScriptFixtures() {
    const auto python = omnilearn::testing::find_torch_python(&skip_reason_);
    if (!python) return;
    const char* source = std::getenv("OMNILEARN_SOURCE_DIR");
    if (!source) {
      ADD_FAILURE() << "OMNILEARN_SOURCE_DIR is unset: run this test through ctest";
      skip_reason_ = "OMNILEARN_SOURCE_DIR is unset";
      return;
    }
    std::string tmpl = (std::filesystem::temp_directory_path() / "ol_torchscript_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) {
      ADD_FAILURE() << "mkdtemp failed";
      return;
    }
    const auto result = omnilearn::testing::run_python(
        *python,
        {(std::filesystem::path(source) / "tests/training/torchscript_fixtures.py").string(),
         tmpl});
    if (result.status.code != 0) {
      ADD_FAILURE() << "torchscript_fixtures.py failed (" << result.status.to_string() << "):\n"
                    << result.out << result.err;
      skip_reason_ = "torchscript_fixtures.py failed";
      std::filesystem::remove_all(tmpl);
      return;
    }
    dir_ = tmpl;
  }

  std::optional<std::filesystem::path> dir_;
  std::string skip_reason_;
};

}  // namespace omnilearn::training::testing
