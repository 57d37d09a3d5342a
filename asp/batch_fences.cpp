#include "asp/batch_fences.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace omnilearn::asp {

BatchFences::BatchFences(std::int32_t shards) : shards_(shards) {
  if (shards < 1) {
    throw std::invalid_argument("asp: fencing needs >= 1 shard, got " + std::to_string(shards));
  }
}

FenceStart BatchFences::worker_gone(EpochDealer& dealer, WorkerId worker) {
  Round round;
  round.worker = worker;
  for (const std::uint64_t id : dealer.outstanding_ids(worker)) {
    if (!fencing(id)) round.batches.push_back(id);
  }
  std::vector<std::int32_t> all;
  for (std::int32_t s = 0; s < shards_; ++s) all.push_back(s);
  return start(dealer, std::move(round), kWholeWorker, all);
}

FenceStart BatchFences::push_failed(EpochDealer& dealer, WorkerId worker, std::uint64_t batch,
                                    const std::vector<std::int32_t>& taken, bool dropped,
                                    const std::vector<std::int32_t>& ask) {
  Round round;
  round.worker = worker;
  // A request sent again (its reply was lost) names a batch settled or being fenced already.
  const auto held = dealer.outstanding_ids(worker);
  if (fencing(batch) || std::find(held.begin(), held.end(), batch) == held.end()) {
    return FenceStart{};
  }
  round.batches.push_back(batch);
  round.taken[batch] = taken;
  if (dropped) round.dropped.insert(batch);
  return start(dealer, std::move(round), batch, ask);
}

FenceStart BatchFences::start(EpochDealer& dealer, Round round, std::uint64_t through,
                              const std::vector<std::int32_t>& ask) {
  FenceStart out;
  round.through = through;
  for (const std::int32_t s : ask) {
    if (s >= 0 && s < shards_) round.waiting.insert(s);
  }
  if (round.waiting.empty()) {
    out.settled = settle(dealer, round, /*asked=*/false);
    return out;
  }
  const std::uint64_t id = next_round_++;
  out.ask = FenceAsk{id, round.worker, through,
                     std::vector<std::int32_t>(round.waiting.begin(), round.waiting.end())};
  for (const std::uint64_t b : round.batches) fencing_.insert(b);
  rounds_.emplace(id, std::move(round));
  return out;
}

std::vector<SettledBatch> BatchFences::answer(EpochDealer& dealer, std::uint64_t round_id,
                                              std::int32_t shard,
                                              const std::optional<std::vector<TakenBatch>>& taken) {
  const auto it = rounds_.find(round_id);
  if (it == rounds_.end() || it->second.waiting.erase(shard) == 0) return {};
  Round& round = it->second;
  if (taken) {
    for (const TakenBatch& t : *taken) {
      if (std::find(round.batches.begin(), round.batches.end(), t.batch) == round.batches.end()) {
        continue;
      }
      auto& shards = round.taken[t.batch];
      if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
      if (!t.applied) round.dropped.insert(t.batch);
    }
  }
  if (!round.waiting.empty()) return {};
  Round done = std::move(round);
  rounds_.erase(it);
  for (const std::uint64_t b : done.batches) fencing_.erase(b);
  return settle(dealer, done, /*asked=*/true);
}

std::vector<FenceAsk> BatchFences::waiting_on(std::int32_t shard) const {
  std::vector<FenceAsk> out;
  for (const auto& [id, round] : rounds_) {
    if (round.waiting.count(shard) > 0) out.push_back(FenceAsk{id, round.worker, round.through, {shard}});
  }
  return out;
}

std::vector<SettledBatch> BatchFences::settle(EpochDealer& dealer, const Round& round,
                                              bool asked) {
  std::vector<SettledBatch> out;
  for (const std::uint64_t b : round.batches) {
    SettledBatch s;
    s.worker = round.worker;
    s.batch = b;
    s.samples = dealer.batch_samples(b);
    const auto taken = round.taken.find(b);
    s.outcome = dealer.settle(round.worker, b,
                              taken == round.taken.end() ? std::vector<std::int32_t>{}
                                                         : taken->second,
                              shards_);
    s.applied = round.dropped.count(b) == 0;
    s.asked = asked;
    out.push_back(s);
  }
  return out;
}

nlohmann::json BatchFences::state() const {
  using Json = nlohmann::json;
  Json rounds = Json::array();
  for (const auto& [id, r] : rounds_) {
    rounds.push_back(Json{{"id", id},
                          {"worker", r.worker},
                          {"through", r.through},
                          {"batches", r.batches},
                          {"waiting", r.waiting},
                          {"taken", r.taken},
                          {"dropped", r.dropped}});
  }
  return Json{{"next_round", next_round_}, {"rounds", rounds}, {"fencing", fencing_}};
}

void BatchFences::restore_state(const nlohmann::json& state) {
  try {
    std::map<std::uint64_t, Round> rounds;
    for (const auto& r : state.at("rounds")) {
      Round round;
      round.worker = r.at("worker").get<WorkerId>();
      round.through = r.at("through").get<std::uint64_t>();
      round.batches = r.at("batches").get<std::vector<std::uint64_t>>();
      round.waiting = r.at("waiting").get<std::set<std::int32_t>>();
      round.taken = r.at("taken").get<std::map<std::uint64_t, std::vector<std::int32_t>>>();
      round.dropped = r.at("dropped").get<std::set<std::uint64_t>>();
      for (const std::int32_t s : round.waiting) {
        if (s < 0 || s >= shards_) throw std::invalid_argument("a fence round waits on no shard");
      }
      rounds[r.at("id").get<std::uint64_t>()] = std::move(round);
    }
    next_round_ = state.at("next_round").get<std::uint64_t>();
    rounds_ = std::move(rounds);
    fencing_ = state.at("fencing").get<std::set<std::uint64_t>>();
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("the fences' state: ") + e.what());
  }
}

}  // namespace omnilearn::asp
