#pragma once
// What a job file makes of a trainer: the replica's configuration and the job's length in
// steps. The trainer process builds its training::Trainer from it, and so does anything that
// must train exactly as a job's trainers do (the fault tests' calm replay of a job).

#include <cstdint>

#include "jobs/job_spec.hpp"
#include "training/trainer.hpp"

namespace omnilearn::actors {

// A job's replica as every trainer of it builds one.
struct TrainerSetup {
  training::TrainerConfig config;
  std::int64_t total_steps = 0;  // [train] steps, or epochs over `data`'s training split
};

// The setup of `spec`'s trainers over `data` (its [train] split decides an epoch-long job's
// steps and a cosine schedule's horizon).
TrainerSetup trainer_setup(const JobSpec& spec, const training::DatasetPair& data);

}  // namespace omnilearn::actors
