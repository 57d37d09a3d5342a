// libFuzzer target: actors::parse_job_spec on arbitrary bytes as TOML text.
// A bad job file must end in the one documented error, JobSpecError, located in the file; any
// other exception escapes on purpose (std::terminate -> abort), so libFuzzer reports it.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "jobs/job_spec.hpp"

namespace {

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "job_spec_fuzz: broken invariant: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto spec = omnilearn::actors::parse_job_spec(text, "fuzz.toml");
    // What parse_job_spec promises about a spec it accepts.
    check(!spec.name.empty() && spec.name.size() <= 64, "job name outside 1..64 characters");
    check((spec.train.epochs > 0) != (spec.train.steps > 0), "not exactly one of epochs/steps");
    check(spec.elastic.min_workers <= spec.elastic.max_workers, "min_workers > max_workers");
    check(spec.controller.config.min_batch <= spec.controller.config.max_batch,
          "min_batch > max_batch");
  } catch (const omnilearn::actors::JobSpecError& e) {
    check(e.source() == "fuzz.toml", "error names another source");
    check(!e.message().empty(), "error without a message");
  }
  return 0;
}
