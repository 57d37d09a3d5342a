// The cluster file: written 0600 and atomically, read back exactly, refused when others can read
// it or when it is damaged, and reused (same keys) by a restarted head.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "runtime/cluster_file.hpp"

namespace omnilearn::runtime {
namespace {

class ClusterFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "omnilearn-cluster-file-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir); }

  static unsigned mode_of(const std::filesystem::path& path) {
    struct stat info {};
    EXPECT_EQ(::stat(path.c_str(), &info), 0);
    return info.st_mode & 0777;
  }

  std::filesystem::path dir;
};

TEST_F(ClusterFileTest, WritesOwnerOnlyFilesInANewPrivateDirectoryAndReadsThemBack) {
  auto path = dir / "nested" / "cluster.toml";
  ClusterFile written{"head.example:7070", generate_cluster_credentials()};
  write_cluster_file(path, written);
  EXPECT_EQ(mode_of(path), 0600u);
  EXPECT_EQ(mode_of(path.parent_path()), 0700u);
  auto read = read_cluster_file(path);
  EXPECT_EQ(read.address, written.address);
  EXPECT_EQ(read.credentials.server.public_key, written.credentials.server.public_key);
  EXPECT_EQ(read.credentials.server.secret_key, written.credentials.server.secret_key);
  EXPECT_EQ(read.credentials.client.public_key, written.credentials.client.public_key);
  EXPECT_EQ(read.credentials.client.secret_key, written.credentials.client.secret_key);
  for (const auto& entry : std::filesystem::directory_iterator(path.parent_path())) {
    EXPECT_EQ(entry.path(), path) << "a temporary file was left behind";
  }
}

TEST_F(ClusterFileTest, AFileOthersCanReadIsRefusedWithTheFix) {
  auto path = dir / "cluster.toml";
  write_cluster_file(path, {"h:1", generate_cluster_credentials()});
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  try {
    read_cluster_file(path);
    FAIL() << "a world-readable cluster file must be refused";
  } catch (const ClusterFileError& e) {
    EXPECT_NE(std::string(e.what()).find("chmod 600"), std::string::npos) << e.what();
  }
}

TEST_F(ClusterFileTest, MissingOrDamagedFilesSayWhatToDo) {
  try {
    read_cluster_file(dir / "absent.toml");
    FAIL();
  } catch (const ClusterFileError& e) {
    EXPECT_NE(std::string(e.what()).find("--cluster-file"), std::string::npos) << e.what();
  }
  auto path = dir / "cluster.toml";
  auto credentials = generate_cluster_credentials();
  write_cluster_file(path, {"h:1", credentials});
  std::string text;
  {
    std::ifstream in(path);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  // One character of the client secret changed: the pair no longer matches.
  auto at = text.find(credentials.client.secret_key);
  ASSERT_NE(at, std::string::npos);
  text[at] = text[at] == 'a' ? 'b' : 'a';
  {
    std::ofstream out(path, std::ios::trunc);
    out << text;
  }
  EXPECT_THROW(read_cluster_file(path), ClusterFileError);
  {
    std::ofstream out(path, std::ios::trunc);
    out << "address = [\n";
  }
  try {
    read_cluster_file(path);
    FAIL();
  } catch (const ClusterFileError& e) {
    EXPECT_NE(std::string(e.what()).find(path.string() + ":"), std::string::npos) << e.what();
  }
}

TEST_F(ClusterFileTest, ARestartedHeadKeepsItsKeysAndUpdatesTheAddress) {
  auto path = dir / "cluster.toml";
  auto first = load_or_new_cluster_file(path);  // first start: fresh keys, nothing written yet
  EXPECT_FALSE(std::filesystem::exists(path));
  first.address = "a:1";
  write_cluster_file(path, first);
  auto second = load_or_new_cluster_file(path);  // restart: the same keys
  EXPECT_EQ(second.credentials.server.public_key, first.credentials.server.public_key);
  EXPECT_EQ(second.credentials.client.secret_key, first.credentials.client.secret_key);
  second.address = "b:2";
  write_cluster_file(path, second);
  EXPECT_EQ(read_cluster_file(path).address, "b:2");
}

}  // namespace
}  // namespace omnilearn::runtime
