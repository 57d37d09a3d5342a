#include "runtime/message_kind.hpp"

#include "runtime/message_types.hpp"

namespace omnilearn::runtime {

std::string_view kind_name(MessageKind kind) {
  switch (kind) {
#define OL_KIND(name) \
  case MessageKind::name: return #name + 1;
    OL_KIND(kError) OL_KIND(kMonitor) OL_KIND(kDown) OL_KIND(kPing) OL_KIND(kPong) OL_KIND(kBlob)
    OL_KIND(kRegisterNode) OL_KIND(kRegisterNodeReply) OL_KIND(kHeartbeat)
    OL_KIND(kHeartbeatReply) OL_KIND(kLeaveNode) OL_KIND(kStatusRequest) OL_KIND(kStatusReply)
    OL_KIND(kNodeEvent) OL_KIND(kSubscribeNodes) OL_KIND(kUnsubscribeNodes) OL_KIND(kSetNodeDrained) OL_KIND(kSubmitJob) OL_KIND(kSubmitJobReply)
    OL_KIND(kStopJob) OL_KIND(kDrainNode) OL_KIND(kSetNodeResources) OL_KIND(kJobProgress)
    OL_KIND(kFollowJob) OL_KIND(kSpawnTrainer) OL_KIND(kTrainerHello) OL_KIND(kRendezvous)
    OL_KIND(kTrainerReport) OL_KIND(kPlanUpdate) OL_KIND(kTrainerDone) OL_KIND(kStopTrainer)
    OL_KIND(kStoreRequest) OL_KIND(kStoreReply) OL_KIND(kSimpleReply) OL_KIND(kJobStatusRequest)
    OL_KIND(kJobStatusReply) OL_KIND(kTrainerExited) OL_KIND(kSetTrainerSpeed) OL_KIND(kTrainerHelloReply)
    OL_KIND(kLeaseRequest) OL_KIND(kLeaseGrant) OL_KIND(kUndrainNode) OL_KIND(kHeadMoved)
    OL_KIND(kTrainerActivity) OL_KIND(kTrainerActivityReply)
    OL_KIND(kExecutorHello) OL_KIND(kExecutorHelloReply) OL_KIND(kSubmitTask) OL_KIND(kTaskResult)
    OL_KIND(kCreateActor) OL_KIND(kActorCall) OL_KIND(kGetActor) OL_KIND(kActorRef)
    OL_KIND(kKillActor) OL_KIND(kClusterInfoRequest) OL_KIND(kClusterInfoReply)
    OL_KIND(kWatchActor)
#undef OL_KIND
    case MessageKind::kLastKind: break;
  }
  return "unknown";
}

bool is_known_kind(std::uint16_t kind) {
  if (kind >= kFirstUserKind) return is_registered_user_kind(kind);
  return kind_name(static_cast<MessageKind>(kind)) != "unknown";
}

}  // namespace omnilearn::runtime
