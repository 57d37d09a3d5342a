#include "tests/elastic/elastic_sim.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <type_traits>
#include <utility>
#include <variant>

#include "cluster/full_disruption.hpp"

namespace omnilearn::scheduler::sim {

// The trainer's Control::kStoppingGraceMs: how long a trainer that read its stop still waits
// in a collective (a stopping leader's last word to its followers).
constexpr std::int64_t kStoppingGraceMs = 1000;

const char* to_string(FaultKind kind) {
  switch (kind) {
    case FaultKind::kKillTrainer:
      return "kill_trainer";
    case FaultKind::kCrashTrainer:
      return "crash_trainer";
    case FaultKind::kKillNode:
      return "kill_node";
    case FaultKind::kFreezeNode:
      return "freeze_node";
    case FaultKind::kFreezeAgent:
      return "freeze_agent";
    case FaultKind::kFreezeTrainer:
      return "freeze_trainer";
    case FaultKind::kPartitionHead:
      return "partition_head";
    case FaultKind::kPartitionNodes:
      return "partition_nodes";
    case FaultKind::kDrain:
      return "drain";
    case FaultKind::kJoinNode:
      return "join_node";
    case FaultKind::kDelaySpike:
      return "delay_spike";
    case FaultKind::kLoseDone:
      return "lose_done";
    case FaultKind::kFailCheckpoint:
      return "fail_checkpoint";
    case FaultKind::kSlowNode:
      return "slow_node";
    case FaultKind::kLeaseChange:
      return "lease_change";
    case FaultKind::kKillAllTrainers:
      return "kill_all_trainers";
    case FaultKind::kRestartHead:
      return "restart_head";
    case FaultKind::kIsolateHead:
      return "isolate_head";
    case FaultKind::kCount:
      break;
  }
  return "?";
}

std::uint64_t initial_checksum() { return 0x6a09e667f3bcc908ULL; }

std::uint64_t fold_checksum(std::uint64_t checksum, std::int64_t step, std::int64_t generation) {
  // splitmix64 of the triple: any fixed mixing function does.
  std::uint64_t z = checksum ^ (static_cast<std::uint64_t>(step) * 0x9e3779b97f4a7c15ULL) ^
                    (static_cast<std::uint64_t>(generation) * 0xc2b2ae3d27d4eb4fULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

namespace {

using Us = std::int64_t;  // simulated microseconds; the machines see milliseconds

// Integers from the generator's raw output (not <random>'s distributions), so every standard
// library draws the same runs from a seed.
std::int64_t uniform(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  if (hi <= lo) return lo;
  return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
}
double uniform_real(std::mt19937_64& rng, double lo, double hi) {
  return lo + (hi - lo) * static_cast<double>(rng() >> 11) * 0x1.0p-53;
}
bool chance(std::mt19937_64& rng, double p) { return p > 0 && uniform_real(rng, 0.0, 1.0) < p; }

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}
template <typename T>
std::string join_nums(const std::vector<T>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

const char* kind_name(MemberReport::Kind kind) {
  switch (kind) {
    case MemberReport::Kind::kSynced:
      return "synced";
    case MemberReport::Kind::kStep:
      return "step";
    case MemberReport::Kind::kBroken:
      return "broken";
    case MemberReport::Kind::kLeft:
      return "left";
  }
  return "?";
}

std::string describe(const MemberMessage& m) {
  std::ostringstream os;
  if (auto* r = std::get_if<MemberReport>(&m)) {
    os << "Report{" << kind_name(r->kind) << " g" << r->generation << " r" << r->rank << " step "
       << r->step;
    if (!r->error.empty()) os << " '" << r->error << "'";
    os << "}";
  } else if (auto* a = std::get_if<LeaseAsk>(&m)) {
    os << "LeaseAsk{g" << a->generation << " seq " << a->seq << " step " << a->step << "}";
  } else if (auto* d = std::get_if<MemberDone>(&m)) {
    os << "Done{" << to_string(d->outcome) << " g" << d->generation << " r" << d->rank << " step "
       << d->step << " ok " << d->ok;
    if (!d->error.empty()) os << " '" << d->error << "'";
    os << "}";
  }
  return os.str();
}

std::string describe(const MemberAction& a) {
  std::ostringstream os;
  if (auto* j = std::get_if<JoinAction>(&a)) {
    os << "Join{g" << j->generation << " r" << j->rank << "/" << j->world << "}";
  } else if (std::holds_alternative<SyncAction>(a)) {
    os << "Sync";
  } else if (auto* c = std::get_if<ControlAction>(&a)) {
    os << "Control{" << join_nums(c->words) << "}";
  } else if (auto* s = std::get_if<StepAction>(&a)) {
    os << "Step{" << join_nums(s->batches) << (s->words.empty() ? "" : " words ")
       << join_nums(s->words) << "}";
  } else if (std::holds_alternative<CommitAction>(a)) {
    os << "Commit";
  } else if (auto* d = std::get_if<DropAction>(&a)) {
    os << "Drop{'" << d->error << "'}";
  } else if (std::holds_alternative<FinishAction>(a)) {
    os << "Finish";
  } else if (auto* w = std::get_if<WaitAction>(&a)) {
    os << "Wait{" << w->until << "}";
  } else if (auto* e = std::get_if<ExitAction>(&a)) {
    os << "Exit{" << e->code << " '" << e->reason << "'}";
  }
  return os.str();
}

std::string describe(const JobCommand& c) {
  std::ostringstream os;
  if (auto* s = std::get_if<SpawnCommand>(&c)) {
    os << "Spawn{" << s->trainer << " on " << s->node << "}";
  } else if (auto* r = std::get_if<RendezvousCommand>(&c)) {
    os << "Rendezvous{" << r->trainer << " g" << r->order.generation << " r" << r->order.rank << "/"
       << r->order.world << " b=" << join_nums(r->order.batches) << " v" << r->order.plan_version
       << (r->order.leave ? " leave" : "") << "}";
  } else if (auto* p = std::get_if<PlanCommand>(&c)) {
    os << "Plan{" << p->trainer << " g" << p->order.generation << " v" << p->order.version
       << " b=" << join_nums(p->order.batches) << "}";
  } else if (auto* l = std::get_if<LeaseCommand>(&c)) {
    os << "Lease{" << l->trainer << " g" << l->answer.generation << " seq " << l->answer.seq
       << (l->answer.granted ? " granted " : " refused ") << l->answer.duration;
    if (!l->answer.reason.empty()) os << " '" << l->answer.reason << "'";
    os << "}";
  } else if (auto* st = std::get_if<StopCommand>(&c)) {
    os << "Stop{" << st->trainer << " '" << st->reason << "'}";
  } else if (auto* pr = std::get_if<ProbeCommand>(&c)) {
    os << "Probe{" << pr->trainer << " g" << pr->generation << "}";
  } else if (auto* d = std::get_if<DropStoreKeysCommand>(&c)) {
    os << "DropStoreKeys{below " << d->below << "}";
  } else if (auto* e = std::get_if<JobEvent>(&c)) {
    os << "Event{" << e->kind;
    if (!e->trainer.empty()) os << " " << e->trainer;
    if (e->generation) os << " g" << e->generation;
    if (e->step) os << " step " << e->step;
    if (!e->members.empty()) os << " [" << join(e->members) << "]";
    if (!e->batches.empty()) os << " b=" << join_nums(e->batches);
    if (e->lost_steps) os << " lost " << e->lost_steps;
    if (!e->reason.empty()) os << " '" << e->reason << "'";
    os << "}";
  } else if (auto* f = std::get_if<FinishCommand>(&c)) {
    os << "Finish{" << f->state << " '" << f->reason << "'}";
  } else if (std::get_if<PersistCommand>(&c)) {
    os << "Persist{}";
  }
  return os.str();
}

#define SLOG(...)                            \
  do {                                       \
    if (cfg_.verbose) log_line(__VA_ARGS__); \
  } while (0)

class Simulation {
 public:
  explicit Simulation(const SimConfig& config)
      : cfg_(config),
        rng_(config.seed * 0x9e3779b97f4a7c15ULL + 0x7f4a7c15ULL),
        job_(config.job,
             [this](const std::vector<std::string>& members) { return plan(members); }) {
    result_.seed = config.seed;
    // A trainer whose stop was lost leaves on its own: after the collective it may be stuck in
    // (a join no one else completes) times out, and then the idle limit.
    exit_bound_ms_ = cfg_.exit_bound_ms > 0
                         ? cfg_.exit_bound_ms
                         : cfg_.member.idle_limit + cfg_.collective_timeout_ms + 15000;
  }

  SimResult run();

 private:
  // ---------------------------------------------------------------- entities
  struct Node {
    int index = 0;
    std::string name;
    bool up = false;  // the agent process runs
    int agent_pid = 0;
    std::string id;  // the incarnation the agent registered as ("" while unregistered)
    std::uint64_t register_token = 0;
    int freeze_node = 0;   // agent and trainers stopped
    int freeze_agent = 0;  // only the agent stopped
    int head_cut = 0;      // head <-> node partition
    int spike = 0;
    std::int64_t speed_ms = 10;
    std::int64_t normal_speed_ms = 10;  // speed_ms when no slow_node fault is on
    int slow = 0;                       // slow_node faults on
    std::vector<int> hosted;  // trainer pids started by the current agent process
    std::vector<std::function<void()>> agent_deferred;
    bool heartbeat_pending = false;
    Us last_reply = 0;  // when a heartbeat reply last reached the agent
  };
  struct Proc {
    int pid = 0;
    std::string name;
    int node = 0;
    int agent_pid = 0;
    std::string node_id;   // the node record (incarnation) the head started it for
    bool alive = true;
    bool started = false;  // past its start-up delay
    bool ready = false;    // its hello was accepted
    int freeze_self = 0;
    std::optional<ElasticMember> member;
    // The fake replica: the generation that committed each of its steps, and a digest of that.
    std::vector<std::int64_t> history;
    std::int64_t step = 0;  // history.size()
    std::uint64_t checksum = initial_checksum();
    // An exchanged step not yet committed (the member's commit gate): its generation.
    std::int64_t holding = -1;
    double rate = 1.0;
    Millis offset = 0;
    bool busy = false;
    std::uint64_t wake_token = 0;
    std::uint64_t hello_token = 0;
    int hello_sent = 0;
    std::vector<std::function<void()>> deferred;  // inputs that arrived while frozen
    std::vector<std::function<void()>> early;     // orders that arrived before the hello reply
    std::int64_t group = -1;                      // generation of the group it is in
    std::int32_t rank = -1;
    std::int64_t in_collective = -1;  // generation of its pending post
    Us stop_read_at = -1;  // when its member was told to stop (-1: never)
    bool joined = false;              // its join of `group` succeeded
    bool stopped_by_agent = false;
    std::string stopped_by;  // the scheduler's stop reason
    Us exited_at = -1;
    bool exit_faulted = false;            // killed, or exited soon after a fault hit it
    bool connection_reset = false;        // killed on a machine that stays up: probes fail at once
    std::int64_t synced_generation = -1;  // newest generation it completed a sync in
    int immediate_waits = 0;
    int exit_code = 0;  // as its agent reported it
    std::string exit_reason;
    // The checkpoint its last committed step wrote (rank 0), reported with that step.
    std::int64_t checkpoint_step = -1;
    std::string checkpoint_path;
  };
  enum class Coll { kJoin, kSync, kControl, kStep };
  static const char* coll_name(Coll c) {
    switch (c) {
      case Coll::kJoin:
        return "join";
      case Coll::kSync:
        return "sync";
      case Coll::kControl:
        return "control";
      case Coll::kStep:
        return "step";
    }
    return "?";
  }
  struct Post {
    int pid = 0;
    std::uint64_t id = 0;
    std::vector<std::int64_t> words;
    std::vector<std::int32_t> batches;
  };
  struct Group {
    std::int64_t generation = 0;
    std::int32_t world = 0;
    std::map<std::int32_t, int> rank_pid;  // ranks that posted their join
    std::map<std::int32_t, Post> pending;  // the collective in progress, by rank
    Coll kind = Coll::kJoin;
    bool broken = false;
    std::string broken_reason;
    // A step exchange whose waits timed out lives on in the ranks' background threads until
    // the transport's own timeout (`ghost_until`): a rank that posts late (thawed) still
    // completes it with the others' data, although they no longer wait for the outcome.
    std::map<std::int32_t, Post> ghosts;
    Us ghost_until = 0;
    // A generation that resumes from a checkpoint: its sync adopts rank 0's state, which rank 0
    // loaded from the checkpoint.
    bool from_rank0 = false;
  };
  // A checkpoint file: the state it holds, and where.
  struct CheckpointFile {
    std::vector<std::int64_t> history;
    std::string node;  // the name of the node whose disk holds it
    bool shared = false;
  };
  struct Commit {
    std::int64_t generation = 0;
    Us at = 0;
  };
  struct Event {
    Us at;
    std::uint64_t seq;
    std::function<void()> fn;
  };

  // ---------------------------------------------------------------- event loop
  void at(Us t, std::function<void()> fn) {
    heap_.push_back(Event{std::max(t, now_), seq_++, std::move(fn)});
    std::push_heap(heap_.begin(), heap_.end(), [](const Event& a, const Event& b) {
      return a.at != b.at ? a.at > b.at : a.seq > b.seq;
    });
  }
  Millis head_now() const { return now_ / 1000; }
  Us ms(std::int64_t v) const { return v * 1000; }

  template <typename... A>
  void log_line(const A&... parts) {
    std::ostringstream os;
    os << "t=" << now_ / 1000 << "." << (now_ % 1000) / 100 << " ";
    (os << ... << parts);
    result_.log.push_back(os.str());
  }
  void violation(const std::string& what) {
    std::string line = "t=" + std::to_string(now_ / 1000) + "ms: " + what;
    if (cfg_.verbose) result_.log.push_back("VIOLATION " + line);
    if (result_.violations.size() < 20) result_.violations.push_back(line);
  }

  static std::uint64_t digest(const std::vector<std::int64_t>& history) {
    std::uint64_t c = initial_checksum();
    for (std::size_t i = 0; i < history.size(); ++i) {
      c = fold_checksum(c, static_cast<std::int64_t>(i + 1), history[i]);
    }
    return c;
  }
  // Where `history` first differs from the committed chain (its length if nowhere).
  std::size_t off_chain(const std::vector<std::int64_t>& history) const {
    const std::size_t n = std::min(history.size(), chain_.size());
    for (std::size_t i = 0; i < n; ++i) {
      if (history[i] != chain_[i]) return i;
    }
    return history.size();
  }
  // A replica's state is the committed chain, then maybe steps that followers committed while
  // their leader did not (its gate refused them): those stay off the chain unless a sync
  // adopts them.
  // The same against the committed chain and every chain given up for a checkpoint: a replica
  // of a given-up timeline holds its committed steps, not the new ones.
  std::size_t off_chains(const std::vector<std::int64_t>& history) const {
    std::size_t best = off_chain(history);
    for (const auto& old : abandoned_) {
      const std::size_t n = std::min(history.size(), old.size());
      std::size_t i = 0;
      while (i < n && history[i] == old[i]) ++i;
      best = std::max(best, i);
    }
    return best;
  }
  void check_replica(const Proc& p, const std::string& when) {
    if (p.checksum != digest(p.history) || p.step != static_cast<std::int64_t>(p.history.size())) {
      violation("(d) " + p.name + "'s replica is inconsistent " + when);
      return;
    }
    for (std::size_t i = off_chains(p.history); i < p.history.size(); ++i) {
      if (!follower_only_.count({static_cast<std::int64_t>(i + 1), p.history[i]})) {
        violation("(d) " + p.name + " holds step " + std::to_string(i + 1) + " of g" +
                  std::to_string(p.history[i]) + " " + when + ", neither on the committed chain " +
                  "nor committed by followers");
        return;
      }
    }
  }
  // Appends step chain_.size() + 1, committed by `generation`, to the committed chain.
  void extend_chain(std::int64_t generation) {
    chain_.push_back(generation);
    const auto s = static_cast<std::int64_t>(chain_.size());
    ledger_[s] = Commit{generation, now_};
    ledger_max_ = s;
    for (std::size_t i = 0; i < cfg_.faults.size(); ++i) {
      const Fault& f = cfg_.faults[i];
      if (!fired_[i] && f.at_step && *f.at_step <= s) {
        fired_[i] = true;
        at(now_ + uniform(rng_, 0, cfg_.fault_jitter_us),
           [this, i] { apply_fault(cfg_.faults[i]); });
      }
    }
  }
  Node& node(int index) { return nodes_[static_cast<std::size_t>(index)]; }
  Proc* proc(int pid) {
    auto it = procs_.find(pid);
    return it == procs_.end() ? nullptr : &it->second;
  }
  bool agent_frozen(const Node& n) const { return n.freeze_node > 0 || n.freeze_agent > 0; }
  bool frozen(const Proc& p) { return node(p.node).freeze_node > 0 || p.freeze_self > 0; }
  Millis local_now(const Proc& p) const {
    return p.offset + static_cast<Millis>(std::floor(p.rate * static_cast<double>(now_) / 1000.0));
  }
  Millis local_at(const Proc& p, Us t) const {
    return p.offset + static_cast<Millis>(std::floor(p.rate * static_cast<double>(t) / 1000.0));
  }
  Us sim_time_of(const Proc& p, Millis local) const {
    Us t = static_cast<Us>(std::ceil(static_cast<double>(local - p.offset) * 1000.0 / p.rate));
    t = std::max(t, now_);
    while (local_at(p, t) < local) t += 50;
    return t;
  }

  // ---------------------------------------------------------------- planner
  GenerationPlan plan(const std::vector<std::string>& members) {
    GenerationPlan p;
    const auto n = static_cast<std::int32_t>(members.size());
    for (std::int32_t i = 0; i < n; ++i) {
      p.batches.push_back(cfg_.global_batch / n + (i < cfg_.global_batch % n ? 1 : 0));
    }
    p.version = ++plan_version_;
    return p;
  }

  // ---------------------------------------------------------------- network
  // One direction of one connection: FIFO, each message delayed, maybe dropped or doubled;
  // nothing crosses a head <-> node partition (checked when sent and when delivered).
  void send(int from, int to, int via_node, std::function<void()> deliver) {
    ++result_.stats.messages;
    Node& n = node(via_node);
    if (n.head_cut > 0 || ((from == 0 || to == 0) && !head_up_)) {
      ++result_.stats.dropped;
      return;
    }
    // A message to the head reaches the process it was sent to, or none: one sent to a head
    // that died meanwhile is lost with its connection.
    if (to == 0) {
      const int incarnation = head_incarnation_;
      deliver = [this, incarnation, inner = std::move(deliver)] {
        if (head_up_ && head_incarnation_ == incarnation) inner();
      };
    }
    if (chance(rng_, cfg_.drop_p)) {
      ++result_.stats.dropped;
      SLOG("net: dropped a message ", from, "->", to);
      return;
    }
    int copies = chance(rng_, cfg_.dup_p) ? 2 : 1;
    if (copies == 2) ++result_.stats.duplicated;
    auto shared = std::make_shared<std::function<void()>>(std::move(deliver));
    for (int i = 0; i < copies; ++i) {
      Us delay = uniform(rng_, cfg_.delay_min_us, cfg_.delay_max_us);
      if (n.spike > 0 || chance(rng_, cfg_.spike_p)) {
        delay = uniform(rng_, 5000, 200000);
        ++result_.stats.spiked;
      }
      Us& last = link_last_[{from, to}];
      Us t = std::max(now_ + delay, last);
      last = t;
      at(t, [this, via_node, shared] {
        if (node(via_node).head_cut > 0) {
          ++result_.stats.dropped;
          return;
        }
        (*shared)();
      });
    }
  }

  // ---------------------------------------------------------------- the head
  void dispatch() {
    for (auto& command : job_.take_commands()) {
      SLOG("job: ", describe(command));
      std::visit([this](auto& c) { handle(c); }, command);
    }
  }

  void handle(SpawnCommand& c) {
    ++result_.stats.spawns;
    auto it = registry_.find(c.node);
    if (it == registry_.end()) {
      SLOG("head: spawn on unknown node ", c.node, " lost");
      return;
    }
    const int idx = it->second.node;
    const int agent = it->second.agent_pid;
    const std::string trainer = c.trainer;
    const std::string node_id = c.node;
    send(0, agent, idx, [this, idx, agent, trainer, node_id] {
      agent_input(idx, agent,
                  [this, idx, trainer, node_id] { agent_spawn(idx, trainer, node_id); });
    });
  }
  void handle(RendezvousCommand& c) {
    RendezvousOrder order = c.order;
    to_trainer(c.trainer, [this, order](Proc& p) {
      p.member->on_rendezvous(order, local_now(p));
      abandon_if_superseded(p, order);
    });
  }
  // As the trainer's waits do: its join of an older generation is given up once a newer
  // rendezvous arrives (RuntimeStore's abandon check), any other collective of an older
  // generation once a rendezvous says a member was lost (abandon_previous; training::
  // Collectives' abandon check, every 50 ms). The member then reports the generation broken
  // and leaves its group, whose connections close under the others.
  void abandon_if_superseded(Proc& p, const RendezvousOrder& order) {
    if (!p.alive || p.in_collective < 0 || order.generation <= p.in_collective) return;
    auto it = groups_.find(p.in_collective);
    if (it == groups_.end()) return;
    if (it->second.kind != Coll::kJoin && !order.abandon_previous) return;
    abandon_wait(p, "generation " + std::to_string(order.generation) + " replaces it");
  }
  // A stop the trainer has not read yet ends the wait it is in, whatever the generation, and
  // no later wait lasts past the stopping grace (the trainer's Control::stopping_waits_end in
  // both abandon checks).
  void read_stop(Proc& p, const std::string& reason) {
    p.member->on_stop(reason);
    if (p.stop_read_at < 0) p.stop_read_at = now_;
    if (p.alive && p.in_collective >= 0) abandon_wait(p, "this trainer is stopping");
  }
  void bound_stopping_wait(Proc& p, std::int64_t generation, std::uint64_t id) {
    if (p.stop_read_at < 0) return;
    const int pid = p.pid;
    at(std::max(now_, p.stop_read_at + ms(kStoppingGraceMs)), [this, pid, generation, id] {
      Proc* q = proc(pid);
      if (!q || !q->alive) return;
      proc_input(*q, [this, pid, generation, id] {
        Proc& r = *proc(pid);
        if (!r.alive || r.in_collective != generation) return;
        const auto g = groups_.find(generation);
        if (g == groups_.end()) return;
        const auto post = g->second.pending.find(r.rank);
        if (post == g->second.pending.end() || post->second.id != id) return;
        abandon_wait(r, "this trainer is stopping");
      });
    });
  }
  void abandon_wait(Proc& p, const std::string& because) {
    auto it = groups_.find(p.in_collective);
    if (it == groups_.end()) return;
    Group& g = it->second;
    const auto post = g.pending.find(p.rank);
    if (post == g.pending.end() || post->second.pid != p.pid) return;
    const std::string why = std::string(coll_name(g.kind)) + " of generation " +
                            std::to_string(g.generation) + " abandoned: " + because;
    if (g.kind == Coll::kStep) {
      // Only the wait ends: the posted data lives on in the rank's background threads, as
      // after a timeout (time_out), and a peer that posts late may still complete the exchange
      // with it. The group is torn down only after that.
      if (!g.broken) {
        g.broken = true;
        g.broken_reason = why;
        g.ghost_until = now_ + ms(cfg_.collective_timeout_ms);
        end_ghosts_at_their_timeout(g);
      }
      g.ghosts[p.rank] = post->second;
    }
    g.pending.erase(post);
    p.in_collective = -1;
    ++result_.stats.abandoned_waits;
    fail_post(p, g.kind, why);
  }
  void handle(PlanCommand& c) {
    PlanOrder order = c.order;
    to_trainer(c.trainer, [order](Proc& p) { p.member->on_plan(order); });
  }
  void handle(LeaseCommand& c) {
    if (c.answer.granted) leased_generation_ = std::max(leased_generation_, c.answer.generation);
    const std::int64_t g = c.answer.generation;
    if (!c.answer.granted && !c.answer.superseded && !lease_refused_at_.count(g)) {
      lease_refused_at_[g] = head_now();
    } else if (c.answer.granted && lease_refused_at_.count(g)) {
      result_.stats.lease_wait_ms =
          std::max(result_.stats.lease_wait_ms, head_now() - lease_refused_at_[g]);
      lease_refused_at_[g] = std::numeric_limits<Millis>::max();  // counted once
    }
    LeaseAnswer answer = c.answer;
    to_trainer(c.trainer, [this, answer](Proc& p) { p.member->on_lease(answer, local_now(p)); });
  }
  void handle(StopCommand& c) {
    auto it = trainer_pid_.find(c.trainer);
    if (it == trainer_pid_.end()) return;
    Proc* p = proc(it->second);
    if (!p || !p->alive) return;
    const std::string reason = c.reason;
    const int pid = p->pid;
    if (!p->ready) {
      // The scheduler has no address for a trainer that has not said hello: its agent kills it.
      const int idx = p->node;
      const int agent = p->agent_pid;
      send(0, agent, idx, [this, idx, agent, pid, reason] {
        agent_input(idx, agent, [this, pid, reason] {
          Proc* q = proc(pid);
          if (q && q->alive) {
            q->stopped_by = reason;
            exit_process(*q, 143, "stopped before its hello: " + reason, false, true);
          }
        });
      });
      return;
    }
    to_trainer(c.trainer, [this, reason](Proc& q) {
      q.stopped_by = reason;
      read_stop(q, reason);
    });
  }
  void handle(ProbeCommand& c) {
    ++result_.stats.probes;
    const std::string trainer = c.trainer;
    const std::int64_t generation = c.generation;
    const std::uint64_t id = ++probe_counter_;
    const int incarnation = head_incarnation_;
    auto answer = [this, trainer, generation, id, incarnation](bool reachable,
                                                               const std::string& error) {
      if (head_incarnation_ != incarnation || !head_up_) return;  // asked by a head now gone
      if (!open_probes_.erase(id)) return;
      SLOG("head: probe ", trainer, " g", generation,
           reachable ? " reachable" : " unreachable: ", error);
      // The adapter's rule (jobs/scheduler_actor.cpp): a closed connection proves the
      // process gone; a timeout, or a process never started, does not.
      job_.probe_result(trainer, generation, reachable, error, head_now(),
                        error == "peer unreachable");
      dispatch();
    };
    open_probes_.insert(id);
    at(now_ + ms(cfg_.job.probe_timeout), [answer] { answer(false, "probe timed out"); });
    auto it = trainer_pid_.find(trainer);
    Proc* p = it == trainer_pid_.end() ? nullptr : proc(it->second);
    if (!p || !p->started) {
      at(now_ + 200, [answer] { answer(false, "no such process"); });
      return;
    }
    if (!p->alive) {
      // The process is gone but its machine is up: the connection was closed, a send fails at
      // once. A dead machine says nothing: the probe times out.
      Node& n = node(p->node);
      const bool machine_up = (n.up && n.agent_pid == p->agent_pid) || p->connection_reset;
      if (machine_up && n.freeze_node == 0 && n.head_cut == 0) {
        at(now_ + 200, [answer] { answer(false, "peer unreachable"); });
      }
      return;
    }
    const int pid = p->pid;
    const int idx = p->node;
    send(0, pid, idx, [this, pid, idx, answer] {
      Proc* q = proc(pid);
      if (!q || !q->alive || frozen(*q)) return;  // no answer: the probe times out
      send(pid, 0, idx, [answer] { answer(true, ""); });
    });
  }
  void handle(PersistCommand&) {
    ++result_.stats.persists;
    durable_ = job_.snapshot();
  }
  void handle(DropStoreKeysCommand& c) {
    ++result_.stats.store_drops;
    if (c.below < 0) {
      store_below_ = std::numeric_limits<std::int64_t>::max();
    } else {
      store_below_ = std::max(store_below_, c.below);
    }
  }
  void handle(JobEvent& e) {
    ++result_.stats.job_events;
    if (e.kind == "resumed_from_checkpoint") resumed(e);
    if (e.kind == "trainer_back") ++result_.stats.takebacks;
  }
  // The job went back to a checkpoint: the committed chain after it is given up (kept, to
  // recognise replicas of it) and trained again by the generation that loads it.
  void resumed(const JobEvent& e) {
    ++result_.stats.resumes;
    auto file = disk_.find(e.reason);
    if (file == disk_.end()) {
      violation("the job resumes from checkpoint " + e.reason + ", which was never written");
      return;
    }
    const auto& held = file->second.history;
    const auto have = static_cast<std::int64_t>(chain_.size());
    if (static_cast<std::int64_t>(held.size()) != e.step) {
      violation("checkpoint " + e.reason + " holds step " + std::to_string(held.size()) +
                "; the job resumes from it at step " + std::to_string(e.step));
    }
    if (off_chain(held) < held.size()) {
      violation("(a) checkpoint " + e.reason + " holds a state off the committed chain");
    }
    if (e.lost_steps < 0 || e.lost_steps > have - e.step) {
      violation("resumed at step " + std::to_string(e.step) + " counting " +
                std::to_string(e.lost_steps) + " steps lost; the chain has " +
                std::to_string(have));
    }
    SLOG("job resumes from ", e.reason, " at step ", e.step, ": steps ", e.step + 1, "..", have,
         " given up (", e.lost_steps, " counted lost)");
    abandoned_.push_back(chain_);
    if (have > e.step) {
      result_.stats.rolled_back += have - e.step;
      chain_.resize(static_cast<std::size_t>(e.step));
      for (std::int64_t s = e.step + 1; s <= ledger_max_; ++s) ledger_.erase(s);
      ledger_max_ = e.step;
    }
    resumed_generation_ = e.generation;
    resumed_committed_ = false;
    state_lost_ = false;
  }
  void handle(FinishCommand& c) {
    if (finished_) {
      violation("the job finished twice: " + result_.state + " then " + c.state);
      return;
    }
    finished_ = true;
    finished_at_ = now_;
    result_.state = c.state;
    result_.reason = c.reason;
    result_.finished_at_ms = now_ / 1000;
    if (!job_.finished() || job_.state() != c.state) {
      violation("FinishCommand{" + c.state + "} but the job says finished=" +
                std::to_string(job_.finished()) + " state=" + job_.state());
    }
  }

  void to_trainer(const std::string& name, std::function<void(Proc&)> fn) {
    auto it = trainer_pid_.find(name);
    if (it == trainer_pid_.end()) {
      SLOG("head: no process for ", name, ": message lost");
      return;
    }
    const int pid = it->second;
    Proc* p = proc(pid);
    send(0, pid, p->node, [this, pid, fn = std::move(fn)] {
      Proc* q = proc(pid);
      if (!q || !q->alive) return;
      proc_input(*q, [this, pid, fn] {
        Proc& r = *proc(pid);
        if (!r.ready) {
          r.early.push_back([this, pid, fn] { fn(*proc(pid)); });
          return;
        }
        fn(r);
      });
    });
  }

  void head_hello(const std::string& name, int pid) {
    const bool accepted = job_.hello(name, head_now());
    SLOG("head: hello ", name, accepted ? " accepted" : " refused");
    Proc* p = proc(pid);
    send(0, pid, p->node, [this, pid, accepted] {
      Proc* q = proc(pid);
      if (!q || !q->alive) return;
      proc_input(*q, [this, pid, accepted] { hello_reply(*proc(pid), accepted); });
    });
    dispatch();
  }

  void head_member_message(const std::string& name, const MemberMessage& m,
                           const std::string& checkpoint = "") {
    SLOG("head: from ", name, " ", describe(m));
    const Millis now = head_now();
    if (auto* r = std::get_if<MemberReport>(&m)) {
      job_.report(name, *r, now);
      // As the scheduler actor: a checkpoint counts when the current leader reports it.
      const auto& members = job_.members();
      if (!checkpoint.empty() && r->generation == job_.generation() && !members.empty() &&
          members[0] == name && disk_.count(checkpoint)) {
        const CheckpointFile& file = disk_.at(checkpoint);
        job_.checkpoint_written({r->step, checkpoint, file.node, file.shared}, now);
        shared_checkpoint_recorded_ = shared_checkpoint_recorded_ || file.shared;
      }
    } else if (auto* a = std::get_if<LeaseAsk>(&m)) {
      job_.lease_request(name, *a, now);
    } else if (auto* d = std::get_if<MemberDone>(&m)) {
      job_.done(name, *d, now);
    }
    dispatch();
  }

  struct RegEntry {
    std::string id;
    int node = 0;
    int agent_pid = 0;
    Us last_heard = 0;
    bool down = false;
  };

  // The head's full-disruption rule over the live entries' last-heard times, in the simulated
  // clock (cluster/full_disruption.hpp).
  bool full_disruption() {
    using TimePoint = actors::FullDisruption::TimePoint;
    std::vector<TimePoint> heard;
    std::vector<RegEntry*> live;
    for (auto& [id, e] : registry_) {
      if (e.down) continue;
      live.push_back(&e);
      heard.push_back(TimePoint{} + std::chrono::microseconds(e.last_heard));
    }
    std::vector<TimePoint*> at;
    for (auto& t : heard) at.push_back(&t);
    const bool was = disruption_.since().has_value();
    const bool hold = disruption_.update(at, TimePoint{} + std::chrono::microseconds(now_));
    for (std::size_t i = 0; i < live.size(); ++i) {
      live[i]->last_heard =
          std::chrono::duration_cast<std::chrono::microseconds>(heard[i] - TimePoint{}).count();
    }
    if (hold && !was) SLOG("head: heard from no node: none is declared dead while none is heard");
    if (!disruption_.since() && was) SLOG("head: heard from a node again");
    return hold;
  }

  void head_register(int idx, int agent_pid) {
    Node& n = node(idx);
    for (auto& [id, e] : registry_) {
      if (e.node == idx && !e.down && e.agent_pid == agent_pid) {  // a retried registration
        reply_registered(idx, agent_pid, id);
        return;
      }
    }
    for (auto& [id, e] : registry_) {
      if (e.node == idx && !e.down) {
        e.down = true;
        SLOG("head: ", id, " replaced by a new incarnation");
        job_.node_down(id, "a new incarnation registered", head_now());
        dispatch();
      }
    }
    const std::string id = n.name + "#" + std::to_string(++incarnations_[idx]);
    registry_[id] = RegEntry{id, idx, agent_pid, now_, false};
    SLOG("head: node_up ", id);
    job_.node_up(id, n.name, head_now());
    dispatch();
    reply_registered(idx, agent_pid, id);
  }
  void reply_registered(int idx, int agent_pid, const std::string& id) {
    send(0, agent_pid, idx, [this, idx, agent_pid, id] {
      agent_input(idx, agent_pid, [this, idx, id] {
        Node& n = node(idx);
        if (n.id.empty()) {
          n.id = id;
          n.last_reply = now_;
          ++n.register_token;
          SLOG("agent ", n.name, ": registered as ", id);
          // As WorkerAgent::on_registered: trainers started for an incarnation the head has
          // declared dead since (this registration's reply was lost meanwhile) are stopped.
          for (int pid : n.hosted) {
            Proc* p = proc(pid);
            if (!p || !p->alive || p->node_id.empty() || p->node_id == id) continue;
            SLOG("agent ", n.name, ": stopping ", p->name, ", started for ", p->node_id);
            stop_by_agent(pid, "started for a node declared dead");
          }
        }
      });
    });
  }

  void head_heartbeat(int idx, int agent_pid, const std::string& id,
                      const std::vector<std::pair<std::string, std::int64_t>>& counters) {
    auto it = registry_.find(id);
    if (it == registry_.end() || it->second.down || it->second.agent_pid != agent_pid) {
      send(0, agent_pid, idx, [this, idx, agent_pid, id] {
        agent_input(idx, agent_pid, [this, idx, id] { agent_forgotten(idx, id); });
      });
      return;
    }
    it->second.last_heard = now_;
    for (const auto& [name, step] : counters) job_.progress(name, step);
    dispatch();
    send(0, agent_pid, idx, [this, idx, agent_pid, id] {
      agent_input(idx, agent_pid,
                  [this, idx, agent_pid, id] { agent_heard_head(idx, agent_pid, id); });
    });
  }

  // A heartbeat reply. As NodeAgent: one after replies went missing (an ask timed out: no reply
  // for a heartbeat timeout after a beat) is the head answering again, and the agent reports
  // again the exits it reported since (WorkerAgent::on_head_answers_again).
  void agent_heard_head(int idx, int agent_pid, const std::string& id) {
    Node& n = node(idx);
    if (!n.up || n.agent_pid != agent_pid || n.id != id) return;
    const Us since = n.last_reply;
    n.last_reply = now_;
    if (now_ - since <= ms(cfg_.heartbeat_timeout_ms + cfg_.heartbeat_interval_ms)) return;
    SLOG("agent ", n.name, ": the head answers again");
    for (auto& [pid, q] : procs_) {
      if (q.node == idx && !q.alive && q.agent_pid == agent_pid && q.exited_at >= since) {
        report_exit(q, q.exit_code, q.exit_reason);
      }
    }
  }

  void head_tick() {
    if (!head_up_) {
      at(now_ + ms(cfg_.tick_ms), [this] { head_tick(); });
      return;
    }
    job_.tick(head_now());
    dispatch();
    const bool hold = full_disruption();
    for (auto& [id, e] : registry_) {
      if (!e.down && !hold && now_ - e.last_heard > ms(cfg_.heartbeat_timeout_ms)) {
        e.down = true;
        SLOG("head: node_down ", id, " (no heartbeat)");
        job_.node_down(id, "no heartbeat for " + std::to_string(cfg_.heartbeat_timeout_ms) + " ms",
                       head_now());
        dispatch();
      }
    }
    // As the SchedulerActor's control rounds (ControlRounds::fresh): no new plan before a step
    // at the last one committed. The leader's step that switches plans is dropped, so plans
    // proposed faster than steps commit would starve the job, which the actor never does.
    if (cfg_.propose_plans && !finished_ && !job_.forming() && !job_.members().empty() &&
        now_ >= next_plan_at_ && job_.committed_step() >= next_plan_step_) {
      next_plan_at_ = now_ + ms(uniform(rng_, 500, 3000));
      next_plan_step_ = job_.committed_step() + 2;
      const auto world = static_cast<std::int32_t>(job_.members().size());
      if (world <= cfg_.global_batch) {
        std::vector<std::int32_t> batches(static_cast<std::size_t>(world), 1);
        for (std::int32_t i = world; i < cfg_.global_batch; ++i) {
          ++batches[static_cast<std::size_t>(uniform(rng_, 0, world - 1))];
        }
        const std::uint64_t version = ++plan_version_;
        if (job_.propose_plan(batches, version, head_now())) ++result_.stats.plans_proposed;
        dispatch();
      }
    }
    // Capacity, for judging failures: usable nodes (up, agent responsive, reachable, not
    // drained) below min_workers, and for how long.
    const int usable = usable_nodes();
    if (usable < cfg_.job.min_workers) {
      if (below_since_ < 0) below_since_ = now_;
      longest_below_ = std::max(longest_below_, now_ - below_since_);
    } else {
      below_since_ = -1;
    }
    if (job_.committed_step() > ledger_max_ && !believed_reported_) {
      believed_reported_ = true;
      violation("the scheduler believes step " + std::to_string(job_.committed_step()) +
                " is committed; the ledger has " + std::to_string(ledger_max_));
    }
    at(now_ + ms(cfg_.tick_ms), [this] { head_tick(); });
  }

  int usable_nodes() {
    int usable = 0;
    for (auto& n : nodes_) {
      if (n.up && !agent_frozen(n) && n.head_cut == 0 && !n.id.empty() && !drained_.count(n.id)) {
        ++usable;
      }
    }
    return usable;
  }

  // ---------------------------------------------------------------- agents
  void agent_input(int idx, int agent_pid, std::function<void()> fn) {
    Node& n = node(idx);
    if (!n.up || n.agent_pid != agent_pid) return;
    if (agent_frozen(n)) {
      n.agent_deferred.push_back(std::move(fn));
      return;
    }
    fn();
  }

  void start_agent(int idx) {
    Node& n = node(idx);
    n.up = true;
    n.agent_pid = ++pid_counter_;
    n.id.clear();
    n.hosted.clear();
    n.agent_deferred.clear();
    n.heartbeat_pending = false;
    SLOG("agent ", n.name, ": started (pid ", n.agent_pid, ")");
    agent_register(idx, n.agent_pid);
    const int agent = n.agent_pid;
    at(now_ + uniform(rng_, 0, ms(cfg_.heartbeat_interval_ms)),
       [this, idx, agent] { agent_heartbeat(idx, agent); });
  }

  void agent_register(int idx, int agent_pid) {
    Node& n = node(idx);
    const std::uint64_t token = ++n.register_token;
    send(agent_pid, 0, idx, [this, idx, agent_pid] { head_register(idx, agent_pid); });
    at(now_ + ms(1000), [this, idx, agent_pid, token] {
      agent_input(idx, agent_pid, [this, idx, agent_pid, token] {
        Node& m = node(idx);
        if (m.id.empty() && m.register_token == token) agent_register(idx, agent_pid);
      });
    });
  }

  void agent_heartbeat(int idx, int agent_pid) {
    Node& n = node(idx);
    if (!n.up || n.agent_pid != agent_pid) return;
    if (agent_frozen(n)) {
      n.heartbeat_pending = true;
      return;
    }
    if (!n.id.empty()) {
      std::vector<std::pair<std::string, std::int64_t>> counters;
      for (int pid : n.hosted) {
        Proc* p = proc(pid);
        if (p && p->alive && p->member) counters.emplace_back(p->name, p->member->step());
      }
      const std::string id = n.id;
      send(agent_pid, 0, idx,
           [this, idx, agent_pid, id, counters] { head_heartbeat(idx, agent_pid, id, counters); });
    }
    at(now_ + ms(cfg_.heartbeat_interval_ms),
       [this, idx, agent_pid] { agent_heartbeat(idx, agent_pid); });
  }

  void agent_forgotten(int idx, const std::string& id) {
    Node& n = node(idx);
    if (n.id != id) return;  // an answer to an older incarnation's heartbeat
    SLOG("agent ", n.name, ": the head forgot ", id, "; stopping its trainers, registering again");
    n.id.clear();
    for (int pid : n.hosted) {
      Proc* p = proc(pid);
      if (p && p->alive) stop_by_agent(pid, "node forgotten");
    }
    agent_register(idx, n.agent_pid);
  }
  // The agent's SIGTERM: a trainer that said hello ends the wait it is in and exits at its next
  // step boundary; its main thread exits the process 2 s after the signal whatever the training
  // thread does (a frozen process reads the signal when it thaws).
  void stop_by_agent(int pid, const std::string& why) {
    proc_input(*proc(pid), [this, pid, why] {
      Proc& q = *proc(pid);
      q.stopped_by_agent = true;
      if (!q.ready) {
        exit_process(q, 143, "stopped: " + why, true, true);
        return;
      }
      read_stop(q, why);
      at(now_ + ms(2000), [this, pid] {
        Proc* r = proc(pid);
        if (!r || !r->alive) return;
        proc_input(*r, [this, pid] {
          exit_process(*proc(pid), 143, "signal 15: left 2 s after the signal", true, true);
        });
      });
    });
  }

  void agent_spawn(int idx, const std::string& trainer, const std::string& node_id) {
    Node& n = node(idx);
    for (int pid : n.hosted) {
      if (procs_.at(pid).name == trainer) return;  // a retried request
    }
    for (int pid : n.hosted) {
      if (procs_.at(pid).alive) {
        ++result_.stats.double_hosted;
        break;
      }
    }
    const int pid = ++pid_counter_;
    Proc& p = procs_[pid];
    p.pid = pid;
    p.name = trainer;
    p.node = idx;
    p.agent_pid = n.agent_pid;
    p.node_id = node_id;
    if (cfg_.skew_clocks) {
      p.rate = 1.0 + uniform_real(rng_, -cfg_.clock_drift, cfg_.clock_drift);
      p.offset = uniform(rng_, 0, 1000000000);  // monotonic clocks: since boot, >= 0
    }
    n.hosted.push_back(pid);
    trainer_pid_[trainer] = pid;
    ++alive_;
    SLOG("agent ", n.name, ": starting ", trainer, " (pid ", pid, ")");
    at(now_ + ms(uniform(rng_, cfg_.startup_min_ms, cfg_.startup_max_ms)), [this, pid] {
      Proc* q = proc(pid);
      if (!q || !q->alive) return;
      proc_input(*q, [this, pid] {
        Proc& r = *proc(pid);
        r.started = true;
        send_hello(r);
      });
    });
  }

  // The agent's waitpid: every exit is reported, with its code.
  void report_exit(const Proc& p, int code, const std::string& reason) {
    const int idx = p.node;
    const int agent = p.agent_pid;
    const std::string name = p.name;
    at(now_ + uniform(rng_, 0, ms(cfg_.reap_max_ms)), [this, idx, agent, name, code, reason] {
      agent_input(idx, agent, [this, idx, agent, name, code, reason] {
        send(agent, 0, idx, [this, name, code, reason] {
          SLOG("head: trainer_exited ", name, " code ", code, " '", reason, "'");
          job_.trainer_exited(name, code, reason, head_now());
          dispatch();
        });
      });
    });
  }

  // ---------------------------------------------------------------- trainer processes
  void proc_input(Proc& p, std::function<void()> fn) {
    if (!p.alive) return;
    if (frozen(p)) {
      p.deferred.push_back(std::move(fn));
      return;
    }
    const int pid = p.pid;
    fn();
    Proc& q = *proc(pid);
    if (!q.alive) return;
    after_call(q);
    drive(q);
  }

  void send_hello(Proc& p) {
    ++p.hello_sent;
    const std::uint64_t token = ++p.hello_token;
    const int pid = p.pid;
    const std::string name = p.name;
    send(pid, 0, p.node, [this, name, pid] { head_hello(name, pid); });
    at(now_ + ms(cfg_.hello_retry_ms), [this, pid, token] {
      Proc* q = proc(pid);
      if (!q || !q->alive) return;
      proc_input(*q, [this, pid, token] {
        Proc& r = *proc(pid);
        if (r.ready || r.hello_token != token) return;
        if (r.hello_sent >= cfg_.hello_attempts) {
          exit_process(r, 3, "no answer from the scheduler", false, true);
        } else {
          send_hello(r);
        }
      });
    });
  }

  void hello_reply(Proc& p, bool accepted) {
    if (p.ready) return;
    if (!accepted) {
      exit_process(p, 3, "the scheduler turned it away", false, true);
      return;
    }
    p.ready = true;
    p.member.emplace(cfg_.member, local_now(p));
    auto early = std::move(p.early);
    p.early.clear();
    for (auto& fn : early) {
      fn();
      if (!p.alive) return;
      after_call(p);
    }
  }

  // After every call into the member: send its outbox, and leave a group it is no longer in.
  void after_call(Proc& p) {
    if (!p.member) return;
    for (auto& m : p.member->take_outbox()) {
      if (lose_done_armed_ && std::holds_alternative<MemberDone>(m)) {
        lose_done_armed_ = false;
        ++result_.stats.lost_dones;
        SLOG("fault: lost ", p.name, "'s ", describe(m));
        continue;
      }
      // As in the trainer: a follower's step goes only to its agent (the heartbeat's counters,
      // head_heartbeat), the leader's to the scheduler. Delivering both let the simulation pass
      // handovers that, in the real runtime, depend on which report came first.
      if (auto* r = std::get_if<MemberReport>(&m);
          r && r->kind == MemberReport::Kind::kStep && r->rank != 0) {
        continue;
      }
      SLOG(p.name, " -> ", describe(m));
      const std::string name = p.name;
      std::string checkpoint;
      if (auto* r = std::get_if<MemberReport>(&m);
          r && r->kind == MemberReport::Kind::kStep && r->step == p.checkpoint_step) {
        checkpoint = p.checkpoint_path;
      }
      send(p.pid, 0, p.node,
           [this, name, m, checkpoint] { head_member_message(name, m, checkpoint); });
    }
    if (!p.busy && p.group >= 0) {
      const auto phase = p.member->phase();
      if (phase == ElasticMember::Phase::kIdle || phase == ElasticMember::Phase::kExited ||
          p.member->generation() != p.group) {
        leave_group(p, "left generation " + std::to_string(p.group));
      }
    }
  }

  void drive(Proc& p) {
    if (!p.alive || !p.ready || p.busy || frozen(p)) return;
    const int pid = p.pid;
    MemberAction action = p.member->next(local_now(p));
    after_call(p);
    if (cfg_.verbose && !std::holds_alternative<WaitAction>(action)) {
      SLOG(p.name, ": ", describe(action));
    }
    if (auto* j = std::get_if<JoinAction>(&action)) {
      if (p.group >= 0 && p.group != j->generation) leave_group(p, "joins another generation");
      p.busy = true;
      post_join(p, *j);
    } else if (auto* sync = std::get_if<SyncAction>(&action)) {
      if (sync->checkpoint_step >= 0) {
        auto g = groups_.find(p.group);
        if (g != groups_.end()) g->second.from_rank0 = true;
        if (p.rank == 0 && !load_checkpoint(p, *sync)) {
          after_call(p);
          drive(p);
          return;
        }
      }
      p.busy = true;
      post(p, Coll::kSync, {}, {});
    } else if (auto* c = std::get_if<ControlAction>(&action)) {
      p.busy = true;
      post(p, Coll::kControl, c->words, {});
    } else if (auto* s = std::get_if<StepAction>(&action)) {
      p.busy = true;
      Node& n = node(p.node);
      const double noise = uniform_real(rng_, 0.0, cfg_.step_noise);
      const Us compute = static_cast<Us>(static_cast<double>(ms(n.speed_ms)) * (1.0 + noise));
      auto batches = s->batches;
      auto words = s->words;
      at(now_ + compute, [this, pid, batches, words] {
        Proc* q = proc(pid);
        if (!q || !q->alive) return;
        proc_input(*q,
                   [this, pid, batches, words] { post(*proc(pid), Coll::kStep, words, batches); });
      });
    } else if (std::holds_alternative<CommitAction>(action)) {
      commit(p);
      p.member->step_done(true, "", p.step, local_now(p));
      after_call(p);
      drive(p);
    } else if (auto* d = std::get_if<DropAction>(&action)) {
      SLOG(p.name, ": dropped its exchanged step: ", d->error);
      ++result_.stats.gate_drops;
      p.holding = -1;
      after_call(p);
      drive(p);
    } else if (std::holds_alternative<FinishAction>(action)) {
      p.busy = true;
      if (p.step != cfg_.job.total_steps) {
        violation(p.name + " writes the final checkpoint at step " + std::to_string(p.step) +
                  " of " + std::to_string(cfg_.job.total_steps));
      }
      at(now_ + ms(uniform(rng_, cfg_.finish_min_ms, cfg_.finish_max_ms)), [this, pid] {
        Proc* q = proc(pid);
        if (!q || !q->alive) return;
        proc_input(*q, [this, pid] {
          Proc& r = *proc(pid);
          r.busy = false;
          bool ok = true;
          if (fail_checkpoint_armed_) {
            fail_checkpoint_armed_ = false;
            checkpoint_failed_ = true;
            ok = false;
          }
          if (ok) {
            finishes_ok_.push_back({r.step, r.history});
          }
          SLOG(r.name, ": final checkpoint at step ", r.step, ok ? " written" : " FAILED");
          r.member->finish_done(ok, ok ? "" : "final checkpoint: disk full", local_now(r));
        });
      });
    } else if (auto* w = std::get_if<WaitAction>(&action)) {
      if (p.member->phase() == ElasticMember::Phase::kCommitting) ++result_.stats.gate_waits;
      Us t = sim_time_of(p, w->until);
      if (w->until <= local_now(p)) {
        if (++p.immediate_waits > 100000) {
          violation(p.name + " busy-waits: next() keeps returning Wait{until <= now}");
          exit_process(p, 99, "harness: busy wait", false, true);
          return;
        }
        t = now_ + 1000;
      }
      const std::uint64_t token = ++p.wake_token;
      at(t, [this, pid, token] {
        Proc* q = proc(pid);
        if (!q || !q->alive || q->wake_token != token) return;
        proc_input(*q, [] {});
      });
    } else if (auto* e = std::get_if<ExitAction>(&action)) {
      exit_process(p, e->code, e->reason, p.stopped_by_agent, true);
    }
  }

  void exit_process(Proc& p, int code, const std::string& reason, bool by_fault,
                    bool agent_reports) {
    if (!p.alive) return;
    const bool was_holder = ledger_max_ > 0 && p.step == ledger_max_;
    p.alive = false;
    p.exit_code = code;
    p.exit_reason = reason;
    p.exited_at = now_;
    p.exit_faulted = by_fault;
    p.busy = false;
    p.deferred.clear();
    p.early.clear();
    --alive_;
    SLOG(p.name, ": process exited, code ", code, " '", reason, "' at step ", p.step);
    check_replica(p, "when it exits");
    leave_group(p, "process exited");
    for (auto& [gen, g] : groups_) {
      for (auto& [rank, post] : g.ghosts) {
        if (post.pid == p.pid) {
          break_group(g, p.name + " process exited");
          break;
        }
      }
    }
    if (was_holder && !state_lost_ && !finished_) {
      bool any = false;
      for (auto& [pid, q] : procs_) {
        if (q.alive && q.step == ledger_max_) {
          any = true;
          break;
        }
      }
      if (!any) {
        state_lost_ = true;
        const bool faulted = by_fault;
        state_lost_by_fault_ = faulted;
        state_lost_how_ = "the last trainer holding step " + std::to_string(ledger_max_) + " (" +
                          p.name + ") exited: code " + std::to_string(code) + " '" + reason + "'" +
                          (p.stopped_by.empty() ? "" : " after a stop: '" + p.stopped_by + "'") +
                          (faulted ? " [fault]" : " [no fault]");
        SLOG("state lost: ", state_lost_how_);
      }
    }
    if (agent_reports) {
      Node& n = node(p.node);
      if (n.up && n.agent_pid == p.agent_pid) report_exit(p, code, reason);
    }
  }

  void thaw_proc(Proc& p) {
    if (!p.alive || frozen(p)) return;
    const int pid = p.pid;
    while (true) {
      Proc& q = *proc(pid);
      if (!q.alive || frozen(q) || q.deferred.empty()) break;
      auto fn = std::move(q.deferred.front());
      q.deferred.erase(q.deferred.begin());
      fn();
      if (!proc(pid)->alive) return;
      after_call(*proc(pid));
    }
    Proc& q = *proc(pid);
    if (!q.alive) return;
    if (q.group >= 0) try_complete(q.group);
    drive(q);
  }

  // ---------------------------------------------------------------- the fake process group
  void post_join(Proc& p, const JoinAction& j) {
    Group& g = groups_[j.generation];
    if (g.world == 0) {
      g.generation = j.generation;
      g.world = j.world;
      ++result_.stats.generations;
    }
    if (g.world != j.world) {
      violation(p.name + " joins generation " + std::to_string(j.generation) + " with world " +
                std::to_string(j.world) + "; another rank joined it with " +
                std::to_string(g.world));
    }
    if (j.rank < 0 || j.rank >= j.world) {
      violation(p.name + " joins with rank " + std::to_string(j.rank) + " of " +
                std::to_string(j.world));
    }
    auto taken = g.rank_pid.find(j.rank);
    if (taken != g.rank_pid.end() && taken->second != p.pid) {
      violation("two trainers with rank " + std::to_string(j.rank) + " in generation " +
                std::to_string(j.generation) + ": " + procs_.at(taken->second).name + " and " +
                p.name);
    }
    g.rank_pid[j.rank] = p.pid;
    p.group = j.generation;
    p.rank = j.rank;
    p.joined = false;
    post(p, Coll::kJoin, {}, {});
  }

  void post(Proc& p, Coll kind, std::vector<std::int64_t> words,
            std::vector<std::int32_t> batches) {
    auto it = groups_.find(p.group);
    if (p.group < 0 || it == groups_.end()) {
      violation(p.name + " posts a " + coll_name(kind) + " outside any group");
      fail_post(p, kind, "not in a group");
      return;
    }
    Group& g = it->second;
    if (kind != Coll::kJoin) {
      if (!p.joined)
        violation(p.name + " posts a " + coll_name(kind) + " before its join succeeded");
      if (p.member->generation() != p.group || p.member->rank() != p.rank) {
        violation(p.name + " posts a " + coll_name(kind) + " in generation " +
                  std::to_string(p.group) + " as rank " + std::to_string(p.rank) +
                  " while its member says g" + std::to_string(p.member->generation()) + " r" +
                  std::to_string(p.member->rank()));
      }
    }
    if (p.in_collective >= 0) {
      violation(p.name + " is in two collectives at once (generations " +
                std::to_string(p.in_collective) + " and " + std::to_string(p.group) + ")");
    }
    if (g.broken) {
      if (kind == Coll::kStep && g.kind == Coll::kStep && now_ < g.ghost_until &&
          !g.ghosts.empty() && !g.ghosts.count(p.rank)) {
        // A late post to a step exchange that lives on in the background.
        const std::uint64_t id = ++post_counter_;
        g.pending[p.rank] = Post{p.pid, id, std::move(words), std::move(batches)};
        p.in_collective = g.generation;
        bound_stopping_wait(p, g.generation, id);
        try_complete(g.generation);
        return;
      }
      fail_post(p, kind, "process group broken: " + g.broken_reason);
      return;
    }
    if (!g.pending.empty() && g.kind != kind) {
      violation("collective mismatch in generation " + std::to_string(g.generation) + ": " +
                p.name + " posts " + coll_name(kind) + " while others posted " + coll_name(g.kind));
      g.pending[p.rank] = Post{p.pid, 0, {}, {}};
      break_group(g, "collective mismatch");
      return;
    }
    g.kind = kind;
    const std::uint64_t id = ++post_counter_;
    g.pending[p.rank] = Post{p.pid, id, std::move(words), std::move(batches)};
    p.in_collective = g.generation;
    const std::int64_t gen = g.generation;
    const std::int32_t rank = p.rank;
    at(now_ + ms(cfg_.collective_timeout_ms), [this, gen, rank, id] {
      Group& h = groups_[gen];
      auto pit = h.pending.find(rank);
      if (h.broken || pit == h.pending.end() || pit->second.id != id) return;
      time_out(h, std::string("collective timeout (") + coll_name(h.kind) + ", rank " +
                      std::to_string(rank) + ")");
    });
    bound_stopping_wait(p, gen, id);
    try_complete(gen);
  }

  void fail_post(Proc& p, Coll kind, const std::string& error) {
    ++result_.stats.collective_failures;
    const int pid = p.pid;
    at(now_, [this, pid, kind, error] {
      Proc* q = proc(pid);
      if (!q || !q->alive) return;
      proc_input(*q, [this, pid, kind, error] { outcome(*proc(pid), kind, false, error, {}); });
    });
  }

  // Delivers a collective's outcome to the member.
  void outcome(Proc& p, Coll kind, bool ok, const std::string& error,
               const std::vector<std::int64_t>& words) {
    p.busy = false;
    const Millis now = local_now(p);
    if (!ok) SLOG(p.name, ": ", coll_name(kind), " failed: ", error);
    switch (kind) {
      case Coll::kJoin:
        p.joined = ok;
        p.member->joined(ok, error, now);
        break;
      case Coll::kSync:
        p.member->synced(ok, error, p.step, p.checksum, now);
        break;
      case Coll::kControl:
        p.member->control_done(ok, error, ok ? words : std::vector<std::int64_t>{}, now);
        break;
      case Coll::kStep:
        // The replica holds the exchanged step if the words confirm it (it asks the member,
        // as training::Trainer::step does), and tells the member the exchange's outcome.
        if (ok && p.member->confirms(words)) p.holding = p.group;
        p.member->exchanged(ok, error, ok ? words : std::vector<std::int64_t>{}, now);
        if (p.member->phase() != ElasticMember::Phase::kCommitting) p.holding = -1;
        break;
    }
  }

  // The waits of a collective time out. A step exchange's posted data lives on in the ranks'
  // background threads (Gloo finishes a queued collective even after its group was abandoned)
  // until the transport's own timeout; a rank frozen while it waits is still waiting on thaw.
  void time_out(Group& g, const std::string& reason) {
    if (g.kind != Coll::kStep) return break_group(g, reason);
    g.broken = true;
    g.broken_reason = reason;
    g.ghost_until = now_ + ms(cfg_.collective_timeout_ms);
    SLOG("group g", g.generation, " timed out: ", reason);
    auto pending = std::move(g.pending);
    g.pending.clear();
    for (auto& [rank, post] : pending) {
      Proc* p = proc(post.pid);
      if (!p) continue;
      if (p->alive && frozen(*p)) {
        g.pending[rank] = post;
        continue;
      }
      g.ghosts[rank] = post;
      p->in_collective = -1;
      if (p->alive) fail_post(*p, g.kind, reason);
    }
    end_ghosts_at_their_timeout(g);
  }

  // At ghost_until the transport's own timeout ends the exchange's background life: the data
  // left in flight is gone, and every wait still in the exchange fails.
  void end_ghosts_at_their_timeout(const Group& g) {
    const std::int64_t gen = g.generation;
    at(g.ghost_until, [this, gen] {
      Group& h = groups_[gen];
      h.ghosts.clear();
      h.ghost_until = 0;
      fail_pending(h, h.broken_reason);
    });
  }

  void fail_pending(Group& g, const std::string& reason) {
    auto pending = std::move(g.pending);
    g.pending.clear();
    for (auto& [rank, post] : pending) {
      Proc* p = proc(post.pid);
      if (!p) continue;
      p->in_collective = -1;
      if (p->alive) fail_post(*p, g.kind, reason);
    }
  }

  // The group's connections close (a member left it or died): everything in it fails.
  void break_group(Group& g, const std::string& reason) {
    if (g.broken) {
      g.ghosts.clear();
      g.ghost_until = 0;
      fail_pending(g, g.broken_reason);
      return;
    }
    g.broken = true;
    g.broken_reason = reason;
    SLOG("group g", g.generation, " broken: ", reason);
    fail_pending(g, reason);
  }

  void leave_group(Proc& p, const std::string& why) {
    if (p.group < 0) return;
    auto it = groups_.find(p.group);
    p.group = -1;
    p.rank = -1;
    p.joined = false;
    if (it == groups_.end()) return;
    // A trainer that gave up waiting tears its broken group down on another thread, which
    // finishes the exchange in flight first.
    if (p.alive && it->second.broken) return;
    // Gloo: the peers see the connection close; whatever they do in this group fails at once.
    break_group(it->second, p.name + " " + why);
  }

  bool cut(int a, int b) const {
    if (a == b) return false;
    auto it = cuts_.find({std::min(a, b), std::max(a, b)});
    return it != cuts_.end() && it->second > 0;
  }

  void try_complete(std::int64_t gen) {
    auto it = groups_.find(gen);
    if (it == groups_.end()) return;
    Group& g = it->second;
    const bool late = g.broken && g.kind == Coll::kStep && now_ < g.ghost_until &&
                      !g.ghosts.empty() && !g.pending.empty();
    if (g.broken && !late) return;
    std::map<std::int32_t, Post> posts = g.pending;
    if (late) posts.insert(g.ghosts.begin(), g.ghosts.end());
    if (static_cast<std::int32_t>(posts.size()) < g.world) return;
    std::vector<Proc*> ranks;
    for (auto& [rank, post] : posts) {
      Proc* p = proc(post.pid);
      if (!p || !p->alive || frozen(*p)) return;
      if (g.kind == Coll::kJoin) {
        // Rendezvous goes through the store on the head.
        if (node(p->node).head_cut > 0 || !head_up_ || gen < store_below_) return;
      }
      ranks.push_back(p);
    }
    for (std::size_t a = 0; a < ranks.size(); ++a) {
      for (std::size_t b = a + 1; b < ranks.size(); ++b) {
        if (cut(ranks[a]->node, ranks[b]->node)) return;
      }
    }
    auto pending = std::move(g.pending);
    g.pending.clear();
    for (auto& [rank, post] : pending) proc(post.pid)->in_collective = -1;
    if (late) {
      ++result_.stats.late_exchanges;
      SLOG("group g", gen, ": a late post completes the step exchange with the data that ",
           g.ghosts.size(), " rank(s) left in flight");
      g.ghosts.clear();
      g.ghost_until = 0;
    }
    const Coll kind = g.kind;
    std::vector<std::int64_t> words;
    if (kind == Coll::kSync) {
      // training::Trainer::sync_state_from_most_advanced: the most steps; on a tie the state
      // whose last step the newest generation committed; then the lowest rank (ranks are in
      // rank order, so a later rank wins only when strictly better).
      const auto last_gen = [](const Proc* p) {
        return p->history.empty() ? std::int64_t{-1} : p->history.back();
      };
      std::int64_t most = -1;
      std::set<std::int64_t> last_gens;  // of the ranks with the most steps
      for (Proc* p : ranks) most = std::max(most, p->step);
      for (Proc* p : ranks) {
        if (p->step == most) last_gens.insert(last_gen(p));
      }
      if (last_gens.size() > 1) ++result_.stats.sync_ties;
      Proc* best = nullptr;
      if (g.from_rank0) best = ranks.front();  // rank 0, which loaded the checkpoint
      for (Proc* p : ranks) {
        if (g.from_rank0) break;
        if (!best || p->step > best->step ||
            (p->step == best->step && cfg_.mutation != Mutation::kSyncTieLowestRank &&
             last_gen(p) > last_gen(best))) {
          best = p;
        }
      }
      const std::size_t off = off_chain(best->history);
      // Within the steps both hold, the state is that chain's.
      const auto agrees = [&](const std::vector<std::int64_t>& chain) {
        const std::size_t n = std::min(best->history.size(), chain.size());
        return std::equal(chain.begin(), chain.begin() + static_cast<std::ptrdiff_t>(n),
                          best->history.begin());
      };
      if (gen < resumed_generation_) {
        // A generation formed before the job gave its timeline up for a checkpoint, syncing
        // only now (its members were frozen or cut off): it holds that timeline's state and
        // extends no chain. It can commit nothing the job keeps: a commit under a lease it
        // held is judged as the given-up timeline's (commit()).
        if (!agrees(chain_) &&
            std::none_of(abandoned_.begin(), abandoned_.end(), agrees)) {
          violation("(a) the sync in g" + std::to_string(gen) + ", of a timeline given up, adopts " +
                    best->name + "'s state, which no chain holds");
        }
      } else if (gen < leased_generation_) {
        // A generation older than one the job has leased syncing only now (its members were
        // frozen or cut off): it can never be leased, so what it adopts extends no chain.
      } else if (off < std::min(best->history.size(), chain_.size())) {
        violation("(a) the sync in g" + std::to_string(gen) + " adopts " + best->name +
                  "'s state, whose step " + std::to_string(off + 1) + " g" +
                  std::to_string(best->history[off]) + " committed; the committed chain has g" +
                  std::to_string(chain_[off]) + "'s");
      } else {
        // Steps only followers committed become committed once a group builds on them; steps
        // of a timeline given up for a checkpoint never again.
        while (chain_.size() < best->history.size()) {
          const std::int64_t g_step = best->history[chain_.size()];
          if (g_step < resumed_generation_) {
            violation("(a) the sync in g" + std::to_string(gen) + " adopts " + best->name +
                      "'s step " + std::to_string(chain_.size() + 1) + " of g" +
                      std::to_string(g_step) + ", of the timeline given up for a checkpoint");
            break;
          }
          extend_chain(g_step);
        }
      }
      const std::vector<std::int64_t> adopted = best->history;
      for (Proc* p : ranks) {
        p->history = adopted;
        p->step = static_cast<std::int64_t>(adopted.size());
        p->checksum = digest(adopted);
        p->synced_generation = std::max(p->synced_generation, gen);
      }
      SLOG("group g", gen, ": synced at step ", best->step, " from ", best->name);
    } else if (kind == Coll::kControl) {
      words = pending.begin()->second.words;
      if (words.empty()) violation("rank 0 of g" + std::to_string(gen) + " broadcast no words");
      for (auto& [rank, post] : pending) {
        if (rank != 0 && !post.words.empty()) {
          violation("follower rank " + std::to_string(rank) + " of g" + std::to_string(gen) +
                    " posted control words");
        }
      }
    } else if (kind == Coll::kStep) {
      words = posts.begin()->second.words;
      check_exchange(g, ranks, posts, pending);
    } else {
      SLOG("group g", gen, ": joined (world ", g.world, ")");
    }
    for (auto& [rank, post] : pending) {
      const int pid = post.pid;
      at(now_, [this, pid, kind, words] {
        Proc* q = proc(pid);
        if (!q || !q->alive) return;
        proc_input(*q, [this, pid, kind, words] { outcome(*proc(pid), kind, true, "", words); });
      });
    }
  }

  // A completed step exchange: every rank computed the same step with the same plan, and only
  // rank 0 carried words.
  void check_exchange(Group& g, const std::vector<Proc*>& ranks,
                      const std::map<std::int32_t, Post>& posts,
                      const std::map<std::int32_t, Post>& waiting) {
    const std::string gen = "g" + std::to_string(g.generation);
    const auto& batches = posts.begin()->second.batches;
    std::int64_t sum = 0;
    for (auto b : batches) sum += b;
    if (static_cast<std::int32_t>(batches.size()) != g.world || sum != cfg_.global_batch) {
      violation(gen + " trains a step with batches {" + join_nums(batches) + "} (world " +
                std::to_string(g.world) + ", global batch " + std::to_string(cfg_.global_batch) +
                ")");
    }
    if (posts.begin()->first != 0 || posts.begin()->second.words.empty()) {
      violation("rank 0 of " + gen + " carried no words in a step exchange");
    }
    for (auto& [rank, post] : posts) {
      if (post.batches != batches) {
        violation(gen + " ranks train one step with different batches: {" + join_nums(batches) +
                  "} and {" + join_nums(post.batches) + "}");
      }
      if (rank != 0 && !post.words.empty()) {
        violation("follower rank " + std::to_string(rank) + " of " + gen + " carried words");
      }
    }
    // The ranks still waiting computed from one state (the others may have moved on since).
    const Proc* first = nullptr;
    for (auto& [rank, post] : waiting) {
      const Proc* p = proc(post.pid);
      if (!first) first = p;
      if (p->history != first->history) {
        violation(gen + " replicas diverged: " + first->name + " at step " +
                  std::to_string(first->step) + ", " + p->name + " at step " +
                  std::to_string(p->step));
      }
    }
    (void)ranks;
  }

  // CommitAction: the replica applies its exchanged step. A leader's commit extends the
  // committed chain (it holds the lease); a follower's stays off it until its leader commits
  // too or a sync adopts it.
  void commit(Proc& p) {
    if (p.holding < 0) {
      violation(p.name + " commits without an exchanged step");
      return;
    }
    const std::int64_t g = p.holding;
    p.holding = -1;
    const std::int64_t s = p.step + 1;
    const std::string gen = "g" + std::to_string(g);
    p.history.push_back(g);
    p.step = s;
    p.checksum = fold_checksum(p.checksum, s, g);
    max_committed_ = std::max(max_committed_, s);
    if (s > cfg_.job.total_steps) {
      violation(gen + " commits step " + std::to_string(s) + " past total_steps " +
                std::to_string(cfg_.job.total_steps));
    }
    if (p.member->rank() != 0) {
      follower_only_.insert({s, g});
      SLOG(p.name, ": committed step ", s, " of ", gen);
      return;
    }
    if (cfg_.checkpoint_every > 0 && s % cfg_.checkpoint_every == 0) write_checkpoint(p);
    if (g < resumed_generation_) {
      // A leader of the timeline given up for a checkpoint, still under its lease: its step is
      // not the job's. Once the resumed generation committed, its lease has run out (the
      // resumed leader's was granted only then), so it can commit nothing more.
      ++result_.stats.given_up_commits;
      // It extends the chain it was given up on (the replica of that timeline may hold it).
      bool extended = false;
      for (auto& old : abandoned_) {
        if (static_cast<std::int64_t>(old.size()) == s - 1 &&
            std::equal(old.begin(), old.end(), p.history.begin())) {
          old.push_back(g);
          extended = true;
          break;
        }
      }
      if (!extended) {
        violation("(a) " + gen + " commits step " + std::to_string(s) +
                  " on a state off every chain, given up or not");
      }
      if (resumed_committed_) {
        violation("(a) " + gen + " commits step " + std::to_string(s) + " after g" +
                  std::to_string(resumed_generation_) +
                  ", resumed from a checkpoint, committed (two leases at once)");
      }
      SLOG("group ", gen, ": committed step ", s, " of the timeline given up (leader ", p.name,
           ")");
      return;
    }
    if (resumed_generation_ > 0) resumed_committed_ = true;
    const std::size_t off = off_chain(p.history);
    const auto have = static_cast<std::int64_t>(chain_.size());
    if (have >= s && chain_[static_cast<std::size_t>(s - 1)] != g) {
      const Commit& prior = ledger_.at(s);
      violation("(a) step " + std::to_string(s) + " committed by g" +
                std::to_string(prior.generation) + " at " + std::to_string(prior.at / 1000) +
                " ms and again by " + gen);
    } else if (have + 1 < s) {
      violation("(b) " + gen + " commits step " + std::to_string(s) + " after step " +
                std::to_string(have) + " (a gap)");
    } else if (off + 1 < static_cast<std::size_t>(s)) {
      violation("(a) " + gen + " commits step " + std::to_string(s) +
                " on a state off the committed chain (from step " + std::to_string(off + 1) + ")");
    } else if (have + 1 == s) {
      ++result_.stats.commits;
      extend_chain(g);
    }
    SLOG("group ", gen, ": committed step ", s, " (leader ", p.name, ")");
  }

  // The leader's checkpoint of the step it just committed (trainer_process.cpp after_step).
  void write_checkpoint(Proc& p) {
    const std::string node_name = node(p.node).name;
    const std::string path = (cfg_.checkpoint_shared ? std::string("shared") : node_name) +
                             "/step-" + std::to_string(p.step) + ".pt";
    disk_[path] = CheckpointFile{p.history, node_name, cfg_.checkpoint_shared};
    p.checkpoint_step = p.step;
    p.checkpoint_path = path;
    ++result_.stats.checkpoints;
  }
  // Rank 0 of a generation that resumes from a checkpoint loads it before the sync; false (and
  // the member told) when it cannot, which the job's choice of checkpoint must rule out.
  bool load_checkpoint(Proc& p, const SyncAction& sync) {
    auto file = disk_.find(sync.checkpoint);
    const bool readable =
        file != disk_.end() && (file->second.shared || file->second.node == node(p.node).name);
    if (!readable) {
      violation(p.name + " on " + node(p.node).name + " is told to load checkpoint " +
                sync.checkpoint + ", which it cannot read");
      p.member->synced(false, "cannot read checkpoint " + sync.checkpoint, p.step, p.checksum,
                       local_now(p), true);
      return false;
    }
    p.history = file->second.history;
    p.step = static_cast<std::int64_t>(p.history.size());
    p.checksum = digest(p.history);
    if (p.step != sync.checkpoint_step) {
      violation(p.name + " loads " + sync.checkpoint + " at step " + std::to_string(p.step) +
                "; the rendezvous said " + std::to_string(sync.checkpoint_step));
    }
    SLOG(p.name, ": loaded ", sync.checkpoint, " (step ", p.step, ")");
    check_replica(p, "after loading a checkpoint");
    return true;
  }

  // ---------------------------------------------------------------- faults
  int leader_node() {
    const auto& members = job_.members();
    if (members.empty()) return -1;
    auto it = trainer_pid_.find(members.front());
    if (it == trainer_pid_.end()) return -1;
    return procs_.at(it->second).node;
  }
  Proc* trainer_on(int idx) {
    Proc* found = nullptr;
    for (int pid : node(idx).hosted) {
      Proc* p = proc(pid);
      if (p && p->alive) found = p;
    }
    return found;
  }
  // A fault starts or ends now: trainers may take until then + exit_bound to be gone (e).
  void mark_fault(int idx) { last_fault_end_ = std::max(last_fault_end_, now_); }

  // kill -9 of the head, and a new head on the same address outage_ms later, as
  // `omnilearn head` restarted with the same state directory: the registry's nodes come back
  // from the store (each with two heartbeat timeouts to be heard again), the job from the last
  // snapshot it persisted; everything else the old process held is gone (its probes, the
  // rendezvous store, messages on their way to it).
  void restart_head(std::int64_t outage_ms) {
    note_fault(FaultKind::kRestartHead, false,
               "the head dies; a new one starts in " + std::to_string(outage_ms) + " ms");
    head_up_ = false;
    ++head_incarnation_;
    open_probes_.clear();
    crashed_generation_ = job_.generation();
    last_fault_end_ = std::max(last_fault_end_, now_ + ms(outage_ms));
    at(now_ + ms(outage_ms), [this] {
      head_up_ = true;
      disruption_ = fresh_disruption_rule();  // a new head process knows of no outage
      store_below_ = std::max(store_below_, crashed_generation_ + 1);
      if (job_.finished()) {
        // A job that ended is the JobManager's to report (it persisted the outcome); no
        // scheduler runs for it again.
        SLOG("head: restarted; the job had ended");
      } else if (!durable_) {
        // Nothing was written, so nothing was spawned or formed: the job starts afresh.
        job_ = ElasticJob(
            cfg_.job, [this](const std::vector<std::string>& members) { return plan(members); });
        SLOG("head: restarted; the job starts afresh");
        job_.start(head_now());
      } else {
        job_ = ElasticJob(
            cfg_.job, [this](const std::vector<std::string>& members) { return plan(members); });
        SLOG("head: restarted; restoring generation ", durable_->generation, " step ",
             durable_->committed_step);
        job_.restore(*durable_, head_now());
      }
      for (auto& [id, e] : registry_) {
        if (e.down) continue;
        e.last_heard = now_ + ms(cfg_.heartbeat_timeout_ms);  // two timeouts of grace
        job_.node_up(id, node(e.node).name, head_now(), drained_.count(id) > 0);
      }
      dispatch();
      // Each agent reports again the exits it reported lately (worker_agent.cpp): those sent
      // to the head that died were lost.
      for (auto& [pid, q] : procs_) {
        const Node& n = node(q.node);
        if (!q.alive && q.exited_at >= 0 && n.up && n.agent_pid == q.agent_pid) {
          report_exit(q, q.exit_code, q.exit_reason);
        }
      }
      complete_all();
    });
  }

  void apply_fault(const Fault& f) {
    if (f.kind == FaultKind::kJoinNode) {
      add_node();
      note_fault(f.kind, false, "node " + nodes_.back().name + " joins");
      return;
    }
    if (f.kind == FaultKind::kLoseDone) {
      lose_done_armed_ = true;
      note_fault(f.kind, false, "the next MemberDone will be lost");
      return;
    }
    if (f.kind == FaultKind::kLeaseChange) {
      // The scheduler actor lengthens leases for slow steps and shortens them again, up to a
      // third of the heartbeat timeout.
      const Millis lease = uniform(rng_, 200, cfg_.heartbeat_timeout_ms / 3);
      job_.set_lease_duration(lease);
      note_fault(f.kind, false, "leases of " + std::to_string(lease) + " ms from now on");
      return;
    }
    if (f.kind == FaultKind::kRestartHead) {
      if (!head_up_) return;
      restart_head(std::max<std::int64_t>(1, f.duration_ms));
      return;
    }
    if (f.kind == FaultKind::kKillAllTrainers) {
      int killed = 0;
      for (auto& [pid, q] : procs_) {
        if (!q.alive) continue;
        mark_fault(q.node);
        exit_process(q, 137, "killed by signal 9", true, true);
        ++killed;
      }
      note_fault(f.kind, false, std::to_string(killed) + " trainer processes");
      return;
    }
    if (f.kind == FaultKind::kIsolateHead) {
      const Us d = ms(std::max<std::int64_t>(1, f.duration_ms));
      note_fault(f.kind, false, "head <-> every node for " + std::to_string(f.duration_ms) + " ms");
      const std::size_t cut = nodes_.size();  // nodes that join meanwhile reach the head
      for (std::size_t i = 0; i < cut; ++i) {
        mark_fault(static_cast<int>(i));
        ++node(static_cast<int>(i)).head_cut;
      }
      last_fault_end_ = std::max(last_fault_end_, now_ + d);
      at(now_ + d, [this, cut] {
        for (std::size_t i = 0; i < cut; ++i) {
          --node(static_cast<int>(i)).head_cut;
          mark_fault(static_cast<int>(i));
        }
        SLOG("fault: the head's network is back");
        complete_all();
      });
      return;
    }
    if (f.kind == FaultKind::kFailCheckpoint) {
      fail_checkpoint_armed_ = true;
      note_fault(f.kind, false, "the next final checkpoint will fail");
      return;
    }
    int victim = -1;
    bool at_leader = false;
    if (f.leader) {
      victim = leader_node();
      at_leader = victim >= 0;
    }
    if (victim < 0 && f.node >= 0 && f.node < static_cast<int>(nodes_.size())) victim = f.node;
    if (victim < 0)
      victim = static_cast<int>(uniform(rng_, 0, static_cast<std::int64_t>(nodes_.size()) - 1));
    Node& n = node(victim);
    const int idx = victim;
    const Us d = ms(f.duration_ms);
    switch (f.kind) {
      case FaultKind::kKillTrainer:
      case FaultKind::kCrashTrainer: {
        Proc* p = trainer_on(idx);
        if (!p) {
          SLOG("fault: ", to_string(f.kind), " on ", n.name, ": no trainer there");
          return;
        }
        note_fault(f.kind, at_leader, p->name + " on " + n.name);
        mark_fault(idx);
        if (f.kind == FaultKind::kKillTrainer) {
          exit_process(*p, 137, "killed by signal 9", true, true);
        } else {
          exit_process(*p, 1, "exited with code 1", true, true);
        }
        return;
      }
      case FaultKind::kKillNode: {
        if (!n.up) return;
        note_fault(f.kind, at_leader,
                   n.name + (f.machine_up ? ", machine up" : "") +
                       (f.restart_after_ms >= 0
                            ? " (back after " + std::to_string(f.restart_after_ms) + " ms)"
                            : " (for good)"));
        mark_fault(idx);
        n.up = false;
        n.id.clear();
        n.agent_deferred.clear();
        for (int pid : n.hosted) {
          Proc* p = proc(pid);
          if (p && p->alive) {
            p->connection_reset = f.machine_up;
            exit_process(*p, 137, "its node died", true, false);
          }
        }
        n.hosted.clear();
        if (f.restart_after_ms >= 0) {
          const Us back = now_ + ms(f.restart_after_ms);
          last_fault_end_ = std::max(last_fault_end_, back);
          at(back, [this, idx] {
            if (!node(idx).up) {
              mark_fault(idx);
              start_agent(idx);
            }
          });
        }
        return;
      }
      case FaultKind::kFreezeNode:
      case FaultKind::kFreezeAgent: {
        if (!n.up) return;
        note_fault(f.kind, at_leader, n.name + " for " + std::to_string(f.duration_ms) + " ms");
        mark_fault(idx);
        const bool whole = f.kind == FaultKind::kFreezeNode;
        (whole ? n.freeze_node : n.freeze_agent)++;
        last_fault_end_ = std::max(last_fault_end_, now_ + d);
        at(now_ + d, [this, idx, whole] {
          Node& m = node(idx);
          (whole ? m.freeze_node : m.freeze_agent)--;
          mark_fault(idx);
          SLOG("fault: ", m.name, whole ? " thawed" : "'s agent thawed");
          thaw_node(idx);
        });
        return;
      }
      case FaultKind::kFreezeTrainer: {
        Proc* p = trainer_on(idx);
        if (!p) return;
        note_fault(f.kind, at_leader, p->name + " for " + std::to_string(f.duration_ms) + " ms");
        mark_fault(idx);
        ++p->freeze_self;
        const int pid = p->pid;
        last_fault_end_ = std::max(last_fault_end_, now_ + d);
        at(now_ + d, [this, pid] {
          Proc& q = *proc(pid);
          --q.freeze_self;
          SLOG("fault: ", q.name, " thawed");
          thaw_proc(q);
        });
        return;
      }
      case FaultKind::kPartitionHead: {
        note_fault(f.kind, at_leader, n.name + " for " + std::to_string(f.duration_ms) + " ms");
        mark_fault(idx);
        ++n.head_cut;
        last_fault_end_ = std::max(last_fault_end_, now_ + d);
        at(now_ + d, [this, idx] {
          Node& m = node(idx);
          --m.head_cut;
          mark_fault(idx);
          SLOG("fault: head <-> ", m.name, " healed");
          complete_all();
        });
        return;
      }
      case FaultKind::kPartitionNodes: {
        if (nodes_.size() < 2) return;
        int other = f.other_node;
        if (other < 0 || other >= static_cast<int>(nodes_.size()) || other == idx) {
          other = static_cast<int>(uniform(rng_, 0, static_cast<std::int64_t>(nodes_.size()) - 2));
          if (other >= idx) ++other;
        }
        note_fault(
            f.kind, at_leader,
            n.name + " <-> " + node(other).name + " for " + std::to_string(f.duration_ms) + " ms");
        mark_fault(idx);
        mark_fault(other);
        const std::pair<int, int> key{std::min(idx, other), std::max(idx, other)};
        ++cuts_[key];
        last_fault_end_ = std::max(last_fault_end_, now_ + d);
        at(now_ + d, [this, key] {
          --cuts_[key];
          mark_fault(key.first);
          mark_fault(key.second);
          SLOG("fault: ", node(key.first).name, " <-> ", node(key.second).name, " healed");
          complete_all();
        });
        return;
      }
      case FaultKind::kDrain: {
        if (n.id.empty()) return;
        const int leaving = job_.drain(n.id, head_now());
        note_fault(f.kind, at_leader, n.id + " (" + std::to_string(leaving) + " leaving)");
        drained_.insert(n.id);
        dispatch();
        return;
      }
      case FaultKind::kSlowNode: {
        note_fault(f.kind, at_leader, n.name + " for " + std::to_string(f.duration_ms) + " ms");
        // Overlapping slowdowns end with the last one: each restoring the speed it found made
        // the node slow for good when two overlapped.
        ++n.slow;
        n.speed_ms = uniform(rng_, 300, 2000);
        last_fault_end_ = std::max(last_fault_end_, now_ + d);
        at(now_ + d, [this, idx] {
          Node& m = node(idx);
          if (--m.slow == 0) m.speed_ms = m.normal_speed_ms;
        });
        return;
      }
      case FaultKind::kDelaySpike: {
        note_fault(f.kind, at_leader, n.name + " for " + std::to_string(f.duration_ms) + " ms");
        ++n.spike;
        last_fault_end_ = std::max(last_fault_end_, now_ + d);
        at(now_ + d, [this, idx] { --node(idx).spike; });
        return;
      }
      default:
        return;
    }
  }

  void note_fault(FaultKind kind, bool at_leader, const std::string& what) {
    ++result_.stats.injected[static_cast<std::size_t>(kind)];
    if (at_leader) ++result_.stats.at_leader[static_cast<std::size_t>(kind)];
    SLOG("FAULT ", to_string(kind), at_leader ? " [leader] " : " ", what);
  }

  void thaw_node(int idx) {
    Node& n = node(idx);
    if (n.up && !agent_frozen(n)) {
      const int agent = n.agent_pid;
      while (!n.agent_deferred.empty() && !agent_frozen(node(idx)) &&
             node(idx).agent_pid == agent) {
        auto fn = std::move(node(idx).agent_deferred.front());
        node(idx).agent_deferred.erase(node(idx).agent_deferred.begin());
        fn();
      }
      Node& m = node(idx);
      if (m.up && m.agent_pid == agent && !agent_frozen(m) && m.heartbeat_pending) {
        m.heartbeat_pending = false;
        agent_heartbeat(idx, agent);
      }
    }
    std::vector<int> pids = node(idx).hosted;
    for (int pid : pids) {
      Proc* p = proc(pid);
      if (p && p->alive) thaw_proc(*p);
    }
  }

  void complete_all() {
    std::vector<std::int64_t> gens;
    for (auto& [gen, g] : groups_) {
      if (!g.broken && !g.pending.empty()) gens.push_back(gen);
    }
    for (auto gen : gens) try_complete(gen);
  }

  void add_node() {
    Node n;
    n.index = static_cast<int>(nodes_.size());
    n.name = "n" + std::to_string(n.index);
    n.speed_ms = uniform(rng_, cfg_.speed_min_ms, cfg_.speed_max_ms);
    n.normal_speed_ms = n.speed_ms;
    nodes_.push_back(std::move(n));
    start_agent(nodes_.back().index);
  }

  void judge();

  // ---------------------------------------------------------------- state
  SimConfig cfg_;
  // The head's rule as its MembershipTable makes it: quiet after two missed beats.
  actors::FullDisruption fresh_disruption_rule() const {
    return actors::FullDisruption(std::chrono::milliseconds(2 * cfg_.heartbeat_interval_ms),
                                  std::chrono::milliseconds(cfg_.heartbeat_timeout_ms),
                                  std::chrono::milliseconds(cfg_.full_disruption_hold_ms));
  }
  actors::FullDisruption disruption_ = fresh_disruption_rule();  // after cfg_, made from it
  std::mt19937_64 rng_;
  ElasticJob job_;
  SimResult result_;

  std::vector<Event> heap_;
  std::uint64_t seq_ = 0;
  Us now_ = 0;

  std::vector<Node> nodes_;
  std::map<int, Proc> procs_;
  std::map<std::string, int> trainer_pid_;
  std::map<int, int> incarnations_;
  std::map<std::string, RegEntry> registry_;
  std::set<std::string> drained_;
  int pid_counter_ = 100;
  int alive_ = 0;
  std::map<std::pair<int, int>, Us> link_last_;
  std::map<std::pair<int, int>, int> cuts_;
  std::map<std::int64_t, Group> groups_;
  std::uint64_t post_counter_ = 0;
  std::uint64_t probe_counter_ = 0;
  std::set<std::uint64_t> open_probes_;
  std::map<std::int64_t, Millis> lease_refused_at_;  // generation -> first refusal (lease_wait_ms)
  std::int64_t store_below_ = 0;
  std::uint64_t plan_version_ = 0;
  Us next_plan_at_ = 0;
  std::int64_t next_plan_step_ = 0;  // the job's committed step a proposal waits for

  std::map<std::int64_t, Commit> ledger_;
  std::int64_t ledger_max_ = 0;
  std::vector<bool> fired_;
  std::vector<std::pair<std::int64_t, std::vector<std::int64_t>>> finishes_ok_;  // (step, state)
  // The committed chain: the generation that committed each step, as leaders committed them
  // (under a lease) or as a sync adopted steps that only followers had committed.
  std::vector<std::int64_t> chain_;
  std::set<std::pair<std::int64_t, std::int64_t>> follower_only_;  // (step, generation)
  std::int64_t max_committed_ = 0;  // the most steps any replica committed
  bool lose_done_armed_ = false;
  bool fail_checkpoint_armed_ = false;
  bool checkpoint_failed_ = false;
  bool state_lost_ = false;
  bool state_lost_by_fault_ = false;
  std::string state_lost_how_;
  bool believed_reported_ = false;
  std::int64_t leased_generation_ = 0;  // newest generation granted a lease
  bool head_up_ = true;
  int head_incarnation_ = 0;
  std::optional<ElasticJobSnapshot> durable_;  // what the head wrote last (PersistCommand)
  std::int64_t crashed_generation_ = 0;
  std::map<std::string, CheckpointFile> disk_;        // checkpoint files, by path
  std::vector<std::vector<std::int64_t>> abandoned_;  // chains given up for a checkpoint
  std::int64_t resumed_generation_ = 0;               // of the last resume from a checkpoint
  bool resumed_committed_ = false;                    // ... which has committed a step since
  bool shared_checkpoint_recorded_ = false;  // the job was told of a checkpoint on a shared disk

  bool finished_ = false;
  Us finished_at_ = 0;
  Us last_fault_end_ = 0;
  Us below_since_ = -1;
  Us longest_below_ = 0;
  std::int64_t exit_bound_ms_ = 0;
};

SimResult Simulation::run() {
  for (int i = 0; i < cfg_.nodes; ++i) {
    Node n;
    n.index = i;
    n.name = "n" + std::to_string(i);
    n.speed_ms = uniform(rng_, cfg_.speed_min_ms, cfg_.speed_max_ms);
    n.normal_speed_ms = n.speed_ms;
    nodes_.push_back(std::move(n));
  }
  // The cluster is up when the job starts: agents registered, heartbeating.
  for (int i = 0; i < cfg_.nodes; ++i) {
    Node& n = node(i);
    n.up = true;
    n.agent_pid = ++pid_counter_;
    n.id = n.name + "#" + std::to_string(++incarnations_[i]);
    n.last_reply = 0;
    registry_[n.id] = RegEntry{n.id, i, n.agent_pid, 0, false};
    job_.node_up(n.id, n.name, 0);
    const int agent = n.agent_pid;
    at(uniform(rng_, 0, ms(cfg_.heartbeat_interval_ms)),
       [this, i, agent] { agent_heartbeat(i, agent); });
  }
  dispatch();
  job_.start(0);
  dispatch();
  at(ms(cfg_.tick_ms), [this] { head_tick(); });
  fired_.assign(cfg_.faults.size(), false);
  for (std::size_t i = 0; i < cfg_.faults.size(); ++i) {
    const Fault& f = cfg_.faults[i];
    if (f.at_ms) {
      fired_[i] = true;
      at(ms(*f.at_ms), [this, i] { apply_fault(cfg_.faults[i]); });
    }
  }

  const auto cmp = [](const Event& a, const Event& b) {
    return a.at != b.at ? a.at > b.at : a.seq > b.seq;
  };
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), cmp);
    Event e = std::move(heap_.back());
    heap_.pop_back();
    now_ = e.at;
    ++result_.stats.events;
    if (!finished_ && now_ > ms(cfg_.max_job_ms)) {
      violation("(c) the job did not end within " + std::to_string(cfg_.max_job_ms / 1000) +
                " simulated seconds (state " + job_.state() + ", step " +
                std::to_string(ledger_max_) + ")");
      break;
    }
    if (finished_) {
      const Us quiet = std::max(finished_at_, last_fault_end_);
      if (alive_ == 0 && now_ >= quiet) break;
      if (now_ > quiet + ms(exit_bound_ms_)) {
        std::string left;
        for (auto& [pid, p] : procs_) {
          if (p.alive) {
            left += " " + p.name + (p.ready ? "" : "(no hello)") + " phase " +
                    (p.member ? std::to_string(static_cast<int>(p.member->phase())) : "-");
          }
        }
        violation("(e) trainers still running " + std::to_string(exit_bound_ms_ / 1000) +
                  " s after the job ended:" + left);
        break;
      }
    }
    e.fn();
  }
  judge();
  return std::move(result_);
}

void Simulation::judge() {
  const std::int64_t n = cfg_.job.total_steps;
  result_.committed = ledger_max_;
  for (const auto& [step, generation] : follower_only_) {
    if (step > static_cast<std::int64_t>(chain_.size()) ||
        chain_[static_cast<std::size_t>(step - 1)] != generation) {
      ++result_.stats.follower_only;
    }
  }
  for (std::int64_t s = 1; s <= ledger_max_; ++s) {
    if (!ledger_.count(s)) {
      violation("(b) step " + std::to_string(s) + " was never committed (ledger reaches " +
                std::to_string(ledger_max_) + ")");
      break;
    }
  }
  if (!finished_) return;  // already reported (c)
  if (job_.committed_step() > ledger_max_) {
    violation("the job ends believing step " + std::to_string(job_.committed_step()) +
              "; the ledger has " + std::to_string(ledger_max_));
  }
  if (result_.state == "succeeded") {
    if (ledger_max_ != n || job_.committed_step() != n) {
      violation("(b) succeeded with the ledger at step " + std::to_string(ledger_max_) +
                " and the job at step " + std::to_string(job_.committed_step()) + " of " +
                std::to_string(n));
    }
    bool checkpoint = false;
    for (auto& [step, checksum] : finishes_ok_) {
      if (step == n && checksum == chain_) checkpoint = true;
    }
    if (!checkpoint)
      violation("succeeded without a final checkpoint written at step " + std::to_string(n));
  } else if (result_.state == "failed") {
    if (result_.reason.empty()) violation("(c) failed without a reason");
    std::string why;
    if (checkpoint_failed_) why = "a final checkpoint failed";
    if (why.empty() && state_lost_ && state_lost_by_fault_) {
      why = "the committed state was lost: " + state_lost_how_;
    }
    if (why.empty() && leased_generation_ > 0) {
      // Under the lease protocol a generation that held a lease may have committed steps no
      // report told of: the scheduler must then count on a trainer that synced in it (or
      // later). If every such trainer is gone, and the last of them went by a fault, the job
      // cannot know its committed state: failing is the protocol's only safe answer.
      const Proc* last = nullptr;
      bool any_alive = false;
      for (auto& [pid, q] : procs_) {
        if (q.synced_generation < leased_generation_) continue;
        if (q.alive || q.exited_at >= finished_at_) any_alive = true;
        if (!last || q.exited_at > last->exited_at) last = &q;
      }
      if (last && !any_alive && last->exit_faulted) {
        why = "every trainer that synced in or after g" + std::to_string(leased_generation_) +
              " (the newest with a lease) was lost to faults; the last: " + last->name;
      }
    }
    // With a checkpoint that any node can read, losing every holder of the state is no reason
    // to fail: the job resumes from the checkpoint.
    if (!why.empty() && !checkpoint_failed_ && shared_checkpoint_recorded_) {
      why.clear();
      state_lost_how_ += state_lost_how_.empty() ? "" : "; ";
      state_lost_how_ += "the job had recorded a checkpoint on a shared disk to resume from";
    }
    if (why.empty() && longest_below_ >= ms(cfg_.job.grace_period) / 2) {
      why = "fewer than min_workers usable nodes for " + std::to_string(longest_below_ / 1000) +
            " ms";
    }
    result_.unavoidable = why;
    if (why.empty()) {
      violation("(c) failed ('" + result_.reason + "') though the schedule did not make it " +
                "unavoidable" + (state_lost_ ? "; " + state_lost_how_ : std::string()));
    }
  } else {
    violation("(c) the job ended '" + result_.state + "' ('" + result_.reason + "')");
  }
  for (auto& [pid, p] : procs_) check_replica(p, "at the end");
}

// When a drawn fault fires: during the first formation (30%), during training (50%) or near the
// end (20%) of a job of `steps` steps.
void draw_moment(std::mt19937_64& rng, std::int64_t steps, Fault& f) {
  const auto when = uniform(rng, 0, 9);
  if (when <= 2) {
    f.at_ms = uniform(rng, 0, 2000);
  } else if (when <= 7) {
    f.at_step = uniform(rng, 1, steps);
  } else {
    f.at_step = uniform(rng, std::max<std::int64_t>(1, steps - 2), steps);
  }
}

}  // namespace

SimConfig random_config(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  SimConfig c;
  c.seed = seed;
  c.nodes = static_cast<int>(uniform(rng, 2, 6));
  c.job.min_workers = static_cast<std::int32_t>(uniform(rng, 1, std::min(3, c.nodes)));
  c.job.max_workers =
      static_cast<std::int32_t>(uniform(rng, c.job.min_workers, std::min(c.nodes + 1, 6)));
  c.job.slots = 1;
  c.job.total_steps = uniform(rng, 20, 200);
  c.job.spawn_timeout = 5000;
  c.job.form_timeout = 8000;
  c.job.grace_period = 20000;
  c.job.lease_duration = 1000;
  c.job.lease_margin = 200;
  c.job.probe_timeout = 1000;
  c.member.total_steps = c.job.total_steps;
  c.member.lease_wait = 2000;
  c.member.done_resend = 1000;
  c.member.idle_limit = 60000;
  c.member.renew_when_left = uniform_real(rng, 0.25, 0.75);
  c.global_batch = 64;
  c.propose_plans = chance(rng, 0.5);
  if (chance(rng, 0.5)) {
    c.drop_p = uniform_real(rng, 0.0, 0.03);
    c.dup_p = uniform_real(rng, 0.0, 0.03);
    c.spike_p = 0.01;
  }
  if (chance(rng, 0.5)) {
    c.skew_clocks = true;
    c.clock_drift = uniform_real(rng, 0.0, 0.02);
  }
  const int count = static_cast<int>(uniform(rng, 0, 6));
  const std::int64_t n = c.job.total_steps;
  for (int i = 0; i < count; ++i) {
    Fault f;
    // Head restarts are drawn below, from their own stream.
    f.kind = static_cast<FaultKind>(uniform(rng, 0, static_cast<int>(FaultKind::kRestartHead) - 1));
    draw_moment(rng, n, f);
    f.leader = chance(rng, 0.5);
    f.duration_ms = chance(rng, 0.5) ? uniform(rng, 200, 2500) : uniform(rng, 2500, 6000);
    f.restart_after_ms = chance(rng, 0.8) ? uniform(rng, 500, 8000) : -1;
    c.faults.push_back(f);
  }
  // Whether a killed node's machine stays up (its processes' connections reset, so a probe of
  // a dead leader proves it gone) comes from a stream of its own too, for the same reason.
  std::mt19937_64 machine_rng(seed * 0x9e3779b97f4a7c15ULL + 29);
  for (Fault& f : c.faults) {
    if (f.kind == FaultKind::kKillNode) f.machine_up = chance(machine_rng, 0.5);
  }
  // Head restarts come from a stream of their own, so that the schedules of the other faults
  // stay what they were for every seed.
  std::mt19937_64 head_rng(seed * 0x2545f4914f6cdd1dULL + 17);
  if (chance(head_rng, 0.3)) {
    Fault f;
    f.kind = FaultKind::kRestartHead;
    draw_moment(head_rng, n, f);
    f.duration_ms = uniform(head_rng, 200, 5000);
    c.faults.push_back(f);
  }
  // The head's own network down for a while, from a stream of its own too: shorter and longer
  // than the heartbeat timeout.
  std::mt19937_64 isolate_rng(seed * 0x2545f4914f6cdd1dULL + 59);
  if (chance(isolate_rng, 0.2)) {
    Fault f;
    f.kind = FaultKind::kIsolateHead;
    draw_moment(isolate_rng, n, f);
    f.duration_ms = uniform(isolate_rng, 500, 4 * c.heartbeat_timeout_ms);
    c.faults.push_back(f);
  }
  // Checkpoints, and every trainer killed at once, from a stream of their own too. The kill
  // comes with a head restart at the same step in half of those seeds (either may come first).
  std::mt19937_64 checkpoint_rng(seed * 0x9e3779b97f4a7c15ULL + 41);
  if (chance(checkpoint_rng, 0.6)) {
    c.checkpoint_every = uniform(checkpoint_rng, 2, 15);
    c.checkpoint_shared = chance(checkpoint_rng, 0.7);
  }
  if (chance(checkpoint_rng, 0.25)) {
    Fault f;
    f.kind = FaultKind::kKillAllTrainers;
    f.at_step = uniform(checkpoint_rng, 1, n);
    c.faults.push_back(f);
    if (chance(checkpoint_rng, 0.5)) {
      Fault head;
      head.kind = FaultKind::kRestartHead;
      head.at_step = f.at_step;
      head.duration_ms = uniform(checkpoint_rng, 200, 5000);
      c.faults.push_back(head);
    }
  }
  return c;
}

SimResult run_simulation(const SimConfig& config) {
  SimConfig c = config;
  c.member.mutation = c.mutation;
  c.job.mutation = c.mutation;
  Simulation sim(c);
  return sim.run();
}

}  // namespace omnilearn::scheduler::sim
