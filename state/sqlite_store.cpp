#include <fcntl.h>
#include <fmt/format.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "state/state_store.hpp"

namespace omnilearn::state {
namespace {

namespace fs = std::filesystem;

// The schema this build writes; a database of a newer schema is refused rather than
// misread. Kept in the database's user_version, which SQLite stores in the file header.
constexpr int kSchemaVersion = 1;

// SQLite's answer to "is this ours?": the application id in the header ("OMNI").
constexpr int kApplicationId = 0x4f4d4e49;

class SqliteStore final : public StateStore {
 public:
  explicit SqliteStore(fs::path dir) : dir_(std::move(dir)), path_(dir_ / "state.db") {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec) {
      throw StateStoreError(
          fmt::format("cannot create the state directory {}: {} (choose "
                      "another with --state-dir)",
                      dir_.string(), ec.message()));
    }
    lock_directory();
    try {
      open_database();
    } catch (...) {
      // The destructor does not run for a constructor that throws.
      close();
      release_lock();
      throw;
    }
  }

  ~SqliteStore() override {
    close();
    release_lock();
  }

  std::string describe() const override { return "sqlite:" + path_.string(); }
  bool durable() const override { return true; }

  std::map<std::string, std::string> load(const std::string& prefix) override {
    std::lock_guard lock(mutex_);
    std::map<std::string, std::string> out;
    sqlite3_stmt* statement = prepare("SELECT key, value FROM kv WHERE key >= ?1 ORDER BY key");
    sqlite3_bind_text(statement, 1, prefix.data(), static_cast<int>(prefix.size()),
                      SQLITE_TRANSIENT);
    int rc;
    while ((rc = sqlite3_step(statement)) == SQLITE_ROW) {
      std::string key(reinterpret_cast<const char*>(sqlite3_column_text(statement, 0)),
                      static_cast<std::size_t>(sqlite3_column_bytes(statement, 0)));
      if (key.compare(0, prefix.size(), prefix) != 0) break;
      const void* blob = sqlite3_column_blob(statement, 1);
      std::string value(static_cast<const char*>(blob),
                        static_cast<std::size_t>(sqlite3_column_bytes(statement, 1)));
      out.emplace(std::move(key), std::move(value));
    }
    std::string why = sqlite3_errmsg(db_);
    sqlite3_finalize(statement);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
      throw StateStoreError(
          fmt::format("cannot read the head's state store {}: {}", path_.string(), why));
    }
    return out;
  }

  void commit(const std::vector<Write>& writes) override {
    if (writes.empty()) return;
    std::lock_guard lock(mutex_);
    exec("BEGIN IMMEDIATE;");
    try {
      sqlite3_stmt* put = prepare("INSERT OR REPLACE INTO kv (key, value) VALUES (?1, ?2)");
      sqlite3_stmt* del = prepare("DELETE FROM kv WHERE key = ?1");
      auto finalize = [&] {
        sqlite3_finalize(put);
        sqlite3_finalize(del);
      };
      for (const auto& write : writes) {
        sqlite3_stmt* statement = write.value ? put : del;
        sqlite3_reset(statement);
        sqlite3_bind_text(statement, 1, write.key.data(), static_cast<int>(write.key.size()),
                          SQLITE_TRANSIENT);
        if (write.value) {
          sqlite3_bind_blob(statement, 2, write.value->data(),
                            static_cast<int>(write.value->size()), SQLITE_TRANSIENT);
        }
        if (sqlite3_step(statement) != SQLITE_DONE) {
          std::string why = sqlite3_errmsg(db_);
          finalize();
          throw StateStoreError(fmt::format("cannot write '{}' to the head's state store {}: {}",
                                            write.key, path_.string(), why));
        }
      }
      finalize();
      exec("COMMIT;");
    } catch (...) {
      sqlite3_exec(db_, "ROLLBACK;", nullptr, nullptr, nullptr);
      throw;
    }
  }

 private:
  // Opens the database, or creates it where there is none; an existing one is checked first.
  void open_database() {
    std::error_code ec;
    const bool existed = fs::exists(path_, ec);
    if (existed && fs::file_size(path_, ec) == 0 && !ec) {
      // SQLite takes an empty file for an empty database; for us it is a file that lost its
      // contents, not a fresh start.
      refuse("the file is empty (truncated)");
    }
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX | (existed ? 0 : SQLITE_OPEN_CREATE);
    if (sqlite3_open_v2(path_.c_str(), &db_, flags, nullptr) != SQLITE_OK) {
      std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
      close();
      throw StateStoreError(
          fmt::format("cannot open the head's state store {}: {}", path_.string(), why));
    }
    sqlite3_busy_timeout(db_, 5000);
    if (existed) {
      check_existing();
    } else {
      exec(fmt::format("PRAGMA application_id = {}; PRAGMA user_version = {};", kApplicationId,
                       kSchemaVersion));
    }
    // WAL: a commit is one append and fsync of the log instead of a rewrite of pages, and a
    // reader never blocks the writer. FULL: the log is fsynced at every commit, so what
    // commit() acknowledged survives a power cut, not only a crash of the process.
    exec("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;");
    exec(
        "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL) "
        "WITHOUT ROWID;");
  }

  // One head per state: two heads writing the same jobs and nodes would each believe it is in
  // charge. The lock is an flock on <dir>/lock, held for the life of the store (the kernel drops
  // it when the process dies, so a killed head never leaves it behind).
  void lock_directory() {
    const auto lock_path = dir_ / "lock";
    lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd_ < 0) {
      throw StateStoreError(
          fmt::format("cannot open {}: {}", lock_path.string(), std::strerror(errno)));
    }
    if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      ::close(lock_fd_);
      lock_fd_ = -1;
      if (error == EWOULDBLOCK) {
        throw StateStoreError(fmt::format(
            "another head is using the state directory {}: stop it first, or give this head a "
            "state directory of its own (--state-dir)",
            dir_.string()));
      }
      throw StateStoreError(
          fmt::format("cannot lock {}: {}", lock_path.string(), std::strerror(error)));
    }
  }

  [[noreturn]] void refuse(const std::string& why) {
    close();
    release_lock();
    throw StateStoreError(fmt::format(
        "the head's state store {} cannot be used: {}. Nothing was changed in it. Move it "
        "aside to start with an empty state (the head then forgets its jobs and nodes), or "
        "restore it from a backup",
        path_.string(), why));
  }

  // An existing file must be one of ours, of a schema we know, and intact, before anything is
  // written to it (setting WAL mode on a damaged file would already write).
  void check_existing() {
    int application_id = 0;
    int version = 0;
    try {
      application_id = pragma_int("application_id");
      version = pragma_int("user_version");
    } catch (const StateStoreError& e) {
      refuse(fmt::format("it is not a readable SQLite database ({})", e.what()));
    }
    if (application_id != kApplicationId) {
      refuse("it is an SQLite database, but not an OmniLearn head's state");
    }
    if (version > kSchemaVersion) {
      refuse(
          fmt::format("it was written by a newer OmniLearn (schema {}; this build reads up "
                      "to {}): run that version's head",
                      version, kSchemaVersion));
    }
    std::string verdict;
    sqlite3_stmt* statement = nullptr;
    if (sqlite3_prepare_v2(db_, "PRAGMA quick_check", -1, &statement, nullptr) != SQLITE_OK) {
      refuse(fmt::format("its integrity cannot be checked ({})", sqlite3_errmsg(db_)));
    }
    int rc;
    while ((rc = sqlite3_step(statement)) == SQLITE_ROW) {
      std::string line = reinterpret_cast<const char*>(sqlite3_column_text(statement, 0));
      if (line != "ok") verdict += (verdict.empty() ? "" : "; ") + line;
    }
    if (rc != SQLITE_DONE)
      verdict += (verdict.empty() ? "" : "; ") + std::string(sqlite3_errmsg(db_));
    sqlite3_finalize(statement);
    if (!verdict.empty()) refuse("it is damaged: " + verdict);
  }

  int pragma_int(const char* name) {
    sqlite3_stmt* statement = prepare(fmt::format("PRAGMA {}", name));
    int rc = sqlite3_step(statement);
    int value = rc == SQLITE_ROW ? sqlite3_column_int(statement, 0) : 0;
    std::string why = sqlite3_errmsg(db_);
    sqlite3_finalize(statement);
    if (rc != SQLITE_ROW) throw StateStoreError(why);
    return value;
  }

  sqlite3_stmt* prepare(const std::string& sql) {
    sqlite3_stmt* statement = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &statement, nullptr) != SQLITE_OK) {
      throw StateStoreError(fmt::format("the head's state store {}: {} (in '{}')", path_.string(),
                                        sqlite3_errmsg(db_), sql));
    }
    return statement;
  }

  void exec(const std::string& sql) {
    char* error = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
      std::string why = error ? error : sqlite3_errmsg(db_);
      sqlite3_free(error);
      throw StateStoreError(fmt::format("the head's state store {}: {}", path_.string(), why));
    }
  }

  void close() {
    if (db_) sqlite3_close_v2(db_);
    db_ = nullptr;
  }

  void release_lock() {
    if (lock_fd_ >= 0) ::close(lock_fd_);
    lock_fd_ = -1;
  }

  fs::path dir_;
  fs::path path_;
  sqlite3* db_ = nullptr;
  int lock_fd_ = -1;
  std::mutex mutex_;
};

class MemoryStore final : public StateStore {
 public:
  std::string describe() const override { return "memory: (forgotten when the head stops)"; }
  bool durable() const override { return false; }

  std::map<std::string, std::string> load(const std::string& prefix) override {
    std::lock_guard lock(mutex_);
    std::map<std::string, std::string> out;
    for (auto it = data_.lower_bound(prefix);
         it != data_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
      out.insert(*it);
    }
    return out;
  }

  void commit(const std::vector<Write>& writes) override {
    std::lock_guard lock(mutex_);
    for (const auto& write : writes) {
      if (write.value) {
        data_[write.key] = *write.value;
      } else {
        data_.erase(write.key);
      }
    }
  }

 private:
  std::mutex mutex_;
  std::map<std::string, std::string> data_;
};

}  // namespace

std::optional<std::string> StateStore::get(const std::string& key) {
  auto found = load(key);
  auto it = found.find(key);
  if (it == found.end()) return std::nullopt;
  return it->second;
}

void StateStore::put(const std::string& key, std::string value) {
  commit({Write{key, std::move(value)}});
}

void StateStore::erase(const std::string& key) { commit({Write{key, std::nullopt}}); }

std::unique_ptr<StateStore> open_sqlite_store(const std::filesystem::path& dir) {
  return std::make_unique<SqliteStore>(dir);
}

std::unique_ptr<StateStore> open_memory_store() { return std::make_unique<MemoryStore>(); }

std::unique_ptr<StateStore> open_state_store(const std::string& spec) {
  if (spec == "memory:" || spec == "memory") return open_memory_store();
  if (spec.rfind("sqlite:", 0) == 0) return open_sqlite_store(spec.substr(7));
  if (spec.find("://") != std::string::npos || spec.empty()) {
    throw StateStoreError(
        fmt::format("--store '{}': the head's state goes in a local directory ('sqlite:DIR' or "
                    "a directory), in memory ('memory:'), or in etcd "
                    "('etcd://HOST:PORT[,HOST:PORT...][/PREFIX]')",
                    spec));
  }
  return open_sqlite_store(spec);
}

}  // namespace omnilearn::state
