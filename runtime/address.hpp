#pragma once
// Where an actor lives: the id of the actor system (one per process) and the actor's name in it.

#include <compare>
#include <string>

namespace omnilearn::runtime {

// An actor's address. `system` is either a system id learned from a peer (its ZeroMQ routing id)
// or, for a peer reached by connecting, the endpoint string ("tcp://10.0.0.1:7070").
struct ActorAddress {
  std::string system;
  std::string actor;

  bool empty() const { return actor.empty(); }
  std::string to_string() const { return actor + "@" + system; }
  auto operator<=>(const ActorAddress&) const = default;
};

// A fresh random system id ("s-" + 13 base-32 digits: 64 random bits, 15 characters, short
// enough for std::string to keep inline); ids of different processes never collide in
// practice, which is what lets a restarted process never be confused with its previous life.
std::string new_system_id();

}  // namespace omnilearn::runtime
