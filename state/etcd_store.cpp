#include "state/etcd_store.hpp"

#include <fmt/format.h>
#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

namespace omnilearn::state {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// etcd's default --max-txn-ops is 128; one operation is the leader compare.
constexpr std::size_t kMaxOpsPerTxn = 120;

std::string base64(const std::string& in) {
  static const char* kTable = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    unsigned v = (static_cast<unsigned char>(in[i]) << 16) |
                 (static_cast<unsigned char>(in[i + 1]) << 8) |
                 static_cast<unsigned char>(in[i + 2]);
    out += kTable[(v >> 18) & 63];
    out += kTable[(v >> 12) & 63];
    out += kTable[(v >> 6) & 63];
    out += kTable[v & 63];
  }
  if (i + 1 == in.size()) {
    unsigned v = static_cast<unsigned char>(in[i]) << 16;
    out += kTable[(v >> 18) & 63];
    out += kTable[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    unsigned v =
        (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8);
    out += kTable[(v >> 18) & 63];
    out += kTable[(v >> 12) & 63];
    out += kTable[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

std::string unbase64(const std::string& in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  unsigned buffer = 0;
  int bits = 0;
  for (char c : in) {
    int v = value(c);
    if (v < 0) {
      if (c == '=') break;
      throw StateStoreError("etcd answered a value that is not base64");
    }
    buffer = (buffer << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buffer >> bits) & 0xff);
    }
  }
  return out;
}

// The first key after every key that starts with `prefix` (etcd's range_end for a prefix).
std::string prefix_end(std::string prefix) {
  while (!prefix.empty()) {
    auto& last = prefix.back();
    if (static_cast<unsigned char>(last) < 0xff) {
      ++last;
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

std::int64_t as_int(const Json& value) {
  // The gateway writes 64-bit integers as strings; absent means 0.
  if (value.is_null()) return 0;
  if (value.is_string()) return std::stoll(value.get<std::string>());
  return value.get<std::int64_t>();
}

class EtcdStore final : public StateStore {
 public:
  explicit EtcdStore(EtcdOptions options)
      : options_(std::move(options)),
        state_prefix_(options_.prefix + "/state/"),
        leader_key_(options_.prefix + "/leader") {
    if (options_.endpoints.empty()) throw StateStoreError("etcd: no endpoints given");
    // The lease runs on etcd's side from when the grant reaches it: counted here from the ask.
    const auto asked = Clock::now();
    lease_ = as_int(call("/v3/lease/grant", {{"TTL", options_.lease_ttl.count()}}).at("ID"));
    last_renewed_ = asked;
    deadline_.store((asked + valid_for()).time_since_epoch().count(), std::memory_order_release);
    keeper_ = std::thread([this] { keep_lease(); });
    watchdog_ = std::thread([this] { watch_deadline(); });
    try {
      campaign();
    } catch (...) {
      stop_keeper();
      throw;
    }
  }

  ~EtcdStore() override {
    stop_keeper();
    // Stepping down at once lets a standby take over without waiting out the lease.
    try {
      call("/v3/lease/revoke", {{"ID", std::to_string(lease_)}});
    } catch (const std::exception&) {
    }
  }

  // The clock first: past the deadline, the lease may be gone whatever the threads have done.
  std::optional<std::string> lapsed() const override {
    const Clock::time_point deadline{Clock::duration(deadline_.load(std::memory_order_acquire))};
    if (Clock::now() >= deadline) {
      return fmt::format(
          "this head's etcd lease was not renewed in time (its TTL is {} s): "
          "another head may be active",
          options_.lease_ttl.count());
    }
    if (lost_flag_.load(std::memory_order_acquire)) return "this head's etcd lease is lost";
    return std::nullopt;
  }

  std::string describe() const override {
    std::string hosts;
    for (const auto& endpoint : options_.endpoints) hosts += (hosts.empty() ? "" : ",") + endpoint;
    return "etcd://" + hosts + options_.prefix;
  }

  bool durable() const override { return true; }

  std::map<std::string, std::string> load(const std::string& prefix) override {
    std::map<std::string, std::string> out;
    const std::string first = state_prefix_ + prefix;
    const std::string end = prefix_end(first);
    std::string from = first;
    while (true) {
      auto answer =
          call("/v3/kv/range", {{"key", base64(from)}, {"range_end", base64(end)}, {"limit", 500}});
      const auto& kvs = answer.value("kvs", Json::array());
      for (const auto& kv : kvs) {
        auto key = unbase64(kv.at("key").get<std::string>());
        out[key.substr(state_prefix_.size())] = unbase64(kv.value("value", std::string()));
        from = key + std::string(1, '\0');
      }
      if (!answer.value("more", false) || kvs.empty()) break;
    }
    return out;
  }

  void commit(const std::vector<Write>& writes) override {
    // etcd bounds the operations of one transaction: a larger batch goes in parts, each atomic
    // and each fenced (the head's state is written so that any prefix of a batch is valid).
    for (std::size_t begin = 0; begin < writes.size(); begin += kMaxOpsPerTxn) {
      const std::size_t end = std::min(writes.size(), begin + kMaxOpsPerTxn);
      Json success = Json::array();
      for (std::size_t i = begin; i < end; ++i) {
        const auto key = base64(state_prefix_ + writes[i].key);
        if (writes[i].value) {
          success.push_back({{"request_put", {{"key", key}, {"value", base64(*writes[i].value)}}}});
        } else {
          success.push_back({{"request_delete_range", {{"key", key}}}});
        }
      }
      Json txn{{"compare", Json::array({fenced()})}, {"success", success}};
      auto answer = call("/v3/kv/txn", txn);
      if (!answer.value("succeeded", false)) {
        deposed("another head holds the leader key " + leader_key_);
        throw StateStoreError(fmt::format(
            "this head is no longer the active one in {}: a write was refused", describe()));
      }
    }
  }

 private:
  // The compare every write carries: the leader key is still the one this head created.
  Json fenced() const {
    return {{"key", base64(leader_key_)},
            {"target", "CREATE"},
            {"result", "EQUAL"},
            {"create_revision", std::to_string(leader_revision_.load())}};
  }

  void campaign() {
    std::string announced;
    while (true) {
      Json txn{{"compare", Json::array({{{"key", base64(leader_key_)},
                                         {"target", "CREATE"},
                                         {"result", "EQUAL"},
                                         {"create_revision", "0"}}})},
               {"success", Json::array({{{"request_put",
                                          {{"key", base64(leader_key_)},
                                           {"value", base64(options_.self)},
                                           {"lease", std::to_string(lease_)}}}}})},
               {"failure", Json::array({{{"request_range", {{"key", base64(leader_key_)}}}}})}};
      auto answer = call("/v3/kv/txn", txn);
      if (answer.value("succeeded", false)) {
        leader_revision_ = as_int(answer.at("header").at("revision"));
        return;
      }
      std::string active = "another head";
      try {
        const auto& kvs = answer.at("responses").at(0).at("response_range").at("kvs");
        if (!kvs.empty()) active = unbase64(kvs.at(0).value("value", std::string()));
      } catch (const std::exception&) {
      }
      if (!options_.standby) {
        throw StateStoreError(fmt::format(
            "{} is the active head in {}: start this one with --standby to take over when it "
            "goes, or stop it first",
            active, describe()));
      }
      if (active != announced && options_.on_waiting) options_.on_waiting(active);
      announced = active;
      std::unique_lock lock(mutex_);
      if (wake_.wait_for(lock, std::chrono::milliseconds(250), [this] { return stopping_; })) {
        throw StateStoreError("stopped while waiting to become the active head");
      }
      if (lost_) throw StateStoreError("etcd lease lost while waiting: " + lost_reason_);
    }
  }

  // The lease is lost when etcd says so, and also when this process could not renew it for
  // nearly a whole TTL (frozen, or cut off): etcd may then expire it and elect another head,
  // and this one must have stopped acting by then, without asking. Hence the deadline: a tenth
  // of the TTL (at most 500 ms) before the TTL is out, counted from when the last renewal was
  // sent (etcd counts from when it arrived), kept by a thread of its own that no renewal holds
  // up (one that gets no answer waits out its connect and read timeouts: seconds, with several
  // members).
  std::chrono::milliseconds valid_for() const {
    using std::chrono::milliseconds;
    const auto ttl = std::chrono::duration_cast<milliseconds>(options_.lease_ttl);
    return ttl - std::min(ttl / 10, milliseconds(500));
  }

  void watch_deadline() {
    std::unique_lock lock(mutex_);
    while (!stopping_ && !lost_) {
      const auto deadline = last_renewed_ + valid_for();
      if (Clock::now() < deadline) {
        // Woken early by a renewal (a later deadline) or by stop.
        wake_.wait_until(lock, deadline);
        continue;
      }
      const double silent = std::chrono::duration<double>(Clock::now() - last_renewed_).count();
      lock.unlock();
      deposed(
          fmt::format("the etcd lease was not renewed for {:.1f} s (its TTL is {} s, after "
                      "which etcd may elect another head)",
                      silent, options_.lease_ttl.count()));
      return;
    }
  }

  // Renews the lease a third of the TTL apart, until it is lost or the store stops.
  void keep_lease() {
    const auto period =
        std::chrono::duration_cast<std::chrono::milliseconds>(options_.lease_ttl) / 3;
    std::unique_lock lock(mutex_);
    while (!stopping_ && !lost_) {
      wake_.wait_until(lock, last_attempt_ + period, [this] { return stopping_ || lost_; });
      if (stopping_ || lost_) return;
      const auto now = Clock::now();
      last_attempt_ = now;
      const auto deadline = last_renewed_ + valid_for();
      lock.unlock();
      try {
        // Not waited for past the deadline: the lease is lost by then anyway.
        auto answer = call("/v3/lease/keepalive", {{"ID", std::to_string(lease_)}}, deadline);
        const auto ttl = as_int(answer.at("result").value("TTL", Json()));
        if (ttl <= 0) {
          deposed("etcd expired this head's lease");
          return;
        }
        lock.lock();
        last_renewed_ = now;  // counted from the ask, as the lease is on etcd's side
        deadline_.store((now + valid_for()).time_since_epoch().count(), std::memory_order_release);
        wake_.notify_all();   // the watchdog's deadline moved
      } catch (const std::exception&) {
        lock.lock();  // tried again at the next period, until the deadline
      }
    }
  }

  void deposed(const std::string& why) {
    bool first = false;
    {
      std::lock_guard lock(mutex_);
      if (!lost_) {
        lost_ = true;
        lost_flag_.store(true, std::memory_order_release);
        lost_reason_ = why;
        first = true;
      }
    }
    wake_.notify_all();  // the keeper and the watchdog end
    if (first && leader_revision_ != 0 && options_.on_deposed) options_.on_deposed(why);
  }

  void stop_keeper() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (keeper_.joinable()) keeper_.join();
    if (watchdog_.joinable()) watchdog_.join();
  }

  // POSTs `body` to one member after another until one answers; throws StateStoreError naming
  // every member's failure. With a `deadline`, no member is asked, nor waited for, past it.
  Json call(const std::string& path, const Json& body,
            std::optional<Clock::time_point> deadline = std::nullopt) {
    using std::chrono::milliseconds;
    std::string failures;
    const auto text = body.dump();
    for (std::size_t n = 0; n < options_.endpoints.size(); ++n) {
      const std::size_t i = (preferred_.load() + n) % options_.endpoints.size();
      const auto& endpoint = options_.endpoints[i];
      auto connect = milliseconds(1000), transfer = milliseconds(3000);
      if (deadline) {
        const auto left = std::chrono::duration_cast<milliseconds>(*deadline - Clock::now());
        if (left <= milliseconds(0)) {
          failures += fmt::format("; {}: not asked, the deadline had passed", endpoint);
          continue;
        }
        connect = std::min(connect, left);
        transfer = std::min(transfer, left);
      }
      httplib::Client client("http://" + endpoint);
      client.set_connection_timeout(connect);
      client.set_read_timeout(transfer);
      client.set_write_timeout(transfer);
      auto result = client.Post(path, text, "application/json");
      if (!result) {
        failures += fmt::format("; {}: {}", endpoint, httplib::to_string(result.error()));
        continue;
      }
      if (result->status != 200) {
        failures += fmt::format("; {}: HTTP {} {}", endpoint, result->status, result->body);
        continue;
      }
      preferred_ = i;
      auto json = Json::parse(result->body, nullptr, false);
      if (json.is_discarded()) {
        failures += fmt::format("; {}: an answer that is not JSON", endpoint);
        continue;
      }
      return json;
    }
    throw StateStoreError(fmt::format("cannot reach etcd at {} ({}): is etcd running there?",
                                      describe(), failures.empty() ? "" : failures.substr(2)));
  }

  EtcdOptions options_;
  const std::string state_prefix_;
  const std::string leader_key_;
  std::int64_t lease_ = 0;
  // The leader key's create revision while this head leads (0 before): set by campaign() on the
  // constructor's thread while the lease keeper already runs.
  std::atomic<std::int64_t> leader_revision_{0};
  std::atomic<std::size_t> preferred_{0};

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool lost_ = false;
  std::string lost_reason_;
  Clock::time_point last_renewed_;
  Clock::time_point last_attempt_{};
  // What lapsed() reads without the mutex: last_renewed_ + valid_for() (Clock ticks) and lost_.
  std::atomic<Clock::rep> deadline_{0};
  std::atomic<bool> lost_flag_{false};
  std::thread keeper_;
  std::thread watchdog_;  // deposes this head at the lease's deadline (watch_deadline)
};

}  // namespace

void parse_etcd_spec(const std::string& spec, EtcdOptions& options) {
  const std::string scheme = "etcd://";
  if (spec.rfind(scheme, 0) != 0) {
    throw StateStoreError("'" + spec +
                          "' is not an etcd store: etcd://HOST:PORT[,HOST:PORT...][/PREFIX]");
  }
  std::string rest = spec.substr(scheme.size());
  auto slash = rest.find('/');
  std::string hosts = rest.substr(0, slash);
  if (slash != std::string::npos && slash + 1 < rest.size()) {
    options.prefix = rest.substr(slash);
    while (options.prefix.size() > 1 && options.prefix.back() == '/') options.prefix.pop_back();
  }
  options.endpoints.clear();
  std::size_t start = 0;
  while (start <= hosts.size()) {
    auto comma = hosts.find(',', start);
    auto item = hosts.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty() || item.find(':') == std::string::npos) {
      throw StateStoreError(
          fmt::format("'{}': each etcd member is HOST:PORT (got '{}')", spec, item));
    }
    options.endpoints.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
}

std::unique_ptr<StateStore> open_etcd_store(EtcdOptions options) {
  return std::make_unique<EtcdStore>(std::move(options));
}

}  // namespace omnilearn::state
