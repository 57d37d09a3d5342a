#include "runtime/message_types.hpp"

#include <map>
#include <mutex>
#include <stdexcept>

namespace omnilearn::runtime {
namespace {

struct TypeRegistry {
  std::mutex mutex;
  std::map<std::uint16_t, std::string> names;                // guarded by mutex
  std::vector<std::pair<std::string, std::string>> clashes;  // guarded by mutex
  std::vector<std::string> bad_names;                        // guarded by mutex
};

// Function-local: registrations run during static initialisation of other translation units.
TypeRegistry& registry() {
  static TypeRegistry instance;
  return instance;
}

}  // namespace

MessageKind user_kind_for(std::string_view name) {
  std::uint32_t hash = 2166136261u;  // FNV-1a, 32 bits
  for (unsigned char c : name) {
    hash ^= c;
    hash *= 16777619u;
  }
  constexpr std::uint32_t span = 65536u - kFirstUserKind;
  return static_cast<MessageKind>(kFirstUserKind + hash % span);
}

MessageKind register_message_type(std::string_view name) {
  MessageKind kind = user_kind_for(name);
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  if (name.empty() || name.size() > 256) {
    r.bad_names.emplace_back(name);
    return kind;
  }
  auto [it, inserted] = r.names.emplace(static_cast<std::uint16_t>(kind), std::string(name));
  if (!inserted && it->second != name) r.clashes.emplace_back(it->second, std::string(name));
  return kind;
}

bool is_registered_user_kind(std::uint16_t kind) {
  if (kind < kFirstUserKind) return false;
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  return r.names.count(kind) > 0;
}

std::string registered_name(std::uint16_t kind) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.names.find(kind);
  return it == r.names.end() ? std::string() : it->second;
}

void check_message_types() {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  std::string problems;
  for (const auto& [first, second] : r.clashes) {
    problems += "message types '" + first + "' and '" + second + "' both map to kind " +
                std::to_string(static_cast<unsigned>(user_kind_for(first))) +
                "; rename one of them. ";
  }
  for (const auto& name : r.bad_names) {
    problems += "message type name '" + name.substr(0, 64) + "' must be 1..256 bytes. ";
  }
  if (!problems.empty()) throw std::logic_error("OmniLearn: " + problems);
}

}  // namespace omnilearn::runtime
