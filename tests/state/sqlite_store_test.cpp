// The embedded state store: what it acknowledged is there after it is reopened, batches are
// atomic, and a file that is not an intact OmniLearn state database is refused untouched.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "state/state_store.hpp"

namespace omnilearn::state {
namespace {

namespace fs = std::filesystem;

class SqliteStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("omnilearn-state-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs SQL on a database directly, as another program (or an operator) would.
  static void sqlite(const fs::path& path, const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    char* error = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK)
        << (error ? error : "");
    sqlite3_free(error);
    sqlite3_close(db);
  }

  static std::string read_all(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }

  fs::path dir_;
};

TEST_F(SqliteStoreTest, WhatWasCommittedIsThereAfterReopening) {
  {
    auto store = open_sqlite_store(dir_);
    store->commit({{"nodes/a", "1"}, {"nodes/b", "2"}, {"jobs/x", std::string("\0bin", 4)}});
    store->erase("nodes/a");
    store->put("head/epoch", "7");
  }
  auto store = open_sqlite_store(dir_);
  EXPECT_EQ(store->describe(), "sqlite:" + (dir_ / "state.db").string());
  auto nodes = store->load("nodes/");
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes.at("nodes/b"), "2");
  EXPECT_EQ(store->get("jobs/x"), std::string("\0bin", 4));
  EXPECT_EQ(store->get("head/epoch"), "7");
  EXPECT_EQ(store->get("head/epo"), std::nullopt);
  EXPECT_EQ(store->load("").size(), 3u);
}

TEST_F(SqliteStoreTest, APrefixDoesNotMatchItsNeighbours) {
  auto store = open_sqlite_store(dir_);
  store->commit({{"job/1", "a"}, {"jobs/1", "b"}, {"jobs0", "c"}, {"jobs/", "d"}});
  auto jobs = store->load("jobs/");
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs.count("jobs/1"), 1u);
  EXPECT_EQ(jobs.count("jobs/"), 1u);
}

TEST_F(SqliteStoreTest, ABatchThatFailsChangesNothing) {
  open_sqlite_store(dir_)->put("keep", "old");
  // A trigger that refuses one key makes the batch fail after its first write succeeded.
  sqlite(dir_ / "state.db",
         "CREATE TRIGGER refuse BEFORE INSERT ON kv WHEN NEW.key = 'poison' "
         "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;");
  auto store = open_sqlite_store(dir_);
  EXPECT_THROW(store->commit({{"keep", "new"}, {"other", "x"}, {"poison", "y"}}), StateStoreError);
  EXPECT_EQ(store->get("keep"), "old");
  EXPECT_EQ(store->get("other"), std::nullopt);
  store->commit({{"keep", "newer"}});  // the store is usable after a failed batch
  EXPECT_EQ(store->get("keep"), "newer");
}

TEST_F(SqliteStoreTest, AnEmptyOrForeignOrGarbageFileIsRefusedAndLeftAsItWas) {
  fs::create_directories(dir_);
  const auto path = dir_ / "state.db";
  const std::vector<std::string> contents = {
      "",                                             // truncated to nothing
      "this is not a database, it is a text file\n",  // not SQLite at all
      std::string(4096, '\x5a'),                      // garbage of a page's size
  };
  for (const auto& content : contents) {
    { std::ofstream(path, std::ios::binary) << content; }
    try {
      open_sqlite_store(dir_);
      ADD_FAILURE() << "accepted a file holding " << content.size() << " bytes of junk";
    } catch (const StateStoreError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(path.string()), std::string::npos) << what;
      EXPECT_NE(what.find("Nothing was changed"), std::string::npos) << what;
    }
    EXPECT_EQ(read_all(path), content);
    EXPECT_FALSE(fs::exists(dir_ / "state.db-wal"));
  }
}

TEST_F(SqliteStoreTest, ATruncatedDatabaseIsRefusedAndLeftAsItWas) {
  {
    auto store = open_sqlite_store(dir_);
    std::vector<Write> writes;
    // Enough rows for several pages, so that cutting the file loses some of them.
    for (int i = 0; i < 2000; ++i) {
      writes.push_back({"jobs/" + std::to_string(i), std::string(200, 'v')});
    }
    store->commit(writes);
  }
  // Closing checkpointed the log into the main file; cut that file in the middle of a page run.
  const auto path = dir_ / "state.db";
  ASSERT_FALSE(fs::exists(dir_ / "state.db-wal"));
  const auto size = fs::file_size(path);
  ASSERT_GT(size, 64u * 1024);
  fs::resize_file(path, size / 2);
  const std::string before = read_all(path);
  try {
    open_sqlite_store(dir_);
    ADD_FAILURE() << "a database cut in half was accepted";
  } catch (const StateStoreError& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_all(path), before);
}

TEST_F(SqliteStoreTest, AnotherProgramsOrANewerSchemasDatabaseIsRefused) {
  fs::create_directories(dir_);
  const auto path = dir_ / "state.db";
  sqlite(path, "CREATE TABLE t(x);");  // a valid SQLite file without our application id
  EXPECT_THROW(open_sqlite_store(dir_), StateStoreError);
  fs::remove(path);
  open_sqlite_store(dir_)->put("a", "b");
  sqlite(path, "PRAGMA user_version = 99;");
  try {
    open_sqlite_store(dir_);
    ADD_FAILURE() << "a newer schema was accepted";
  } catch (const StateStoreError& e) {
    EXPECT_NE(std::string(e.what()).find("newer OmniLearn"), std::string::npos) << e.what();
  }
}

TEST_F(SqliteStoreTest, OneHeadPerStateDirectory) {
  auto first = open_sqlite_store(dir_);
  try {
    open_sqlite_store(dir_);
    ADD_FAILURE() << "two stores over one directory";
  } catch (const StateStoreError& e) {
    EXPECT_NE(std::string(e.what()).find("another head is using"), std::string::npos) << e.what();
  }
  first.reset();  // released with the store (and by the kernel when a head dies)
  EXPECT_NO_THROW(open_sqlite_store(dir_));
  // A refused file releases the lock too.
  fs::remove(dir_ / "state.db");
  { std::ofstream(dir_ / "state.db") << "junk"; }
  EXPECT_THROW(open_sqlite_store(dir_), StateStoreError);
  fs::remove(dir_ / "state.db");
  EXPECT_NO_THROW(open_sqlite_store(dir_));
}

TEST(StateStoreSpec, NamesTheStoresItAccepts) {
  EXPECT_NE(open_state_store("memory:"), nullptr);
  try {
    open_state_store("redis://127.0.0.1:6379");
    ADD_FAILURE() << "an unknown store kind was accepted";
  } catch (const StateStoreError& e) {
    EXPECT_NE(std::string(e.what()).find("sqlite:DIR"), std::string::npos) << e.what();
  }
  auto memory = open_memory_store();
  memory->commit({{"a/1", "x"}, {"a/2", "y"}, {"b", "z"}});
  memory->commit({{"a/1", std::nullopt}});
  EXPECT_EQ(memory->load("a/").size(), 1u);
}

}  // namespace
}  // namespace omnilearn::state
