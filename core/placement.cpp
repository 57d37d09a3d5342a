#include "core/placement.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>

#include <fmt/format.h>

namespace omnilearn::core {
namespace {

constexpr double kEpsilon = 1e-9;

bool labels_match(const NodeLoad& node, const ResourceSpec& need) {
  for (const auto& [key, value] : need.labels) {
    auto it = node.total.labels.find(key);
    if (it == node.total.labels.end() || it->second != value) return false;
  }
  return true;
}

bool covers(const NodeLoad& node, const ResourceSpec& need) {
  return node.total.cpus + kEpsilon >= need.cpus && node.total.gpus + kEpsilon >= need.gpus &&
         labels_match(node, need);
}

bool free_now(const NodeLoad& node, const ResourceSpec& need) {
  return node.total.cpus - node.used.cpus + kEpsilon >= need.cpus &&
         node.total.gpus - node.used.gpus + kEpsilon >= need.gpus;
}

double fraction(double used, double total) { return total > 0 ? used / total : 0.0; }

std::string describe_missing(const std::vector<const NodeLoad*>& nodes, const ResourceSpec& need) {
  if (nodes.empty()) return "no worker with an executor has joined the cluster";
  std::vector<std::string> parts;
  auto largest = [&](auto field, const char* what, double wanted) {
    double best = -1;
    std::string where;
    for (const auto* node : nodes) {
      double have = field(*node);
      if (have > best + kEpsilon) {
        best = have;
        where = node->name;
      } else if (std::abs(have - best) <= kEpsilon) {
        where += ", " + node->name;
      }
    }
    if (best + kEpsilon < wanted) {
      parts.push_back(fmt::format("{} >= {} (largest: {} on {})", what, wanted, best, where));
    }
  };
  largest([](const NodeLoad& n) { return n.total.cpus; }, "cpus", need.cpus);
  largest([](const NodeLoad& n) { return n.total.gpus; }, "gpus", need.gpus);
  for (const auto& label : need.labels) {
    // Named references, not structured bindings: clang 14 (the fuzz build) cannot capture those.
    const std::string& key = label.first;
    const std::string& value = label.second;
    bool any = std::any_of(nodes.begin(), nodes.end(), [&](const NodeLoad* n) {
      auto it = n->total.labels.find(key);
      return it != n->total.labels.end() && it->second == value;
    });
    if (!any) parts.push_back(fmt::format("label {}={}", key, value));
  }
  if (parts.empty()) {
    // Each part exists somewhere, but never all on one node.
    parts.push_back(fmt::format("cpus >= {}, gpus >= {} and every label asked for on one node",
                                need.cpus, need.gpus));
  }
  std::string text = "no node has ";
  for (std::size_t i = 0; i < parts.size(); ++i) text += (i ? "; " : "") + parts[i];
  return text;
}

}  // namespace

PlacementDecision place(const std::vector<NodeLoad>& nodes, const ResourceSpec& need,
                        PlacementStrategy strategy) {
  std::vector<const NodeLoad*> pointers;
  pointers.reserve(nodes.size());
  for (const auto& node : nodes) pointers.push_back(&node);
  return place_among(pointers, need, strategy);
}

PlacementDecision place_among(const std::vector<const NodeLoad*>& nodes, const ResourceSpec& need,
                              PlacementStrategy strategy) {
  const NodeLoad* best = nullptr;
  auto key = [&](const NodeLoad& node) {
    int group = strategy == PlacementStrategy::kSpread ? node.group_members
                : strategy == PlacementStrategy::kPack ? -node.group_members
                                                       : 0;
    // References to the names, not copies: this runs twice per node for every placement.
    return std::tuple<int, int, double, double, const std::string&, const std::string&>(
        free_now(node, need) ? 0 : 1, group, fraction(node.used.cpus, node.total.cpus),
        fraction(node.used.gpus, node.total.gpus), node.name, node.id);
  };
  for (const auto* node : nodes) {
    if (!covers(*node, need)) continue;
    if (!best || key(*node) < key(*best)) best = node;
  }
  if (!best) return PlacementDecision::infeasible(describe_missing(nodes, need));
  return PlacementDecision::on(best->id);
}

}  // namespace omnilearn::core
