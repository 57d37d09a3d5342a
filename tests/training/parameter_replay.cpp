// omnilearn-parameter-replay: the calm run the fault tests compare a job with. It trains the job
// file's replica alone, in this process (same seed, data, model, optimizer and precision as the
// job's trainers: actors::trainer_setup), and compares every parameter, buffer and
// optimizer-state element and the data cursor with a checkpoint the job wrote. One replica with
// batch B computes what any number of workers with batches summing to B compute, up to rounding
// (docs/ARCHITECTURE.md, "Same math as one big batch"): a step lost, doubled or trained on other
// samples under a fault shows as a difference far above float64's rounding.
//
//   omnilearn-parameter-replay JOB CHECKPOINT               train to CHECKPOINT's step, compare
//   omnilearn-parameter-replay JOB --steps N --save CALM    train N steps, save the state to CALM
//   omnilearn-parameter-replay JOB CHECKPOINT --calm CALM   compare with a state saved so
//
// Comparing prints one JSON object: {"steps", "elements", "max_abs_diff", "worst",
// "max_abs_value", "cursor_equal", "seconds"}. Exit codes: 0 done, 1 failed (unreadable job or
// checkpoint, a step that did not commit, a calm state of another step), 2 usage.

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "jobs/job_spec.hpp"
#include "trainer/trainer_config.hpp"
#include "training/trainer.hpp"

namespace {

using omnilearn::training::NamedTensor;

struct Difference {
  double max_abs_diff = 0;
  double max_abs_value = 0;
  std::string worst;
  std::int64_t elements = 0;
};

void compare(const std::vector<NamedTensor>& calm, const std::vector<NamedTensor>& saved,
             const char* what, Difference* d) {
  if (calm.size() != saved.size()) {
    throw std::runtime_error(std::string(what) + ": " + std::to_string(saved.size()) +
                             " entries in the checkpoint, " + std::to_string(calm.size()) +
                             " in the replay");
  }
  for (std::size_t i = 0; i < calm.size(); ++i) {
    const at::Tensor a = calm[i].second.to(at::kDouble);
    const at::Tensor b = saved[i].second.to(at::kDouble);
    if (a.sizes() != b.sizes()) throw std::runtime_error(calm[i].first + ": shapes differ");
    d->elements += a.numel();
    if (a.numel() == 0) continue;
    const double diff = (a - b).abs().max().item<double>();
    d->max_abs_value = std::max(d->max_abs_value, a.abs().max().item<double>());
    if (diff > d->max_abs_diff || d->worst.empty()) {
      d->worst = std::string(what) + " " + calm[i].first;
      d->max_abs_diff = diff;
    }
  }
}

}  // namespace

int usage(const char* program) {
  std::fprintf(stderr,
               "usage: %s JOB.toml CHECKPOINT [--calm CALM]\n"
               "       %s JOB.toml --steps N --save CALM\n",
               program, program);
  return 2;
}

int main(int argc, char** argv) {
  using namespace omnilearn;
  const std::vector<std::string> args(argv + 1, argv + argc);
  std::string job, checkpoint, calm_path, save_path;
  std::int64_t steps = -1;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const bool has_value = i + 1 < args.size();
    if (args[i] == "--calm" && has_value) {
      calm_path = args[++i];
    } else if (args[i] == "--save" && has_value) {
      save_path = args[++i];
    } else if (args[i] == "--steps" && has_value) {
      try {
        steps = std::stoll(args[++i]);
      } catch (const std::exception&) {
        return usage(argv[0]);
      }
    } else if (job.empty()) {
      job = args[i];
    } else if (checkpoint.empty()) {
      checkpoint = args[i];
    } else {
      return usage(argv[0]);
    }
  }
  const bool save = !save_path.empty();
  if (job.empty() || (save && (steps < 0 || !checkpoint.empty() || !calm_path.empty())) ||
      (!save && (checkpoint.empty() || steps >= 0))) {
    return usage(argv[0]);
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    const actors::JobSpec spec = actors::load_job_spec(job);
    if (spec.mode != "bsp") throw std::runtime_error("only a mode = \"bsp\" job can be replayed");
    torch::set_num_threads(spec.train.threads);
    const training::DatasetPair data = training::load_datasets(spec.data);
    const actors::TrainerSetup setup = actors::trainer_setup(spec, data);
    const std::vector<int> batches{spec.train.global_batch};
    training::Trainer calm(setup.config, data);
    auto train_to = [&](std::int64_t target) {
      while (calm.step_count() < target) {
        const training::StepResult r = calm.step(batches);
        if (!r.committed) {
          throw std::runtime_error("replay step " + std::to_string(r.step + 1) + ": " + r.error);
        }
      }
    };
    if (save) {
      train_to(steps);
      calm.save_checkpoint(save_path);
      return 0;
    }
    training::Trainer saved(setup.config, data);
    saved.load_checkpoint(checkpoint);
    if (!calm_path.empty()) {
      calm.load_checkpoint(calm_path);
      if (calm.step_count() != saved.step_count()) {
        throw std::runtime_error("the calm state " + calm_path + " is at step " +
                                 std::to_string(calm.step_count()) + ", " + checkpoint +
                                 " at step " + std::to_string(saved.step_count()));
      }
    }
    train_to(saved.step_count());
    Difference d;
    compare(calm.named_parameters(), saved.named_parameters(), "parameter", &d);
    compare(calm.named_buffers(), saved.named_buffers(), "buffer", &d);
    compare(calm.named_optimizer_state(), saved.named_optimizer_state(), "optimizer", &d);
    nlohmann::json out = {
        {"steps", saved.step_count()},
        {"elements", d.elements},
        {"max_abs_diff", d.max_abs_diff},
        {"worst", d.worst},
        {"max_abs_value", d.max_abs_value},
        {"cursor_equal", calm.cursor().epoch == saved.cursor().epoch &&
                             calm.cursor().position == saved.cursor().position},
        {"seconds",
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()}};
    std::printf("%s\n", out.dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "omnilearn-parameter-replay: %s\n", e.what());
    return 1;
  }
}
