// runtime::write_file_atomically: a crash at any step leaves the old content or the whole new
// one (a forked child is SIGKILLed at each step in turn), and a failed write leaves the target
// as it was and no temporary file behind.

#include "runtime/atomic_file.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace omnilearn::runtime {
namespace {

namespace fs = std::filesystem;

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "ol-atomic-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string read(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  // Everything in the directory but `keep`.
  std::vector<std::string> others(const std::string& keep) const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      if (entry.path().filename() != keep) names.push_back(entry.path().filename().string());
    }
    return names;
  }
  // Runs `body` in a forked child; its exit status as waitpid reports it.
  static int in_child(const std::function<void()>& body) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      body();
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return status;
  }

  fs::path dir_;
};

// Several chunks, so that a crash can land between two of them.
std::string content(char fill) { return std::string((5u << 20) + 123, fill); }

TEST_F(AtomicFileTest, WritesReplacesAndAppliesTheModeExactly) {
  const fs::path target = dir_ / "summary.json";
  write_file_atomically(target, "first");
  EXPECT_EQ(read(target), "first");
  const mode_t old_mask = ::umask(077);
  AtomicWriteOptions secret;
  secret.mode = 0640;
  write_file_atomically(target, "second", secret);
  ::umask(old_mask);
  EXPECT_EQ(read(target), "second");
  EXPECT_EQ(fs::status(target).permissions(),
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  write_file_atomically(target, "");
  EXPECT_EQ(read(target), "");
  EXPECT_TRUE(others("summary.json").empty());
}

TEST_F(AtomicFileTest, CreatesMissingDirectoriesOnlyWhenAsked) {
  const fs::path target = dir_ / "a" / "b" / "cluster.toml";
  try {
    write_file_atomically(target, "x");
    FAIL() << "a missing directory must be an error unless create_directories is set";
  } catch (const AtomicWriteError& e) {
    EXPECT_NE(std::string(e.what()).find("creating the temporary file"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(target.string()), std::string::npos) << e.what();
  }
  AtomicWriteOptions options;
  options.create_directories = true;
  write_file_atomically(target, "x", options);
  EXPECT_EQ(read(target), "x");
}

// The crash simulation: for every step, a child writes the new content over the old and is
// killed right after that step. Before the rename the target holds the whole old content; from
// the rename on, the whole new one; never a mixture or a cut file.
TEST_F(AtomicFileTest, ACrashAtAnyStepLeavesTheOldOrTheWholeNewContent) {
  const fs::path target = dir_ / "shard-0.pt";
  const std::string old_content = content('o');
  const std::string new_content = content('n');
  const std::vector<AtomicWriteStep> steps = {
      AtomicWriteStep::kCreated, AtomicWriteStep::kPartlyWritten, AtomicWriteStep::kWritten,
      AtomicWriteStep::kFlushed, AtomicWriteStep::kRenamed,       AtomicWriteStep::kDirectoryFlushed};
  for (auto crash_at : steps) {
    SCOPED_TRACE(static_cast<int>(crash_at));
    write_file_atomically(target, old_content);
    const int status = in_child([&] {
      AtomicWriteOptions options;
      options.after_step = [&](AtomicWriteStep step) {
        if (step == crash_at) ::kill(::getpid(), SIGKILL);
      };
      write_file_atomically(target, new_content, options);
    });
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the child must die at the step, not finish (status " << status << ")";
    const std::string now = read(target);
    if (crash_at < AtomicWriteStep::kRenamed) {
      EXPECT_TRUE(now == old_content) << "a crash before the rename changed the target ("
                                      << now.size() << " bytes)";
    } else {
      EXPECT_TRUE(now == new_content) << "a crash after the rename lost the new content ("
                                      << now.size() << " bytes)";
    }
    // What a killed writer leaves is its own uniquely named temporary file, never the target's
    // name; removed here so that the next round starts clean.
    for (const auto& name : others("shard-0.pt")) {
      EXPECT_NE(name.find("shard-0.pt.tmp."), std::string::npos) << name;
      fs::remove(dir_ / name);
    }
  }
}

TEST_F(AtomicFileTest, AFailedRenameLeavesTheTargetAndNoTemporaryFile) {
  // A directory in the target's place: every step succeeds but the rename.
  const fs::path target = dir_ / "report.html";
  fs::create_directory(target);
  fs::create_directory(target / "inside");
  try {
    write_file_atomically(target, "new");
    FAIL() << "renaming a file over a non-empty directory must fail";
  } catch (const AtomicWriteError& e) {
    EXPECT_NE(std::string(e.what()).find("renaming"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_directory(target / "inside"));
  EXPECT_TRUE(others("report.html").empty()) << others("report.html").front();
}

TEST_F(AtomicFileTest, AFailedWriteLeavesTheOldContentAndNoTemporaryFile) {
  // A file-size limit makes write() fail part-way (EFBIG), as a full disk would.
  const fs::path target = dir_ / "checkpoint.pt";
  write_file_atomically(target, "old");
  const int status = in_child([&] {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit {1u << 20, 1u << 20};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(3);
    try {
      write_file_atomically(target, content('n'));
    } catch (const AtomicWriteError& e) {
      const std::string what = e.what();
      ::_exit(what.find("writing") != std::string::npos ? 0 : 4);
    }
    ::_exit(5);  // no error: the limit did not bite
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: setrlimit failed, 4: wrong step named, 5: no error";
  EXPECT_EQ(read(target), "old");
  EXPECT_TRUE(others("checkpoint.pt").empty()) << others("checkpoint.pt").front();
}

}  // namespace
}  // namespace omnilearn::runtime
