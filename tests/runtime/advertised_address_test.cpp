// The start-up check on advertised addresses is a pure function of what was resolved: each
// case below is a machine's situation, with no lookup and no network.

#include "runtime/advertised_address.hpp"

#include <gtest/gtest.h>

namespace omnilearn::runtime {
namespace {

AdvertiseCheck head(const std::string& bind, const std::string& advertised,
                    std::vector<std::string> resolved) {
  AdvertiseCheck check;
  check.who = "the head";
  check.flag = "--advertise-address";
  check.bind_host = bind;
  check.advertised = advertised;
  check.resolved = std::move(resolved);
  check.others_connect = !is_loopback_host(bind);
  check.suggestions = {"10.0.0.5"};
  return check;
}

TEST(AdvertisedAddress, LoopbackAndWildcardHosts) {
  for (const char* host : {"127.0.0.1", "127.0.1.1", "127.255.0.9", "localhost", "LOCALHOST", "::1",
                           "[::1]", "::ffff:127.0.1.1", "a.localhost"}) {
    EXPECT_TRUE(is_loopback_host(host)) << host;
  }
  for (const char* host :
       {"10.0.0.5", "0.0.0.0", "128.0.0.1", "head.example", "fd00::2", "", "127.example"}) {
    EXPECT_FALSE(is_loopback_host(host)) << host;
  }
  for (const char* host : {"0.0.0.0", "*", "::", "[::]"}) EXPECT_TRUE(is_wildcard_host(host));
  EXPECT_FALSE(is_wildcard_host("127.0.0.1"));
}

TEST(AdvertisedAddress, DebianHostNameOnAHeadListeningEverywhereIsWarnedAbout) {
  // /etc/hosts maps the host name to 127.0.1.1: workers elsewhere would dial themselves.
  auto warning = advertise_warning(head("0.0.0.0", "vm", {"127.0.1.1"}));
  ASSERT_TRUE(warning);
  EXPECT_NE(warning->find("vm (127.0.1.1)"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("loopback"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("--advertise-address"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("10.0.0.5"), std::string::npos) << "suggests an address: " << *warning;
  EXPECT_EQ(warning->find('\n'), std::string::npos) << "one line";

  EXPECT_TRUE(advertise_warning(head("0.0.0.0", "127.0.0.1", {"127.0.0.1"})));
  EXPECT_TRUE(advertise_warning(head("10.0.0.5", "localhost", {"127.0.0.1", "::1"})));
}

TEST(AdvertisedAddress, ReachableAdvertisedAddressesAreFine) {
  EXPECT_FALSE(advertise_warning(head("0.0.0.0", "10.0.0.5", {"10.0.0.5"})));
  EXPECT_FALSE(advertise_warning(head("0.0.0.0", "head.example", {"127.0.1.1", "10.0.0.5"})))
      << "one reachable address is enough";
  EXPECT_FALSE(advertise_warning(head("10.0.0.5", "10.0.0.5", {"10.0.0.5"})));
  // A one-machine cluster: loopback everywhere, nobody else is expected.
  EXPECT_FALSE(advertise_warning(head("127.0.0.1", "127.0.0.1", {"127.0.0.1"})));
  EXPECT_FALSE(advertise_warning(head("127.0.0.1", "vm", {"127.0.1.1"})));
}

TEST(AdvertisedAddress, AHeadOnLoopbackAdvertisingAnotherAddressIsWarnedAbout) {
  auto warning = advertise_warning(head("127.0.0.1", "10.0.0.5", {"10.0.0.5"}));
  ASSERT_TRUE(warning);
  EXPECT_NE(warning->find("listens on 127.0.0.1 only"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("--host"), std::string::npos) << *warning;
}

TEST(AdvertisedAddress, AnAddressThatDoesNotResolveIsWarnedAbout) {
  auto warning = advertise_warning(head("0.0.0.0", "no-such-host", {}));
  ASSERT_TRUE(warning);
  EXPECT_NE(warning->find("does not resolve"), std::string::npos) << *warning;
}

TEST(AdvertisedAddress, AWorkerIsWarnedOnlyWhenItsHeadIsElsewhere) {
  AdvertiseCheck worker;
  worker.who = "this worker";
  worker.flag = "--advertise-address";
  worker.advertised = "vm";
  worker.resolved = {"127.0.1.1"};
  worker.others_connect = true;  // the head is on another machine
  auto warning = advertise_warning(worker);
  ASSERT_TRUE(warning);
  EXPECT_EQ(warning->rfind("this worker advertises vm (127.0.1.1)", 0), 0u) << *warning;
  EXPECT_EQ(warning->find("listens on"), std::string::npos) << "a worker binds where it advertises";

  worker.others_connect = false;  // the head is on this machine
  EXPECT_FALSE(advertise_warning(worker));
  worker.others_connect = true;
  worker.advertised = "10.251.0.2";
  worker.resolved = {"10.251.0.2"};
  EXPECT_FALSE(advertise_warning(worker));
}

TEST(AdvertisedAddress, ParsesHostOrHostAndPort) {
  auto host = parse_advertise_address("10.0.0.5");
  EXPECT_EQ(host.host, "10.0.0.5");
  EXPECT_EQ(host.port, 0);
  auto both = parse_advertise_address("head.example:17070");
  EXPECT_EQ(both.host, "head.example");
  EXPECT_EQ(both.port, 17070);
  EXPECT_EQ(parse_advertise_address("fd00::2").host, "fd00::2");
  EXPECT_EQ(parse_advertise_address("[fd00::2]").host, "fd00::2");
  auto v6 = parse_advertise_address("[fd00::2]:7070");
  EXPECT_EQ(v6.host, "fd00::2");
  EXPECT_EQ(v6.port, 7070);
  for (const char* bad : {"", "bad host", "h:notaport", "h:70000", "[fd00::2"}) {
    EXPECT_THROW(parse_advertise_address(bad), std::invalid_argument) << bad;
  }
}

TEST(AdvertisedAddress, ResolvesNumericAddressesWithoutALookup) {
  EXPECT_EQ(resolve_host("127.0.0.1"), std::vector<std::string>{"127.0.0.1"});
  EXPECT_TRUE(resolve_host("no-such-host.invalid").empty());
  for (const auto& address : non_loopback_interface_addresses()) {
    EXPECT_FALSE(is_loopback_host(address)) << address;
  }
}

}  // namespace
}  // namespace omnilearn::runtime
