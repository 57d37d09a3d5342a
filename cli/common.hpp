#pragma once
// Small pieces every command shares: where the head is, logging, this machine's name.

#include <string>

#include "runtime/endpoint.hpp"

namespace omnilearn::cli {

// The head's address from --address, else $OMNILEARN_ADDRESS; CliError (exit 2) if neither is
// set or it does not parse.
runtime::HostPort resolve_head_address(const std::string& flag_value);

// Logs go to stderr (stdout stays machine-readable); level from $OMNILEARN_LOG (info default).
void setup_logging();

std::string local_hostname();

}  // namespace omnilearn::cli
