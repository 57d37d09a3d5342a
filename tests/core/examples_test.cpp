// examples/cpp as a user builds them: install this build into a temporary prefix, configure
// examples/cpp on its own (find_package(OmniLearn) only), build it, and run both examples
// against a real head and two workers that load the example libraries.

#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "tests/support/cluster.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

CommandResult run(std::vector<std::string> argv, std::chrono::milliseconds timeout) {
  return run_command(std::move(argv), timeout);
}

TEST(Examples, BuildOutOfTreeAgainstTheInstalledPackageAndRun) {
  fs::path work = fs::path(test_cluster_file()).parent_path();
  fs::path prefix = work / "prefix";
  fs::path build = work / "examples-build";
  auto install = run({OL_CMAKE, "--install", OL_BUILD_DIR, "--prefix", prefix.string()}, 120s);
  ASSERT_EQ(install.status.code, 0) << install.out << install.err;
  ASSERT_TRUE(fs::exists(prefix / "include/omnilearn/omnilearn.hpp"));
  EXPECT_FALSE(fs::exists(prefix / "include/runtime")) << "internal headers must not be installed";

  std::vector<std::string> configure_argv = {
      OL_CMAKE, "-S", std::string(OL_SOURCE_DIR) + "/examples/cpp", "-B", build.string(), "-G",
      "Ninja", "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DCMAKE_PREFIX_PATH=" + prefix.string()};
#ifdef OL_SANITIZE
  // This tree is built with sanitizers, and so is the library installed from it: the examples
  // are built the same way (an uninstrumented program cannot load an instrumented library), and
  // run under the sanitizers with everything else.
  const std::string sanitize = std::string("-fsanitize=") + OL_SANITIZE;
  configure_argv.push_back("-DCMAKE_CXX_FLAGS=" + sanitize + " -fno-omit-frame-pointer");
  configure_argv.push_back("-DCMAKE_EXE_LINKER_FLAGS=" + sanitize);
  configure_argv.push_back("-DCMAKE_SHARED_LINKER_FLAGS=" + sanitize);
#endif
  auto configure = run(configure_argv, 120s);
  ASSERT_EQ(configure.status.code, 0) << configure.out << configure.err;
  auto compile = run({OL_CMAKE, "--build", build.string(), "-j1"}, 900s);
  ASSERT_EQ(compile.status.code, 0) << compile.out << compile.err;

  TestCluster cluster;
  for (std::string name : {"ex0", "ex1"}) {
    cluster.start_worker(name, {"--cpus", "2", "--load", (build / "libsweep_tasks.so").string(),
                                "--load", (build / "libreplay_buffer.so").string()});
    ASSERT_TRUE(cluster.wait_worker_joined(name, 20s)) << cluster.worker(name).describe();
  }
  std::vector<std::string> connect = {"--cluster-file", test_cluster_file().string(), "--address",
                                      cluster.address()};
  auto with = [&](std::vector<std::string> argv) {
    argv.insert(argv.end(), connect.begin(), connect.end());
    return argv;
  };
  auto sweep = run(with({(build / "sweep").string()}), 300s);
  ASSERT_EQ(sweep.status.code, 0) << sweep.out << sweep.err;
  std::smatch best;
  std::string out = sweep.out;
  ASSERT_TRUE(std::regex_search(out, best, std::regex(R"(best: .* accuracy=([0-9.]+) \(30 trials\))")))
      << sweep.out;
  EXPECT_GT(std::stod(best[1]), 0.85) << "a logistic regression learns the linear rule";

  auto first = run(with({(build / "replay").string(), "create", "shared", "100"}), 60s);
  ASSERT_EQ(first.status.code, 0) << first.out << first.err;
  EXPECT_NE(first.out.find("size=100 total=100"), std::string::npos) << first.out;
  auto second = run(with({(build / "replay").string(), "add", "shared", "50"}), 60s);
  ASSERT_EQ(second.status.code, 0) << second.out << second.err;
  EXPECT_NE(second.out.find("size=150 total=150 sampled=4"), std::string::npos) << second.out;
}

}  // namespace
}  // namespace omnilearn::testing
