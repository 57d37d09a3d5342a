#pragma once
// Where a task or an actor goes: a pure function of the nodes' resources and load (no clock, no
// socket), so that its rules are tested with plain tables.

#include <string>
#include <vector>

#include "core/protocol.hpp"

namespace omnilearn::core {

struct NodeLoad {
  std::string id;    // the node's system id
  std::string name;  // for people
  ResourceSpec total;
  ResourceSpec used;  // held by running tasks and live actors
  int group_members = 0;  // actors of the request's group already on this node
};

enum class PlacementStrategy { kLeastLoaded = 0, kSpread = 1, kPack = 2 };

struct PlacementDecision {
  bool feasible = false;
  std::string node_id;  // when feasible
  std::string missing;  // when not: what no node has ("gpus >= 1 (largest: 0 on a, b)")

  static PlacementDecision on(std::string node) { return {true, std::move(node), {}}; }
  static PlacementDecision infeasible(std::string why) { return {false, {}, std::move(why)}; }
};

// Feasible nodes are those whose total resources cover `need` and whose labels include every
// label asked for. Among them, those with the resources free now come first; then, by strategy:
// least-loaded (lowest fraction of CPUs in use, then of GPUs, then name), spread (fewest group
// members first), pack (most group members first). A node with nothing free is still chosen
// when every feasible node is busy: the work waits there rather than failing.
PlacementDecision place(const std::vector<NodeLoad>& nodes, const ResourceSpec& need,
                        PlacementStrategy strategy = PlacementStrategy::kLeastLoaded);
// The same over loads kept elsewhere (the task router's own table): nothing is copied.
PlacementDecision place_among(const std::vector<const NodeLoad*>& nodes, const ResourceSpec& need,
                              PlacementStrategy strategy = PlacementStrategy::kLeastLoaded);

}  // namespace omnilearn::core
