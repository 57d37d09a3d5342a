#include "cli/common.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <filesystem>
#include <future>
#include <stdexcept>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cli/command.hpp"
#include "runtime/actor_system.hpp"
#include "runtime/cluster_file.hpp"
#include "wire/membership_protocol.hpp"

namespace omnilearn::cli {

runtime::HostPort resolve_head_address(const std::string& flag_value) {
  std::string text = flag_value;
  if (text.empty()) {
    const char* env = std::getenv("OMNILEARN_ADDRESS");
    if (env) text = env;
  }
  if (text.empty()) {
    throw CliError(
        "no head address: pass --address HOST:PORT, set OMNILEARN_ADDRESS, or use a cluster file "
        "(--cluster-file) that names it");
  }
  try {
    auto address = runtime::parse_host_port(text);
    if (address.port == 0) throw std::invalid_argument("bad address '" + text + "': port 0");
    return address;
  } catch (const std::invalid_argument& e) {
    throw CliError(e.what());
  }
}

std::vector<runtime::HostPort> resolve_head_addresses(const std::string& flag_value) {
  std::string text = flag_value;
  if (text.empty()) {
    if (const char* env = std::getenv("OMNILEARN_ADDRESS")) text = env;
  }
  std::vector<runtime::HostPort> heads;
  std::size_t start = 0;
  while (true) {
    const auto comma = text.find(',', start);
    heads.push_back(resolve_head_address(text.substr(start, comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return heads;
}

namespace {

// The first of `heads` whose registry answers (the active one among standbys), asked all at
// once with a one-second bound; the first of the list when none answers.
runtime::HostPort active_head(const std::vector<runtime::HostPort>& heads,
                              const runtime::SystemOptions& options) {
  runtime::ActorSystem system(options);
  std::vector<std::future<runtime::AskResult>> asks;
  for (const auto& head : heads) {
    // A standby listens before it is elected, but has no registry yet: it answers with an
    // error, not a status.
    asks.push_back(system.ask(runtime::ActorAddress{runtime::tcp_endpoint(head),
                                                    actors::kRegistryActor},
                              actors::StatusRequest{false}, std::chrono::seconds(1)));
  }
  for (std::size_t i = 0; i < heads.size(); ++i) {
    if (asks[i].get().as<actors::StatusReply>()) return heads[i];
  }
  return heads.front();
}

}  // namespace

void add_cluster_flags(CLI::App* command, ClusterFlags& flags) {
  command->add_option("--address", flags.address,
                      "Head address HOST:PORT (default: $OMNILEARN_ADDRESS, else the cluster "
                      "file's); HOST:PORT,HOST:PORT,... for heads that share their state (a "
                      "standby's): the one that answers is used");
  command->add_option("--cluster-file", flags.cluster_file,
                      "The cluster's credentials, written by `omnilearn head` (default: "
                      "$OMNILEARN_CLUSTER_FILE, else ~/.omnilearn/cluster.toml)");
  command->add_flag("--insecure", flags.insecure,
                    "No authentication or encryption, for a head started with --insecure "
                    "(local experiments only)");
}

void warn_insecure(const std::string& who) {
  std::fprintf(stderr,
               "WARNING: %s runs with --insecure: connections are neither authenticated nor "
               "encrypted, so anyone who can reach its ports can join, read status and submit "
               "jobs (that is, run code). Use it only on a machine or network you trust "
               "completely.\n",
               who.c_str());
}

ClusterAccess resolve_cluster_access(const ClusterFlags& flags) {
  ClusterAccess access;
  std::optional<runtime::ClusterFile> file;
  if (flags.insecure) {
    if (!flags.cluster_file.empty()) {
      throw CliError("--insecure and --cluster-file contradict each other: choose one");
    }
    warn_insecure("this command");
  } else {
    std::string path = flags.cluster_file;
    if (path.empty()) {
      if (const char* env = std::getenv("OMNILEARN_CLUSTER_FILE")) path = env;
    }
    if (path.empty()) {
      auto fallback = runtime::default_cluster_file_path();
      if (!std::filesystem::exists(fallback)) {
        throw CliError(fmt::format(
            "no cluster file: `omnilearn head` writes one ({} on the head's machine); copy it "
            "here and pass --cluster-file F (or set OMNILEARN_CLUSTER_FILE), or use --insecure "
            "for a head started with --insecure",
            fallback.string()));
      }
      path = fallback.string();
    }
    try {
      file = runtime::read_cluster_file(path);
    } catch (const runtime::ClusterFileError& e) {
      throw CliError(e.what());
    }
    access.credentials = file->credentials;
    access.cluster_file = std::filesystem::absolute(path).string();
  }
  std::string address = flags.address;
  if (address.empty()) {
    if (const char* env = std::getenv("OMNILEARN_ADDRESS")) address = env;
  }
  if (address.empty() && file) address = file->address;
  access.heads = resolve_head_addresses(address);
  access.head = access.heads.size() > 1 ? active_head(access.heads, access.system_options())
                                        : access.heads.front();
  // The one in use first, the others after it in the order given.
  std::stable_partition(access.heads.begin(), access.heads.end(),
                        [&](const runtime::HostPort& h) {
                          return h.host == access.head.host && h.port == access.head.port;
                        });
  return access;
}

runtime::SystemOptions ClusterAccess::system_options() const {
  runtime::SystemOptions options;
  options.credentials = credentials;
  return options;
}

std::string handshake_hint(const runtime::ActorSystem& system) {
  if (system.transport_stats().failed_handshakes_out.load() == 0) return "";
  return "; the secure handshake with it failed: this cluster file is not that cluster's, or one "
         "side runs --insecure";
}

std::optional<spdlog::level::level_enum> parse_log_level(const std::string& name) {
  if (name.empty()) return spdlog::level::info;
  for (const char* known : kLogLevels) {
    // spdlog's own names, and "warning" (which spdlog also takes for warn).
    if (name == known) return spdlog::level::from_str(name);
  }
  if (name == "warning") return spdlog::level::warn;
  return std::nullopt;
}

int no_answer_exit_code(const runtime::ActorSystem& system) {
  return system.transport_stats().failed_handshakes_out.load() > 0 ? kExitUsage : kExitUnreachable;
}

void setup_logging() {
  const char* env = std::getenv("OMNILEARN_LOG");
  const std::string name = env ? env : "";
  const auto level = parse_log_level(name);
  if (!level) {
    throw CliError(
        fmt::format("OMNILEARN_LOG='{}' is not a log level: use one of {} (or unset "
                    "it: info)",
                    name, fmt::join(kLogLevels, ", ")));
  }
  auto logger = spdlog::stderr_color_mt("omnilearn");
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ [%P] %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(*level);
}

std::string local_hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace omnilearn::cli
