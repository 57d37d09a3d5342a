#include "asp/buffer_average.hpp"

#include <stdexcept>
#include <string>

namespace omnilearn::asp {

void add_buffer_difference(std::span<float> buffers, std::span<const float> difference,
                           const std::vector<bool>& counters, std::int64_t staleness) {
  if (difference.size() != buffers.size() ||
      (!counters.empty() && counters.size() != buffers.size())) {
    throw std::invalid_argument("add_buffer_difference: " + std::to_string(buffers.size()) +
                                " buffer values, a difference of " +
                                std::to_string(difference.size()) + " and " +
                                std::to_string(counters.size()) + " counter flags");
  }
  const float damp = 1.0F / static_cast<float>(1 + (staleness > 0 ? staleness : 0));
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    buffers[i] += (!counters.empty() && counters[i]) ? difference[i] : difference[i] * damp;
  }
}

}  // namespace omnilearn::asp
