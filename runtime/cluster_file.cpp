#include "runtime/cluster_file.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "runtime/atomic_file.hpp"

namespace omnilearn::runtime {
namespace {

std::string text_of(const toml::table& table, const std::string& key, const std::string& source) {
  auto value = table[key].value<std::string>();
  if (!value) {
    throw ClusterFileError(fmt::format("{}: missing or non-string '{}' (regenerate the file by "
                                       "deleting it and restarting `omnilearn head`)",
                                       source, key));
  }
  return *value;
}

}  // namespace

std::filesystem::path default_cluster_file_path() {
  const char* home = std::getenv("HOME");
  std::filesystem::path base = home && *home ? home : ".";
  return base / ".omnilearn" / "cluster.toml";
}

ClusterFile read_cluster_file(const std::filesystem::path& path) {
  const std::string source = path.string();
  struct stat info {};
  if (::stat(source.c_str(), &info) != 0) {
    throw ClusterFileError(fmt::format(
        "cannot read the cluster file {}: {} (copy it from the head's machine, where `omnilearn "
        "head` wrote it, or pass --cluster-file)",
        source, std::strerror(errno)));
  }
  if ((info.st_mode & 077) != 0) {
    throw ClusterFileError(fmt::format(
        "the cluster file {} is readable by other users (mode {:04o}); it holds the cluster's "
        "secret keys: run `chmod 600 {}`",
        source, info.st_mode & 07777, source));
  }
  toml::table table;
  try {
    table = toml::parse_file(source);
  } catch (const toml::parse_error& e) {
    throw ClusterFileError(fmt::format("{}:{}:{}: {}", source, e.source().begin.line,
                                       e.source().begin.column, e.description()));
  }
  ClusterFile file;
  file.address = text_of(table, "address", source);
  file.credentials.server = {text_of(table, "server_public_key", source),
                             text_of(table, "server_secret_key", source)};
  file.credentials.client = {text_of(table, "client_public_key", source),
                             text_of(table, "client_secret_key", source)};
  try {
    check_cluster_credentials(file.credentials);
  } catch (const std::invalid_argument& e) {
    throw ClusterFileError(fmt::format("{}: {} (the file is damaged: copy it again from the head)",
                                       source, e.what()));
  }
  return file;
}

void write_cluster_file(const std::filesystem::path& path, const ClusterFile& file) {
  toml::table table{{"address", file.address},
                    {"server_public_key", file.credentials.server.public_key},
                    {"server_secret_key", file.credentials.server.secret_key},
                    {"client_public_key", file.credentials.client.public_key},
                    {"client_secret_key", file.credentials.client.secret_key}};
  std::ostringstream text;
  text << "# OmniLearn cluster file: the head's address and the cluster's keys.\n"
          "# Whoever holds this file can join the cluster and submit jobs: keep it mode 0600.\n"
       << table << "\n";
  AtomicWriteOptions options;
  options.mode = 0600;
  options.create_directories = true;
  try {
    write_file_atomically(path, text.str(), options);
  } catch (const AtomicWriteError& e) {
    throw ClusterFileError(
        fmt::format("{} (choose another path with --cluster-file)", e.what()));
  }
}

ClusterFile load_or_new_cluster_file(const std::filesystem::path& path) {
  if (std::filesystem::exists(path)) return read_cluster_file(path);
  return {"", generate_cluster_credentials()};
}

}  // namespace omnilearn::runtime
