// Two user message names that derive the same kind stop every ActorSystem at start, naming
// both (its own test program: the collision is process-wide by design).

#include <gtest/gtest.h>

#include <map>

#include "runtime/actor_system.hpp"
#include "runtime/message_types.hpp"

namespace omnilearn::runtime {
namespace {

TEST(MessageCollision, IsDetectedWhenASystemStarts) {
  ActorSystem before;  // nothing collides yet
  std::map<MessageKind, std::string> seen;
  std::string first, second;
  for (int i = 0; first.empty(); ++i) {
    auto name = "collide." + std::to_string(i);
    auto [it, inserted] = seen.emplace(user_kind_for(name), name);
    if (!inserted) {
      first = it->second;
      second = name;
    }
  }
  register_message_type(first);
  register_message_type(first);  // the same name again is not a collision
  EXPECT_NO_THROW(check_message_types());
  register_message_type(second);
  try {
    ActorSystem system;
    FAIL() << "a collision must stop the system at start";
  } catch (const std::logic_error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("'" + first + "'"), std::string::npos) << what;
    EXPECT_NE(what.find("'" + second + "'"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace omnilearn::runtime
