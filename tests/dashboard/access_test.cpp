#include "dashboard/access.hpp"

#include <gtest/gtest.h>

namespace omnilearn::dashboard {
namespace {

runtime::ClusterCredentials credentials() {
  runtime::ClusterCredentials c;
  c.server = runtime::generate_curve_key_pair();
  c.client = runtime::generate_curve_key_pair();
  return c;
}

TEST(DashboardToken, IsStablePerClusterAndDiffersBetweenClusters) {
  auto a = credentials();
  auto b = credentials();
  auto token = dashboard_token(a);
  EXPECT_EQ(token.size(), 64u);
  EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(dashboard_token(a), token);
  EXPECT_NE(dashboard_token(b), token);
  // Nothing of the key shows in the token.
  EXPECT_EQ(token.find(a.server.secret_key.substr(0, 8)), std::string::npos);
}

TEST(DashboardToken, MatchesOnlyTheExactToken) {
  EXPECT_TRUE(token_matches("abcd", "abcd"));
  EXPECT_FALSE(token_matches("abcd", "abce"));
  EXPECT_FALSE(token_matches("abcd", "abc"));
  EXPECT_FALSE(token_matches("", ""));
}

TEST(DashboardToken, IsFoundInHeaderQueryOrCookie) {
  EXPECT_EQ(presented_token("Bearer t1", "t2", "omnilearn_dashboard=t3"), "t1");
  EXPECT_EQ(presented_token("", "t2", "omnilearn_dashboard=t3"), "t2");
  EXPECT_EQ(presented_token("", "", "a=b; omnilearn_dashboard=t3; c=d"), "t3");
  EXPECT_EQ(presented_token("Basic xyz", "", "other=1"), std::nullopt);
}

TEST(DashboardAccess, KnowsLoopbackHosts) {
  EXPECT_TRUE(is_default_loopback("127.0.0.1"));
  EXPECT_TRUE(is_default_loopback("localhost"));
  EXPECT_TRUE(is_default_loopback("::1"));
  EXPECT_FALSE(is_default_loopback("0.0.0.0"));
  EXPECT_FALSE(is_default_loopback("127.0.0.2"));
  EXPECT_TRUE(is_loopback_host_header("127.0.0.1:8265"));
  EXPECT_TRUE(is_loopback_host_header("localhost"));
  EXPECT_TRUE(is_loopback_host_header("[::1]:80"));
  EXPECT_FALSE(is_loopback_host_header("evil.example:8265"));
  EXPECT_FALSE(is_loopback_host_header("127.0.0.1.evil.example"));
  EXPECT_FALSE(is_loopback_host_header(""));
}

}  // namespace
}  // namespace omnilearn::dashboard
