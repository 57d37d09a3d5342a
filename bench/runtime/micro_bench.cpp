// In-process costs per message (Google Benchmark): the pieces a cross-process message pays for,
// to see where time goes when runtime_bench misses a target.

#include <benchmark/benchmark.h>

#include <future>

#include "wire/membership_protocol.hpp"
#include "runtime/actor_system.hpp"
#include "runtime/codec.hpp"
#include "runtime/mailbox.hpp"
#include "runtime/system_messages.hpp"

namespace {

using namespace omnilearn;

runtime::Envelope small_envelope() {
  runtime::Envelope e;
  e.kind = runtime::MessageKind::kPing;
  e.to = runtime::ActorAddress{"tcp://127.0.0.1:7070", "echo"};
  e.from = runtime::ActorAddress{"s-0123456789abcdef", "pinger"};
  e.payload = runtime::pack_payload(runtime::Ping{42});
  return e;
}

void BM_EncodeEnvelope(benchmark::State& state) {
  auto e = small_envelope();
  for (auto _ : state) benchmark::DoNotOptimize(runtime::encode_envelope(e));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EncodeEnvelope);

void BM_DecodeEnvelope(benchmark::State& state) {
  auto frames = runtime::encode_envelope(small_envelope());
  std::vector<std::string_view> views(frames.begin(), frames.end());
  for (auto _ : state) benchmark::DoNotOptimize(runtime::decode_envelope(views));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DecodeEnvelope);

void BM_PackUnpackPing(benchmark::State& state) {
  for (auto _ : state) {
    auto bytes = runtime::pack_payload(runtime::Ping{42});
    benchmark::DoNotOptimize(runtime::unpack_payload<runtime::Ping>(bytes));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PackUnpackPing);

void BM_UnpackHeartbeat(benchmark::State& state) {
  actors::Heartbeat beat;
  beat.node_id = "n-01234567";
  beat.incarnation = 1;
  beat.actors.push_back(actors::ActorCounters{"trainer-0", "job-1", 0, 100, 64, 512.0, 0.1, 0.1});
  auto bytes = runtime::pack_payload(beat);
  for (auto _ : state) benchmark::DoNotOptimize(runtime::unpack_payload<actors::Heartbeat>(bytes));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_UnpackHeartbeat);

void BM_MailboxPushPop(benchmark::State& state) {
  runtime::Mailbox mailbox;  // claimed by its creator, as an actor's is while it runs
  auto e = small_envelope();
  runtime::Letter letter;
  for (auto _ : state) {
    mailbox.push(runtime::Letter{e, {}, {}});
    benchmark::DoNotOptimize(mailbox.take(letter));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MailboxPushPop);

// Local tells to an actor on the actor threads: the in-process path with no socket.
class CountingActor : public runtime::Actor {
 public:
  explicit CountingActor(std::promise<void>* done, std::int64_t expect)
      : done_(done), expect_(expect) {}
  void on_message(const runtime::Envelope&) override {
    if (++count_ == expect_) done_->set_value();
  }

 private:
  std::promise<void>* done_;
  std::int64_t expect_;
  std::int64_t count_ = 0;
};

void BM_LocalTellThroughput(benchmark::State& state) {
  for (auto _ : state) {
    state.PauseTiming();
    runtime::ActorSystem system;
    std::promise<void> done;
    auto to = system.spawn<CountingActor>("count", &done, state.range(0));
    state.ResumeTiming();
    for (std::int64_t i = 0; i < state.range(0); ++i) system.tell(to, runtime::Ping{1});
    done.get_future().wait();
    state.PauseTiming();
    system.shutdown();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_LocalTellThroughput)->Arg(100000)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
