#include "runtime/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <system_error>

namespace omnilearn::runtime {
namespace {

// Large enough to be fast, small enough that a big checkpoint passes kPartlyWritten.
constexpr std::size_t kChunk = 1u << 20;

std::string unique_suffix() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return ".tmp." + std::to_string(::getpid()) + "." + std::to_string(rng());
}

}  // namespace

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes,
                           const AtomicWriteOptions& options) {
  const std::filesystem::path dir =
      path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  auto fail = [&](const std::string& step, int error) {
    throw AtomicWriteError("cannot write " + path.string() + ": " + step + ": " +
                           std::strerror(error));
  };
  auto step = [&](AtomicWriteStep done) {
    if (options.after_step) options.after_step(done);
  };
  if (options.create_directories && !std::filesystem::exists(dir)) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) fail("creating the directory " + dir.string(), ec.value());
    ::chmod(dir.c_str(), 0700);
  }
  const std::filesystem::path temporary = path.string() + unique_suffix();
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) fail("creating the temporary file " + temporary.string(), errno);
  // Removes the temporary file on every way out but success.
  auto abandon = [&](const std::string& what) {
    const int error = errno;
    ::close(fd);
    ::unlink(temporary.c_str());
    fail(what, error);
  };
  if (::fchmod(fd, options.mode) != 0) abandon("setting the mode");
  step(AtomicWriteStep::kCreated);
  std::size_t done = 0;
  bool reported_part = false;
  while (done < bytes.size()) {
    const std::size_t size = std::min(kChunk, bytes.size() - done);
    const ssize_t n = ::write(fd, bytes.data() + done, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      abandon("writing " + temporary.string());
    }
    done += static_cast<std::size_t>(n);
    if (done < bytes.size() && !reported_part) {
      reported_part = true;
      step(AtomicWriteStep::kPartlyWritten);
    }
  }
  step(AtomicWriteStep::kWritten);
  if (::fsync(fd) != 0) abandon("flushing " + temporary.string());
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    fail("closing " + temporary.string(), error);
  }
  step(AtomicWriteStep::kFlushed);
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    fail("renaming " + temporary.string() + " over it", error);
  }
  step(AtomicWriteStep::kRenamed);
  // The rename is in the directory: without this, a power loss may bring back the old name.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) fail("opening the directory " + dir.string() + " to flush it", errno);
  if (::fsync(dfd) != 0) {
    const int error = errno;
    ::close(dfd);
    fail("flushing the directory " + dir.string(), error);
  }
  ::close(dfd);
  step(AtomicWriteStep::kDirectoryFlushed);
}

}  // namespace omnilearn::runtime
