#pragma once
// Checks for numeric flags, with messages a user can act on. CLI11's own PositiveNumber and
// Range let NaN through ("--slowdown nan" was taken and then meant nothing), print a range up to
// DBL_MAX in 309 digits, and say "not in range" for a word; a delimited option silently drops an
// empty item ("1,,3" became two workers' factors). These accept finite numbers only.

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace omnilearn::cli {

// A finite number > 0.
CLI::Validator positive_number();
// A finite number >= 0.
CLI::Validator non_negative_number();
// A finite number in [lo, hi].
CLI::Validator number_in(double lo, double hi);
// A comma-separated list of such numbers, none empty: "1,1,2,4". Pair with parse_number_list.
CLI::Validator number_list_in(double lo, double hi);
CLI::Validator positive_number_list();

// The numbers of a list that number_list_in or positive_number_list accepted.
std::vector<double> parse_number_list(const std::string& text);

}  // namespace omnilearn::cli
