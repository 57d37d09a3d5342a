#pragma once
// How asp/ names a worker: the job's number for it, stable for the worker's life (a worker that
// leaves and comes back may reuse it; what it held before is gone by then).

#include <cstdint>

namespace omnilearn::asp {

using WorkerId = std::int64_t;

}  // namespace omnilearn::asp
