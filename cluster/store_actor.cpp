#include "cluster/store_actor.hpp"

#include <charconv>

#include "runtime/system_messages.hpp"

namespace omnilearn::actors {

StoreActor::StoreActor(StoreLimits limits, std::shared_ptr<StoreStats> stats)
    : limits_(limits), stats_(std::move(stats)) {}

void StoreActor::publish_stats() {
  if (!stats_) return;
  stats_->keys.store(values_.size(), std::memory_order_relaxed);
  stats_->waiting.store(parked_.size(), std::memory_order_relaxed);
}

bool StoreActor::all_present(const std::vector<std::string>& keys) const {
  for (const auto& key : keys) {
    if (!values_.count(key)) return false;
  }
  return true;
}

void StoreActor::answer(const runtime::Envelope& request, const StoreRequest& body) {
  StoreReply reply;
  reply.ok = true;
  if (body.op == StoreRequest::kGet && !body.keys.empty()) reply.value = values_[body.keys[0]];
  this->reply(request, reply);
}

void StoreActor::wake_parked() {
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (all_present(it->second.body.keys)) {
      cancel_timer(it->second.timer);
      answer(it->second.request, it->second.body);
      it = parked_.erase(it);
    } else {
      ++it;
    }
  }
  publish_stats();
}

void StoreActor::on_message(const runtime::Envelope& message) {
  if (message.kind != MessageKind::kStoreRequest) return;
  auto body = decode_or_count<StoreRequest>(message);
  auto fail = [&](const std::string& error) {
    StoreReply reply;
    reply.error = error;
    this->reply(message, reply);
  };
  if (!body) return fail("malformed store request");
  if (body->value.size() > limits_.max_value_bytes) return fail("value too large");
  for (const auto& key : body->keys) {
    if (key.size() > 1024) return fail("key too long");
  }
  bool needs_key = body->op != StoreRequest::kNumKeys;
  if (needs_key && body->keys.empty()) return fail("no key given");
  bool adds_key = body->op == StoreRequest::kSet || body->op == StoreRequest::kAdd ||
                  body->op == StoreRequest::kCompareSet;
  if (adds_key && !values_.count(body->keys[0]) && values_.size() >= limits_.max_keys) {
    return fail("store is full");
  }
  // The counts other threads read (StoreStats) are published before the reply goes out, so
  // whoever got the reply sees them.
  auto respond = [&](const StoreReply& answer) {
    publish_stats();
    this->reply(message, answer);
  };

  StoreReply reply;
  reply.ok = true;
  switch (body->op) {
    case StoreRequest::kSet:
      values_[body->keys[0]] = body->value;
      respond(reply);
      wake_parked();
      return;
    case StoreRequest::kAdd: {
      // c10d keeps counters as decimal strings; so do we, so get() returns what it expects.
      std::int64_t current = 0;
      auto it = values_.find(body->keys[0]);
      if (it != values_.end()) {
        std::from_chars(it->second.data(), it->second.data() + it->second.size(), current);
      }
      current += body->delta;
      values_[body->keys[0]] = std::to_string(current);
      reply.number = current;
      respond(reply);
      wake_parked();
      return;
    }
    case StoreRequest::kCompareSet: {
      auto it = values_.find(body->keys[0]);
      if (it == values_.end()) {
        if (body->expected.empty()) values_[body->keys[0]] = body->value;
        reply.value = values_.count(body->keys[0]) ? values_[body->keys[0]] : body->expected;
      } else if (it->second == body->expected) {
        it->second = body->value;
        reply.value = body->value;
      } else {
        reply.value = it->second;
      }
      respond(reply);
      wake_parked();
      return;
    }
    case StoreRequest::kCheck:
      reply.number = all_present(body->keys) ? 1 : 0;
      respond(reply);
      return;
    case StoreRequest::kDelete:
      reply.number = static_cast<std::int64_t>(values_.erase(body->keys[0]));
      respond(reply);
      return;
    case StoreRequest::kNumKeys:
      reply.number = static_cast<std::int64_t>(values_.size());
      respond(reply);
      return;
    case StoreRequest::kDeletePrefix: {
      // Only the head's own actors (a job's scheduler, the job manager) may clear a job's keys:
      // a trainer of one job must not be able to wipe another job's rendezvous.
      if (message.from.system != system().id()) {
        return fail("delete-prefix is only accepted from actors on the head");
      }
      const auto& prefix = body->keys[0];
      if (prefix.empty()) {
        return fail("delete-prefix needs a non-empty prefix (an empty one would delete every "
                    "job's keys); pass the job's, e.g. \"job/<id>/\"");
      }
      // Parked waiters on these keys are left alone: answered if a key is set again, otherwise
      // at their timeout, as if nothing had happened.
      auto first = values_.lower_bound(prefix);
      auto last = first;
      while (last != values_.end() && last->first.compare(0, prefix.size(), prefix) == 0) ++last;
      reply.number = static_cast<std::int64_t>(std::distance(first, last));
      values_.erase(first, last);
      respond(reply);
      return;
    }
    case StoreRequest::kGet:
    case StoreRequest::kWait: {
      if (all_present(body->keys)) {
        answer(message, *body);
        return;
      }
      if (parked_.size() >= limits_.max_parked) return fail("too many waiting requests");
      auto id = ++next_parked_;
      auto timeout = std::chrono::milliseconds(std::max<std::int64_t>(0, body->timeout_ms));
      auto timer = after(timeout, [this, id] {
        auto it = parked_.find(id);
        if (it == parked_.end()) return;
        auto request = std::move(it->second.request);
        parked_.erase(it);
        publish_stats();
        StoreReply expired;
        expired.error = "timeout";
        this->reply(request, expired);
      });
      parked_.emplace(id, Parked{message, *body, timer});
      publish_stats();
      return;
    }
    default:
      return fail("unknown store operation");
  }
}

}  // namespace omnilearn::actors
