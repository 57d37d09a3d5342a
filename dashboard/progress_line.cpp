#include "dashboard/progress_line.hpp"

#include <fmt/format.h>

#include <cmath>

namespace omnilearn::dashboard {
namespace {
// Rate over the last this-many steps, or this many seconds: recent enough to follow a plan
// change, long enough not to jump with every step.
constexpr std::size_t kWindowSteps = 50;
constexpr double kWindowSeconds = 30;
}  // namespace

std::string format_duration(double seconds) {
  if (seconds < 0 || !std::isfinite(seconds)) return "?";
  auto s = static_cast<long long>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

void ProgressLine::observe(const nlohmann::json& e) {
  if (!e.is_object()) return;
  if (e.value("event", "") == "asp_interval") {
    // One per interval of an asynchronous job: its step is the server updates so far.
    asp_ = true;
    step_ = e.value("step", std::int64_t{0});
    if (e.value("total", std::int64_t{0}) > 0) total_ = e.value("total", std::int64_t{0});
    loss_ = e.value("loss", 0.0);
    updates_per_s_ = e.value("updates_per_s", 0.0);
    if (auto it = e.find("staleness"); it != e.end() && it->is_object()) {
      staleness_mean_ = it->value("mean", 0.0);
      staleness_p95_ = it->value("p95", std::int64_t{0});
      staleness_max_ = it->value("max", std::int64_t{0});
    }
    return;
  }
  if (e.value("event", "") != "step") return;
  auto step = e.value("step", std::int64_t{0});
  double time = e.value("time", 0.0);
  if (!window_.empty() && step <= window_.back().second) window_.clear();
  window_.emplace_back(time, step);
  while (window_.size() > kWindowSteps ||
         (window_.size() > 2 && time - window_.front().first > kWindowSeconds)) {
    window_.pop_front();
  }
  step_ = step;
  loss_ = e.value("loss", 0.0);
  if (e.contains("test_accuracy")) test_accuracy_ = e.value("test_accuracy", -1.0);
  batches_.clear();
  global_batch_ = 0;
  if (auto it = e.find("batches"); it != e.end() && it->is_array()) {
    for (const auto& b : *it) {
      if (!b.is_number_integer()) continue;
      batches_.push_back(b.get<std::int32_t>());
      global_batch_ += batches_.back();
    }
  }
}

double ProgressLine::steps_per_second() const {
  if (window_.size() < 2) return 0;
  double seconds = window_.back().first - window_.front().first;
  auto steps = window_.back().second - window_.front().second;
  return seconds > 0 ? steps / seconds : 0;
}

double ProgressLine::eta_seconds() const {
  double rate = asp_ ? updates_per_s_ : steps_per_second();
  if (total_ <= 0 || rate <= 0) return -1;
  return std::max<std::int64_t>(0, total_ - step_) / rate;
}

std::string ProgressLine::render(std::size_t width) const {
  std::string line;
  if (asp_) {
    if (total_ > 0) {
      double percent = 100.0 * static_cast<double>(step_) / static_cast<double>(total_);
      line = fmt::format("update {}/{}  {:.1f}%  ETA {}", step_, total_, percent,
                         format_duration(eta_seconds()));
    } else {
      line = fmt::format("update {}", step_);
    }
    line += fmt::format("  {:.1f} updates/s  staleness mean {:.2f} p95 {} max {}  loss {:.4f}",
                        updates_per_s_, staleness_mean_, staleness_p95_, staleness_max_, loss_);
    if (width > 0 && line.size() > width) line.resize(width);
    return line;
  }
  if (total_ > 0) {
    double percent = 100.0 * static_cast<double>(step_) / static_cast<double>(total_);
    line = fmt::format("step {}/{}  {:.1f}%  ETA {}", step_, total_, percent,
                       format_duration(eta_seconds()));
  } else {
    line = fmt::format("step {}", step_);
  }
  double rate = steps_per_second();
  if (rate > 0) line += fmt::format("  {:.0f} samples/s", rate * global_batch_);
  line += fmt::format("  loss {:.4f}", loss_);
  if (test_accuracy_ >= 0) line += fmt::format("  test acc {:.4f}", test_accuracy_);
  line += fmt::format("  batches [{}]", fmt::join(batches_, ","));
  if (width > 0 && line.size() > width) line.resize(width);
  return line;
}

}  // namespace omnilearn::dashboard
