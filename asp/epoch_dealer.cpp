#include "asp/epoch_dealer.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace omnilearn::asp {

EpochDealer::EpochDealer(std::int64_t dataset_size, std::uint64_t seed, std::int64_t max_epochs)
    : sampler_(dataset_size, seed), max_epochs_(max_epochs) {
  if (max_epochs < 0) {
    throw std::invalid_argument("asp: max_epochs must be >= 0, got " + std::to_string(max_epochs));
  }
}

DealtBatch EpochDealer::deal(WorkerId worker, std::int64_t epoch,
                             std::vector<std::int64_t> indices, bool reissued,
                             std::vector<std::int32_t> shards_done) {
  DealtBatch out;
  out.id = next_id_++;
  out.epoch = epoch;
  out.reissued = reissued;
  out.indices = std::move(indices);
  out.shards_done = std::move(shards_done);
  outstanding_.emplace(out.id, Holding{worker, epoch, out.indices, out.shards_done});
  ++counters_.batches_dealt;
  const auto n = static_cast<std::int64_t>(out.indices.size());
  counters_.samples_dealt += n;
  if (reissued) counters_.samples_reissued += n;
  return out;
}

DealtBatch EpochDealer::pull(WorkerId worker, std::int64_t batch) {
  if (batch < 1) throw std::invalid_argument("asp: a pull needs batch >= 1, got " + std::to_string(batch));
  if (!reissue_.empty()) {
    // Reissued indices first, from the front chunks of one epoch that went to the same shards.
    const std::int64_t epoch = reissue_.front().epoch;
    std::vector<std::int32_t> shards_done = reissue_.front().shards_done;
    std::vector<std::int64_t> take;
    while (!reissue_.empty() && reissue_.front().epoch == epoch &&
           reissue_.front().shards_done == shards_done &&
           static_cast<std::int64_t>(take.size()) < batch) {
      Chunk& front = reissue_.front();
      const auto want = static_cast<std::size_t>(batch) - take.size();
      const std::size_t n = std::min(want, front.indices.size());
      take.insert(take.end(), front.indices.begin(), front.indices.begin() + n);
      front.indices.erase(front.indices.begin(), front.indices.begin() + n);
      if (front.indices.empty()) reissue_.pop_front();
    }
    return deal(worker, epoch, std::move(take), /*reissued=*/true, std::move(shards_done));
  }
  if (max_epochs_ > 0 && cursor_.epoch >= max_epochs_) return DealtBatch{};
  // Never across the epoch's end: the last batch of an epoch is what is left of it.
  const std::int64_t left = sampler_.dataset_size() - cursor_.position;
  const std::int64_t count = std::min(batch, left);
  const std::int64_t epoch = cursor_.epoch;
  auto indices = sampler_.indices(cursor_, 0, count);
  cursor_ = sampler_.advance(cursor_, count);
  return deal(worker, epoch, std::move(indices), /*reissued=*/false);
}

Receipt EpochDealer::push(WorkerId worker, std::uint64_t batch_id) {
  auto it = outstanding_.find(batch_id);
  if (it == outstanding_.end()) {
    // Ids are dealt in order: one below next_id_ that is not outstanding was pushed already or
    // retired when its worker was declared gone.
    if (batch_id >= 1 && batch_id < next_id_) {
      ++counters_.duplicates;
      return Receipt::kDuplicate;
    }
    ++counters_.unknown;
    return Receipt::kUnknown;
  }
  if (it->second.worker != worker) {
    ++counters_.unknown;
    return Receipt::kUnknown;
  }
  const std::int64_t epoch = it->second.epoch;
  const auto n = static_cast<std::int64_t>(it->second.indices.size());
  outstanding_.erase(it);
  ++counters_.batches_accepted;
  counters_.samples_accepted += n;
  std::int64_t& done = accepted_[epoch];
  done += n;
  if (done == sampler_.dataset_size()) {
    accepted_.erase(epoch);
    ++epochs_completed_;
  }
  return Receipt::kAccepted;
}

std::int64_t EpochDealer::queue_again(Holding holding) {
  const auto n = static_cast<std::int64_t>(holding.indices.size());
  reissue_.push_back(
      Chunk{holding.epoch, std::move(holding.indices), std::move(holding.shards_done)});
  // Oldest epoch first, dealing order within it (stable: chunks already queued keep their place).
  std::stable_sort(reissue_.begin(), reissue_.end(),
                   [](const Chunk& a, const Chunk& b) { return a.epoch < b.epoch; });
  return n;
}

std::int64_t EpochDealer::worker_gone(WorkerId worker) {
  std::int64_t queued = 0;
  for (auto it = outstanding_.begin(); it != outstanding_.end();) {
    if (it->second.worker != worker) {
      ++it;
      continue;
    }
    queued += queue_again(std::move(it->second));
    it = outstanding_.erase(it);
  }
  return queued;
}

std::int64_t EpochDealer::push_failed(WorkerId worker, std::uint64_t batch_id,
                                      const std::vector<std::int32_t>& shards_taken) {
  auto it = outstanding_.find(batch_id);
  if (it == outstanding_.end() || it->second.worker != worker) return 0;
  Holding holding = std::move(it->second);
  outstanding_.erase(it);
  auto& done = holding.shards_done;
  if (!shards_taken.empty()) ++counters_.partial_pushes;
  done.insert(done.end(), shards_taken.begin(), shards_taken.end());
  std::sort(done.begin(), done.end());
  done.erase(std::unique(done.begin(), done.end()), done.end());
  return queue_again(std::move(holding));
}

EpochDealer::Settled EpochDealer::settle(WorkerId worker, std::uint64_t batch_id,
                                         const std::vector<std::int32_t>& shards_taken,
                                         std::int32_t shards) {
  const auto it = outstanding_.find(batch_id);
  if (it == outstanding_.end() || it->second.worker != worker) return Settled::kNotOutstanding;
  std::vector<bool> took(static_cast<std::size_t>(std::max(shards, 0)), false);
  auto mark = [&](const std::vector<std::int32_t>& group) {
    for (const std::int32_t s : group) {
      if (s >= 0 && s < shards) took[static_cast<std::size_t>(s)] = true;
    }
  };
  mark(shards_taken);
  mark(it->second.shards_done);
  if (std::all_of(took.begin(), took.end(), [](bool b) { return b; })) {
    push(worker, batch_id);
    return Settled::kAccepted;
  }
  push_failed(worker, batch_id, shards_taken);
  return Settled::kDealtAgain;
}

std::vector<std::uint64_t> EpochDealer::outstanding_ids(WorkerId worker) const {
  std::vector<std::uint64_t> ids;
  for (const auto& [id, holding] : outstanding_) {
    if (holding.worker == worker) ids.push_back(id);
  }
  return ids;
}

std::int64_t EpochDealer::batch_samples(std::uint64_t batch_id) const {
  const auto it = outstanding_.find(batch_id);
  return it == outstanding_.end() ? 0 : static_cast<std::int64_t>(it->second.indices.size());
}

std::int64_t EpochDealer::outstanding_batches(WorkerId worker) const {
  return std::count_if(outstanding_.begin(), outstanding_.end(),
                       [&](const auto& entry) { return entry.second.worker == worker; });
}

std::int64_t EpochDealer::outstanding_samples(WorkerId worker) const {
  std::int64_t n = 0;
  for (const auto& [id, holding] : outstanding_) {
    if (holding.worker == worker) n += static_cast<std::int64_t>(holding.indices.size());
  }
  return n;
}

std::int64_t EpochDealer::reissue_backlog() const {
  std::int64_t n = 0;
  for (const auto& chunk : reissue_) n += static_cast<std::int64_t>(chunk.indices.size());
  return n;
}

nlohmann::json EpochDealer::state() const {
  using Json = nlohmann::json;
  Json outstanding = Json::array();
  for (const auto& [id, h] : outstanding_) {
    outstanding.push_back(Json{{"id", id},
                               {"worker", h.worker},
                               {"epoch", h.epoch},
                               {"indices", h.indices},
                               {"shards_done", h.shards_done}});
  }
  Json reissue = Json::array();
  for (const auto& c : reissue_) {
    reissue.push_back(
        Json{{"epoch", c.epoch}, {"indices", c.indices}, {"shards_done", c.shards_done}});
  }
  const auto& c = counters_;
  return Json{{"epoch", cursor_.epoch},
              {"position", cursor_.position},
              {"next_id", next_id_},
              {"outstanding", outstanding},
              {"reissue", reissue},
              {"accepted", accepted_},
              {"epochs_completed", epochs_completed_},
              {"counters",
               {c.batches_dealt, c.samples_dealt, c.samples_reissued, c.batches_accepted,
                c.samples_accepted, c.duplicates, c.unknown, c.partial_pushes}}};
}

void EpochDealer::restore_state(const nlohmann::json& state) {
  try {
    training::Cursor cursor{state.at("epoch").get<std::int64_t>(),
                            state.at("position").get<std::int64_t>()};
    if (cursor.epoch < 0 || cursor.position < 0 || cursor.position >= dataset_size()) {
      throw std::invalid_argument("the dealer's position is outside the dataset");
    }
    std::map<std::uint64_t, Holding> outstanding;
    for (const auto& h : state.at("outstanding")) {
      outstanding[h.at("id").get<std::uint64_t>()] =
          Holding{h.at("worker").get<WorkerId>(), h.at("epoch").get<std::int64_t>(),
                  h.at("indices").get<std::vector<std::int64_t>>(),
                  h.at("shards_done").get<std::vector<std::int32_t>>()};
    }
    std::deque<Chunk> reissue;
    for (const auto& c : state.at("reissue")) {
      reissue.push_back(Chunk{c.at("epoch").get<std::int64_t>(),
                              c.at("indices").get<std::vector<std::int64_t>>(),
                              c.at("shards_done").get<std::vector<std::int32_t>>()});
    }
    const auto counters = state.at("counters").get<std::vector<std::int64_t>>();
    if (counters.size() != 8) throw std::invalid_argument("the dealer's counters are not 8");
    cursor_ = cursor;
    next_id_ = state.at("next_id").get<std::uint64_t>();
    outstanding_ = std::move(outstanding);
    reissue_ = std::move(reissue);
    accepted_ = state.at("accepted").get<std::map<std::int64_t, std::int64_t>>();
    epochs_completed_ = state.at("epochs_completed").get<std::int64_t>();
    counters_ = DealerCounters{counters[0], counters[1], counters[2], counters[3],
                               counters[4], counters[5], counters[6], counters[7]};
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("the dealer's state: ") + e.what());
  }
}

}  // namespace omnilearn::asp
