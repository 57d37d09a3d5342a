#include "cli/flag_checks.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>

namespace omnilearn::cli {
namespace {

// The number `text` spells in full, or nothing (a word, a trailing letter, NaN, infinity).
std::optional<double> finite_number(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

// "" when `text` is a finite number within the bounds; else what is wrong with it.
std::string check_number(const std::string& text, double lo, bool lo_open, double hi) {
  const auto value = finite_number(text);
  if (!value) {
    return text.empty() ? std::string("an empty value; give a number")
                        : fmt::format("'{}' is not a number", text);
  }
  const bool unbounded = hi == std::numeric_limits<double>::infinity();
  if (lo_open ? *value <= lo : *value < lo) {
    return unbounded ? fmt::format("must be {} {} (got {})", lo_open ? "greater than" : "at least",
                                   lo, text)
                     : fmt::format("must be between {} and {} (got {})", lo, hi, text);
  }
  if (*value > hi) return fmt::format("must be between {} and {} (got {})", lo, hi, text);
  return "";
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> items;
  std::string::size_type start = 0;
  for (;;) {
    const auto comma = text.find(',', start);
    items.push_back(text.substr(start, comma - start));
    if (comma == std::string::npos) return items;
    start = comma + 1;
  }
}

CLI::Validator list_of(double lo, bool lo_open, double hi, std::string description) {
  return CLI::Validator(
      [lo, lo_open, hi](std::string& text) -> std::string {
        const auto items = split_commas(text);
        for (std::size_t i = 0; i < items.size(); ++i) {
          auto why = check_number(items[i], lo, lo_open, hi);
          if (!why.empty()) {
            return items.size() == 1 ? why : fmt::format("item {} of '{}': {}", i + 1, text, why);
          }
        }
        return "";
      },
      std::move(description));
}

constexpr double kNoBound = std::numeric_limits<double>::infinity();

}  // namespace

CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& text) { return check_number(text, 0.0, /*lo_open=*/true, kNoBound); },
      "NUMBER > 0");
}

CLI::Validator non_negative_number() {
  return CLI::Validator(
      [](std::string& text) { return check_number(text, 0.0, /*lo_open=*/false, kNoBound); },
      "NUMBER >= 0");
}

CLI::Validator number_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) { return check_number(text, lo, /*lo_open=*/false, hi); },
      fmt::format("NUMBER in [{}, {}]", lo, hi));
}

CLI::Validator number_list_in(double lo, double hi) {
  return list_of(lo, /*lo_open=*/false, hi, fmt::format("N,N,... each in [{}, {}]", lo, hi));
}

CLI::Validator positive_number_list() {
  return list_of(0.0, /*lo_open=*/true, kNoBound, "N,N,... each > 0");
}

std::vector<double> parse_number_list(const std::string& text) {
  std::vector<double> numbers;
  for (const auto& item : split_commas(text)) numbers.push_back(std::strtod(item.c_str(), nullptr));
  return numbers;
}

}  // namespace omnilearn::cli
