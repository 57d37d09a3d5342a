#pragma once
// How a parameter server adds a worker's change to the model's buffers (BatchNorm running
// statistics and counters) in asynchronous training. The worker pulls the buffers
// x[t-s], its forward moves them to (1 - m) x[t-s] + m b (b: its batch's statistic) and pushes
// the difference m (b - x[t-s]); the server adds it to what they are now, x[t].
//
// Undamped, x[t+1] = x[t] + m (b - x[t-s]) is a delayed recurrence that oscillates and grows once
// m (2s + 1) passes about pi (BatchNorm's m = 0.1: some 16 pushes in flight), a variance going
// negative. A statistic's difference is therefore damped by 1 / (1 + s): m / (1 + s) is below the
// recurrence's stability bound 2 cos(s pi / (2s + 1)) >= 2 / (2s + 1) for every s and m <= 1.
// A counter (num_batches_tracked) counts the batch whole.

#include <cstdint>
#include <span>
#include <vector>

namespace omnilearn::asp {

// buffers += difference, a statistic's damped by 1 / (1 + staleness); `counters` flags, per
// element, a counter (empty: none). Sizes must agree (std::invalid_argument otherwise);
// staleness < 0 is taken as 0.
void add_buffer_difference(std::span<float> buffers, std::span<const float> difference,
                           const std::vector<bool>& counters, std::int64_t staleness);

}  // namespace omnilearn::asp
