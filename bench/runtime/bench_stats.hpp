#pragma once
// What the runtime benchmarks print their figures with: medians and ranges over rounds.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace omnilearn::bench {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  if (values.empty()) return 0;
  auto n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// "lo..hi" with `format` for each.
inline std::string min_max(const std::vector<double>& values, const char* format = "%.2f") {
  if (values.empty()) return "-";
  auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  char buffer[64];
  std::string f = std::string(format) + ".." + format;
  std::snprintf(buffer, sizeof buffer, f.c_str(), *lo, *hi);
  return buffer;
}

}  // namespace omnilearn::bench
