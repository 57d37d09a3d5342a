#include "asp/server_core.hpp"

#include <algorithm>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string>

namespace omnilearn::asp {
namespace {

constexpr char kMagicV1[8] = {'O', 'L', 'A', 'S', 'P', 'C', 'K', '1'};
constexpr char kMagic[8] = {'O', 'L', 'A', 'S', 'P', 'C', 'K', '2'};
constexpr std::size_t kCounters = 6;  // incarnation .. rejected

void put(std::vector<std::uint8_t>& out, std::int64_t value) {
  auto u = static_cast<std::uint64_t>(value);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(u >> (8 * i)));
}

// Reads 64-bit words in order; once a read runs past the end, every later one fails too.
class WordReader {
 public:
  explicit WordReader(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}
  bool next(std::uint64_t* out) {
    if (at_ > bytes_.size() || bytes_.size() - at_ < 8) return false;
    std::uint64_t u = 0;
    for (int i = 0; i < 8; ++i) u |= static_cast<std::uint64_t>(bytes_[at_ + i]) << (8 * i);
    at_ += 8;
    *out = u;
    return true;
  }
  bool next(std::int64_t* out) {
    std::uint64_t u = 0;
    if (!next(&u)) return false;
    *out = static_cast<std::int64_t>(u);
    return true;
  }
  // A count of `width`-word entries that fits in what is left (so no huge allocation follows).
  bool count(std::int64_t* out, std::size_t width) {
    if (!next(out) || *out < 0) return false;
    return static_cast<std::uint64_t>(*out) <= (bytes_.size() - at_) / (8 * width);
  }
  bool done() const { return at_ == bytes_.size(); }

 private:
  std::span<const std::uint8_t> bytes_;
  std::size_t at_ = sizeof(kMagic);
};

}  // namespace

std::vector<std::uint8_t> encode_checkpoint(const ServerCheckpoint& c) {
  std::vector<std::uint8_t> out(kMagic, kMagic + sizeof(kMagic));
  for (std::int64_t v : {c.incarnation, c.version, c.pushes, c.applied, c.dropped, c.rejected}) {
    put(out, v);
  }
  put(out, static_cast<std::int64_t>(c.updates.size()));
  for (const auto& [worker, n] : c.updates) {
    put(out, worker);
    put(out, n);
  }
  put(out, static_cast<std::int64_t>(c.taken.size()));
  for (const auto& [worker, batches] : c.taken) {
    put(out, worker);
    put(out, static_cast<std::int64_t>(batches.size()));
    for (const TakenBatch& b : batches) {
      put(out, static_cast<std::int64_t>(b.batch));
      put(out, b.applied ? 1 : 0);
    }
  }
  return out;
}

std::optional<ServerCheckpoint> decode_checkpoint(std::span<const std::uint8_t> bytes) {
  if (bytes.size() < sizeof(kMagic)) return std::nullopt;
  const bool v1 = std::memcmp(bytes.data(), kMagicV1, sizeof(kMagicV1)) == 0;
  if (!v1 && std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) return std::nullopt;
  WordReader in(bytes);
  ServerCheckpoint c;
  std::int64_t* counters[kCounters] = {&c.incarnation, &c.version, &c.pushes,
                                       &c.applied,     &c.dropped, &c.rejected};
  for (std::int64_t* v : counters) {
    if (!in.next(v) || *v < 0) return std::nullopt;
  }
  // (Compared so that no sum of two counters can overflow.)
  if (c.applied > c.version || c.applied > c.pushes || c.dropped != c.pushes - c.applied) {
    return std::nullopt;
  }
  std::int64_t pairs = 0;
  if (!in.count(&pairs, 2)) return std::nullopt;
  for (std::int64_t p = 0; p < pairs; ++p) {
    std::int64_t worker = 0, n = 0;
    if (!in.next(&worker) || !in.next(&n)) return std::nullopt;
    if (n < 0 || !c.updates.emplace(worker, n).second) return std::nullopt;
  }
  if (!v1) {
    // What the encoder writes of a real state, nothing else: at most kTakenWorkersKept workers,
    // each with 1..kTakenKept distinct batches (ids from 1), no more entries than pushes weighed
    // and no more applied ones per worker than its updates.
    std::int64_t workers = 0;
    if (!in.count(&workers, 2) ||
        workers > static_cast<std::int64_t>(ServerCore::kTakenWorkersKept)) {
      return std::nullopt;
    }
    std::int64_t entries = 0;
    for (std::int64_t w = 0; w < workers; ++w) {
      std::int64_t worker = 0, n = 0;
      if (!in.next(&worker) || !in.count(&n, 2)) return std::nullopt;
      if (n < 1 || n > static_cast<std::int64_t>(ServerCore::kTakenKept)) return std::nullopt;
      entries += n;
      if (entries > c.pushes) return std::nullopt;
      auto [batches, fresh] = c.taken.try_emplace(worker);
      if (!fresh) return std::nullopt;
      std::set<std::uint64_t> seen;
      std::int64_t applied_here = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint64_t batch = 0, applied = 0;
        if (!in.next(&batch) || !in.next(&applied)) return std::nullopt;
        if (batch == 0 || applied > 1 || !seen.insert(batch).second) return std::nullopt;
        applied_here += static_cast<std::int64_t>(applied);
        batches->second.push_back(TakenBatch{batch, applied == 1});
      }
      const auto updates = c.updates.find(worker);
      if (applied_here > (updates == c.updates.end() ? 0 : updates->second)) return std::nullopt;
    }
  }
  if (!in.done()) return std::nullopt;
  return c;
}

ServerCore::ServerCore(std::int64_t shard_size, StalenessConfig config, ApplyFn apply)
    : shard_size_(shard_size), config_(config), apply_(std::move(apply)) {
  if (shard_size < 1) {
    throw std::invalid_argument("asp: a shard needs >= 1 parameter, got " + std::to_string(shard_size));
  }
  validate(config_);
  if (!apply_) throw std::invalid_argument("asp: a server needs an apply callback");
}

ServerCore ServerCore::resume(const ServerCheckpoint& checkpoint, std::int64_t shard_size,
                              StalenessConfig config, ApplyFn apply) {
  ServerCore core(shard_size, config, std::move(apply));
  core.state_ = checkpoint;
  core.state_.incarnation = checkpoint.incarnation + 1;
  core.resumed_from_ = checkpoint.version;
  return core;
}

void ServerCore::set_batch_plan(std::int64_t global_batch, int workers) {
  if (global_batch < 1 || workers < 1) {
    throw std::invalid_argument("asp: a batch plan needs B >= 1 and n >= 1, got B = " +
                                std::to_string(global_batch) + ", n = " + std::to_string(workers));
  }
  reference_batch_ = static_cast<double>(global_batch) / workers;
}

void ServerCore::note_version_seen(std::int64_t number) {
  if (state_.incarnation > 0) lost_ = std::max(lost_, number - resumed_from_);
}

bool ServerCore::fenced(WorkerId worker, std::uint64_t batch_id) const {
  const auto it = fenced_through_.find(worker);
  if (it == fenced_through_.end()) return false;
  return it->second == kWholeWorker || (batch_id != 0 && batch_id <= it->second);
}

std::vector<TakenBatch> ServerCore::fence(WorkerId worker, std::uint64_t through) {
  auto& mark = fenced_through_[worker];
  mark = std::max(mark, through);
  std::vector<TakenBatch> out;
  if (const auto it = state_.taken.find(worker); it != state_.taken.end()) {
    for (const auto& t : it->second) {
      if (t.batch <= through) out.push_back(t);
    }
  }
  return out;
}

PushOutcome ServerCore::push(WorkerId worker, Version pulled, std::int64_t batch_size,
                             std::span<const float> gradient, std::uint64_t batch_id) {
  if (static_cast<std::int64_t>(gradient.size()) != shard_size_) {
    throw std::invalid_argument("asp: a gradient of " + std::to_string(gradient.size()) +
                                " floats for a shard of " + std::to_string(shard_size_));
  }
  if (batch_size < 1) {
    throw std::invalid_argument("asp: a push needs batch >= 1, got " + std::to_string(batch_size));
  }
  if (config_.lr_scaling == LrScaling::kLinear && !reference_batch_) {
    throw std::logic_error("asp: linear lr_scaling before any batch plan (set_batch_plan)");
  }
  PushOutcome out;
  if (fenced(worker, batch_id)) {
    ++fenced_pushes_;
    out.status = PushStatus::kFenced;
    out.version = pull();
    return out;
  }
  std::int64_t base = pulled.number;
  if (pulled.incarnation > state_.incarnation ||
      (pulled.incarnation == state_.incarnation && pulled.number > state_.version) ||
      pulled.number < 0) {
    ++state_.rejected;
    out.version = pull();
    return out;
  }
  if (pulled.incarnation < state_.incarnation) {
    // Pulled from an earlier incarnation: what it saw past the checkpoint is lost.
    if (pulled.incarnation == state_.incarnation - 1) note_version_seen(pulled.number);
    base = std::min(pulled.number, resumed_from_);
  }
  out.staleness = state_.version - base;
  const StepDecision decision =
      decide_step(config_, out.staleness, batch_size, reference_batch_.value_or(1.0));
  if (decision.apply) {
    apply_(decision.scale, gradient);
    ++state_.version;
    ++state_.applied;
    ++state_.updates[worker];
    out.status = PushStatus::kApplied;
    out.scale = decision.scale;
  } else {
    ++state_.dropped;
    out.status = PushStatus::kDropped;
  }
  ++state_.pushes;
  stats_.record(worker, out.staleness, decision.apply);
  if (batch_id != 0) {
    auto& taken = state_.taken[worker];
    taken.push_back(TakenBatch{batch_id, decision.apply});
    if (taken.size() > kTakenKept) taken.pop_front();
    if (state_.taken.size() > kTakenWorkersKept) {
      // The worker whose newest push came first (batch ids rise as they are dealt): gone long
      // ago, its fences settled; the checkpoint stays bounded however many workers come and go.
      auto oldest = state_.taken.end();
      for (auto it = state_.taken.begin(); it != state_.taken.end(); ++it) {
        if (it->first == worker) continue;
        if (oldest == state_.taken.end() || it->second.back().batch < oldest->second.back().batch) {
          oldest = it;
        }
      }
      state_.taken.erase(oldest);
    }
  }
  out.version = pull();
  return out;
}

}  // namespace omnilearn::asp
