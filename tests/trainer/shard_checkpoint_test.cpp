// What a restarted ASP server shard resumes from (trainer/shard_checkpoint): its own
// node's file only at the version the scheduler recorded for it (a cut-off incarnation that
// still runs may have rewritten it), else the head's copy, else the initial parameters; a file
// refused changes nothing.
#include "trainer/shard_checkpoint.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>

namespace omnilearn::actors {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kParameters = 1000;

training::OptimizerSpec sgd_momentum() {
  training::OptimizerSpec spec;
  spec.kind = "sgd";
  spec.lr = 0.1;
  spec.momentum = 0.9;
  return spec;
}

std::vector<float> initial_parameters() {
  std::vector<float> flat(kParameters);
  std::iota(flat.begin(), flat.end(), 0.0F);
  return flat;
}

std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class ShardCheckpoints : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "ol_shard_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Shard 1 of 3, as incarnation `incarnation`'s server builds it, writing its own file.
  std::unique_ptr<ShardState> shard(std::int64_t incarnation) const {
    auto s = make_shard_state(layout_, 1, initial_parameters(), sgd_momentum());
    s->checkpoint_path = (fs::path(dir_) / ("server-shard1-i" + std::to_string(incarnation) +
                                            ".pt"))
                             .string();
    return s;
  }

  // `updates` optimizer steps on gradients that differ per step, as pushes would.
  static void train(ShardState& s, int updates, int first) {
    c10::NoGradGuard no_grad;
    for (int u = first; u < first + updates; ++u) {
      s.params.mutable_grad().copy_(at::full_like(s.params, 0.01 * (u % 7 + 1)));
      s.optimizer->step(s.optimizer_spec.lr, u + 1);
    }
  }

  static asp::ServerCheckpoint core_at(std::int64_t version) {
    asp::ServerCheckpoint c;
    c.incarnation = 0;
    c.version = version;
    c.pushes = c.applied = version;
    c.updates[asp::WorkerId{7}] = version;
    c.taken[asp::WorkerId{7}].push_back(asp::TakenBatch{static_cast<std::uint64_t>(version), true});
    return c;
  }

  std::string dir_;
  asp::ShardLayout layout_{kParameters, 3};
};

void expect_same_state(const ShardState& a, const ShardState& b) {
  EXPECT_TRUE(at::equal(a.params, b.params));
  ASSERT_EQ(a.optimizer->state().size(), b.optimizer->state().size());
  for (std::size_t i = 0; i < a.optimizer->state().size(); ++i) {
    EXPECT_TRUE(at::equal(a.optimizer->state()[i].second, b.optimizer->state()[i].second))
        << a.optimizer->state()[i].first;
  }
}

TEST_F(ShardCheckpoints, ALocalFileAtTheRecordedVersionResumesExactly) {
  auto dead = shard(0);
  train(*dead, 40, 0);
  save_shard(*dead, core_at(40));

  auto restarted = shard(1);
  ResumeSources sources;
  sources.local = read_file(dead->checkpoint_path);
  sources.local_path = dead->checkpoint_path;
  sources.local_version = 40;
  const ResumedShard resumed = resume_shard(*restarted, sources);
  EXPECT_EQ(resumed.resumed_from, "local");
  EXPECT_TRUE(resumed.refused.empty());
  EXPECT_EQ(resumed.from, core_at(40));  // the batches it took included: fences answer for them
  expect_same_state(*restarted, *dead);
  EXPECT_FALSE(at::equal(restarted->params, shard(2)->params));  // not the initial parameters
}

TEST_F(ShardCheckpoints, ALocalFileRewrittenByACutOffIncarnationIsRefusedForTheHeadsCopy) {
  // Incarnation 0 checkpoints at version 40 and reports it: the head keeps a copy and records
  // version 40 for the file.
  auto cut_off = shard(0);
  train(*cut_off, 40, 0);
  save_shard(*cut_off, core_at(40));
  const std::vector<char> head_copy = read_file(cut_off->checkpoint_path);
  auto at_40 = shard(9);
  train(*at_40, 40, 0);
  // Declared gone (its agent froze) yet still serving: it applies 20 more pushes no fence
  // answered for and rewrites its file (a shared disk, or the restart lands on its node).
  train(*cut_off, 20, 40);
  save_shard(*cut_off, core_at(60));

  auto restarted = shard(1);
  const auto initial = restarted->params.clone();
  ResumeSources sources;
  sources.local = read_file(cut_off->checkpoint_path);
  sources.local_path = cut_off->checkpoint_path;
  sources.local_version = 40;
  sources.head_copy = head_copy;
  sources.head_version = 40;
  const ResumedShard resumed = resume_shard(*restarted, sources);
  EXPECT_EQ(resumed.resumed_from, "head");
  EXPECT_EQ(resumed.from, core_at(40));
  expect_same_state(*restarted, *at_40);
  ASSERT_EQ(resumed.refused.size(), 1U);
  EXPECT_NE(resumed.refused[0].find("holds version 60, the scheduler recorded version 40"),
            std::string::npos)
      << resumed.refused[0];
  EXPECT_NE(resumed.refused[0].find(cut_off->checkpoint_path), std::string::npos);

  // Without the head's copy the shard starts from its initial parameters, not the rewritten
  // state.
  auto alone = shard(1);
  sources.head_copy.reset();
  const ResumedShard fallback = resume_shard(*alone, sources);
  EXPECT_EQ(fallback.resumed_from, "initial");
  EXPECT_EQ(fallback.from, asp::ServerCheckpoint{});
  EXPECT_TRUE(at::equal(alone->params, initial));
  EXPECT_EQ(fallback.refused.size(), 1U);
}

TEST_F(ShardCheckpoints, TheNewerOfTheTwoSourcesWins) {
  auto dead = shard(0);
  train(*dead, 40, 0);
  save_shard(*dead, core_at(40));
  const std::vector<char> at_40 = read_file(dead->checkpoint_path);
  train(*dead, 20, 40);
  save_shard(*dead, core_at(60));
  const std::vector<char> at_60 = read_file(dead->checkpoint_path);

  // The head's copy newer than the local file (the shard ran elsewhere since).
  auto a = shard(1);
  ResumeSources sources;
  sources.local = at_40;
  sources.local_path = "old.pt";
  sources.local_version = 40;
  sources.head_copy = at_60;
  sources.head_version = 60;
  ResumedShard resumed = resume_shard(*a, sources);
  EXPECT_EQ(resumed.resumed_from, "head");
  EXPECT_EQ(resumed.from.version, 60);
  expect_same_state(*a, *dead);

  // The local file newer than the head's copy (a report whose bytes did not reach the head).
  auto b = shard(1);
  sources.local = at_60;
  sources.local_version = 60;
  sources.head_copy = at_40;
  sources.head_version = 40;
  resumed = resume_shard(*b, sources);
  EXPECT_EQ(resumed.resumed_from, "local");
  EXPECT_EQ(resumed.from.version, 60);
  expect_same_state(*b, *dead);
}

TEST_F(ShardCheckpoints, AnotherLayoutOrGarbageIsRefusedAndChangesNothing) {
  auto dead = shard(0);
  train(*dead, 5, 0);
  save_shard(*dead, core_at(5));
  const std::vector<char> bytes = read_file(dead->checkpoint_path);

  // Shard 1 of 2 holds another slice than shard 1 of 3.
  auto other = make_shard_state(asp::ShardLayout(kParameters, 2), 1, initial_parameters(),
                                sgd_momentum());
  const auto before = other->params.clone();
  try {
    load_shard(*other, bytes, "f.pt", 5);
    FAIL() << "loaded a file written for another shard layout";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("another shard layout"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(at::equal(other->params, before));

  auto s = shard(1);
  const auto initial = s->params.clone();
  std::vector<char> garbage(bytes.begin(), bytes.begin() + static_cast<long>(bytes.size() / 3));
  EXPECT_THROW(load_shard(*s, garbage, "cut.pt"), std::runtime_error);
  EXPECT_THROW(load_shard(*s, std::vector<char>(64, 'x'), "x.pt"), std::runtime_error);
  EXPECT_TRUE(at::equal(s->params, initial));

  // An optimizer of another kind has other state: refused before anything is copied.
  training::OptimizerSpec adam;
  adam.kind = "adam";
  auto with_adam = make_shard_state(layout_, 1, initial_parameters(), adam);
  EXPECT_THROW(load_shard(*with_adam, bytes, "f.pt"), std::runtime_error);
  EXPECT_TRUE(at::equal(with_adam->params, initial));
}

TEST_F(ShardCheckpoints, ShardZeroKeepsTheModelsBuffersAcrossARestart) {
  const std::vector<float> buffers{0.5F, 1.5F, 2.5F, 3.0F};
  auto dead = make_shard_state(layout_, 0, initial_parameters(), sgd_momentum(), buffers);
  dead->checkpoint_path = (fs::path(dir_) / "server-shard0-i0.pt").string();
  train(*dead, 3, 0);
  dead->buffers.add_(1.0);  // pushes moved them
  save_shard(*dead, core_at(3));

  auto restarted = make_shard_state(layout_, 0, initial_parameters(), sgd_momentum(), buffers);
  ResumeSources sources;
  sources.head_copy = read_file(dead->checkpoint_path);
  sources.head_version = 3;
  const ResumedShard resumed = resume_shard(*restarted, sources);
  EXPECT_EQ(resumed.resumed_from, "head");
  expect_same_state(*restarted, *dead);
  EXPECT_TRUE(at::equal(restarted->buffers, dead->buffers));

  // A file written before shard 0 kept them resumes the parameters with the shard's own
  // (initial) buffers; one with another count is refused.
  auto without = make_shard_state(layout_, 0, initial_parameters(), sgd_momentum());
  without->checkpoint_path = (fs::path(dir_) / "older.pt").string();
  train(*without, 3, 0);
  save_shard(*without, core_at(3));
  auto fresh = make_shard_state(layout_, 0, initial_parameters(), sgd_momentum(), buffers);
  EXPECT_EQ(load_shard(*fresh, read_file(without->checkpoint_path), "older.pt"), core_at(3));
  EXPECT_TRUE(at::equal(fresh->params, without->params));
  EXPECT_TRUE(at::equal(fresh->buffers, at::tensor(buffers)));
  // And a file with buffers does not load into a shard that keeps none.
  EXPECT_THROW(load_shard(*without, read_file(dead->checkpoint_path), "f.pt"),
               std::runtime_error);
  auto fewer = make_shard_state(layout_, 0, initial_parameters(), sgd_momentum(),
                                std::vector<float>(3, 0.0F));
  try {
    load_shard(*fewer, read_file(dead->checkpoint_path), "f.pt");
    FAIL() << "loaded 4 buffer values into a shard of 3";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("it holds 4 buffer values, this shard 3"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(at::equal(fewer->buffers, at::zeros({3})));
}

// A push's weight (linear lr_scaling's b_i / (B / n), "inverse"'s 1 / (1 + s)) multiplies its
// gradient as it enters the momentum buffer, so each push counts by its own weight; a weight on
// the step would also rescale the earlier pushes still in the buffer (the rule before: with it
// the second step here would be 0.1 x 0.5 x (0.9 x g1 + g2) = 0.05, not 0.185).
TEST(ApplyPush, TheWeightGoesOnTheGradientNotOnTheMomentum) {
  const asp::ShardLayout layout(4, 1);
  auto s = make_shard_state(layout, 0, std::vector<float>(4, 1.0F), sgd_momentum());
  const std::vector<float> g1(4, 1.0F);
  const std::vector<float> g2(4, 0.1F);
  apply_push(*s, 0, 2.0, g1);  // m = 2 g1 = 2; p = 1 - 0.1 x 2
  EXPECT_TRUE(at::allclose(s->params, at::full({4}, 0.8F)));
  apply_push(*s, 1, 0.5, g2);  // m = 0.9 x 2 + 0.5 x 0.1 = 1.85; p = 0.8 - 0.185
  EXPECT_TRUE(at::allclose(s->params, at::full({4}, 0.615F))) << s->params;
  EXPECT_TRUE(at::allclose(s->optimizer->state()[0].second, at::full({4}, 1.85F)));
  EXPECT_THROW(apply_push(*s, 2, 1.0, std::vector<float>(3, 0.0F)), std::invalid_argument);
}

// The learning rate is the schedule's at the version the push started from, as BSP's at the
// step it commits.
TEST(ApplyPush, TheLearningRateFollowsTheScheduleAtTheVersionPulled) {
  training::OptimizerSpec spec;
  spec.kind = "sgd";
  spec.lr = 0.1;
  spec.schedule.kind = "step";
  spec.schedule.step_size = 10;
  spec.schedule.gamma = 0.5;
  const asp::ShardLayout layout(2, 1);
  auto s = make_shard_state(layout, 0, std::vector<float>(2, 0.0F), spec);
  apply_push(*s, 12, 1.0, std::vector<float>(2, 1.0F));  // lr 0.05 past the first step
  EXPECT_TRUE(at::allclose(s->params, at::full({2}, -0.05F))) << s->params;
}

}  // namespace
}  // namespace omnilearn::actors
