#pragma once
// Open message types: a user struct with a msgpack adaptor becomes a message by registering a
// name. Its kind is derived from the name (FNV-1a folded into kFirstUserKind..65535), so every
// process that registers the same name agrees on the number without coordination. Two names
// that fold to the same kind are a collision: recorded at registration (static initialisation)
// and reported by check_message_types(), which every ActorSystem calls when it starts, so a
// collision stops the process at start instead of mis-decoding messages later.
//
//   struct Sample { std::string text; int label; MSGPACK_DEFINE(text, label); };
//   OMNILEARN_MESSAGE(Sample, "myapp.Sample")      // at namespace scope, once per program
//   system.tell(to, Sample{"x", 1});  ...  auto s = runtime::unpack_as<Sample>(envelope);

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "runtime/message_kind.hpp"

namespace omnilearn::runtime {

// Kinds at and above this number belong to registered user types; below, to the runtime.
inline constexpr std::uint16_t kFirstUserKind = 1024;

// The kind a name maps to (pure; the same in every process and build).
MessageKind user_kind_for(std::string_view name);

// Registers `name` (any thread; idempotent for the same name). Returns its kind. A second name
// with the same kind is recorded as a collision (see check_message_types).
MessageKind register_message_type(std::string_view name);

// True if `kind` belongs to a registered user type.
bool is_registered_user_kind(std::uint16_t kind);
// The registered name of a user kind, "" if none.
std::string registered_name(std::uint16_t kind);

// Throws std::logic_error naming every colliding pair of names; called by ActorSystem's
// constructor. Also rejects names that are empty or longer than 256 bytes.
void check_message_types();

// Specialised by OMNILEARN_MESSAGE for a user type.
template <class M>
struct MessageName;

template <class M, class = void>
struct HasStaticKind : std::false_type {};
template <class M>
struct HasStaticKind<M, std::void_t<decltype(M::kKind)>> : std::true_type {};

// The kind of a message type: its static kKind (runtime and training messages), or the kind its
// registered name derives to.
template <class M>
MessageKind kind_of() {
  if constexpr (HasStaticKind<M>::value) {
    return M::kKind;
  } else {
    static const MessageKind kind = register_message_type(MessageName<M>::value);
    return kind;
  }
}

}  // namespace omnilearn::runtime

#define OMNILEARN_MSG_CONCAT_INNER(a, b) a##b
#define OMNILEARN_MSG_CONCAT(a, b) OMNILEARN_MSG_CONCAT_INNER(a, b)
// At global namespace scope: makes `Type` (with MSGPACK_DEFINE or an adaptor) a message named
// `Name` (a string literal; keep it stable: it is the wire identity).
#define OMNILEARN_MESSAGE(Type, Name)                                                       \
  template <>                                                                               \
  struct omnilearn::runtime::MessageName<Type> {                                            \
    static constexpr std::string_view value = Name;                                         \
  };                                                                                        \
  [[maybe_unused]] static const ::omnilearn::runtime::MessageKind OMNILEARN_MSG_CONCAT(     \
      omnilearn_message_kind_, __COUNTER__) = ::omnilearn::runtime::register_message_type(Name)
