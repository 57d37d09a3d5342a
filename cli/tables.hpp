#pragma once
// The tables `status`, `node list`, `job list` and `job status` print.

#include <string>
#include <vector>

#include "wire/membership_protocol.hpp"

namespace omnilearn::cli {

// A node's state as the tables show it: a drained node that is alive is "draining" while it
// still hosts trainers and "drained" after; any other node, its registry state.
std::string shown_state(const actors::NodeInfo& node);

// One line per node, live ones first; "(no nodes have joined yet)" when there are none.
void print_nodes(std::vector<actors::NodeInfo> nodes);
// One line per job, with its reason and newest checkpoint under it when it has them.
void print_jobs(const std::vector<actors::JobInfo>& jobs);

}  // namespace omnilearn::cli
