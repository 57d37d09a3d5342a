#include "trainer/runtime_store.hpp"

#include <stdexcept>

#include "wire/job_protocol.hpp"

namespace omnilearn::actors {

RuntimeStore::RuntimeStore(runtime::ActorSystem& system, runtime::ActorAddress store,
                           std::chrono::milliseconds timeout)
    : c10d::Store(timeout), system_(system), store_([store] { return store; }) {}

RuntimeStore::RuntimeStore(runtime::ActorSystem& system,
                           std::function<runtime::ActorAddress()> store,
                           std::chrono::milliseconds timeout)
    : c10d::Store(timeout), system_(system), store_(std::move(store)) {}

RuntimeStore::Reply RuntimeStore::call(int op, std::vector<std::string> keys, std::string value,
                                       std::string expected, std::int64_t delta,
                                       std::chrono::milliseconds wait_timeout) {
  StoreRequest request;
  request.op = op;
  request.keys = std::move(keys);
  request.value = std::move(value);
  request.expected = std::move(expected);
  request.delta = delta;
  request.timeout_ms = wait_timeout.count();
  // The ask outlives the store-side wait a little, so a store timeout arrives as an answer.
  auto pending = system_.ask(store_(), request, wait_timeout + std::chrono::seconds(5));
  if (abandon_) {
    while (pending.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
      if (abandon_()) {
        throw std::runtime_error(
            "rendezvous abandoned: a newer generation replaces it, or this trainer is stopping");
      }
    }
  }
  auto result = pending.get();
  auto reply = result.as<StoreReply>();
  if (!reply) {
    throw std::runtime_error("rendezvous store unreachable: " +
                             (result.error.empty() ? std::string("bad reply") : result.error));
  }
  if (!reply->ok) {
    std::string key = request.keys.empty() ? "" : request.keys[0];
    throw std::runtime_error("rendezvous store: " + reply->error + " (key " + key + ")");
  }
  return Reply{reply->value, reply->number};
}

void RuntimeStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  call(StoreRequest::kSet, {key}, std::string(value.begin(), value.end()), {}, 0,
       std::chrono::milliseconds(0));
}

std::vector<uint8_t> RuntimeStore::compareSet(const std::string& key,
                                              const std::vector<uint8_t>& expected,
                                              const std::vector<uint8_t>& desired) {
  auto reply = call(StoreRequest::kCompareSet, {key}, std::string(desired.begin(), desired.end()),
                    std::string(expected.begin(), expected.end()), 0, std::chrono::milliseconds(0));
  return std::vector<uint8_t>(reply.value.begin(), reply.value.end());
}

std::vector<uint8_t> RuntimeStore::get(const std::string& key) {
  auto reply = call(StoreRequest::kGet, {key}, {}, {}, 0, timeout_);
  return std::vector<uint8_t>(reply.value.begin(), reply.value.end());
}

int64_t RuntimeStore::add(const std::string& key, int64_t value) {
  return call(StoreRequest::kAdd, {key}, {}, {}, value, std::chrono::milliseconds(0)).number;
}

bool RuntimeStore::deleteKey(const std::string& key) {
  return call(StoreRequest::kDelete, {key}, {}, {}, 0, std::chrono::milliseconds(0)).number > 0;
}

bool RuntimeStore::check(const std::vector<std::string>& keys) {
  return call(StoreRequest::kCheck, keys, {}, {}, 0, std::chrono::milliseconds(0)).number > 0;
}

int64_t RuntimeStore::getNumKeys() {
  return call(StoreRequest::kNumKeys, {}, {}, {}, 0, std::chrono::milliseconds(0)).number;
}

void RuntimeStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void RuntimeStore::wait(const std::vector<std::string>& keys,
                        const std::chrono::milliseconds& timeout) {
  call(StoreRequest::kWait, keys, {}, {}, 0, timeout);
}

}  // namespace omnilearn::actors
