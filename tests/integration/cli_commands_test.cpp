// The command nouns (`job ...`, `node ...`, `dashboard`), each with its exit codes: 0 done,
// 1 the job or request failed, 2 bad input (flag, file, environment), 3 the head could not be
// reached, 130 interrupted; a drained node stays drained for every later job until it is
// undrained; every command's --help shows an example. The older spellings are covered by
// cli_errors_test.cpp, which uses them.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "tests/support/cluster.hpp"
#include "tests/support/job_run.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

// A loopback port nobody listens on: bound by the OS, then released.
std::string unreachable_address() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  std::uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  ::close(fd);
  return "127.0.0.1:" + std::to_string(port);
}

std::size_t count_lines(const std::string& text) {
  std::size_t lines = 0;
  for (char c : text) lines += c == '\n';
  if (!text.empty() && text.back() != '\n') ++lines;
  return lines;
}

// Exit `code`, and exactly one "omnilearn: error: ..." line on stderr containing `needle`.
void expect_error(const CommandResult& result, int code, const std::string& needle) {
  EXPECT_FALSE(result.timed_out) << "hung";
  EXPECT_TRUE(result.status.exited()) << result.status.to_string();
  EXPECT_EQ(result.status.code, code) << result.err;
  EXPECT_EQ(count_lines(result.err), 1u) << "stderr:\n" << result.err;
  EXPECT_EQ(result.err.rfind("omnilearn: error: ", 0), 0u) << result.err;
  EXPECT_NE(result.err.find(needle), std::string::npos) << result.err;
}

std::vector<Json> json_lines(const std::string& text) {
  std::vector<Json> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    out.push_back(Json::parse(line, nullptr, false));
  }
  return out;
}

const std::vector<std::vector<std::string>> kCommands = {
    {"job", "submit"}, {"job", "list"},   {"job", "status"},
    {"job", "logs"},   {"job", "stop"},   {"node", "list"},
    {"node", "set"},   {"node", "drain"}, {"node", "undrain"},
    {"dashboard"},     {"status"},        {"submit"},
    {"logs"},          {"stop"},          {"drain"},
    {"run"},           {"simulate"},      {"report"},
    {"head"},          {"worker"},        {"dashboard-token"}};

TEST(CliCommands, EveryCommandsHelpShowsAnExampleAndExits0) {
  for (const auto& command : kCommands) {
    auto args = command;
    args.push_back("--help");
    SCOPED_TRACE(args[0] + (args.size() > 2 ? " " + args[1] : std::string()));
    auto result = run_omnilearn(args, 20s);
    EXPECT_EQ(result.status.code, 0) << result.err;
    EXPECT_TRUE(std::regex_search(result.out, std::regex("Example: omnilearn [a-z-]+")))
        << result.out;
  }
  // The top level shows the exit codes too.
  auto top = run_omnilearn({"--help"}, 20s);
  EXPECT_NE(top.out.find("3 the head or a worker could not be reached"), std::string::npos)
      << top.out;
}

TEST(CliCommands, BadFlagsAndFilesExit2AndPointToTheCommandsHelp) {
  for (const auto& command : kCommands) {
    auto args = command;
    args.push_back("--no-such-flag");
    std::string path;
    for (const auto& word : command) path += " " + word;
    SCOPED_TRACE(path);
    expect_error(run_omnilearn(args, 20s), 2, "see 'omnilearn" + path + " --help'");
  }
  ScratchDir dir("cli-bad-file");
  const auto missing = (dir.path() / "missing.toml").string();
  expect_error(run_omnilearn({"job", "submit", missing, "--address", "127.0.0.1:1"}, 20s), 2,
               "cannot read the job file");
  const auto bad = dir.write("bad.toml", "[job]\nname = \"x\"\n[train]\nglobal_batch = 0\n");
  expect_error(run_omnilearn({"job", "submit", bad.string(), "--address", "127.0.0.1:1"}, 20s), 2,
               "bad.toml:4:16: [train] global_batch");
  expect_error(run_omnilearn({"run", bad.string(), "--local", "1"}, 20s), 2, "bad.toml:4:16");
  expect_error(run_omnilearn({"report", (dir.path() / "no-run").string()}, 20s), 2, "no-run");
}

TEST(CliCommands, AMisspelledLogLevelIsAnErrorNamingTheLevels) {
  ProcessOptions options;
  options.env = {"OMNILEARN_LOG=verbose"};
  expect_error(run_omnilearn({"status", "--address", "127.0.0.1:1"}, 20s, options), 2,
               "OMNILEARN_LOG='verbose' is not a log level: use one of trace, debug, info, warn, "
               "error, critical, off");
  options.env = {"OMNILEARN_LOG=debug"};
  auto fine = run_omnilearn({"simulate", "--speeds", "1,2", "--rounds", "1"}, 20s, options);
  EXPECT_EQ(fine.status.code, 0) << fine.err;
}

TEST(CliCommands, AnUnreachableHeadIsExit3ForEveryCommandThatAsks) {
  const auto nowhere = unreachable_address();
  ScratchDir dir("cli-unreachable");
  const auto job = dir.write("job.toml", synthetic_elastic_job("unreachable", 10, 1)).string();
  for (const std::vector<std::string>& args : {std::vector<std::string>{"job", "submit", job},
                                               {"job", "list"},
                                               {"job", "status", "j"},
                                               {"job", "logs", "j"},
                                               {"job", "logs", "j", "-f"},
                                               {"job", "stop", "j"},
                                               {"node", "list"},
                                               {"node", "drain", "w"},
                                               {"node", "undrain", "w"},
                                               {"node", "set", "w", "--slowdown", "2"},
                                               {"dashboard"},
                                               {"status"}}) {
    auto command = args;
    command.insert(command.end(), {"--address", nowhere, "--timeout-ms", "300"});
    std::string words;
    for (const auto& word : args) words += word + " ";
    SCOPED_TRACE(words);
    auto result = run_omnilearn(command, 20s);
    expect_error(result, 3, nowhere);
    EXPECT_TRUE(result.out.empty()) << result.out;
  }
}

// A job that does not succeed is exit 1 for the commands that report on it, a no from the head
// is exit 1 too; Ctrl-C while following is 130 and leaves the job running.
TEST(CliCommands, FailedJobsAndRefusalsExit1AndCtrlCWhileFollowingExits130) {
  TestCluster cluster;  // no workers: a submitted job stays pending
  ScratchDir dir("cli-nouns");
  const auto& address = cluster.address();
  const auto job = dir.write("job.toml", synthetic_elastic_job("cli-nouns", 10, 1)).string();
  auto submitted = run_omnilearn({"job", "submit", job, "--address", address, "--json"}, 20s);
  ASSERT_EQ(submitted.status.code, 0) << submitted.err;
  const std::string job_id = Json::parse(submitted.out).at("job_id");

  auto status = run_omnilearn({"job", "status", job_id, "--address", address, "--json"}, 20s);
  EXPECT_EQ(status.status.code, 0) << status.err;
  EXPECT_EQ(Json::parse(status.out, nullptr, false).value("state", ""), "pending") << status.out;
  auto list = run_omnilearn({"job", "list", "--address", address, "--json"}, 20s);
  EXPECT_EQ(list.status.code, 0) << list.err;
  const auto jobs = Json::parse(list.out, nullptr, false);
  ASSERT_TRUE(jobs.is_array()) << list.out;
  ASSERT_EQ(jobs.size(), 1u) << list.out;
  EXPECT_EQ(jobs[0].value("id", ""), job_id);
  auto table = run_omnilearn({"job", "list", "--address", address}, 20s);
  EXPECT_NE(table.out.find(job_id), std::string::npos) << table.out;

  // Ctrl-C while following: 130, one line saying the job goes on.
  ChildProcess follow(
      {omnilearn_binary().string(), "job", "logs", job_id, "-f", "--address", address},
      omnilearn_process_options({}));
  ASSERT_TRUE(follow.wait_for_output("job " + job_id, 20s)) << follow.describe();
  follow.send_signal(SIGINT);
  const auto interrupted = follow.wait_exit(20s);
  ASSERT_TRUE(interrupted) << follow.describe();
  EXPECT_EQ(interrupted->code, 130) << follow.describe();
  // Waited for, not read at once: the exit can be seen before the pipe is drained.
  EXPECT_TRUE(follow.wait_for_output("interrupted; job " + job_id + " goes on", 5s,
                                     Stream::kStderr))
      << follow.describe();

  auto stopped = run_omnilearn({"job", "stop", job_id, "--address", address}, 20s);
  EXPECT_EQ(stopped.status.code, 0) << stopped.err;
  // Stopped is not succeeded: `job status` and `job logs` exit 1 once it has ended.
  CommandResult ended;
  ASSERT_TRUE(wait_until(
      [&] {
        ended = run_omnilearn({"job", "status", job_id, "--address", address, "--json"}, 20s);
        return ended.out.find("\"stopped\"") != std::string::npos;
      },
      20s, 100ms))
      << ended.out << ended.err;
  EXPECT_EQ(ended.status.code, 1) << ended.err;
  auto logs = run_omnilearn({"job", "logs", job_id, "--address", address}, 20s);
  EXPECT_EQ(logs.status.code, 1) << logs.err;

  expect_error(run_omnilearn({"job", "status", "nosuchjob", "--address", address}, 20s), 1,
               "no job with id 'nosuchjob'");
  expect_error(run_omnilearn({"job", "stop", "nosuchjob", "--address", address}, 20s), 1,
               "no job with id 'nosuchjob'");
  expect_error(run_omnilearn({"node", "drain", "nosuchnode", "--address", address}, 20s), 1,
               "no live node named 'nosuchnode'");
  expect_error(run_omnilearn({"node", "undrain", "nosuchnode", "--address", address}, 20s), 1,
               "is not drained");
  // A head without a dashboard: a no, with what to do.
  expect_error(run_omnilearn({"dashboard", "--address", address}, 20s), 1, "--dashboard-port");
}

// `node drain` holds for every job, later ones included, until `node undrain`: a job submitted
// after the drain places nothing on the node (it waits), and once the node is undrained a
// trainer is spawned there. `node list` shows the node as drained meanwhile.
TEST(CliCommands, ADrainedNodeStaysOffEveryJobUntilUndrained) {
  TestCluster cluster;
  const auto& address = cluster.address();
  ProcessOptions no_trainer;
  no_trainer.env = {"OMNILEARN_TRAINER=/bin/false"};  // placement is tested, not training
  cluster.start_worker("w1", {}, no_trainer);
  ASSERT_TRUE(cluster.wait_worker_joined("w1", 15s)) << cluster.worker("w1").describe();

  auto drained = run_omnilearn({"node", "drain", "w1", "--address", address, "--json"}, 20s);
  ASSERT_EQ(drained.status.code, 0) << drained.err;
  EXPECT_NE(drained.out.find("node undrain w1"), std::string::npos) << drained.out;
  auto nodes = run_omnilearn({"node", "list", "--address", address, "--json"}, 20s);
  ASSERT_EQ(nodes.status.code, 0) << nodes.err;
  const auto listed = Json::parse(nodes.out, nullptr, false);
  ASSERT_TRUE(listed.is_array() && listed.size() == 1u) << nodes.out;
  EXPECT_EQ(listed[0].value("drained", false), true) << nodes.out;
  auto table = run_omnilearn({"node", "list", "--address", address}, 20s);
  EXPECT_TRUE(std::regex_search(table.out, std::regex("w1 +\\S+ +drained"))) << table.out;

  ScratchDir dir("cli-drain");
  dir.write("job.toml", R"([job]
name = "after-drain"
[model]
kind = "mlp"
hidden = [8]
[data]
dataset = "synthetic"
train_size = 256
test_size = 64
[train]
global_batch = 32
steps = 5
)");
  auto submitted = run_omnilearn(
      {"job", "submit", (dir.path() / "job.toml").string(), "--address", address, "--json"}, 20s);
  ASSERT_EQ(submitted.status.code, 0) << submitted.err;
  const std::string job_id = Json::parse(submitted.out).at("job_id");
  auto spawns = [&] {
    auto logs = run_omnilearn({"job", "logs", job_id, "--address", address, "--json"}, 20s);
    int count = 0;
    for (const auto& event : json_lines(logs.out)) count += event.value("event", "") == "spawn";
    return count;
  };
  // The scheduler has the node's snapshot by the time its first event is written; a spawn would
  // follow at once. None comes while the node is drained.
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(spawns(), 0) << "a trainer was placed on a drained node";

  auto undrained = run_omnilearn({"node", "undrain", "w1", "--address", address}, 20s);
  ASSERT_EQ(undrained.status.code, 0) << undrained.err;
  EXPECT_NE(undrained.out.find("usable again"), std::string::npos) << undrained.out;
  EXPECT_TRUE(wait_until([&] { return spawns() > 0; }, 20s, 200ms))
      << "no trainer placed on the undrained node";
  auto again = run_omnilearn({"node", "list", "--address", address, "--json"}, 20s);
  EXPECT_EQ(Json::parse(again.out, nullptr, false)[0].value("drained", true), false) << again.out;
  run_omnilearn({"job", "stop", job_id, "--address", address}, 20s);
}

TEST(CliCommands, DashboardPrintsTheHeadsDashboardOnceItAnswers) {
  HeadOptions head;
  head.extra_args = {"--dashboard-port", "0"};
  TestCluster cluster(head);
  auto result = run_omnilearn({"dashboard", "--address", cluster.address()}, 20s);
  ASSERT_EQ(result.status.code, 0) << result.err;
  EXPECT_TRUE(std::regex_match(result.out, std::regex("http://127\\.0\\.0\\.1:[0-9]+/\n")))
      << result.out;
  // The head printed the same address when it started.
  EXPECT_NE(cluster.head().process().output(Stream::kStdout).find("dashboard: " + result.out),
            std::string::npos)
      << cluster.head().process().describe();
}

// Every environment variable a program reads (a getenv in the sources of omnilearn,
// omnilearn-trainer and the libraries) has a row in the README's one table of them.
TEST(CliCommands, EveryEnvironmentVariableTheProgramsReadIsInTheReadmeTable) {
  const char* source = std::getenv("OMNILEARN_SOURCE_DIR");
  ASSERT_TRUE(source) << "run through ctest (it sets OMNILEARN_SOURCE_DIR)";
  const std::filesystem::path root(source);
  std::ifstream readme_in(root / "README.md");
  std::stringstream readme_text;
  readme_text << readme_in.rdbuf();
  const std::string readme = readme_text.str();
  const auto table_at = readme.find("\n## Environment variables\n");
  ASSERT_NE(table_at, std::string::npos) << "README.md has no 'Environment variables' section";
  const auto table = readme.substr(table_at, readme.find("\n## ", table_at + 1) - table_at);
  const std::regex getenv_call(R"re(getenv\("([A-Z_]+)"\))re");
  std::set<std::string> read;
  for (const char* dir : {"asp", "cli", "cluster", "controller", "core", "dashboard", "elastic",
                          "head", "include", "jobs", "runtime", "state", "trainer", "training",
                          "wire"}) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root / dir)) {
      const auto ext = entry.path().extension();
      if (ext != ".cpp" && ext != ".hpp") continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      const std::string content = text.str();
      for (std::sregex_iterator it(content.begin(), content.end(), getenv_call), end; it != end;
           ++it) {
        read.insert((*it)[1].str());
      }
    }
  }
  EXPECT_GT(read.size(), 5u);
  for (const auto& name : read) {
    EXPECT_NE(table.find("| `" + name + "` |"), std::string::npos)
        << name << " is read by the programs but not in the README's table";
  }
}

}  // namespace
}  // namespace omnilearn::testing
