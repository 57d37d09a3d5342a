// User errors get one line on stderr and exit code 2, within a bounded wait — never a hang or a
// stack trace; a head that does not answer, one line and exit code 3; a request the head answers
// with no (no such job or node) gets one line and exit code 1; --json answers are one JSON
// object on stdout.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "tests/support/cluster.hpp"
#include "tests/support/job_run.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;


std::size_t count_lines(const std::string& text) {
  std::size_t lines = 0;
  for (char c : text) lines += c == '\n';
  if (!text.empty() && text.back() != '\n') ++lines;
  return lines;
}

// Exit 2, nothing on stdout, exactly one "omnilearn: error: ..." line on stderr containing
// `needle`.
void expect_usage_error(const CommandResult& result, const std::string& needle) {
  EXPECT_FALSE(result.timed_out) << "hung";
  EXPECT_TRUE(result.status.exited()) << result.status.to_string();
  EXPECT_EQ(result.status.code, 2) << result.err;
  EXPECT_EQ(count_lines(result.err), 1u) << "stderr:\n" << result.err;
  EXPECT_EQ(result.err.rfind("omnilearn: error: ", 0), 0u) << result.err;
  EXPECT_NE(result.err.find(needle), std::string::npos) << result.err;
  EXPECT_EQ(result.err.find("terminate called"), std::string::npos) << result.err;
}

// Exit 3 (the head could not be reached), nothing on stdout, exactly one "omnilearn: error: ..."
// line on stderr containing `needle`.
void expect_unreachable(const CommandResult& result, const std::string& needle) {
  EXPECT_FALSE(result.timed_out) << "hung";
  EXPECT_TRUE(result.status.exited()) << result.status.to_string();
  EXPECT_EQ(result.status.code, 3) << result.err;
  EXPECT_EQ(count_lines(result.err), 1u) << "stderr:\n" << result.err;
  EXPECT_EQ(result.err.rfind("omnilearn: error: ", 0), 0u) << result.err;
  EXPECT_NE(result.err.find(needle), std::string::npos) << result.err;
  EXPECT_TRUE(result.out.empty()) << result.out;
}

// No address anywhere: not in the environment, not in the (otherwise valid) cluster file.
ProcessOptions without_address_env() {
  ProcessOptions options;
  options.env = {"OMNILEARN_ADDRESS=", "OMNILEARN_CLUSTER_FILE=" +
                                           extra_cluster_file("no-address.toml", "", true).string()};
  return options;
}

TEST(CliErrors, StatusAgainstAnUnreachableHeadExits3WithinItsTimeout) {
  auto port = unused_port();
  ASSERT_NE(port, 0);
  auto address = "127.0.0.1:" + std::to_string(port);
  auto quick = run_omnilearn({"status", "--address", address, "--timeout-ms", "300"}, 20s);
  expect_unreachable(quick, "cannot reach the head at " + address);
  EXPECT_LT(quick.elapsed, 300ms + 3s);
  // The default wait is bounded too (3 s).
  auto by_default = run_omnilearn({"status", "--address", address, "--json"}, 20s);
  expect_unreachable(by_default, "cannot reach the head");
  EXPECT_GE(by_default.elapsed, 2900ms);
  EXPECT_LT(by_default.elapsed, 3s + 3s);
  EXPECT_TRUE(by_default.out.empty()) << "no half-written JSON: " << by_default.out;
}

TEST(CliErrors, BadAddressesAreRejectedWithoutWaiting) {
  for (const std::string bad : {"nonsense", "127.0.0.1", "127.0.0.1:notaport", "127.0.0.1:70000",
                                "bad host:7070", ":7070"}) {
    auto result = run_omnilearn({"status", "--address", bad}, 20s);
    expect_usage_error(result, "bad address");
    EXPECT_LT(result.elapsed, 2s) << bad;
  }
  expect_usage_error(run_omnilearn({"status", "--address", "127.0.0.1:0"}, 20s), "port 0");
  expect_usage_error(run_omnilearn({"worker", "--address", "nonsense", "--name", "w"}, 20s),
                     "bad address");
}

TEST(CliErrors, MissingAddressNamesBothWaysToGiveIt) {
  auto result = run_omnilearn({"status"}, 20s, without_address_env());
  expect_usage_error(result, "--address");
  EXPECT_NE(result.err.find("OMNILEARN_ADDRESS"), std::string::npos) << result.err;
  expect_usage_error(run_omnilearn({"worker"}, 20s, without_address_env()), "OMNILEARN_ADDRESS");
}

TEST(CliErrors, AddressFromTheEnvironment) {
  TestCluster cluster;
  ProcessOptions options;
  options.env = {"OMNILEARN_ADDRESS=" + cluster.address()};
  auto result = run_omnilearn({"status", "--json"}, 20s, options);
  EXPECT_EQ(result.status.code, 0) << result.err;
  auto json = nlohmann::json::parse(result.out, nullptr, false);
  ASSERT_FALSE(json.is_discarded()) << result.out;
  EXPECT_TRUE(json["nodes"].is_array());

  options.env = {"OMNILEARN_ADDRESS=not-an-address"};
  expect_usage_error(run_omnilearn({"status"}, 20s, options), "bad address");
}

TEST(CliErrors, UnknownFlagsAndCommandsExit2WithOneLine) {
  expect_usage_error(run_omnilearn({"status", "--bogus"}, 20s), "--bogus");
  expect_usage_error(run_omnilearn({"head", "--no-such-flag"}, 20s), "--no-such-flag");
  expect_usage_error(run_omnilearn({"worker", "--address", "127.0.0.1:1", "--nope"}, 20s),
                     "--nope");
  // An unknown command is named as such, at any level that needs one.
  expect_usage_error(run_omnilearn({"frobnicate"}, 20s),
                     "unknown command 'frobnicate'; see 'omnilearn --help'");
  expect_usage_error(run_omnilearn({"node", "frob", "w1"}, 20s),
                     "unknown command 'node frob'; see 'omnilearn node --help'");
  // A parse error points to the help of the command it is about.
  expect_usage_error(run_omnilearn({"status", "--bogus"}, 20s), "see 'omnilearn status --help'");
  expect_usage_error(run_omnilearn({"job", "submit", "--bogus"}, 20s),
                     "see 'omnilearn job submit --help'");
  expect_usage_error(run_omnilearn({"job", "logs"}, 20s), "see 'omnilearn job logs --help'");
  expect_usage_error(run_omnilearn({}, 20s), "subcommand");
  expect_usage_error(run_omnilearn({"head", "--port", "99999"}, 20s), "--port");
  expect_usage_error(run_omnilearn({"head", "--heartbeat-interval-ms", "abc"}, 20s),
                     "--heartbeat-interval-ms");
}

// Numeric flags take finite numbers only, and say what is wrong in words: not a range up to
// DBL_MAX, not "not in range" for a word; a list with an empty item is refused, not shortened.
TEST(CliErrors, NumericFlagsRefuseNanEmptyItemsAndWordsInPlainWords) {
  const std::string job = "job.toml";  // never read: flags are checked first
  expect_usage_error(
      run_omnilearn({"status", "--address", "127.0.0.1:1", "--timeout-ms", "0"}, 20s),
      "--timeout-ms: must be greater than 0 (got 0)");
  expect_usage_error(run_omnilearn({"worker", "--cpus", "nan"}, 20s),
                     "--cpus: 'nan' is not a number");
  expect_usage_error(run_omnilearn({"worker", "--slowdown", "inf"}, 20s),
                     "--slowdown: 'inf' is not a number");
  expect_usage_error(run_omnilearn({"worker", "--join-timeout-s", "-1"}, 20s),
                     "--join-timeout-s: must be at least 0 (got -1)");
  expect_usage_error(run_omnilearn({"node", "set", "w1", "--slowdown", "nan"}, 20s),
                     "--slowdown: 'nan' is not a number");
  expect_usage_error(run_omnilearn({"node", "set", "w1", "--cpu-quota", "5000"}, 20s),
                     "--cpu-quota: must be between 0 and 4096 (got 5000)");
  expect_usage_error(run_omnilearn({"run", job, "--local", "3", "--slowdown", "1,,3"}, 20s),
                     "--slowdown: item 2 of '1,,3': an empty value");
  expect_usage_error(run_omnilearn({"run", job, "--local", "2", "--slowdown", "1,abc"}, 20s),
                     "--slowdown: item 2 of '1,abc': 'abc' is not a number");
  expect_usage_error(run_omnilearn({"run", job, "--local", "2", "--slowdown", "0.5"}, 20s),
                     "--slowdown: must be between 1 and 1000 (got 0.5)");
  expect_usage_error(run_omnilearn({"run", job, "--local", "2", "--cpu-quota", "0.5,-1"}, 20s),
                     "--cpu-quota: item 2 of '0.5,-1': must be greater than 0 (got -1)");
  // The plural spellings of run's lists, named as typed.
  expect_usage_error(run_omnilearn({"run", job, "--local", "2", "--slowdowns", "1,abc"}, 20s),
                     "--slowdowns: item 2 of '1,abc': 'abc' is not a number");
  expect_usage_error(run_omnilearn({"run", job, "--local", "2", "--cpu-quotas", "0"}, 20s),
                     "--cpu-quotas: must be greater than 0 (got 0)");
  const auto huge = run_omnilearn({"head", "--max-jobs", "0"}, 20s);
  expect_usage_error(huge, "--max-jobs: must be greater than 0 (got 0)");
  EXPECT_LT(huge.err.size(), 200u) << "no range printed to DBL_MAX: " << huge.err;
}

TEST(CliErrors, VersionIsTheBuildsProjectVersion) {
  const char* source = std::getenv("OMNILEARN_SOURCE_DIR");
  ASSERT_TRUE(source) << "run through ctest (it sets OMNILEARN_SOURCE_DIR)";
  std::ifstream cmake(std::string(source) + "/CMakeLists.txt");
  std::stringstream text;
  text << cmake.rdbuf();
  std::smatch match;
  std::string content = text.str();
  ASSERT_TRUE(std::regex_search(content, match, std::regex(R"(project\(OmniLearn VERSION ([0-9.]+))")));
  auto result = run_omnilearn({"--version"}, 20s);
  EXPECT_EQ(result.status.code, 0) << result.err;
  EXPECT_EQ(result.out, "omnilearn " + match[1].str() + "\n");
}

// Exit 1, and exactly one "omnilearn: error: ..." line on stderr containing `needle`.
void expect_refusal(const CommandResult& result, const std::string& needle) {
  EXPECT_FALSE(result.timed_out) << "hung";
  EXPECT_EQ(result.status.code, 1) << result.status.to_string() << "\n" << result.err;
  EXPECT_EQ(count_lines(result.err), 1u) << "stderr:\n" << result.err;
  EXPECT_EQ(result.err.rfind("omnilearn: error: ", 0), 0u) << result.err;
  EXPECT_NE(result.err.find(needle), std::string::npos) << result.err;
}

nlohmann::json one_json_line(const CommandResult& result) {
  EXPECT_EQ(count_lines(result.out), 1u) << result.out;
  auto json = nlohmann::json::parse(result.out, nullptr, false);
  EXPECT_TRUE(json.is_object()) << result.out;
  return json;
}

TEST(CliErrors, ExitCodesAndJsonOfSubmitLogsStopAndDrain) {
  TestCluster cluster;  // no workers: a submitted job stays pending until it is stopped
  ScratchDir dir("cli-json");
  auto job = dir.write("job.toml", synthetic_elastic_job("cli-json", 10, 1)).string();
  const auto& address = cluster.address();

  auto submitted = run_omnilearn({"submit", job, "--address", address, "--json", "--run-dir",
                                  (dir.path() / "run").string()},
                                 20s);
  ASSERT_EQ(submitted.status.code, 0) << submitted.err;
  auto ids = one_json_line(submitted);
  ASSERT_TRUE(ids.contains("job_id") && ids.contains("run_dir")) << submitted.out;
  const std::string job_id = ids["job_id"];
  EXPECT_EQ(ids["run_dir"], (dir.path() / "run").string());

  // logs of a job that has not finished: its events so far, exit 0.
  auto pending = run_omnilearn({"logs", job_id, "--address", address}, 20s);
  EXPECT_EQ(pending.status.code, 0) << pending.err;
  EXPECT_NE(pending.out.find("job " + job_id + " 'cli-json'"), std::string::npos) << pending.out;

  auto stopped = run_omnilearn({"stop", job_id, "--address", address, "--json"}, 20s);
  EXPECT_EQ(stopped.status.code, 0) << stopped.err;
  EXPECT_EQ(one_json_line(stopped).value("ok", false), true) << stopped.out;
  auto again = run_omnilearn({"stop", job_id, "--address", address}, 20s);
  EXPECT_EQ(again.status.code, 0) << again.err;
  EXPECT_NE(again.out.find("already finished"), std::string::npos) << again.out;

  // A stopped job did not succeed: logs of it exit 1 (once it has finished).
  CommandResult logs;
  ASSERT_TRUE(wait_until(
      [&] {
        logs = run_omnilearn({"logs", job_id, "--address", address, "--json"}, 20s);
        return logs.out.find("\"status\":\"stopped\"") != std::string::npos;
      },
      20s, 100ms))
      << logs.out << logs.err;
  EXPECT_EQ(logs.status.code, 1) << logs.err;
  std::istringstream lines(logs.out);
  std::vector<nlohmann::json> events;
  for (std::string line; std::getline(lines, line);) {
    events.push_back(nlohmann::json::parse(line, nullptr, false));
    EXPECT_TRUE(events.back().is_object()) << "every line is JSON: " << line;
  }
  ASSERT_GE(events.size(), 3u) << logs.out;
  EXPECT_EQ(events.front().value("event", ""), "submitted");
  EXPECT_EQ(events.back().value("status", ""), "stopped") << "the summary comes last";
  EXPECT_EQ(events.back().value("job_id", ""), job_id);
  auto followed = run_omnilearn({"logs", job_id, "--address", address, "--follow"}, 20s);
  EXPECT_EQ(followed.status.code, 1) << followed.err;
  EXPECT_NE(followed.out.find("== summary: job " + job_id + " stopped"), std::string::npos)
      << followed.out;

  // The head says no: exit 1, one line (and with --json, the answer on stdout too).
  expect_refusal(run_omnilearn({"stop", "nosuchjob", "--address", address}, 20s),
                 "no job with id 'nosuchjob'");
  auto no_job = run_omnilearn({"stop", "nosuchjob", "--address", address, "--json"}, 20s);
  expect_refusal(no_job, "no job with id");
  EXPECT_EQ(one_json_line(no_job).value("ok", true), false) << no_job.out;
  expect_refusal(run_omnilearn({"drain", "nosuchnode", "--address", address}, 20s),
                 "no live node named 'nosuchnode'");
  auto no_node = run_omnilearn({"drain", "nosuchnode", "--address", address, "--json"}, 20s);
  expect_refusal(no_node, "no live node");
  EXPECT_EQ(one_json_line(no_node).value("ok", true), false) << no_node.out;
  expect_refusal(run_omnilearn({"logs", "nosuchjob", "--address", address}, 20s),
                 "no job with id 'nosuchjob'");
  expect_refusal(run_omnilearn({"logs", "nosuchjob", "--address", address, "--follow"}, 20s),
                 "no job with id 'nosuchjob'");

  // No answer at all: exit 3.
  auto port = unused_port();
  ASSERT_NE(port, 0);
  auto nowhere = "127.0.0.1:" + std::to_string(port);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"logs", job_id}, {"logs", job_id, "--follow"}, {"stop", job_id},
        {"drain", "w1"}, {"submit", job, "--json"}}) {
    auto command = args;
    command.insert(command.end(), {"--address", nowhere, "--timeout-ms", "300"});
    auto result = run_omnilearn(command, 20s);
    SCOPED_TRACE(args[0]);
    expect_unreachable(result, "no answer from the head at");
  }
}

// A head that dies while `submit --follow` watches: the client gives up after its 30 s of
// silence with exit code 3 (no answer, as for any unreachable head), the silence it waited, and
// what to do: re-attach to a head that is back, or know that a restarted one forgot the job.
TEST(CliErrors, FollowGivesUpOnADeadHeadWithCode3AndSaysWhatToDo) {
  TestCluster cluster;  // no workers: the job stays pending while it is followed
  ScratchDir dir("cli-lost-head");
  auto job = dir.write("job.toml", synthetic_elastic_job("cli-lost-head", 10, 1)).string();
  ChildProcess follow({omnilearn_binary().string(), "submit", job, "--address", cluster.address(),
                       "--run-dir", (dir.path() / "run").string(), "--follow"},
                      omnilearn_process_options({}));
  const auto submitted = follow.wait_for_output("submitted job ", 20s);
  ASSERT_TRUE(submitted) << follow.describe();
  const auto job_id = submitted->substr(std::string("submitted job ").size(), 8);
  cluster.kill_head();
  const auto status = follow.wait_exit(90s);
  ASSERT_TRUE(status) << "still following a dead head: " << follow.describe();
  EXPECT_EQ(status->code, 3) << follow.describe();
  // Waited for, not read at once: the exit can be seen before the pipe is drained.
  EXPECT_TRUE(follow.wait_for_output("lost contact with the head at ", 5s, Stream::kStderr))
      << follow.describe();
  const auto err = follow.output(Stream::kStderr);
  EXPECT_NE(err.find("lost contact with the head at "), std::string::npos) << err;
  EXPECT_TRUE(std::regex_search(err, std::regex("no answer for [0-9]+ s"))) << err;
  EXPECT_NE(err.find("omnilearn job logs " + job_id + " -f"), std::string::npos) << err;
}

TEST(CliErrors, HeadRejectsInconsistentHeartbeatSettings) {
  expect_usage_error(run_omnilearn({"head", "--port", "0", "--heartbeat-interval-ms", "500",
                                    "--heartbeat-timeout-ms", "400"},
                                   20s),
                     "--heartbeat-timeout-ms");
}

TEST(CliErrors, HeadOnAPortInUseExits2) {
  TestCluster cluster;
  auto result = run_omnilearn(
      {"head", "--host", "127.0.0.1", "--port", std::to_string(cluster.head().port())}, 20s);
  expect_usage_error(result, "another head");
  // Any other failure to listen does not blame another head.
  auto bad_host = run_omnilearn({"head", "--host", "999.1.1.1", "--port", "0"}, 20s);
  expect_usage_error(bad_host, "is --host an address of this machine?");
  EXPECT_EQ(bad_host.err.find("another head"), std::string::npos) << bad_host.err;
}

TEST(CliErrors, WorkerGivesUpAfterJoinTimeoutWhenNoHeadAppearsWithCode3) {
  auto port = unused_port();
  ASSERT_NE(port, 0);
  auto address = "127.0.0.1:" + std::to_string(port);
  auto result = run_omnilearn(
      {"worker", "--address", address, "--name", "lonely", "--join-timeout-s", "1"}, 20s);
  EXPECT_FALSE(result.timed_out);
  EXPECT_EQ(result.status.code, 3) << result.status.to_string() << "\n" << result.err;
  EXPECT_GE(result.elapsed, 1s);
  EXPECT_LT(result.elapsed, 1s + 3s);
  // The worker may log while it retries; the error itself is one line, and the last one.
  auto last_line = result.err.substr(result.err.rfind('\n', result.err.size() - 2) + 1);
  EXPECT_EQ(last_line.rfind("omnilearn: error: could not reach the head at " + address, 0), 0u)
      << result.err;
  EXPECT_NE(result.out.find("joining"), std::string::npos) << result.out;
}

TEST(CliErrors, WorkerStoppedBeforeItJoinedExitsCleanly) {
  auto port = unused_port();
  ASSERT_NE(port, 0);
  ChildProcess worker({omnilearn_binary().string(), "worker", "--address",
                       "127.0.0.1:" + std::to_string(port), "--name", "w"},
                      omnilearn_process_options({}));
  ASSERT_TRUE(worker.wait_for_output("joining", 10s));
  worker.send_signal(SIGTERM);
  auto exit = worker.wait_exit(5s);
  ASSERT_TRUE(exit) << "SIGTERM did not stop a worker that was still joining";
  EXPECT_EQ(exit->code, 0);
}

}  // namespace
}  // namespace omnilearn::testing
