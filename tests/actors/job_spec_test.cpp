// The job file parser on inputs the fuzzer and reviews found: numbers that do not fit the field
// they are meant for are located errors, never silent truncation or undefined behaviour.

#include <gtest/gtest.h>

#include <string>

#include "actors/job_spec.hpp"

namespace omnilearn::actors {
namespace {

const std::string kBase = R"([job]
name = "t"
[model]
kind = "mlp"
hidden = [8]
[data]
dataset = "synthetic"
[train]
global_batch = 64
steps = 10
)";

std::string error_of(const std::string& text) {
  try {
    parse_job_spec(text, "job.toml");
  } catch (const JobSpecError& e) {
    return e.what();
  }
  return "";
}

TEST(JobSpecNumbers, AValidJobParses) {
  auto spec = parse_job_spec(kBase, "job.toml");
  EXPECT_EQ(spec.train.global_batch, 64);
  EXPECT_EQ(spec.train.steps, 10);
}

TEST(JobSpecNumbers, AnIntegerTooLargeForItsFieldIsALocatedError) {
  auto error = error_of(kBase + "[controller]\nmin_batch = 4294967297\n");
  EXPECT_NE(error.find("job.toml:"), std::string::npos) << error;
  EXPECT_NE(error.find("min_batch"), std::string::npos) << error;
}

TEST(JobSpecNumbers, AnIntegerBeyondTwoToThe53IsARangeErrorForAFloatField) {
  auto text = kBase;
  text.insert(text.find("steps = 10"), "lr = 9007199254740993\n");
  auto error = error_of(text);
  EXPECT_NE(error.find("lr"), std::string::npos) << error;
}

}  // namespace
}  // namespace omnilearn::actors
