#pragma once
// Clean shutdown on SIGINT/SIGTERM without async-signal-unsafe handlers: the signals are blocked
// in every thread and collected synchronously by the thread that waits for them.

#include <chrono>

namespace omnilearn::runtime {

// Blocks SIGINT and SIGTERM in the calling thread; threads started afterwards inherit the mask.
// Call first thing in main, before any thread exists.
void block_shutdown_signals();

// Waits up to `timeout` for SIGINT or SIGTERM; returns the signal number, or 0 on timeout.
int wait_for_shutdown_signal(std::chrono::milliseconds timeout);

}  // namespace omnilearn::runtime
