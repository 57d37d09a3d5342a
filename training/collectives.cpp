#include "training/collectives.hpp"

#include <algorithm>
#include <stdexcept>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "training/process_group.hpp"

namespace omnilearn::training::internal {

c10::intrusive_ptr<c10d::ProcessGroup> make_process_group(const GroupRequest& request) {
  switch (request.options->backend) {
    case Backend::kGloo:
      return make_gloo_group(request);
    case Backend::kNccl:
#ifdef OMNILEARN_WITH_NCCL
      return make_nccl_group(request);
#else
      throw std::invalid_argument(
          "the NCCL backend needs a build with -DOMNILEARN_WITH_NCCL=ON and CUDA LibTorch");
#endif
  }
  throw std::invalid_argument("unknown collective backend");
}

CollectiveStatus Collectives::join(const c10::intrusive_ptr<c10d::Store>& store, int generation,
                                   int rank, int world, std::chrono::milliseconds timeout,
                                   const GroupOptions& options, const at::Device& device) {
  leave();
  GroupRequest request;
  request.store =
      c10::make_intrusive<c10d::PrefixStore>("gen/" + std::to_string(generation), store);
  request.rank = rank;
  request.world = world;
  request.timeout = timeout;
  request.options = &options;
  request.device = device;
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  try {
    group = make_process_group(request);
  } catch (const std::invalid_argument&) {
    throw;
  } catch (const std::exception& e) {
    return CollectiveStatus{false, "rendezvous of generation " + std::to_string(generation) +
                                       " as rank " + std::to_string(rank) + "/" +
                                       std::to_string(world) + " failed: " + e.what()};
  }
  group_ = std::move(group);
  rank_ = rank;
  world_ = world;
  generation_ = generation;
  timeout_ = timeout;
  broken_.clear();
  return {};
}

void Collectives::leave() {
  std::erase_if(reaping_, [](const std::future<void>& f) {
    return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  });
  if (group_ && !broken_.empty()) {
    reaping_.push_back(
        std::async(std::launch::async, [group = std::move(group_)]() mutable { group.reset(); }));
  }
  group_.reset();
  rank_ = 0;
  world_ = 1;
  generation_ = -1;
  broken_.clear();
}

CollectiveStatus Collectives::usable() const {
  if (!broken_.empty()) {
    return {false, "process group is broken (" + broken_ + "); join a new generation"};
  }
  return {};
}

CollectiveStatus Collectives::fail(const std::string& what) {
  broken_ = what;
  return CollectiveStatus{false, what};
}

CollectiveStatus Collectives::wait(const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
  using Clock = std::chrono::steady_clock;
  constexpr std::chrono::milliseconds kAbandonSlice{50};
  const Clock::time_point deadline = Clock::now() + timeout_;
  while (true) {
    // Work::wait(0) waits forever: every slice is at least 1 ms.
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    left = std::max(left, std::chrono::milliseconds(1));
    try {
      work->wait(abandon_ ? std::min(left, kAbandonSlice) : left);
      return {};
    } catch (const std::exception& e) {
      // A slice ran out (the work is still running) or the collective failed. The work may
      // also have completed just after the slice ran out: then its own outcome decides
      // (wait() returns at once, or rethrows the collective's real error).
      if (work->isCompleted()) {
        try {
          work->wait();
          return {};
        } catch (const std::exception& failed) {
          return fail(std::string(what) + " failed in generation " + std::to_string(generation_) +
                      ": " + failed.what());
        }
      }
      if (Clock::now() >= deadline) {
        return fail(std::string(what) + " failed in generation " + std::to_string(generation_) +
                    ": " + e.what());
      }
      if (abandon_ && abandon_()) {
        return fail(std::string(what) + " abandoned in generation " + std::to_string(generation_) +
                    ": a newer generation replaces it, or this trainer is stopping");
      }
    }
  }
}

CollectiveStatus Collectives::broadcast(at::Tensor& t, const char* what, int root) {
  std::vector<at::Tensor> tensors{t};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = group_->broadcast(tensors, opts);
  } catch (const std::exception& e) {
    return fail(std::string(what) + " failed: " + e.what());
  }
  return wait(work, what);
}

CollectiveStatus Collectives::allreduce(std::vector<at::Tensor> tensors, c10d::ReduceOp op,
                                        const char* what) {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  try {
    for (auto& t : tensors) {
      std::vector<at::Tensor> one{t};
      c10d::AllreduceOptions opts;
      opts.reduceOp = op;
      works.push_back(group_->allreduce(one, opts));
    }
  } catch (const std::exception& e) {
    return fail(std::string(what) + " failed: " + e.what());
  }
  for (auto& w : works) {
    CollectiveStatus s = wait(w, what);
    if (!s) return s;
  }
  return {};
}

CollectiveStatus Collectives::barrier() {
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = group_->barrier();
  } catch (const std::exception& e) {
    return fail(std::string("barrier failed: ") + e.what());
  }
  return wait(work, "barrier");
}

}  // namespace omnilearn::training::internal
