#include "trainer/trainer_config.hpp"

namespace omnilearn::actors {

TrainerSetup trainer_setup(const JobSpec& spec, const training::DatasetPair& data) {
  TrainerSetup setup;
  training::TrainerConfig& config = setup.config;
  config.model = spec.model;
  config.optimizer = spec.optimizer;
  config.data = spec.data;
  config.loss = spec.train.loss;
  config.precision = spec.train.precision == "float64" ? training::Precision::kFloat64
                                                       : training::Precision::kFloat32;
  const std::int64_t N = data.train->size();
  const std::int64_t B = spec.train.global_batch;
  setup.total_steps = spec.train.steps > 0 ? spec.train.steps : (spec.train.epochs * N + B - 1) / B;
  if (config.optimizer.schedule.kind == "cosine" && config.optimizer.schedule.total_steps == 0) {
    config.optimizer.schedule.total_steps = setup.total_steps;
  }
  return setup;
}

}  // namespace omnilearn::actors
