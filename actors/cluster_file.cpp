#include "actors/cluster_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

namespace omnilearn::actors {
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
    runtime::check_cluster_credentials(file.credentials);
  } catch (const std::invalid_argument& e) {
    throw ClusterFileError(fmt::format("{}: {} (the file is damaged: copy it again from the head)",
                                       source, e.what()));
  }
  return file;
}

void write_cluster_file(const std::filesystem::path& path, const ClusterFile& file) {
  const std::string target = path.string();
  auto fail = [&](const std::string& what) {
    throw ClusterFileError(fmt::format("cannot write the cluster file {}: {}: {} (choose another "
                                       "path with --cluster-file)",
                                       target, what, std::strerror(errno)));
  };
  if (path.has_parent_path() && !std::filesystem::exists(path.parent_path())) {
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    if (ec) {
      errno = ec.value();
      fail("creating " + path.parent_path().string());
    }
    ::chmod(path.parent_path().c_str(), 0700);
  }
  toml::table table{{"address", file.address},
                    {"server_public_key", file.credentials.server.public_key},
                    {"server_secret_key", file.credentials.server.secret_key},
                    {"client_public_key", file.credentials.client.public_key},
                    {"client_secret_key", file.credentials.client.secret_key}};
  std::ostringstream text;
  text << "# OmniLearn cluster file: the head's address and the cluster's keys.\n"
          "# Whoever holds this file can join the cluster and submit jobs: keep it mode 0600.\n"
       << table << "\n";
  std::string body = text.str();
  std::string temporary = target + ".tmp-" + std::to_string(::getpid());
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) fail("opening " + temporary);
  ::fchmod(fd, 0600);  // O_CREAT's mode is masked by the umask; an existing file kept its mode
  const char* data = body.data();
  std::size_t left = body.size();
  while (left > 0) {
    ssize_t n = ::write(fd, data, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      ::unlink(temporary.c_str());
      fail("writing");
    }
    data += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(temporary.c_str());
    fail("flushing");
  }
  if (::rename(temporary.c_str(), target.c_str()) != 0) {
    ::unlink(temporary.c_str());
    fail("renaming " + temporary);
  }
}

ClusterFile load_or_new_cluster_file(const std::filesystem::path& path) {
  if (std::filesystem::exists(path)) return read_cluster_file(path);
  return {"", runtime::generate_cluster_credentials()};
}

}  // namespace omnilearn::actors
