#include "actors/atomic_file.hpp"

#include <fstream>
#include <system_error>

namespace omnilearn::actors {

bool write_text_atomically(const std::filesystem::path& path, const std::string& text) {
  auto temp = path;
  temp += ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) return false;
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  return !ec;
}

}  // namespace omnilearn::actors
