// Placement is a pure function: tables in, a node (or what is missing) out.
#include <gtest/gtest.h>

#include "core/placement.hpp"

namespace omnilearn::core {
namespace {

NodeLoad node(std::string name, double cpus, double used_cpus, double gpus = 0,
              std::map<std::string, std::string> labels = {}, int group = 0) {
  NodeLoad load;
  load.id = "sys-" + name;
  load.name = name;
  load.total = ResourceSpec{cpus, gpus, std::move(labels)};
  load.used = ResourceSpec{used_cpus, 0, {}};
  load.group_members = group;
  return load;
}

TEST(Placement, LeastLoadedFeasibleNodeWins) {
  std::vector<NodeLoad> nodes = {node("a", 4, 3), node("b", 8, 2), node("c", 2, 0, 0)};
  auto decision = place(nodes, ResourceSpec{1, 0, {}});
  ASSERT_TRUE(decision.feasible);
  EXPECT_EQ(decision.node_id, "sys-c");  // 0% used
  decision = place(nodes, ResourceSpec{3, 0, {}});
  ASSERT_TRUE(decision.feasible);
  EXPECT_EQ(decision.node_id, "sys-b");  // c is too small, a has 1 free
}

TEST(Placement, BusyFeasibleNodesStillTakeWork) {
  std::vector<NodeLoad> nodes = {node("a", 2, 2), node("b", 2, 3)};
  auto decision = place(nodes, ResourceSpec{1, 0, {}});
  ASSERT_TRUE(decision.feasible);
  EXPECT_EQ(decision.node_id, "sys-a");
}

TEST(Placement, InfeasibleSaysWhatIsMissing) {
  std::vector<NodeLoad> nodes = {node("a", 4, 0, 1, {{"zone", "x"}}), node("b", 4, 0, 0)};
  auto gpus = place(nodes, ResourceSpec{1, 2, {}});
  ASSERT_FALSE(gpus.feasible);
  EXPECT_NE(gpus.missing.find("gpus >= 2 (largest: 1 on a)"), std::string::npos) << gpus.missing;
  auto label = place(nodes, ResourceSpec{1, 0, {{"zone", "y"}}});
  ASSERT_FALSE(label.feasible);
  EXPECT_NE(label.missing.find("label zone=y"), std::string::npos) << label.missing;
  auto cpus = place(nodes, ResourceSpec{16, 0, {}});
  ASSERT_FALSE(cpus.feasible);
  EXPECT_NE(cpus.missing.find("cpus >= 16 (largest: 4 on a, b)"), std::string::npos)
      << cpus.missing;
  // Every part exists, but not together.
  auto together = place(nodes, ResourceSpec{1, 1, {{"zone", "x"}}});
  EXPECT_TRUE(together.feasible);
  auto apart = place({node("a", 4, 0, 1), node("b", 4, 0, 0, {{"zone", "x"}})},
                     ResourceSpec{1, 1, {{"zone", "x"}}});
  ASSERT_FALSE(apart.feasible);
  EXPECT_NE(apart.missing.find("on one node"), std::string::npos) << apart.missing;
  auto none = place({}, ResourceSpec{1, 0, {}});
  ASSERT_FALSE(none.feasible);
  EXPECT_NE(none.missing.find("no worker"), std::string::npos);
}

TEST(Placement, SpreadAndPackFollowTheGroup) {
  std::vector<NodeLoad> nodes = {node("a", 4, 1, 0, {}, 2), node("b", 4, 2, 0, {}, 0)};
  EXPECT_EQ(place(nodes, ResourceSpec{1, 0, {}}, PlacementStrategy::kSpread).node_id, "sys-b");
  EXPECT_EQ(place(nodes, ResourceSpec{1, 0, {}}, PlacementStrategy::kPack).node_id, "sys-a");
  EXPECT_EQ(place(nodes, ResourceSpec{1, 0, {}}, PlacementStrategy::kLeastLoaded).node_id,
            "sys-a");
}

}  // namespace
}  // namespace omnilearn::core
