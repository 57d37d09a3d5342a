#include "cli/common.hpp"

#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cli/command.hpp"

namespace omnilearn::cli {

runtime::HostPort resolve_head_address(const std::string& flag_value) {
  std::string text = flag_value;
  if (text.empty()) {
    const char* env = std::getenv("OMNILEARN_ADDRESS");
    if (env) text = env;
  }
  if (text.empty()) {
    throw CliError("no head address: pass --address HOST:PORT or set OMNILEARN_ADDRESS");
  }
  try {
    auto address = runtime::parse_host_port(text);
    if (address.port == 0) throw std::invalid_argument("bad address '" + text + "': port 0");
    return address;
  } catch (const std::invalid_argument& e) {
    throw CliError(e.what());
  }
}

void setup_logging() {
  auto logger = spdlog::stderr_color_mt("omnilearn");
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ [%P] %v");
  spdlog::set_default_logger(logger);
  const char* level = std::getenv("OMNILEARN_LOG");
  spdlog::set_level(level ? spdlog::level::from_str(level) : spdlog::level::info);
}

std::string local_hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace omnilearn::cli
