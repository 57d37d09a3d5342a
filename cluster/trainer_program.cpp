#include "cluster/trainer_program.hpp"

#include <unistd.h>

#include <sys/stat.h>

namespace omnilearn::actors {
namespace {

bool executable_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
         ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

TrainerProgramSearch find_trainer_program(const std::filesystem::path& self,
                                          const std::optional<std::string>& override_path) {
  TrainerProgramSearch search;
  if (override_path) {
    search.tried.push_back(*override_path);
  } else {
    auto bin = self.parent_path();
    auto prefix = bin.parent_path();
    search.tried.push_back((bin / kTrainerProgramName).string());
    search.tried.push_back((prefix / "libexec" / "omnilearn" / kTrainerProgramName).string());
    search.tried.push_back((prefix / "lib" / "omnilearn" / kTrainerProgramName).string());
  }
  for (const auto& path : search.tried) {
    if (executable_file(path)) {
      search.found = path;
      break;
    }
  }
  return search;
}

std::string trainer_program_not_found(const TrainerProgramSearch& search, bool overridden) {
  std::string where;
  for (const auto& path : search.tried) where += (where.empty() ? "" : ", ") + path;
  if (overridden) {
    return "OMNILEARN_TRAINER=" + where +
           " is not an executable file (point it at omnilearn-trainer, or unset it to search "
           "beside omnilearn and in <prefix>/libexec/omnilearn)";
  }
  return std::string("cannot find the trainer program ") + kTrainerProgramName +
         " (looked at " + where +
         "): install the omnilearn package, build the omnilearn-trainer target, or set "
         "OMNILEARN_TRAINER to its path";
}

}  // namespace omnilearn::actors
