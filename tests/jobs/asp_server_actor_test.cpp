// AspServerActor over real loopback sockets, one server ActorSystem per shard (as the trainers
// run them) and a worker system asking from outside any actor (as the ASP worker does): a pull
// returns the shard's bytes and version; a push's gradient reaches the apply callback byte for
// byte and moves the version; a push with no attachment, two, or one of the wrong size is
// answered kRejected with a message naming the size wanted, and changes nothing; the
// after-apply hook's checkpoints and a resumed shard's lost updates are reported to the
// scheduler. Swept over 1 and 2 shards.

#include "jobs/asp_server_actor.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "runtime/actor_system.hpp"
#include "runtime/system_messages.hpp"
#include "tests/support/actor_probe.hpp"

namespace omnilearn::actors {
namespace {

using namespace std::chrono_literals;
using runtime::ActorAddress;

constexpr std::int64_t kParameters = 1001;  // odd: two shards differ in size by one
constexpr double kLr = 0.5;

// What one shard's apply callback saw, read by the test thread once the push's reply came.
struct Applied {
  std::mutex mutex;
  std::vector<std::vector<float>> gradients;  // guarded by mutex
  std::vector<std::int64_t> from_versions;    // guarded by mutex
};

struct Shard {
  asp::ShardSlice slice;
  std::shared_ptr<std::vector<float>> parameters;
  std::shared_ptr<Applied> applied = std::make_shared<Applied>();
  std::shared_ptr<std::atomic<std::int64_t>> last_message =
      std::make_shared<std::atomic<std::int64_t>>(0);
  std::unique_ptr<runtime::ActorSystem> system;
  std::string endpoint;
};

// The flat vector's initial value at index i: distinct per index, so a wrong slice shows.
float initial(std::int64_t i) { return 0.25f * static_cast<float>(i) - 3.0f; }

class AspServer : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    scheduler = testing::spawn_probe(head, "scheduler");
    head_endpoint = head.listen("tcp://127.0.0.1:0");
    standby_scheduler = testing::spawn_probe(standby, "scheduler");
    standby_endpoint = standby.listen("tcp://127.0.0.1:0");
    follow(head_endpoint);
  }

  // The head the servers' trainer follows from now on (their reports go there).
  void follow(const std::string& endpoint) {
    std::lock_guard lock(followed_mutex);
    followed = endpoint;
  }

  // Starts shard s of `shards` (SGD at kLr in `apply`); `after` is its after-apply hook.
  void start(int shards, AspServerActor::AfterApplyFn after = {},
             std::optional<asp::ServerCheckpoint> resume = std::nullopt,
             AspServerActor::SaveFn save = {}) {
    const asp::ShardLayout layout(kParameters, shards);
    for (int s = 0; s < shards; ++s) {
      Shard shard;
      shard.slice = layout.slice(s);
      shard.parameters = std::make_shared<std::vector<float>>();
      for (std::int64_t i = 0; i < shard.slice.size; ++i) {
        shard.parameters->push_back(initial(shard.slice.offset + i));
      }
      AspServerConfig config;
      config.job = "job-1";
      config.trainer = "job-1-n0-s" + std::to_string(s);
      config.shard = s;
      config.slice = shard.slice;
      config.staleness.lr_scaling = asp::LrScaling::kNone;
      config.resume = resume;
      config.scheduler = [this] {
        std::lock_guard lock(followed_mutex);
        return ActorAddress{followed, "scheduler"};
      };
      config.last_message = shard.last_message;
      if (s == 0 && buffers) {
        config.buffers = std::span<float>(*buffers);
        config.buffer_counters = buffer_counters;
      }
      if (bound > 0) {
        config.staleness.mode = asp::StalenessMode::kBound;
        config.staleness.max_staleness = bound;
      }
      auto apply = [params = shard.parameters, seen = shard.applied](
                       std::int64_t from_version, double scale, std::span<const float> g) {
        {
          std::lock_guard lock(seen->mutex);
          seen->gradients.emplace_back(g.begin(), g.end());
          seen->from_versions.push_back(from_version);
        }
        for (std::size_t i = 0; i < g.size(); ++i) {
          (*params)[i] -= static_cast<float>(kLr * scale) * g[i];
        }
      };
      shard.system = std::make_unique<runtime::ActorSystem>();
      shard.endpoint = shard.system->listen("tcp://127.0.0.1:0");
      auto actor = std::make_unique<AspServerActor>(config, std::span<float>(*shard.parameters),
                                                    apply, after, save);
      const asp::Version v = actor->version();
      EXPECT_EQ(v.incarnation, resume ? resume->incarnation + 1 : 0);
      EXPECT_EQ(v.number, resume ? resume->version : 0);
      shard.system->spawn(kAspServerActor, std::move(actor));
      servers.push_back(std::move(shard));
    }
  }

  runtime::Envelope to_server(int s, runtime::MessageKind kind, std::string payload) {
    return worker.make_envelope(ActorAddress{servers[s].endpoint, kAspServerActor}, kind,
                                std::move(payload), {});
  }

  struct Pulled {
    AspPullReply reply;
    std::vector<float> values;
  };
  Pulled pull(int s) {
    auto result = worker
                      .ask_envelope(to_server(s, runtime::kind_of<AspPull>(),
                                              runtime::pack_payload(AspPull{"job-1", s})),
                                    5s)
                      .get();
    Pulled out;
    auto r = result.as<AspPullReply>();
    EXPECT_TRUE(r) << "shard " << s << ": " << result.error;
    if (!r) return out;
    out.reply = *r;
    EXPECT_EQ(result.reply.attachments.size(), 1u);
    if (result.reply.attachments.size() != 1) return out;
    const auto& frame = result.reply.attachments[0];
    EXPECT_EQ(frame.size() % sizeof(float), 0u);
    out.values.resize(frame.size() / sizeof(float));
    std::memcpy(out.values.data(), frame.data(), out.values.size() * sizeof(float));
    return out;
  }

  AspPushReply push(int s, const asp::Version& pulled, std::vector<runtime::Bytes> attachments,
                    int addressed_shard = -1, const std::string& job = "job-1") {
    AspPush body{job,           addressed_shard >= 0 ? addressed_shard : s,
                 /*worker=*/7,  pulled.incarnation,
                 pulled.number,
                 /*batch=*/32,  /*global_batch=*/32,
                 /*workers=*/1};
    auto envelope = to_server(s, runtime::kind_of<AspPush>(), runtime::pack_payload(body));
    envelope.attachments = std::move(attachments);
    auto result = worker.ask_envelope(std::move(envelope), 5s).get();
    auto r = result.as<AspPushReply>();
    EXPECT_TRUE(r) << "shard " << s << ": " << result.error;
    return r.value_or(AspPushReply{});
  }

  std::optional<AspHandOverReply> hand_over(int s) {
    auto result = worker.ask_envelope(to_server(s, runtime::kind_of<AspHandOver>(),
                                                runtime::pack_payload(AspHandOver{"job-1", s})),
                                      5s)
                      .get();
    auto r = result.as<AspHandOverReply>();
    EXPECT_TRUE(r) << "shard " << s << ": " << result.error;
    return r;
  }

  // The gradient for shard s as the worker sends it: a view into one shared buffer.
  runtime::Bytes gradient_view(int s) {
    const auto& slice = servers[s].slice;
    return runtime::Bytes::view(gradient,
                                reinterpret_cast<const char*>(gradient->data() + slice.offset),
                                static_cast<std::size_t>(slice.size) * sizeof(float));
  }

  std::vector<float> expected_initial(int s) const {
    std::vector<float> v;
    for (std::int64_t i = 0; i < servers[s].slice.size; ++i) {
      v.push_back(initial(servers[s].slice.offset + i));
    }
    return v;
  }

  // The after-apply hooks' calls (on the servers' threads; outlive the servers).
  std::mutex hook_mutex;
  std::vector<std::int64_t> hook_versions;  // guarded by hook_mutex
  // Set before start(): shard 0 keeps these as the model's buffers (counters flagged), and
  // pushes staler than `bound` (> 0) are dropped. Before `servers`: shard 0's actor reads the
  // buffers on its I/O thread until its system stops, so they must outlive it (ThreadSanitizer
  // caught them freed first).
  std::shared_ptr<std::vector<float>> buffers;
  std::vector<bool> buffer_counters;
  std::int64_t bound = 0;
  runtime::ActorSystem head;                // hosts the scheduler probe that takes AspServerReports
  testing::Probe scheduler;
  std::string head_endpoint;
  runtime::ActorSystem standby;  // a head that took over: the scheduler probe there
  testing::Probe standby_scheduler;
  std::string standby_endpoint;
  std::mutex followed_mutex;
  std::string followed;        // guarded by followed_mutex; read by the servers' report callbacks
  std::vector<Shard> servers;  // after head: stopped (their reports' target) first
  runtime::ActorSystem worker;
  std::shared_ptr<std::vector<float>> gradient = [] {
    auto g = std::make_shared<std::vector<float>>();
    for (std::int64_t i = 0; i < kParameters; ++i) g->push_back(0.001f * static_cast<float>(i));
    return g;
  }();
};

TEST_P(AspServer, PullReturnsTheShardsBytesAndVersion) {
  const int shards = GetParam();
  start(shards);
  std::int64_t covered = 0;
  for (int s = 0; s < shards; ++s) {
    const Pulled p = pull(s);
    EXPECT_TRUE(p.reply.ok) << p.reply.error;
    EXPECT_EQ(p.reply.shard, s);
    EXPECT_EQ(p.reply.incarnation, 0);
    EXPECT_EQ(p.reply.version, 0);
    EXPECT_EQ(p.reply.offset, covered);
    EXPECT_EQ(p.reply.size, servers[s].slice.size);
    EXPECT_EQ(p.values, expected_initial(s)) << "shard " << s;
    EXPECT_GT(servers[s].last_message->load(), 0) << "the idle clock saw the pull";
    covered += p.reply.size;
  }
  EXPECT_EQ(covered, kParameters);
}

TEST_P(AspServer, PushAppliesTheGradientAndMovesTheVersion) {
  const int shards = GetParam();
  start(shards, [this](const asp::ServerCore& core) {
    std::lock_guard lock(hook_mutex);
    hook_versions.push_back(core.pull().number);
    return std::string();  // no checkpoint: nothing to report
  });
  for (int round = 1; round <= 2; ++round) {
    for (int s = 0; s < shards; ++s) {
      const Pulled before = pull(s);
      const AspPushReply r =
          push(s, asp::Version{before.reply.incarnation, before.reply.version}, {gradient_view(s)});
      EXPECT_EQ(r.status, AspPushReply::kApplied) << r.error;
      EXPECT_EQ(r.version, round);
      EXPECT_EQ(r.staleness, 0);
      EXPECT_DOUBLE_EQ(r.scale, 1.0);

      const auto& slice = servers[s].slice;
      const std::vector<float> sent(gradient->begin() + slice.offset,
                                    gradient->begin() + slice.offset + slice.size);
      {
        std::lock_guard lock(servers[s].applied->mutex);
        ASSERT_EQ(servers[s].applied->gradients.size(), static_cast<std::size_t>(round));
        EXPECT_EQ(servers[s].applied->gradients.back(), sent) << "apply sees the bytes sent";
        EXPECT_EQ(servers[s].applied->from_versions.back(), round - 1);
      }
      const Pulled after = pull(s);
      EXPECT_EQ(after.reply.version, round);
      ASSERT_EQ(after.values.size(), before.values.size());
      for (std::size_t i = 0; i < sent.size(); ++i) {
        EXPECT_FLOAT_EQ(after.values[i], before.values[i] - static_cast<float>(kLr) * sent[i])
            << "shard " << s << " index " << i;
      }
    }
  }
  // Each round ended with a pull, which the actor took after the last push's hook had run.
  std::lock_guard lock(hook_mutex);
  EXPECT_EQ(hook_versions.size(), static_cast<std::size_t>(2 * shards))
      << "the hook runs once per applied push";
  EXPECT_FALSE(scheduler.queue->pop_as<AspServerReport>(200ms))
      << "no checkpoint and no lost update: no report";
}

TEST_P(AspServer, MalformedPushGetsAClearErrorAndChangesNothing) {
  const int shards = GetParam();
  start(shards, [this](const asp::ServerCore& core) {
    std::lock_guard lock(hook_mutex);
    hook_versions.push_back(core.pull().number);
    return std::string();
  });
  for (int s = 0; s < shards; ++s) {
    const auto& slice = servers[s].slice;
    const std::string want = std::to_string(slice.size * 4) + " bytes";
    const asp::Version v0{0, 0};
    std::vector<std::vector<runtime::Bytes>> bad;
    bad.push_back({});  // no attachment
    bad.push_back({runtime::Bytes::view(gradient, reinterpret_cast<const char*>(gradient->data()),
                                        static_cast<std::size_t>(slice.size - 1) * 4)});
    bad.push_back({runtime::Bytes(std::string(static_cast<std::size_t>(slice.size) * 4 + 4, 'x'))});
    bad.push_back({gradient_view(s), gradient_view(s)});  // the right size, twice
    for (std::size_t k = 0; k < bad.size(); ++k) {
      const AspPushReply r = push(s, v0, bad[k]);
      EXPECT_EQ(r.status, AspPushReply::kRejected) << "case " << k;
      EXPECT_NE(r.error.find("needs one attachment of " + want), std::string::npos)
          << "case " << k << ": " << r.error;
      EXPECT_NE(r.error.find("nothing applied"), std::string::npos) << r.error;
    }
    const Pulled p = pull(s);
    EXPECT_EQ(p.reply.version, 0) << "the version stays";
    EXPECT_EQ(p.values, expected_initial(s)) << "the parameters stay";
    std::lock_guard lock(servers[s].applied->mutex);
    EXPECT_TRUE(servers[s].applied->gradients.empty()) << "apply was never called";
  }
  {
    std::lock_guard lock(hook_mutex);
    EXPECT_TRUE(hook_versions.empty()) << "the hook runs for applied pushes only";
  }

  // The right bytes sent to the wrong shard (a stale server list) or for another job.
  for (int s = 0; s < shards; ++s) {
    const AspPushReply wrong_shard = push(s, asp::Version{0, 0}, {gradient_view(s)}, s + 1);
    EXPECT_EQ(wrong_shard.status, AspPushReply::kRejected);
    EXPECT_NE(wrong_shard.error.find("reached shard " + std::to_string(s)), std::string::npos)
        << wrong_shard.error;
    const AspPushReply wrong_job = push(s, asp::Version{0, 0}, {gradient_view(s)}, s, "job-2");
    EXPECT_EQ(wrong_job.status, AspPushReply::kRejected) << wrong_job.error;
    auto result = worker
                      .ask_envelope(to_server(s, runtime::kind_of<AspPull>(),
                                              runtime::pack_payload(AspPull{"job-1", s + 1})),
                                    5s)
                      .get();
    auto r = result.as<AspPullReply>();
    ASSERT_TRUE(r) << result.error;
    EXPECT_FALSE(r->ok);
    EXPECT_NE(r->error.find("reached shard " + std::to_string(s)), std::string::npos) << r->error;
    EXPECT_TRUE(result.reply.attachments.empty());
    const Pulled p = pull(s);
    EXPECT_EQ(p.reply.version, 0) << "the version stays";
    std::lock_guard lock(servers[s].applied->mutex);
    EXPECT_TRUE(servers[s].applied->gradients.empty()) << "apply was never called";
  }

  // Not a push at all: an ask with another message is answered, not left to time out.
  auto odd =
      worker.ask(ActorAddress{servers[0].endpoint, kAspServerActor}, runtime::Ping{1}, 5s).get();
  auto error = odd.as<runtime::ErrorReply>();
  ASSERT_TRUE(error) << odd.error;
  EXPECT_EQ(error->code, "bad-request");
}

TEST_P(AspServer, CheckpointsAndLostUpdatesAreReported) {
  const int shards = GetParam();
  // A shard resumed from a checkpoint at version 5 of incarnation 0; the hook "checkpoints"
  // every third version.
  asp::ServerCheckpoint from;
  from.version = 5;
  from.pushes = from.applied = 5;
  start(
      shards,
      [](const asp::ServerCore& core) {
        const auto v = core.pull().number;
        return v % 3 == 0 ? "ckpt-" + std::to_string(v) : std::string();
      },
      from);
  for (int s = 0; s < shards; ++s) {
    // A push computed on version 8 of the dead incarnation: 3 updates were lost.
    AspPushReply r = push(s, asp::Version{0, 8}, {gradient_view(s)});
    EXPECT_EQ(r.status, AspPushReply::kApplied) << r.error;
    EXPECT_EQ(r.incarnation, 1);
    EXPECT_EQ(r.version, 6);
    auto report = scheduler.queue->pop_as<AspServerReport>(5s);
    ASSERT_TRUE(report) << "shard " << s << ": a checkpoint at 6 and 3 updates lost";
    EXPECT_EQ(report->shard, s);
    EXPECT_EQ(report->job_id, "job-1");
    EXPECT_EQ(report->incarnation, 1);
    EXPECT_EQ(report->version, 6);
    EXPECT_EQ(report->updates_lost, 3);
    EXPECT_EQ(report->applied, 6);
    EXPECT_EQ(report->checkpoint, "ckpt-6");

    r = push(s, asp::Version{1, 6}, {gradient_view(s)});  // version 7: no checkpoint
    EXPECT_EQ(r.version, 7);
    EXPECT_FALSE(scheduler.queue->pop_as<AspServerReport>(200ms)) << "nothing new to report";

    r = push(s, asp::Version{0, 9}, {gradient_view(s)});  // 4 lost now: reported, no checkpoint
    EXPECT_EQ(r.version, 8);
    report = scheduler.queue->pop_as<AspServerReport>(5s);
    ASSERT_TRUE(report);
    EXPECT_EQ(report->version, 8);
    EXPECT_EQ(report->updates_lost, 4);
    EXPECT_EQ(report->checkpoint, "") << "a report of lost updates alone names no checkpoint";
  }
}

// The trainer follows the active head: each report goes to the scheduler on the head followed
// at that moment (a standby that took over), not to the one the server started under.
TEST_P(AspServer, ReportsGoToTheHeadFollowedNow) {
  const int shards = GetParam();
  start(shards,
        [](const asp::ServerCore& core) { return "ckpt-" + std::to_string(core.pull().number); });
  for (int s = 0; s < shards; ++s) {
    follow(head_endpoint);
    ASSERT_EQ(push(s, asp::Version{0, 0}, {gradient_view(s)}).status, AspPushReply::kApplied);
    auto report = scheduler.queue->pop_as<AspServerReport>(5s);
    ASSERT_TRUE(report) << "shard " << s << ": the first head hears the checkpoint at 1";
    EXPECT_EQ(report->checkpoint, "ckpt-1");

    follow(standby_endpoint);
    ASSERT_EQ(push(s, asp::Version{0, 1}, {gradient_view(s)}).status, AspPushReply::kApplied);
    report = standby_scheduler.queue->pop_as<AspServerReport>(5s);
    ASSERT_TRUE(report) << "shard " << s << ": the head that took over hears the checkpoint at 2";
    EXPECT_EQ(report->shard, s);
    EXPECT_EQ(report->version, 2);
    EXPECT_EQ(report->checkpoint, "ckpt-2");
    EXPECT_FALSE(scheduler.queue->pop_as<AspServerReport>(200ms))
        << "the head left behind still got a report";
  }
}

// A drained node's server: AspHandOver closes the shard first and checkpoints at its last
// version (reported, bytes and all, before the answer); every later push is refused and
// changes nothing, while pulls still serve the final parameters.
TEST_P(AspServer, HandOverCheckpointsTheLastVersionAndRefusesEveryLaterPush) {
  const int shards = GetParam();
  start(shards, {}, std::nullopt, [](const asp::ServerCore& core) {
    return "hand-over-" + std::to_string(core.pull().number);
  });
  for (int s = 0; s < shards; ++s) {
    ASSERT_EQ(push(s, asp::Version{0, 0}, {gradient_view(s)}).status, AspPushReply::kApplied);
    ASSERT_EQ(push(s, asp::Version{0, 1}, {gradient_view(s)}).status, AspPushReply::kApplied);
    const auto before = pull(s);
    const auto r = hand_over(s);
    ASSERT_TRUE(r);
    EXPECT_TRUE(r->ok) << r->error;
    EXPECT_EQ(r->shard, s);
    EXPECT_EQ(r->version, 2);
    EXPECT_EQ(r->checkpoint, "hand-over-2");
    auto report = scheduler.queue->pop_as<AspServerReport>(5s);
    ASSERT_TRUE(report) << "the hand-over's checkpoint is reported";
    EXPECT_EQ(report->checkpoint, "hand-over-2");
    EXPECT_EQ(report->version, 2);

    const AspPushReply refused = push(s, asp::Version{0, 2}, {gradient_view(s)});
    EXPECT_EQ(refused.status, AspPushReply::kRejected);
    EXPECT_NE(refused.error.find("moving to another node"), std::string::npos) << refused.error;
    const auto after = pull(s);
    EXPECT_EQ(after.reply.version, 2);
    EXPECT_EQ(after.values, before.values) << "a refused push changed the shard";
  }
}

TEST_P(AspServer, HandOverWithoutASaveSaysSoAndStillCloses) {
  const int shards = GetParam();
  start(shards);
  for (int s = 0; s < shards; ++s) {
    const auto r = hand_over(s);
    ASSERT_TRUE(r);
    EXPECT_FALSE(r->ok);
    EXPECT_NE(r->error.find("cannot write a checkpoint"), std::string::npos) << r->error;
    EXPECT_EQ(push(s, asp::Version{0, 0}, {gradient_view(s)}).status, AspPushReply::kRejected);
  }
}

TEST(AspServerConstruction, RefusesStorageOfAnotherSize) {
  std::vector<float> storage(10);
  AspServerConfig config;
  config.slice = asp::ShardSlice{0, 11};
  auto apply = [](std::int64_t, double, std::span<const float>) {};
  EXPECT_THROW(AspServerActor(config, std::span<float>(storage), apply), std::invalid_argument);
  config.slice.size = 10;
  EXPECT_THROW(AspServerActor(config, std::span<float>(storage), {}), std::invalid_argument);
  EXPECT_NO_THROW(AspServerActor(config, std::span<float>(storage), apply));
}

// A model with buffers (BatchNorm statistics): shard 0 keeps them, sends them with every pull
// and adds what an applied push's forward moved them, a statistic's damped by 1 / (1 + s), a
// counter's whole; a push dropped, fenced or refused moves nothing.
TEST_P(AspServer, ShardZeroKeepsTheBuffersAndAddsWhatAnAppliedPushMovedThem) {
  const int shards = GetParam();
  buffers = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4});
  buffer_counters = {false, false, false, true};
  bound = 1;
  start(shards);
  auto raw_pull = [&](int s) {
    return worker
        .ask_envelope(to_server(s, runtime::kind_of<AspPull>(),
                                runtime::pack_payload(AspPull{"job-1", s})),
                      5s)
        .get();
  };
  auto pulled_buffers = [&] {
    const auto result = raw_pull(0);
    const auto r = result.as<AspPullReply>();
    EXPECT_TRUE(r && r->ok) << result.error;
    EXPECT_EQ(r ? r->buffers : -1, 4);
    EXPECT_EQ(result.reply.attachments.size(), 2u);
    std::vector<float> out(4, -1);
    if (result.reply.attachments.size() == 2 && result.reply.attachments[1].size() == 16) {
      std::memcpy(out.data(), result.reply.attachments[1].data(), 16);
    }
    return out;
  };
  EXPECT_EQ(pulled_buffers(), (std::vector<float>{1, 2, 3, 4}));
  for (int s = 1; s < shards; ++s) {
    const auto result = raw_pull(s);
    const auto r = result.as<AspPullReply>();
    ASSERT_TRUE(r && r->ok);
    EXPECT_EQ(r->buffers, 0) << "only shard 0 keeps them";
    EXPECT_EQ(result.reply.attachments.size(), 1u);
  }
  auto moved = [](std::vector<float> v) {
    auto owned = std::make_shared<std::vector<float>>(std::move(v));
    return runtime::Bytes::view(owned, reinterpret_cast<const char*>(owned->data()),
                                owned->size() * sizeof(float));
  };
  auto push_batch = [&](std::int64_t version, std::uint64_t batch_id,
                        std::vector<runtime::Bytes> attachments) {
    AspPush body{"job-1", 0, /*worker=*/7, 0, version, /*batch=*/32, 32, 1, batch_id};
    auto envelope = to_server(0, runtime::kind_of<AspPush>(), runtime::pack_payload(body));
    envelope.attachments = std::move(attachments);
    const auto result = worker.ask_envelope(std::move(envelope), 5s).get();
    const auto r = result.as<AspPushReply>();
    EXPECT_TRUE(r) << result.error;
    return r.value_or(AspPushReply{});
  };

  AspPushReply r = push_batch(0, 1, {gradient_view(0), moved({0.5f, -1, 0, 2})});
  EXPECT_EQ(r.status, AspPushReply::kApplied) << r.error;
  EXPECT_EQ(pulled_buffers(), (std::vector<float>{1.5f, 1, 3, 6}));
  // Pulled at version 0, applied at 1 (staleness 1): a statistic moves by half its difference,
  // the counter by all of it.
  r = push_batch(0, 2, {gradient_view(0), moved({1, 1, 1, 1})});
  EXPECT_EQ(r.status, AspPushReply::kApplied) << r.error;
  EXPECT_EQ(r.staleness, 1);
  EXPECT_EQ(pulled_buffers(), (std::vector<float>{2, 1.5f, 3.5f, 7}));
  // Staleness 2 is past the bound: dropped, nothing moves.
  r = push_batch(0, 3, {gradient_view(0), moved({1, 1, 1, 1})});
  EXPECT_EQ(r.status, AspPushReply::kDropped) << r.error;
  EXPECT_EQ(pulled_buffers(), (std::vector<float>{2, 1.5f, 3.5f, 7}));
  // The gradient alone (a worker that sends no difference) leaves them.
  r = push_batch(2, 4, {gradient_view(0)});
  EXPECT_EQ(r.status, AspPushReply::kApplied) << r.error;
  EXPECT_EQ(pulled_buffers(), (std::vector<float>{2, 1.5f, 3.5f, 7}));

  // A batch fenced off: refused, nothing moves.
  const auto fenced = worker
                          .ask_envelope(to_server(0, runtime::kind_of<AspFence>(),
                                                  runtime::pack_payload(AspFence{"job-1", 0, 7, 9})),
                                        5s)
                          .get();
  ASSERT_TRUE(fenced.as<AspFenceReply>() && fenced.as<AspFenceReply>()->ok) << fenced.error;
  r = push_batch(3, 9, {gradient_view(0), moved({1, 1, 1, 1})});
  EXPECT_EQ(r.status, AspPushReply::kFenced) << r.error;
  // Refused pushes: a difference of the wrong size, a version never issued.
  r = push_batch(3, 10, {gradient_view(0), moved({1, 1, 1})});
  EXPECT_EQ(r.status, AspPushReply::kRejected);
  EXPECT_NE(r.error.find("at most one of 16 bytes"), std::string::npos) << r.error;
  r = push_batch(99, 11, {gradient_view(0), moved({1, 1, 1, 1})});
  EXPECT_EQ(r.status, AspPushReply::kRejected);
  EXPECT_EQ(pulled_buffers(), (std::vector<float>{2, 1.5f, 3.5f, 7}));
  EXPECT_EQ(*buffers, (std::vector<float>{2, 1.5f, 3.5f, 7})) << "written in the caller's storage";
  // A shard that keeps no buffers takes no difference.
  for (int s = 1; s < shards; ++s) {
    r = push(s, {0, 0}, {gradient_view(s), moved({1, 1, 1, 1})});
    EXPECT_EQ(r.status, AspPushReply::kRejected) << "shard " << s;
  }
}

// Flags that do not match the buffers are a programming error, caught at construction.
TEST(AspServerConfig, BufferCounterFlagsMustMatchTheBuffers) {
  std::vector<float> storage(4), buffers(3);
  AspServerConfig config;
  config.slice = asp::ShardSlice{0, 4};
  config.buffers = std::span<float>(buffers);
  config.buffer_counters = {false, true};
  auto apply = [](std::int64_t, double, std::span<const float>) {};
  EXPECT_THROW(AspServerActor(config, std::span<float>(storage), apply), std::invalid_argument);
  config.buffer_counters = {false, false, true};
  EXPECT_NO_THROW(AspServerActor(config, std::span<float>(storage), apply));
}

INSTANTIATE_TEST_SUITE_P(Shards, AspServer, ::testing::Values(1, 2),
                         [](const auto& info) { return std::to_string(info.param) + "shards"; });

}  // namespace
}  // namespace omnilearn::actors
