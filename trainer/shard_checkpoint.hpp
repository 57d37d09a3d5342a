#pragma once
// One ASP parameter-server shard as LibTorch holds it (its parameters and their optimizer), its
// checkpoint file, and the choice of what a restarted shard resumes from. Apart from the server
// role (asp_roles.cpp) so that the refusal of a rewritten checkpoint is tested without processes
// (tests/trainer/shard_checkpoint_test).
//
// The file: {"shard": {"params": T[, "buffers": T]}, "optimizer": {...}, "optimizer_kind": s,
// "asp": {shard, offset, size, parameters, version, incarnation}, "core": uint8 T}
// (torch.load()-able; "core" is asp::encode_checkpoint's bytes; "buffers" on shard 0 of a
// model with buffers).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "asp/server_core.hpp"
#include "asp/shard_layout.hpp"
#include "training/optimizer.hpp"
#include "training/specs.hpp"

namespace omnilearn::actors {

struct ShardState {
  std::int32_t shard = 0;
  asp::ShardSlice slice;
  std::int64_t parameters = 0;  // of the whole flat vector
  training::OptimizerSpec optimizer_spec;
  at::Tensor params;  // float32 [slice.size], its grad preallocated
  // Shard 0 of a model with buffers: them, flat (Trainer::copy_flat_buffers); else undefined.
  at::Tensor buffers;
  std::unique_ptr<training::Optimizer> optimizer;
  // Multiplies the scheduled learning rate of every push: 1 / n for n workers under [asp]
  // scale_lr_by_workers (set from each push's batch plan), else 1.
  double lr_factor = 1.0;
  std::int64_t checkpoint_every = 0;
  std::string checkpoint_path;
};

// Shard `shard` of `layout`, starting from its slice of `initial` (the whole flat vector), with a
// fresh optimizer for `optimizer`, keeping `buffers` (the model's, flat) when not empty.
std::unique_ptr<ShardState> make_shard_state(const asp::ShardLayout& layout, std::int32_t shard,
                                             const std::vector<float>& initial,
                                             const training::OptimizerSpec& optimizer,
                                             const std::vector<float>& buffers = {});

// Applies one push to the shard: the job's optimizer, at the learning rate its schedule gives
// version `from_version`, on `gradient` x `weight` (asp::decide_step's scale: b_i / (B / n)
// under linear lr_scaling, 1 / (1 + staleness) more under "inverse"). The weight goes on the
// gradient, not on the step: with momentum, a step scaled by a push's weight would scale every
// earlier push's gradient still in the momentum buffer too, so in the end every push would count
// about the same whatever its batch (bench/jobs/asp_simulated.py measures what that cost).
// Weight decay, the optimizer's own term, is whole on every push: a plan's pushes per epoch
// (samples / (B / n)) do not depend on how it splits B, and a parameter's decay is never stale.
void apply_push(ShardState& s, std::int64_t from_version, double weight,
                std::span<const float> gradient);

// Writes the shard and `checkpoint` to s.checkpoint_path (runtime::write_file_atomically: the
// old file or the whole new one survives a crash). Throws runtime::AtomicWriteError.
void save_shard(const ShardState& s, const asp::ServerCheckpoint& checkpoint);

// Restores parameters, buffers (where the file has them) and optimizer state from a file's
// `bytes` into `s`; returns the core's checkpoint. Throws std::runtime_error naming `what`, changing nothing, when the file is not
// this shard's or, with `version` >= 0, holds another version.
asp::ServerCheckpoint load_shard(ShardState& s, const std::vector<char>& bytes,
                                 const std::string& what, std::int64_t version = -1);

// What a restarted shard may resume from.
struct ResumeSources {
  // This node's file of the newest checkpoint the scheduler recorded (there when the shard ran
  // on this node or the disk is shared) and the version recorded for it; nullopt: none read.
  std::optional<std::vector<char>> local;
  std::string local_path;
  std::int64_t local_version = -1;
  // The head's copy of the shard's newest reported checkpoint and its version; nullopt: none.
  std::optional<std::vector<char>> head_copy;
  std::int64_t head_version = -1;
};

struct ResumedShard {
  asp::ServerCheckpoint from;  // version 0, nothing taken, when resumed from "initial"
  std::string resumed_from;    // "local", "head" or "initial"
  std::vector<std::string> refused;  // why each source offered was not loaded
};

// Loads the newer of the two sources into `s`; the local file only at the version the scheduler
// recorded for it: an incarnation declared gone that still runs (cut off, on a shared disk) may
// have rewritten it since with a state no fence answered for. With neither, `s` keeps its
// initial parameters.
ResumedShard resume_shard(ShardState& s, const ResumeSources& sources);

}  // namespace omnilearn::actors
