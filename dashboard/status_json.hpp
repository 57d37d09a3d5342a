#pragma once
// The JSON shape of the head's state, shared by `omnilearn status --json` and the dashboard's
// /api/nodes and /api/jobs, so that both always say the same thing.

#include <nlohmann/json.hpp>

#include "wire/membership_protocol.hpp"

namespace omnilearn::dashboard {

// One node as `status --json` lists it under "nodes".
nlohmann::json to_json(const actors::NodeInfo& node);
// One job as `status --json` lists it under "jobs".
nlohmann::json to_json(const actors::JobInfo& job);
// The whole `status --json` object: {"nodes": [...], "jobs": [...], "counters": {...}}.
nlohmann::json status_json(const actors::StatusReply& status);

}  // namespace omnilearn::dashboard
