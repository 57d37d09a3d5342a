#include "tests/asp/asp_job_sim.hpp"

#include <algorithm>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <random>
#include <set>
#include <stdexcept>
#include <variant>

#include "asp/restart_ledger.hpp"
#include "asp/server_core.hpp"

namespace omnilearn::asp::sim {
namespace {

constexpr Millis kPushBound = 5000;  // the worker's bound on a push's answer (AspPush asks)
constexpr Millis kNever = -1;
constexpr Millis kProbeTimeout = 3000;  // the adapter's ping of a server (kServerProbeTimeout)
constexpr Millis kGiveUp = 4 * 3600 * 1000;  // virtual time: a run still going is a livelock
const StalenessConfig kStaleness{StalenessMode::kNone, 0, LrScaling::kNone};

template <class... Fns>
struct Overloaded : Fns... {
  using Fns::operator()...;
};
template <class... Fns>
Overloaded(Fns...) -> Overloaded<Fns...>;

using Counts = std::vector<std::vector<int>>;  // [epoch][sample]

void apply_nothing(double, std::span<const float>) {}

class World {
 public:
  explicit World(const SimConfig& c) : c_(c), rng_(c.seed), job_(std::in_place, options(c)) {
    for (int n = 0; n < c.nodes; ++n) node_ids_.push_back("node" + std::to_string(n));
    ever_taken_.assign(static_cast<std::size_t>(c.shards), zero());
  }

  SimResult run() {
    job_->start(now_);
    std::vector<AspJob::NodeView> nodes;
    for (const auto& id : node_ids_) nodes.push_back({id, "n" + id.substr(4), false});
    job_->nodes(nodes, now_);
    commands();
    schedule_faults();
    tick();
    std::uint64_t steps = 0;
    while (!events_.empty() && !job_->finished()) {
      Event e = events_.top();
      events_.pop();
      now_ = e.at;
      if (now_ > kGiveUp || ++steps > 3'000'000) break;
      e.run();
      commands();
    }
    return check();
  }

 private:
  struct Event {
    Millis at;
    std::uint64_t seq;
    std::function<void()> run;
  };
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.at > b.at || (a.at == b.at && a.seq > b.seq);
    }
  };
  struct Snapshot {  // a checkpoint file: the shard's core state and what that state took
    ServerCheckpoint core;
    Counts taken;
  };
  struct Server {  // one server process (an incarnation of a shard)
    std::int32_t shard = 0;
    std::int64_t incarnation = 0;
    std::optional<ServerCore> core;
    Counts taken;
    bool alive = true;
    bool handed_over = false;  // refuses every push
    Millis hung_until = 0;     // hung (SIGSTOP) before this: it reads nothing
  };
  struct Report {  // what a worker's next deal request says of its last batch
    std::uint64_t batch = 0;
    std::int32_t size = 0;
    std::vector<std::int64_t> incarnations, versions, unanswered;
    std::int64_t staleness = 0;
    bool failed = false;
    bool applied = true;
    double compute_s = 0;
    std::int64_t pushes = 0;  // shards it was pushed to
  };
  struct Worker {  // one worker process
    std::string node;
    WorkerId id = 0;
    double ms_per_sample = 10;
    bool alive = true;
    bool evaluated = false;  // its next ask carries an evaluation's figures
    std::string eval_error;  // ... or says why it could not evaluate
    std::vector<std::int32_t> unreachable;  // shards whose pull got no reply since its last ask
    Report report;
  };
  struct Process {
    std::string node;
    bool alive = true;
  };

  static AspJobOptions options(const SimConfig& c) {
    AspJobOptions o;
    o.job_id = "sim";
    o.name = "sim";
    o.run_dir = "runs/sim";
    o.servers = c.shards;
    o.min_workers = 1;
    o.max_workers = c.nodes;
    o.slots = 1;
    o.epochs = c.epochs;
    o.global_batch = 64;
    o.eval_every = c.eval_every;
    o.data_seed = c.seed;
    o.controller.global_batch = 64;
    o.controller.min_batch = 4;
    o.mutation = c.mutation;
    return o;
  }

  Counts zero() const {
    return Counts(static_cast<std::size_t>(c_.epochs),
                  std::vector<int>(static_cast<std::size_t>(c_.dataset), 0));
  }

  void at(Millis when, std::function<void()> fn) {
    events_.push(Event{when, seq_++, std::move(fn)});
  }
  Millis uniform(Millis lo, Millis hi) {
    return std::uniform_int_distribution<Millis>(lo, hi)(rng_);
  }
  bool coin(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  void fail(const std::string& what) {
    if (violations_.size() < 5) violations_.push_back("t=" + std::to_string(now_) + " ms: " + what);
  }
  bool node_frozen(const std::string& node) const { return frozen_.count(node) > 0; }
  // A message that reaches server `name` while it hangs is read when it runs again: `fn` then.
  bool later_if_hung(const std::string& name, const std::function<void()>& fn) {
    const auto it = servers_.find(name);
    if (it == servers_.end() || !it->second.alive || now_ >= it->second.hung_until) return false;
    at(it->second.hung_until, fn);
    return true;
  }
  // The shards among `endpoints` whose pull gets no reply within the worker's bound: the
  // server is dead, or hung now. (A real pull of a server that runs again within the bound is
  // answered late; counting it silent is the harsher case: the batch is abandoned.)
  std::vector<std::int32_t> silent_shards(const std::vector<std::string>& endpoints) const {
    std::vector<std::int32_t> silent;
    for (std::size_t s = 0; s < endpoints.size(); ++s) {
      const auto it = servers_.find(endpoints[s]);
      if (it != servers_.end() && (!it->second.alive || now_ < it->second.hung_until)) {
        silent.push_back(static_cast<std::int32_t>(s));
      }
    }
    return silent;
  }
  static void note_unreachable(std::vector<std::int32_t>& into,
                               const std::vector<std::int32_t>& silent) {
    for (const std::int32_t s : silent) {
      if (std::find(into.begin(), into.end(), s) == into.end()) into.push_back(s);
    }
  }

  void tick() {
    job_->tick(now_);
    if (!job_->finished()) {
      at(now_ + 100, [this, epoch = head_epoch_] {
        if (epoch == head_epoch_ && head_up_) tick();  // a dead head's clock stops with it
      });
    }
  }

  // ---- the head: killed (kill -9) and restarted from its last persisted snapshot

  // A message the sender sends again until the head answers (a hello, a server's ready, a
  // drain, a finished worker's report, the registry's verdict on a node): now, or once a
  // restarted head listens.
  void to_head(std::function<void()> fn) {
    if (head_up_) {
      fn();
    } else {
      retry_.push_back(std::move(fn));
    }
  }
  // Whether a message sent to (or an answer due from an ask of) the head of `epoch` reaches a
  // head that can take it: not when that head died meanwhile.
  bool reaches(std::uint64_t epoch) const { return head_up_ && epoch == head_epoch_; }

  void crash() {
    if (!head_up_ || job_->finished()) return;
    head_up_ = false;
    ++head_epoch_;
    ++head_restarts_;
    if (c_.trace) std::cout << now_ << " ms head killed\n";
    at(now_ + uniform(200, 5000), [this] { restart(); });
  }

  void restart() {
    job_.emplace(options(c_));
    head_up_ = true;
    if (persisted_.empty()) {
      fail("the head was restarted before its machine asked for a snapshot");
      return;
    }
    try {
      job_->restore(nlohmann::json::parse(persisted_), now_);
    } catch (const std::exception& e) {
      fail(std::string("the persisted snapshot did not restore: ") + e.what());
      return;
    }
    if (c_.trace) std::cout << now_ << " ms head restored\n";
    // The adapter pings every trainer the machine counts as live: an exit during the outage
    // was reported to the dead head.
    for (const auto& name : job_->live_trainers()) {
      const auto p = processes_.find(name);
      if (p == processes_.end() || !p->second.alive) {
        job_->trainer_exited(name, 1, false, "did not answer after the head restarted", "", now_);
      }
    }
    commands();
    auto retry = std::move(retry_);
    retry_.clear();
    for (auto& fn : retry) {
      fn();
      commands();
    }
    tick();
  }

  void schedule_faults() {
    std::vector<std::string> order = node_ids_;
    std::shuffle(order.begin(), order.end(), rng_);
    // Node faults on distinct nodes, never all of them.
    std::size_t next = 0;
    for (int f = 0; f < c_.frozen_nodes && next + 1 < order.size(); ++f) {
      const std::string node = order[next++];
      at(uniform(2000, 40000), [this, node] {
        for (const auto& [name, sv] : servers_) {
          if (sv.alive && processes_[name].node == node) ++fault_deaths_[sv.shard];
        }
        // A server placed there that has not said hello yet dies with the node too: the job
        // counts it (its shard's server is gone) though it never started.
        const auto views = job_->shards();
        for (std::size_t shard = 0; shard < views.size(); ++shard) {
          const auto p = processes_.find(views[shard].trainer);
          if (p != processes_.end() && p->second.alive && p->second.node == node &&
              !servers_.count(views[shard].trainer)) {
            ++fault_deaths_[static_cast<std::int32_t>(shard)];
          }
        }
        frozen_.insert(node);  // its agent stops: the registry declares the node dead
        to_head([this, node] { job_->node_down(node, "dead", now_); });
      });
    }
    for (int d = 0; d < c_.drains && next + 1 < order.size(); ++d) {
      const std::string node = order[next++];
      at(uniform(2000, 40000),
         [this, node] { to_head([this, node] { job_->drain(node, now_); }); });
    }
    for (int k = 0; k < c_.server_kills; ++k) {
      const auto shard = static_cast<std::int32_t>(uniform(0, c_.shards - 1));
      at(uniform(1000, 60000), [this, shard] {
        const auto view = job_->shards()[static_cast<std::size_t>(shard)];
        if (servers_.count(view.trainer)) kill(view.trainer);
      });
    }
    for (int k = 0; k < c_.hung_servers; ++k) {
      const auto shard = static_cast<std::int32_t>(uniform(0, c_.shards - 1));
      at(uniform(1000, 60000), [this, shard] {
        const auto view = job_->shards()[static_cast<std::size_t>(shard)];
        auto it = servers_.find(view.trainer);
        if (it == servers_.end() || !it->second.alive) return;
        // Mostly for seconds; sometimes past the job's stall limit (no update for spawn
        // timeout + grace period fails it): only a restart then lets the job finish.
        it->second.hung_until = now_ + (coin(0.3) ? 150000 : uniform(3000, 20000));
        ++hung_servers_;
        if (c_.trace) std::cout << now_ << " ms " << view.trainer << " hangs\n";
      });
    }
    for (int k = 0; k < c_.worker_kills; ++k) {
      at(uniform(1000, 60000), [this] {
        std::vector<std::string> live;
        for (const auto& [name, w] : workers_) {
          if (w.alive) live.push_back(name);
        }
        if (live.size() > 1) kill(live[static_cast<std::size_t>(uniform(0, live.size() - 1))]);
      });
    }
    for (int k = 0; k < c_.head_restarts; ++k) {
      at(uniform(2000, 60000), [this] {
        // Half of them just after a deal was written down and before its answer reached the
        // worker (which asks again, without the batch).
        if (coin(0.5)) {
          crash_after_deal_ = true;
        } else {
          crash();
        }
      });
    }
  }

  // A process dies (kill -9): its agent reports the exit, unless the agent is frozen.
  void kill(const std::string& trainer) {
    std::string node;
    if (auto s = servers_.find(trainer); s != servers_.end()) {
      if (!s->second.alive) return;
      s->second.alive = false;
      ++fault_deaths_[s->second.shard];
      node = processes_[trainer].node;
    } else if (auto w = workers_.find(trainer); w != workers_.end()) {
      if (!w->second.alive) return;
      w->second.alive = false;
      node = w->second.node;
      unreported_ += w->second.report.pushes;
    } else {
      return;
    }
    processes_[trainer].alive = false;
    exited(trainer, node, 9, "killed");
  }

  void exited(const std::string& trainer, const std::string& node, int code,
              const std::string& why) {
    if (node_frozen(node)) return;
    at(now_ + uniform(50, 800), [this, trainer, code, why, epoch = head_epoch_] {
      // The agent's report is a tell: lost if the head it went to died.
      if (reaches(epoch)) job_->trainer_exited(trainer, code, false, why, "", now_);
    });
  }

  void commands() {
    for (auto list = job_->take_commands(); !list.empty(); list = job_->take_commands()) {
      for (auto& command : list) {
        std::visit(Overloaded{
                       [&](PersistCommand&) {
                         // Written as the adapter writes it (only where a restart reads it:
                         // a snapshot per deal is most of a run's time).
                         if (c_.head_restarts > 0) persisted_ = job_->snapshot(now_).dump();
                       },
                       [&](SpawnCommand& c) { spawn(c); },
                       [&](StopCommand& c) { stop(c); },
                       [&](FenceCommand& c) { fence(c); },
                       [&](HandOverCommand& c) { hand_over(c); },
                       [&](ProbeCommand& c) { probe(c); },
                       [&](EventCommand& e) {
                         if (c_.trace) std::cout << now_ << " ms " << e.event.dump() << "\n";
                       },
                       [&](PublishCommand&) {},
                       [&](FinishCommand&) {},
                   },
                   command);
      }
    }
  }

  // ---- processes

  void spawn(const SpawnCommand& c) {
    if (node_frozen(c.node)) return;  // the agent never reads the order: the spawn times out
    processes_[c.trainer] = Process{c.node, true};
    at(now_ + uniform(200, 1500), [this, trainer = c.trainer, node = c.node] {
      to_head([this, trainer, node] { hello(trainer, node); });
    });
  }

  void hello(const std::string& trainer, const std::string& node) {
    {
      if (!processes_[trainer].alive) return;
      const HelloAnswer a = job_->hello(trainer, now_);
      if (!a.accepted) {
        processes_[trainer].alive = false;
        exited(trainer, node, 1, a.error);
        return;
      }
      if (a.server) {
        start_server(trainer, a);
      } else {
        Worker w;
        w.node = node;
        w.id = a.worker;
        w.ms_per_sample = 2.0 + 18.0 * std::uniform_real_distribution<double>(0, 1)(rng_);
        workers_[trainer] = w;
        ask(trainer);
      }
    }
  }

  void start_server(const std::string& trainer, const HelloAnswer& a) {
    Server s;
    s.shard = a.shard;
    s.incarnation = a.incarnation;
    ServerCheckpoint from;
    s.taken = zero();
    std::string resumed_from = "initial";
    if (!a.resume_checkpoint.empty()) {
      const auto it = files_.find(a.resume_checkpoint);
      if (it == files_.end()) {
        fail("a restart was told to resume from " + a.resume_checkpoint + ", never written");
      } else {
        if (it->second.core.version != a.resume_version) {
          fail("checkpoint " + a.resume_checkpoint + " is at version " +
               std::to_string(it->second.core.version) + ", the machine said " +
               std::to_string(a.resume_version));
        }
        from = it->second.core;
        s.taken = it->second.taken;
        resumed_from = "head";
      }
    }
    if (a.incarnation == 0) {
      s.core.emplace(1, kStaleness, apply_nothing);
    } else {
      from.incarnation = a.incarnation - 1;  // resume() makes it the incarnation it was told
      s.core.emplace(ServerCore::resume(from, 1, kStaleness, apply_nothing));
    }
    const std::int64_t version = s.core->pull().number;
    servers_[trainer] = std::move(s);
    at(now_ + uniform(50, 500), [this, trainer, resumed_from, version] {
      to_head([this, trainer, resumed_from, version] { ready(trainer, resumed_from, version); });
    });
  }

  void ready(const std::string& trainer, const std::string& resumed_from, std::int64_t version) {
    {
      Server& server = servers_[trainer];
      if (!server.alive) return;
      if (server.incarnation > 0) {
        truth_[server.shard].resumed(server.incarnation, version);
        resumed_[server.shard][server.incarnation] = version;
        check_drain(server.shard);
      }
      served_by_[server.shard] = trainer;
      job_->server_ready(ServerReady{trainer, server.shard, trainer, server.incarnation, version, 1,
                                     c_.dataset, resumed_from},
                         now_);
    }
  }

  // A drained server's successor (the next incarnation) resumes where the drained one stopped.
  // Checked once both are known: the drained server reads its stop late when it hung after
  // its hand-over, maybe after its successor listened.
  void check_drain(std::int32_t shard) {
    auto it = drained_.find(shard);
    if (it == drained_.end()) return;
    const auto& resumed = resumed_[shard];
    const auto successor = resumed.find(it->second.first + 1);
    if (successor == resumed.end()) return;
    if (successor->second != it->second.second) {
      fail("shard " + std::to_string(shard) + " was drained at version " +
           std::to_string(it->second.second) + " and its restart resumed at " +
           std::to_string(successor->second) + ": the drain lost updates");
    }
    drained_.erase(it);
  }

  void stop(const StopCommand& c) {
    if (const auto s = servers_.find(c.trainer);
        s != servers_.end() && c.reason.rfind("hung:", 0) == 0) {
      ++fault_deaths_[s->second.shard];
      ++hung_restarts_;
    }
    at(now_ + uniform(5, 50), [this, c] { stop_arrives(c); });
  }
  void stop_arrives(const StopCommand& c) {
    if (later_if_hung(c.trainer, [this, c] { stop_arrives(c); })) return;
    {
      auto p = processes_.find(c.trainer);
      if (p == processes_.end() || !p->second.alive) return;
      p->second.alive = false;
      if (auto s = servers_.find(c.trainer); s != servers_.end()) {
        s->second.alive = false;
        if (c.reason == "drained") {
          drained_[s->second.shard] = {s->second.incarnation, s->second.core->pull().number};
          check_drain(s->second.shard);
        }
      }
      if (auto w = workers_.find(c.trainer); w != workers_.end()) {
        w->second.alive = false;
        unreported_ += w->second.report.pushes;
      }
      exited(c.trainer, p->second.node, 0, c.reason);
    }
  }

  // Writes the server's checkpoint and reports it; returns its path.
  std::string checkpoint(const std::string& trainer, Server& s) {
    const std::string path = trainer + "@v" + std::to_string(s.core->pull().number) + "#" +
                             std::to_string(files_.size());
    const auto decoded = decode_checkpoint(encode_checkpoint(s.core->checkpoint()));
    if (!decoded) {
      fail("a checkpoint did not decode");
      return path;
    }
    files_[path] = Snapshot{*decoded, s.taken};
    const ServerReport report{trainer, s.shard, s.core->pull().number,
                              0,       path,    s.core->fenced_pushes()};
    at(now_ + uniform(5, 200), [this, report, epoch = head_epoch_] {
      if (!reaches(epoch)) return;  // a tell: lost with the head
      if (job_->server_report(report, true, now_))
        job_->head_copy_kept(report.shard, report.version);
    });
    return path;
  }

  // ---- workers

  void ask(const std::string& trainer) {
    Worker& w = workers_[trainer];
    if (!w.alive) return;
    if (!head_up_) {  // no answer: the worker asks again, the same request
      at(now_ + 500, [this, trainer] { ask(trainer); });
      return;
    }
    DealAsk a;
    a.trainer = trainer;
    const Report sent = w.report;
    Report r = std::move(w.report);
    w.report = Report{};
    if (r.batch != 0) {
      (r.failed ? a.failed_batch : a.pushed_batch) = r.batch;
      a.incarnations = r.incarnations;
      a.versions = r.versions;
      a.unanswered = r.unanswered;
      a.staleness = r.staleness;
      a.applied = !r.failed && r.applied;
      a.batch = r.size;
      a.compute_time_s = r.compute_s;
      a.update_time_s = r.compute_s;
      a.loss = 1.0;
    }
    if (w.evaluated) {
      w.evaluated = false;
      a.evaluated = true;
      a.eval_accuracy = 0.5;
      a.eval_loss = 1.0;
    } else if (!w.eval_error.empty()) {
      a.eval_error = std::exchange(w.eval_error, "");
    }
    const std::vector<std::int32_t> unreachable = std::exchange(w.unreachable, {});
    a.unreachable = unreachable;
    const DealAnswer d = job_->deal(a, now_);
    commands();
    if (crash_after_deal_ && d.action == DealAnswer::Action::kBatch) {
      // The head wrote the deal down and died before its answer left: the worker asks again.
      crash_after_deal_ = false;
      crash();
      ++lost_deals_;
      w.report = sent;
      w.evaluated = a.evaluated;
      w.eval_error = a.eval_error;
      w.unreachable = unreachable;
      at(now_ + 500, [this, trainer] { ask(trainer); });
      return;
    }
    switch (d.action) {
      case DealAnswer::Action::kDone:
        w.alive = false;
        processes_[trainer].alive = false;
        exited(trainer, w.node, 0, "done");
        return;
      case DealAnswer::Action::kWait:
        at(now_ + std::max<Millis>(d.wait, 1), [this, trainer] { ask(trainer); });
        return;
      case DealAnswer::Action::kEvaluate:
        ++evaluations_;
        at(now_ + uniform(100, 600), [this, trainer, servers = d.servers] {
          Worker& e = workers_[trainer];
          const auto silent = silent_shards(servers);
          if (!silent.empty()) {  // its pull failed: evaluation skipped, said with the next ask
            note_unreachable(e.unreachable, silent);
            e.eval_error = "pull failed: no reply";
            at(now_ + kPushBound, [this, trainer] { ask(trainer); });
            return;
          }
          e.evaluated = true;
          ask(trainer);
        });
        return;
      case DealAnswer::Action::kFinish:
        at(now_ + uniform(100, 600), [this, trainer, servers = d.servers] {
          if (!workers_[trainer].alive) return;
          if (const auto silent = silent_shards(servers); !silent.empty()) {
            // Five pulls of the final parameters failed (each at its bound, 0.5 s apart): it
            // asks again, and the scheduler tells it to finish once every shard is back.
            note_unreachable(workers_[trainer].unreachable, silent);
            at(now_ + 5 * (kPushBound + 500), [this, trainer] { ask(trainer); });
            return;
          }
          to_head([this, trainer] {
            if (!workers_[trainer].alive) return;
            job_->finished(FinishReport{trainer, true, "", 0.5, 1.0, "final.pt"}, now_);
          });
        });
        return;
      case DealAnswer::Action::kBatch:
        push(trainer, d);
        return;
    }
  }

  void push(const std::string& trainer, const DealAnswer& d) {
    Worker& w = workers_[trainer];
    const auto shards = static_cast<std::size_t>(c_.shards);
    Report& next = w.report;
    next.batch = d.batch_id;
    next.size = static_cast<std::int32_t>(d.indices.size());
    next.incarnations.assign(shards, -1);
    next.versions.assign(shards, 0);
    next.unanswered.assign(shards, -1);
    const double compute = static_cast<double>(d.indices.size()) * w.ms_per_sample *
                           std::uniform_real_distribution<double>(0.8, 1.2)(rng_);
    next.compute_s = compute / 1000.0;
    // The pulls come first, from every shard (the worker's pull_all): one that gets no reply
    // abandons the batch before anything is pushed, reported failed with no push unanswered
    // and the silent shards named, once the pull's bound has passed.
    if (const auto silent = silent_shards(d.servers); !silent.empty()) {
      next.failed = true;
      note_unreachable(w.unreachable, silent);
      ++abandoned_pulls_;
      at(now_ + kPushBound, [this, trainer] { ask(trainer); });
      return;
    }
    const Millis pushed_at = now_ + static_cast<Millis>(compute) + 1;
    Millis answers_by = pushed_at;
    bool waits_for_bound = false;
    for (std::size_t s = 0; s < shards; ++s) {
      if (std::find(d.shards_done.begin(), d.shards_done.end(), static_cast<std::int32_t>(s)) !=
          d.shards_done.end()) {
        continue;
      }
      const std::string server = d.servers[s];
      auto it = servers_.find(server);
      if (it == servers_.end()) {
        fail("a deal named shard " + std::to_string(s) + "'s endpoint '" + server +
             "', no server of it");
        next.failed = true;
        continue;
      }
      const std::int64_t incarnation = it->second.incarnation;
      const Version pulled = it->second.core->pull();
      Millis delay = coin(c_.lost)                   ? kNever
                     : coin(c_.late / (1 - c_.lost)) ? uniform(kPushBound + 10, 3 * kPushBound)
                                                     : uniform(0, kPushBound / 20);
      if (delay == kNever || delay > kPushBound) {
        next.unanswered[s] = incarnation;
        next.failed = true;
        waits_for_bound = true;
        if (delay != kNever) ++late_pushes_;
      } else {
        answers_by = std::max(answers_by, pushed_at + delay);
      }
      if (delay == kNever) continue;
      ++next.pushes;
      const bool answered = delay <= kPushBound;
      at(pushed_at + delay, [this, trainer, server, s, d, pulled, answered, incarnation] {
        push_arrives(trainer, server, s, d, pulled, answered, incarnation);
      });
    }
    at(waits_for_bound ? pushed_at + kPushBound : answers_by, [this, trainer] { ask(trainer); });
  }

  void push_arrives(const std::string& trainer, const std::string& server, std::size_t s,
                    const DealAnswer& d, const Version& pulled, bool answered,
                    std::int64_t incarnation) {
    {
      if (answered && later_if_hung(server, [=, this] {
            push_arrives(trainer, server, s, d, pulled, false, incarnation);
          })) {
        // Read when the server runs again, long after the worker's bound: unanswered.
        Report& waiting = workers_[trainer].report;
        if (waiting.batch == d.batch_id) {
          waiting.unanswered[s] = incarnation;
          waiting.failed = true;
        }
        return;
      }
      if (later_if_hung(server, [=, this] {
            push_arrives(trainer, server, s, d, pulled, answered, incarnation);
          })) {
        return;
      }
      {
        Server& sv = servers_[server];
        Report& r = workers_[trainer].report;
        const bool mine = answered && r.batch == d.batch_id;
        if (!sv.alive) {  // lost with its process: no answer
          if (mine) {
            r.unanswered[s] = incarnation;
            r.failed = true;
          }
          return;
        }
        if (node_frozen(workers_[trainer].node) || node_frozen(processes_[server].node)) {
          ++zombie_pushes_;  // from or to a trainer on a node declared dead
        }
        if (sv.handed_over) {  // refused: answered, not taken
          if (mine) r.failed = true;
          return;
        }
        const WorkerId id = workers_[trainer].id;
        const PushOutcome o = sv.core->push(id, pulled, static_cast<std::int64_t>(d.indices.size()),
                                            std::vector<float>{1.0f}, d.batch_id);
        const bool took = o.status == PushStatus::kApplied || o.status == PushStatus::kDropped;
        if (took) {
          for (const std::int64_t i : d.indices) {
            ++sv.taken[static_cast<std::size_t>(d.epoch)][static_cast<std::size_t>(i)];
            ever_taken_[s][static_cast<std::size_t>(d.epoch)][static_cast<std::size_t>(i)] = 1;
          }
          truth_[sv.shard].replied(sv.incarnation, o.version.number);
          if (o.status == PushStatus::kApplied && o.version.number % c_.checkpoint_every == 0) {
            checkpoint(server, sv);
          }
        }
        if (!mine) return;  // the worker stopped waiting for this one
        if (took) {
          r.incarnations[s] = o.version.incarnation;
          r.versions[s] = o.version.number;
          r.staleness = std::max(r.staleness, o.staleness);
          r.applied = r.applied && o.status == PushStatus::kApplied;
        } else {
          r.failed = true;  // fenced or rejected: answered, not taken
        }
      }
    }
  }

  // ---- the head's asks

  void fence(const FenceCommand& c) {
    if (!c.round) {
      // Sent before any deal names the restarted server: it reaches the server first.
      auto it = servers_.find(c.server);
      if (it != servers_.end() && it->second.alive) it->second.core->fence(c.worker, c.through);
      return;
    }
    auto over = std::make_shared<bool>(false);  // answered, or past its bound
    const Millis arrive = coin(c_.slow_fences) ? uniform(job_->options().fence_timeout * 6 / 5,
                                                         job_->options().fence_timeout * 3)
                                               : uniform(0, 500);
    const std::uint64_t epoch = head_epoch_;
    at(now_ + arrive, [this, c, over, epoch] { fence_arrives(c, over, epoch); });
    at(now_ + job_->options().fence_timeout, [this, c, over, epoch] {
      if (*over || !reaches(epoch)) return;
      *over = true;
      ++fence_timeouts_;
      job_->fence_answered(c, std::nullopt, "timed out", now_);
    });
  }

  void fence_arrives(const FenceCommand& c, const std::shared_ptr<bool>& over,
                     std::uint64_t epoch) {
    if (later_if_hung(c.server, [=, this] { fence_arrives(c, over, epoch); })) return;
    {
      auto it = servers_.find(c.server);
      if (it == servers_.end() || !it->second.alive) return;  // lost with it
      if (coin(c_.kill_on_fence)) {
        kill(c.server);  // just before it reads the fence
        return;
      }
      Server& sv = it->second;
      FenceReply reply;
      reply.ok = true;
      reply.incarnation = sv.incarnation;
      reply.version = sv.core->pull().number;
      reply.taken = sv.core->fence(c.worker, c.through);
      at(now_ + uniform(0, 500), [this, c, over, reply, epoch] {
        if (*over || !reaches(epoch)) return;  // timed out, or the head that asked died
        *over = true;
        job_->fence_answered(c, reply, "", now_);
      });
    }
  }

  // The adapter's ping of a server (a probe timeout of 3 s): a dead process's connection is
  // closed and the ping fails at once, a hung one's times out, a live one answers.
  void probe(const ProbeCommand& c) {
    const std::uint64_t epoch = head_epoch_;
    at(now_ + uniform(0, 100), [this, c, epoch] {
      const auto it = servers_.find(c.server);
      const bool dead = it != servers_.end() && !it->second.alive;
      const bool hung = it != servers_.end() && it->second.alive && now_ < it->second.hung_until;
      const Millis answer_at = now_ + (dead ? 0 : hung ? kProbeTimeout : uniform(0, 100));
      at(answer_at, [this, c, epoch, answered = !dead && !hung] {
        if (!reaches(epoch)) return;
        job_->probe_answered(c, answered, answered ? "" : "no reply", now_);
      });
    });
  }

  void hand_over(const HandOverCommand& c) {
    auto over = std::make_shared<bool>(false);
    const std::uint64_t epoch = head_epoch_;
    at(now_ + uniform(0, 300), [this, c, over, epoch] { hand_over_arrives(c, over, epoch); });
    at(now_ + job_->options().hand_over_timeout, [this, c, over, epoch] {
      if (*over || !reaches(epoch)) return;
      *over = true;
      job_->handed_over(c, std::nullopt, "timed out", now_);
    });
  }

  void hand_over_arrives(const HandOverCommand& c, const std::shared_ptr<bool>& over,
                         std::uint64_t epoch) {
    if (later_if_hung(c.server, [=, this] { hand_over_arrives(c, over, epoch); })) return;
    {
      auto it = servers_.find(c.server);
      if (it == servers_.end() || !it->second.alive) return;
      Server& sv = it->second;
      sv.handed_over = true;  // first closed, then saved
      HandOverReply reply;
      reply.ok = true;
      reply.incarnation = sv.incarnation;
      reply.version = sv.core->pull().number;
      reply.checkpoint = checkpoint(c.server, sv);
      for (const auto& [worker, batches] : sv.core->taken()) {
        reply.taken[worker].assign(batches.begin(), batches.end());
      }
      at(now_ + uniform(210, 400), [this, c, over, reply, epoch] {  // after its report
        if (*over || !reaches(epoch)) return;
        *over = true;
        ++hand_overs_;
        job_->handed_over(c, reply, "", now_);
      });
    }
  }

  // ---- the end

  SimResult check() {
    SimResult out;
    out.violations = violations_;
    out.state = job_->state();
    out.updates = job_->updates();
    // A shard whose servers the faults killed more often than the job is set to survive
    // (max_server_restarts) fails it by design; any other end but success is a violation.
    bool by_design = false;
    for (const auto& [shard, deaths] : fault_deaths_) {
      by_design |= deaths > job_->options().max_server_restarts &&
                   job_->reason().rfind("parameter server shard " + std::to_string(shard) + " died",
                                        0) == 0;
    }
    const bool failed_by_design = job_->state() == "failed" && by_design;
    if (job_->state() != "succeeded" && !failed_by_design) {
      out.violations.push_back("the job did not succeed: " + job_->state() + " (" + job_->reason() +
                               ") at t=" + std::to_string(now_) + " ms");
    }
    const auto shards = job_->shards();
    for (std::size_t s = 0; s < shards.size(); ++s) {
      // The incarnation that served last: the current one, or, when it died after the final
      // pull and its restart has not started yet, the one the final model was pulled from.
      const auto last = served_by_.find(static_cast<std::int32_t>(s));
      const auto it = last == served_by_.end() ? servers_.end() : servers_.find(last->second);
      if (it == servers_.end()) {
        out.violations.push_back("shard " + std::to_string(s) + " never served");
        continue;
      }
      const Counts& served = it->second.taken;
      for (std::size_t e = 0; e < served.size(); ++e) {
        for (std::size_t i = 0; i < served[e].size(); ++i) {
          const int n = served[e][i];
          if (n == 1) continue;
          if (n == 0 && failed_by_design) continue;  // the epochs it did not get to
          if (n == 0 && ever_taken_[s][e][i]) {
            ++out.lost_samples;
            continue;
          }
          if (out.violations.size() < 8) {
            out.violations.push_back("epoch " + std::to_string(e) + ", shard " + std::to_string(s) +
                                     ", sample " + std::to_string(i) + " taken " +
                                     std::to_string(n) + " times");
          }
        }
      }
      out.server_restarts += shards[s].restarts;
    }
    std::int64_t really_lost = 0;
    for (const auto& [shard, ledger] : truth_) really_lost += ledger.lost();
    if (job_->updates_lost() > really_lost) {
      out.violations.push_back("the machine counts " + std::to_string(job_->updates_lost()) +
                               " updates lost, " + std::to_string(really_lost) + " were lost");
    }
    // At most what replies proved plus the pushes with no answer to incarnations since
    // restarted, except pushes no deal request reported: the worker died or stopped first, or
    // the job ended first.
    for (const auto& [name, w] : workers_) {
      if (w.alive) unreported_ += w.report.pushes;
    }
    if (really_lost > job_->updates_lost_at_most() + unreported_) {
      out.violations.push_back(std::to_string(really_lost) + " updates were lost, more than the " +
                               std::to_string(job_->updates_lost_at_most()) +
                               " the machine counts at most and the " +
                               std::to_string(unreported_) + " pushes never reported");
    }
    for (const auto& [name, sv] : servers_) out.fenced_pushes += sv.core->fenced_pushes();
    out.late_pushes = late_pushes_;
    out.abandoned_pulls = abandoned_pulls_;
    out.zombie_pushes = zombie_pushes_;
    out.fence_timeouts = fence_timeouts_;
    out.hand_overs = hand_overs_;
    out.evaluations = evaluations_;
    out.head_restarts = head_restarts_;
    out.lost_deals = lost_deals_;
    out.hung_servers = hung_servers_;
    out.hung_restarts = hung_restarts_;
    if (job_->dealer()) out.partial_pushes = job_->dealer()->counters().partial_pushes;
    return out;
  }

  SimConfig c_;
  std::mt19937_64 rng_;
  std::optional<AspJob> job_;  // the live head's machine (a restart replaces it)
  Millis now_ = 0;
  std::priority_queue<Event, std::vector<Event>, Later> events_;
  std::uint64_t seq_ = 0;
  std::vector<std::string> node_ids_;
  std::set<std::string> frozen_;
  std::map<std::string, Process> processes_;
  std::map<std::string, Server> servers_;
  std::map<std::int32_t, int> fault_deaths_;  // shard -> its servers the faults killed
  std::map<std::string, Worker> workers_;
  std::map<std::string, Snapshot> files_;
  std::map<std::int32_t, std::string> served_by_;  // per shard: the last incarnation that listened
  std::map<std::int32_t, std::pair<std::int64_t, std::int64_t>> drained_;  // incarnation, version
  std::map<std::int32_t, std::map<std::int64_t, std::int64_t>> resumed_;  // incarnation -> version
  std::vector<Counts> ever_taken_;               // [shard]: taken by some incarnation
  std::map<std::int32_t, RestartLedger> truth_;  // per shard: what incarnations really reached
  std::vector<std::string> violations_;
  bool head_up_ = true;
  std::uint64_t head_epoch_ = 0;
  std::string persisted_;                     // the last snapshot the machine asked to write
  std::vector<std::function<void()>> retry_;  // sent to the dead head, sent again
  bool crash_after_deal_ = false;
  std::int64_t head_restarts_ = 0, lost_deals_ = 0;
  std::int64_t hung_servers_ = 0, hung_restarts_ = 0;
  std::int64_t unreported_ = 0;  // pushes whose worker never reported them
  std::int64_t abandoned_pulls_ = 0;
  std::int64_t late_pushes_ = 0, zombie_pushes_ = 0, fence_timeouts_ = 0, hand_overs_ = 0,
               evaluations_ = 0;
};

}  // namespace

SimConfig random_config(std::uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 7);
  SimConfig c;
  c.seed = seed;
  c.shards = 1 + static_cast<int>(seed % 3);
  c.nodes = 3 + static_cast<int>(rng() % 3);
  c.frozen_nodes = static_cast<int>(rng() % 2);
  c.server_kills = static_cast<int>(rng() % 3);
  c.kill_on_fence = (rng() % 2) ? 0.05 : 0.0;
  c.worker_kills = static_cast<int>(rng() % 2);
  c.drains = (rng() % 3) ? 1 : 0;
  c.head_restarts = (rng() % 10 < 3) ? 1 + static_cast<int>(rng() % 2) : 0;
  c.hung_servers = (rng() % 3 == 0) ? 1 : 0;
  return c;
}

SimResult run_simulation(const SimConfig& config) { return World(config).run(); }

std::string replay_line(const SimConfig& config) {
  std::string line = "ASP_JOB_SIM_SEED=" + std::to_string(config.seed);
  if (config.mutation != AspMutation::kNone) {
    line += std::string(" ASP_JOB_SIM_MUTATION=") + to_string(config.mutation);
  }
  return line + " build/tests/asp/asp_job_simulation_test";
}

AspMutation mutation_named(const std::string& name) {
  for (const AspMutation m :
       {AspMutation::kNone, AspMutation::kNoFence, AspMutation::kSilenceIsNotTaken,
        AspMutation::kDeadSilenceIsNotTaken, AspMutation::kStopBeforeHandOver,
        AspMutation::kRestoreForgetsAsks, AspMutation::kUndeliveredStaysDealt}) {
    if (name == to_string(m)) return m;
  }
  if (name.empty()) return AspMutation::kNone;
  throw std::invalid_argument("no ASP mutation is called '" + name + "'");
}

}  // namespace omnilearn::asp::sim
