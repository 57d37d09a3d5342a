#pragma once
// The elastic protocol's vocabulary, shared by its two state machines (ElasticJob on the
// scheduler's side, ElasticMember on each trainer's) and by the deterministic simulation that
// drives them. Transport-free: the actors map these onto their wire messages
// (wire/job_protocol.hpp). docs/ARCHITECTURE.md "The elastic protocol" describes the states,
// messages and invariants.

#include <cstdint>
#include <string>
#include <vector>

namespace omnilearn::scheduler {

// A reading of a monotonic clock, in milliseconds. Each party has its own clock; the protocol
// never compares readings of two clocks, only durations (with a margin for rate differences).
using Millis = std::int64_t;

// Words the leader's control broadcast starts with at every step boundary.
enum ControlCommand : std::int64_t {
  kContinue = 0,  // [kContinue, generation, plan version, b_0..b_{world-1}]: train one step
  kRegroup = 1,   // [kRegroup, newer generation]: leave this group, join that one
  kAbandon = 2,   // [kAbandon, generation]: this group ends here; wait for the next rendezvous
};

// scheduler -> trainer: take part in `generation` as `rank` of `world` (rank < 0: not in it;
// with `leave`, drained: say done and exit).
struct RendezvousOrder {
  std::int64_t generation = 0;
  std::int32_t rank = -1;
  std::int32_t world = 0;
  std::vector<std::int32_t> batches;
  std::uint64_t plan_version = 0;
  bool leave = false;
  // A member of the previous generation was lost (died, hung, cut off): whoever still waits in
  // one of its collectives may give up now rather than at the collective timeout.
  bool abandon_previous = false;
  // A generation that resumes from a checkpoint (no live trainer held the job's committed
  // state): rank 0 loads `checkpoint`, the committed state at step `checkpoint_step`, before
  // the sync, and every rank adopts rank 0's state, whatever step it holds itself.
  // checkpoint_step < 0: an ordinary generation (the sync adopts the most advanced state).
  std::string checkpoint;
  std::int64_t checkpoint_step = -1;
};

// scheduler -> leader: use these batches from the next step boundary of `generation` on.
struct PlanOrder {
  std::int64_t generation = 0;
  std::uint64_t version = 0;
  std::vector<std::int32_t> batches;
};

// leader -> scheduler and back: the leader's right to commit steps of a generation.
struct LeaseAsk {
  std::int64_t generation = 0;
  std::uint64_t seq = 0;
  std::int64_t step = 0;
};
struct LeaseAnswer {
  std::int64_t generation = 0;
  std::uint64_t seq = 0;
  bool granted = false;
  Millis duration = 0;
  std::string reason;
  // Refused for good: the generation is superseded (or the job ended). The leader abandons at
  // once instead of waiting for a lease that will not come.
  bool superseded = false;
};

// trainer -> scheduler reports. Each names the generation it belongs to; the scheduler ignores
// one whose generation is superseded.
struct MemberReport {
  // kLeft: the member stopped training in its generation (it regrouped or abandoned it at a
  // step boundary): it commits nothing more there, so a leader's lease may go to a successor
  // at once, and the step it names is its committed state.
  enum class Kind { kSynced, kStep, kBroken, kLeft };
  Kind kind = Kind::kStep;
  std::int64_t generation = 0;
  std::int32_t rank = -1;
  std::int64_t step = 0;      // committed steps of the reporter
  std::string error;          // kBroken: what failed
  std::uint64_t checksum = 0; // kSynced: a digest of the replica's state (equal on every rank)
  // The newest generation the reporter synced in (-1: none), in every report: a lost kSynced
  // report is made up by the next one, or the scheduler would not count the reporter as
  // holding the state it adopted there.
  std::int64_t synced_generation = -1;
};

// A trainer's exit code for an error in the job's own input (a data file that is not a tensor
// archive, a label out of range, a model that does not fit the data): another try cannot end
// differently, so the scheduler fails the job at once instead of retrying (sysexits' EX_DATAERR).
inline constexpr int kTrainerExitBadInput = 65;

// trainer -> scheduler at the end of its part: finished all steps, drained, or an error.
struct MemberDone {
  enum class Outcome { kFinished, kDrained, kError };
  Outcome outcome = Outcome::kFinished;
  std::int64_t generation = 0;
  std::int32_t rank = -1;
  std::int64_t step = 0;
  std::string error;  // kError, or a failed final checkpoint (kFinished with ok == false)
  bool ok = true;
};

const char* to_string(MemberDone::Outcome outcome);

// Rules of the protocol that the mutation checks break on purpose
// (tests/elastic/elastic_mutation_test.cpp): the simulation must fail under each broken
// variant, which shows that its seeds exercise the rule. Production always runs kNone.
enum class Mutation {
  kNone,
  kNoLeaseCheck,  // ElasticMember: the leader neither waits for a lease nor checks it at the gate
  kNoCommitRenewal,    // ElasticMember: the gate commits a step that outlasted the lease, unrenewed
  kCommitUnconfirmed,  // ElasticMember: a follower commits whatever rank 0's words say
  kSyncTieLowestRank,  // sync ties go to the lowest rank, not the newest generation's last step
  kGrantOnSilence,     // ElasticJob: a failed probe of the old leader releases its lease even
                       // when it timed out (silence), not only when its connection was closed
  kRestoreTrustsSnapshot,  // ElasticJob::restore: the trainers' steps as persisted, no waiting
  kRestoreForgetsLease,    // ElasticJob::restore: the lease in force treated as run out
};
const char* to_string(Mutation mutation);

}  // namespace omnilearn::scheduler
