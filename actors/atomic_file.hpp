#pragma once
// Run-directory files (summary.json) are written to a temporary file beside the target and
// renamed over it, so a reader sees the old file or the whole new one, never half of it.

#include <filesystem>
#include <string>

namespace omnilearn::actors {

// False when the temporary file could not be written or renamed (the target is then untouched).
bool write_text_atomically(const std::filesystem::path& path, const std::string& text);

}  // namespace omnilearn::actors
