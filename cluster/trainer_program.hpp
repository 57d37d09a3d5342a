#pragma once
// Where a worker finds omnilearn-trainer, the program it starts for each replica it hosts.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace omnilearn::actors {

// The trainer's file name, in the build tree (bin/) and in an installed prefix.
inline constexpr char kTrainerProgramName[] = "omnilearn-trainer";

// The outcome of a search: the program found (empty when none), and every path looked at, in
// order, for the error that names them.
struct TrainerProgramSearch {
  std::string found;
  std::vector<std::string> tried;
};

// Looks for omnilearn-trainer for the program at `self` (the running omnilearn's own path):
// `override_path` ($OMNILEARN_TRAINER) when given, and nothing else, since a path set by hand
// that is wrong must fail rather than be quietly replaced; otherwise beside `self` (the build
// tree's bin/), then <prefix>/libexec/omnilearn/ and <prefix>/lib/omnilearn/, where <prefix> is
// the parent of `self`'s folder (an installed bin/omnilearn). The first executable file wins.
TrainerProgramSearch find_trainer_program(const std::filesystem::path& self,
                                          const std::optional<std::string>& override_path);

// One line for a search that found nothing: where it looked and what to do.
std::string trainer_program_not_found(const TrainerProgramSearch& search, bool overridden);

}  // namespace omnilearn::actors
