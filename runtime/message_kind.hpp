#pragma once
// Every message kind that may travel on the wire, in one place so that a number is never reused.
// The envelope carries the kind and a protocol version; payloads are msgpack arrays whose
// decoders accept extra trailing fields (newer senders) and fill missing ones with defaults.

#include <cstdint>
#include <string_view>

namespace omnilearn::runtime {

inline constexpr std::uint8_t kProtocolVersion = 1;

enum class MessageKind : std::uint16_t {
  // runtime (1..99)
  kError = 1,            // ErrorReply: an ask could not be served
  kMonitor = 2,          // MonitorRequest: tell me when an actor stops
  kDown = 3,             // Down: a monitored actor or system is gone
  kPing = 4,             // Ping/Pong: liveness and benchmarks
  kPong = 5,
  kBlob = 6,             // raw bytes (benchmarks, tests)
  // membership (100..199)
  kRegisterNode = 100,
  kRegisterNodeReply = 101,
  kHeartbeat = 102,
  kHeartbeatReply = 103,
  kLeaveNode = 104,
  kStatusRequest = 105,
  kStatusReply = 106,
  kNodeEvent = 107,
  kSubscribeNodes = 108,
  kUnsubscribeNodes = 109,
  kSetNodeDrained = 110,  // jobs -> registry: a node drained for every job, or usable again
  // jobs and scheduling (200..299)
  kSubmitJob = 200,
  kSubmitJobReply = 201,
  kStopJob = 202,
  kDrainNode = 203,
  kSetNodeResources = 204,
  kJobProgress = 205,
  kFollowJob = 206,
  kSpawnTrainer = 207,
  kTrainerHello = 208,
  kRendezvous = 209,
  kTrainerReport = 210,
  kPlanUpdate = 211,
  kTrainerDone = 212,
  kStopTrainer = 213,
  kStoreRequest = 214,
  kStoreReply = 215,
  kSimpleReply = 216,
  kJobStatusRequest = 217,
  kJobStatusReply = 218,
  kTrainerExited = 219,  // was kTrainerFailed; now sent for every exit, with its code
  kSetTrainerSpeed = 220,
  kTrainerHelloReply = 221,
  kLeaseRequest = 222,
  kLeaseGrant = 223,
  kUndrainNode = 224,     // client -> jobs: a drained node usable again by every job
  kHeadMoved = 225,       // agent -> trainer: the job goes on under the head at this address
  kTrainerActivity = 226,       // scheduler -> trainer: a probe; what is its training thread doing?
  kTrainerActivityReply = 227,
  // remote tasks and actors, core/ (300..399)
  kExecutorHello = 300,   // executor -> task router: this node runs these functions
  kExecutorHelloReply = 301,
  kSubmitTask = 302,      // driver -> router -> executor: run a registered function
  kTaskResult = 303,      // the reply to kSubmitTask, kCreateActor and kActorCall
  kCreateActor = 304,     // driver -> router -> executor: construct a registered actor class
  kActorCall = 305,       // driver -> router -> executor: call a registered method
  kGetActor = 306,        // driver -> router: a named actor's handle
  kActorRef = 307,        // reply to kCreateActor (router) and kGetActor
  kKillActor = 308,
  kClusterInfoRequest = 309,
  kClusterInfoReply = 310,
  kWatchActor = 311,      // driver -> router: answered once the actor has ended for good
  kLastKind = 399,
  // 1024..65535: user message types registered by name (runtime/message_types.hpp)
};

// True for numbers this build knows; anything else is dropped at decode time.
bool is_known_kind(std::uint16_t kind);
std::string_view kind_name(MessageKind kind);

}  // namespace omnilearn::runtime
