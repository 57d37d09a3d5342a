// The real `omnilearn simulate` binary: JSON for good input, one line and exit code 2 for bad.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <string>

namespace {

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `omnilearn <args>` from $OMNILEARN_BIN through the shell, capturing both streams in
// files of a fresh temporary directory (removed afterwards).
Result run_omnilearn(const std::string& args) {
  const char* bin = std::getenv("OMNILEARN_BIN");
  if (bin == nullptr) {
    ADD_FAILURE() << "OMNILEARN_BIN is not set (run through ctest)";
    return {};
  }
  char dir_template[] = "/tmp/omnilearn-simulate-test-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) {
    ADD_FAILURE() << "mkdtemp failed";
    return {};
  }
  const std::string out_path = std::string(dir) + "/out", err_path = std::string(dir) + "/err";
  const std::string command =
      "'" + std::string(bin) + "/omnilearn' " + args + " >'" + out_path + "' 2>'" + err_path + "'";
  const int status = std::system(command.c_str());
  Result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  std::remove(out_path.c_str());
  std::remove(err_path.c_str());
  rmdir(dir);
  return r;
}

TEST(SimulateCli, JsonRoundsHaveTheDocumentedFields) {
  const Result r = run_omnilearn(
      "simulate --speeds 1,1,2,4 --global-batch 256 --policy proportional --rounds 12 "
      "--deadband 0.05 --min-batch 8 --max-batch 1024 --noise 0.05 --overhead-ms 2 "
      "--events 5:speed:3=0.5,8:leave:1,10:join:2.0 --seed 7 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.at("rounds").size(), 12u);
  int index = 0;
  for (const auto& round : j.at("rounds")) {
    EXPECT_EQ(round.at("round").get<int>(), index++);
    const auto batches = round.at("batches").get<std::vector<int>>();
    EXPECT_EQ(std::accumulate(batches.begin(), batches.end(), 0), 256);
    for (int b : batches) {
      EXPECT_GE(b, 8);
      EXPECT_LE(b, 1024);
    }
    EXPECT_EQ(round.at("times").size(), batches.size());
    const double step = round.at("step_time").get<double>();
    const double ideal = round.at("ideal_step_time").get<double>();
    EXPECT_NEAR(round.at("efficiency").get<double>(), ideal / step, 1e-9);
    EXPECT_GT(step, 0.0);
    EXPECT_LE(ideal, step / 0.95 + 1e-9);  // noise is +-5%: no step is faster than 0.95 x plan
  }
  EXPECT_EQ(j["rounds"][8]["batches"].size(), 3u);   // worker 1 left
  EXPECT_EQ(j["rounds"][10]["batches"].size(), 4u);  // a worker joined
  EXPECT_GE(j["rounds"][3]["plan_efficiency"].get<double>(), 0.9);
}

TEST(SimulateCli, TableIsTheDefault) {
  const Result r = run_omnilearn("simulate --speeds 1,3 --global-batch 64 --rounds 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("round"), std::string::npos);
  EXPECT_NE(r.out.find("16 48"), std::string::npos) << r.out;  // batches 1:3 after one round
}

TEST(SimulateCli, BadInputIsOneLineOnStderrAndExitCode2) {
  for (const char* args :
       {"simulate --speeds 1,0,2", "simulate --speeds 1,-3",
        "simulate --speeds 1,1 --global-batch 8 --min-batch 8",
        "simulate --speeds 1,1 --events 5:jump:1", "simulate --speeds 1,1 --events 3:leave:7",
        "simulate --speeds 1,1 --policy fastest", "simulate --speeds 1,abc",
        "simulate --speeds 1,,2", "simulate --speeds 1,nan",
        "simulate --global-batch 64"}) {
    const Result r = run_omnilearn(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << args << "\n" << r.out;
    ASSERT_FALSE(r.err.empty()) << args;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << args << ": more than one line:\n" << r.err;
    EXPECT_EQ(r.err.rfind("omnilearn: error: ", 0), 0u) << r.err;
  }
}

}  // namespace
