// State sync: after a membership change, every rank of the new group adopts the state of the
// rank that committed the most steps (parameters, buffers, optimizer state, step, cursor), so
// that the group goes on from the job's last committed step.
#include <ATen/ATen.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "training/trainer_impl.hpp"

namespace omnilearn::training {
namespace {

constexpr int64_t kStateMagic = 0x4F4C5354;  // "OLST": first word of the sync header

int64_t optimizer_code(const std::string& kind) {
  return kind == "sgd" ? 1 : kind == "adam" ? 2 : 3;
}

int64_t total_numel(const std::vector<at::Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts) n += t.numel();
  return n;
}

}  // namespace

std::vector<at::Tensor> Trainer::Impl::float_state() const {
  std::vector<at::Tensor> out;
  for (const auto& [name, p] : params) out.push_back(p);
  for (const auto& b : float_buffers) out.push_back(b);
  for (const auto& [name, s] : optimizer->state()) out.push_back(s);
  return out;
}

std::vector<int64_t> Trainer::Impl::layout_fingerprint() const {
  return {kStateMagic,
          total_numel(float_state()),
          total_numel(int_buffers),
          static_cast<int64_t>(params.size()),
          static_cast<int64_t>(trainable.size()),
          optimizer_code(config.optimizer.kind),
          sampler.dataset_size(),
          static_cast<int64_t>(sampler.seed()),
          real_bytes()};
}

CollectiveStatus Trainer::sync_state_from_rank0() { return sync_state_from(0); }

CollectiveStatus Trainer::sync_state_from_most_advanced(int* root) {
  Impl& s = *impl_;
  if (root) *root = 0;
  if (s.alone()) return {};
  if (CollectiveStatus u = s.group.usable(); !u) return u;
  // One all-reduce finds the most committed steps; on a tie, the state committed by the newest
  // generation (a superseded group's straggler may have committed the same step number: the
  // newer one is the job's, as in Raft's "last log term"); then the lowest rank. Packed into
  // one integer for MAX: step (31 bits), commit generation + 1 (20 bits), 4095 - rank (12).
  constexpr int64_t kRankBits = 12, kGenerationBits = 20;
  const auto longs = at::TensorOptions().dtype(at::kLong).device(s.device);
  const int64_t generation_field =
      std::min<int64_t>(s.commit_generation + 1, (int64_t{1} << kGenerationBits) - 1);
  const int64_t packed = (s.step << (kRankBits + kGenerationBits)) |
                         (generation_field << kRankBits) |
                         ((int64_t{1} << kRankBits) - 1 - s.group.rank());
  at::Tensor key = at::full({1}, packed, longs);
  if (CollectiveStatus st = s.group.allreduce({key}, c10d::ReduceOp::MAX, "state holder election");
      !st) {
    return st;
  }
  const int64_t rank_field = key.to(at::kCPU).item<int64_t>() & ((int64_t{1} << kRankBits) - 1);
  const int chosen = static_cast<int>((int64_t{1} << kRankBits) - 1 - rank_field);
  if (root) *root = chosen;
  return sync_state_from(chosen);
}

CollectiveStatus Trainer::sync_state_from(int root) {
  Impl& s = *impl_;
  if (s.alone()) return {};
  if (CollectiveStatus u = s.group.usable(); !u) return u;
  if (root < 0 || root >= s.group.world()) {
    throw std::invalid_argument("sync_state_from: root " + std::to_string(root) +
                                " is not a rank of a world of " + std::to_string(s.group.world()));
  }
  const auto cpu_long = at::TensorOptions().dtype(at::kLong).device(s.device);

  // 1. Header: the root's counters and layout; every rank checks the layout matches its own.
  const std::vector<int64_t> fingerprint = s.layout_fingerprint();
  std::vector<int64_t> header_words = fingerprint;
  header_words.insert(header_words.end(),
                      {s.step, s.cursor.epoch, s.cursor.position, s.commit_generation});
  at::Tensor header = at::tensor(header_words, at::TensorOptions().dtype(at::kLong)).to(s.device);
  if (CollectiveStatus st = s.group.broadcast(header, "state header broadcast", root); !st)
    return st;
  header = header.to(at::kCPU);
  const int64_t* h = header.data_ptr<int64_t>();
  bool layout_ok = true;
  for (size_t i = 0; i < fingerprint.size(); ++i) layout_ok = layout_ok && h[i] == fingerprint[i];
  at::Tensor agree = at::full({1}, layout_ok ? 1 : 0, cpu_long);
  if (CollectiveStatus st = s.group.allreduce({agree}, c10d::ReduceOp::MIN, "state layout check");
      !st) {
    return st;
  }
  if (agree.item<int64_t>() == 0) {
    // Every rank saw the same verdict, so the group is still in step and usable.
    return CollectiveStatus{false, layout_ok ? "another rank's model/optimizer/data layout "
                                               "differs from the root's; state not synced"
                                             : "this rank's model/optimizer/data layout differs "
                                               "from the root's; state not synced"};
  }
  const size_t n = fingerprint.size();
  const int64_t step = h[n], epoch = h[n + 1], position = h[n + 2], commit_generation = h[n + 3];

  // 2. Float state (parameters, BatchNorm statistics, optimizer state) in bucket-sized chunks,
  // then integer buffers. Copied into the live tensors only once everything has arrived.
  const std::vector<at::Tensor> live = s.float_state();
  std::vector<at::Tensor> flat_parts;
  for (const auto& t : live) flat_parts.push_back(t.detach().reshape({-1}));
  at::Tensor flat = at::cat(flat_parts);
  const int64_t chunk = std::max<int64_t>(1, s.config.bucket_bytes / s.real_bytes());
  for (int64_t off = 0; off < flat.numel(); off += chunk) {
    at::Tensor part = flat.narrow(0, off, std::min(chunk, flat.numel() - off)).clone();
    if (CollectiveStatus st = s.group.broadcast(part, "state broadcast", root); !st) return st;
    flat.narrow(0, off, part.numel()).copy_(part);
  }
  at::Tensor ints;
  if (!s.int_buffers.empty()) {
    std::vector<at::Tensor> parts;
    for (const auto& t : s.int_buffers) parts.push_back(t.reshape({-1}).to(at::kLong));
    ints = at::cat(parts);
    if (CollectiveStatus st = s.group.broadcast(ints, "buffer broadcast", root); !st) return st;
  }

  c10::NoGradGuard no_grad;
  int64_t off = 0;
  for (const auto& t : live) {
    t.detach().view({-1}).copy_(flat.narrow(0, off, t.numel()));
    off += t.numel();
  }
  off = 0;
  for (auto& t : s.int_buffers) {
    t.view({-1}).copy_(ints.narrow(0, off, t.numel()));
    off += t.numel();
  }
  s.step = step;
  s.cursor = Cursor{epoch, position};
  s.commit_generation = commit_generation;
  return {};
}

}  // namespace omnilearn::training
