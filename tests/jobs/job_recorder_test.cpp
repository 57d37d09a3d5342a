// The job shell's recorder (jobs/job_recorder.hpp): events in order in events.jsonl and in the
// pages readers get, memory bounded over a million events with old offsets still answered
// (from the file, or with the count of what was skipped where the file cannot serve them), a
// resumed job's numbering, summary.json written whole, and every kind of event documented.

#include "jobs/job_recorder.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/job_run.hpp"

namespace omnilearn::actors {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

std::vector<std::string> lines_of(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

RunEvent step_event(std::int64_t step) {
  return RunEvent(EventKind::kStep, Json{{"step", step}, {"loss", 0.5}}, 1000.0 + step);
}

JobRecorderOptions options_for(const fs::path& dir, std::size_t kept = 2 * kMaxEventsPerPage) {
  JobRecorderOptions o;
  o.job_id = "j1";
  o.run_dir = dir.string();
  o.kept_events = kept;
  return o;
}

// Reads every event from `since` the way a follower does: page after page from `next`.
std::vector<std::string> read_all(JobRecorder& recorder, std::uint64_t since,
                                  std::uint64_t* dropped = nullptr) {
  std::vector<std::string> out;
  for (int pages = 0; pages < 100000; ++pages) {
    auto page = recorder.page(JobInfo{}, since);
    if (dropped) *dropped += page.dropped;
    EXPECT_EQ(page.next, since + page.dropped + page.events.size());
    out.insert(out.end(), page.events.begin(), page.events.end());
    since = page.next;
    if (page.events.empty()) break;
  }
  return out;
}

TEST(JobRecorder, EventsKeepTheirOrderAndTheLinesOfTheTable) {
  testing::ScratchDir scratch;
  const fs::path dir = scratch.path() / "run";  // created by open()
  JobRecorder recorder(options_for(dir));
  ASSERT_TRUE(recorder.open());
  recorder.record(RunEvent(EventKind::kSubmitted, Json{{"job_id", "j1"}, {"name", "n"}}, 5.0));
  for (int s = 1; s <= 3; ++s) recorder.record(step_event(s));
  recorder.record(RunEvent::from_json(Json{{"event", "server_gone"}, {"shard", 1}, {"time", 7.5}}));
  recorder.record(finished_event("succeeded", "done", 3));

  const auto file = lines_of(dir / "events.jsonl");
  ASSERT_EQ(file.size(), 6u);
  // The same JSON objects as before the recorder: `time` and `event` beside the fields.
  EXPECT_EQ(file[0], R"({"event":"submitted","job_id":"j1","name":"n","time":5.0})");
  EXPECT_EQ(file[1], R"({"event":"step","loss":0.5,"step":1,"time":1001.0})");
  EXPECT_EQ(file[4], R"({"event":"server_gone","shard":1,"time":7.5})");
  const auto last = Json::parse(file[5]);
  EXPECT_EQ(last.at("event"), "finished");
  EXPECT_EQ(last.at("status"), "succeeded");
  EXPECT_GT(last.at("time").get<double>(), 1e9) << "stamped with the time it was recorded";

  // Readers get the file's lines, in order, from any offset.
  EXPECT_EQ(read_all(recorder, 0), file);
  EXPECT_EQ(read_all(recorder, 4), std::vector<std::string>(file.begin() + 4, file.end()));
  const auto beyond = recorder.page(JobInfo{}, 1000);
  EXPECT_TRUE(beyond.events.empty());
  EXPECT_EQ(beyond.next, 1000u);
  EXPECT_EQ(beyond.dropped, 0u);

  EXPECT_EQ(recorder.stats(EventKind::kStep).count, 3u);
  EXPECT_EQ(recorder.stats(EventKind::kStep).first_step, 1);
  EXPECT_EQ(recorder.stats(EventKind::kStep).last_step, 3);
  EXPECT_EQ(recorder.stats(EventKind::kStep).first_time, 1001.0);
  EXPECT_EQ(recorder.stats(EventKind::kPlan).count, 0u);
  EXPECT_EQ(recorder.counts_json(),
            (Json{{"submitted", 1}, {"step", 3}, {"server_gone", 1}, {"finished", 1}}));
}

TEST(JobRecorder, AnEventOfNoKindIsRefused) {
  EXPECT_THROW(RunEvent::from_json(Json{{"event", "stepp"}}), std::invalid_argument);
  EXPECT_THROW(RunEvent::from_json(Json{{"step", 1}}), std::invalid_argument);
  EXPECT_THROW(RunEvent(EventKind::kStep, Json::array()), std::logic_error);
  for (std::size_t i = 0; i < kEventKinds; ++i) {
    const auto kind = static_cast<EventKind>(i);
    EXPECT_EQ(event_kind(event_name(kind)), kind) << event_name(kind);
  }
}

// A million step events: the recorder's memory stays at its bound (events kept, index
// positions), and readers at any offset get exactly the events from there, old ones read back
// from events.jsonl.
TEST(JobRecorder, AMillionEventsKeepMemoryBoundedAndOldOffsetsAnswered) {
  testing::ScratchDir scratch;
  constexpr std::int64_t kEvents = 1'000'000;
  constexpr std::size_t kKept = 1000;
  JobRecorder recorder(options_for(scratch.path(), kKept));
  ASSERT_TRUE(recorder.open());
  std::size_t most_kept = 0;
  std::size_t most_index = 0;
  for (std::int64_t s = 0; s < kEvents; ++s) {
    recorder.record(step_event(s));
    if (s % 1000 == 0) {
      most_kept = std::max(most_kept, recorder.kept());
      most_index = std::max(most_index, recorder.index_entries());
    }
  }
  EXPECT_EQ(recorder.recorded(), static_cast<std::uint64_t>(kEvents));
  EXPECT_EQ(recorder.kept(), kKept);
  EXPECT_LE(most_kept, kKept);
  EXPECT_LE(most_index, JobRecorder::kMaxIndexEntries);
  EXPECT_LE(recorder.index_entries(), JobRecorder::kMaxIndexEntries);
  EXPECT_EQ(recorder.first_kept(), static_cast<std::uint64_t>(kEvents) - kKept);
  EXPECT_EQ(recorder.stats(EventKind::kStep).count, static_cast<std::uint64_t>(kEvents));
  EXPECT_EQ(recorder.stats(EventKind::kStep).last_step, kEvents - 1);
  EXPECT_TRUE(recorder.file_whole());

  // A reader far behind the ring (a dashboard opened late): served from the file, in order,
  // nothing skipped.
  for (std::uint64_t since :
       {std::uint64_t{0}, std::uint64_t{5}, std::uint64_t{123'457}, std::uint64_t{999'000} - 1}) {
    auto page = recorder.page(JobInfo{}, since);
    EXPECT_EQ(page.dropped, 0u) << since;
    ASSERT_FALSE(page.events.empty()) << since;
    EXPECT_EQ(page.next, since + page.events.size());
    for (std::size_t i = 0; i < page.events.size(); ++i) {
      ASSERT_EQ(Json::parse(page.events[i]).at("step").get<std::uint64_t>(), since + i) << since;
    }
  }
  // Reading on page after page from an old offset crosses from the file into the ring without a
  // gap or a repeat.
  const std::uint64_t start = static_cast<std::uint64_t>(kEvents) - 3 * kMaxEventsPerPage - 17;
  std::uint64_t dropped = 0;
  const auto rest = read_all(recorder, start, &dropped);
  EXPECT_EQ(dropped, 0u);
  ASSERT_EQ(rest.size(), static_cast<std::uint64_t>(kEvents) - start);
  for (std::size_t i = 0; i < rest.size(); i += 997) {
    ASSERT_EQ(Json::parse(rest[i]).at("step").get<std::uint64_t>(), start + i);
  }
  EXPECT_EQ(Json::parse(rest.back()).at("step").get<std::int64_t>(), kEvents - 1);
}

// Where events.jsonl cannot be written, only the ring serves: a reader behind it gets what is
// kept and is told how many events it missed.
TEST(JobRecorder, WithoutItsFileAnOldOffsetIsToldWhatWasDropped) {
  testing::ScratchDir scratch;
  // The run directory's place is taken by a file: neither directory nor events.jsonl can exist.
  const fs::path blocked = scratch.write("run", "not a directory");
  constexpr std::size_t kKept = 100;
  JobRecorder recorder(options_for(blocked, kKept));
  EXPECT_FALSE(recorder.open());
  for (std::int64_t s = 0; s < 10'000; ++s) recorder.record(step_event(s));
  EXPECT_EQ(recorder.kept(), kKept);
  EXPECT_FALSE(recorder.file_whole());

  auto page = recorder.page(JobInfo{}, 5);
  EXPECT_EQ(page.dropped, 10'000u - kKept - 5);
  ASSERT_EQ(page.events.size(), kKept);
  EXPECT_EQ(Json::parse(page.events.front()).at("step"), 10'000 - static_cast<int>(kKept));
  EXPECT_EQ(page.next, 10'000u);
  // A reader that is not behind the ring misses nothing.
  auto recent = recorder.page(JobInfo{}, 9'950);
  EXPECT_EQ(recent.dropped, 0u);
  EXPECT_EQ(recent.events.size(), 50u);
  EXPECT_EQ(Json::parse(recent.events.front()).at("step"), 9'950);
}

// A write that fails part way (a file size limit standing in for a full disk): the file keeps
// what it holds whole, readers get that from the file, then the gap, then the ring.
TEST(JobRecorder, AFailedWriteLeavesTheWholeLinesAndNamesTheGap) {
  testing::ScratchDir scratch;
  constexpr std::size_t kKept = 50;
  JobRecorder recorder(options_for(scratch.path(), kKept));
  ASSERT_TRUE(recorder.open());
  for (std::int64_t s = 0; s < 100; ++s) recorder.record(step_event(s));
  const auto path = recorder.events_path();
  const auto written = lines_of(path);
  ASSERT_EQ(written.size(), 100u);
  // Every later write fails: the process may not make the file one byte longer.
  struct rlimit old_limit {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  const auto size = fs::file_size(path);
  struct rlimit limit = old_limit;
  limit.rlim_cur = size;          // no byte more
  std::signal(SIGXFSZ, SIG_IGN);  // write() fails with EFBIG instead
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  for (std::int64_t s = 100; s < 300; ++s) recorder.record(step_event(s));
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  EXPECT_FALSE(recorder.file_whole());
  EXPECT_EQ(recorder.events_in_file(), 100u);
  EXPECT_EQ(lines_of(path), written);

  std::uint64_t dropped = 0;
  const auto all = read_all(recorder, 0, &dropped);
  EXPECT_EQ(dropped, 300u - kKept - 100u);
  ASSERT_EQ(all.size(), 100u + kKept);
  for (std::size_t i = 0; i < 100; ++i) EXPECT_EQ(Json::parse(all[i]).at("step"), i);
  EXPECT_EQ(Json::parse(all[100]).at("step"), 300 - static_cast<int>(kKept));
}

// A head whose lease may have run out (JobRecorderOptions::may_write, the store's lapsed())
// writes nothing more to the run directory, which the head that took over may be writing: the
// events from then on are kept in memory only, and no summary.json is written.
TEST(JobRecorder, AFencedRecorderWritesNothingMoreToTheRunDirectory) {
  testing::ScratchDir scratch;
  std::optional<std::string> lapsed;
  JobRecorderOptions options = options_for(scratch.path());
  options.may_write = [&] { return lapsed; };
  JobRecorder recorder(options);
  ASSERT_TRUE(recorder.open());
  for (std::int64_t s = 0; s < 10; ++s) recorder.record(step_event(s));
  lapsed = "the lease ran out";
  for (std::int64_t s = 10; s < 20; ++s) recorder.record(step_event(s));
  EXPECT_FALSE(recorder.file_whole());
  EXPECT_EQ(recorder.events_in_file(), 10u);
  const auto written = lines_of(recorder.events_path());
  ASSERT_EQ(written.size(), 10u);
  EXPECT_EQ(Json::parse(written.back()).at("step"), 9);
  EXPECT_EQ(read_all(recorder, 0).size(), 20u) << "the later events are kept in memory";
  EXPECT_FALSE(recorder.finish(Json{{"job_id", "j1"}}));
  EXPECT_FALSE(fs::exists(scratch.path() / "summary.json"));
  EXPECT_EQ(lines_of(recorder.events_path()), written);

  // Unfenced, the same recorder's options write everything.
  testing::ScratchDir other;
  JobRecorderOptions open_options = options_for(other.path());
  open_options.may_write = [] { return std::optional<std::string>(); };
  JobRecorder plain(open_options);
  ASSERT_TRUE(plain.open());
  for (std::int64_t s = 0; s < 20; ++s) plain.record(step_event(s));
  EXPECT_TRUE(plain.finish(Json{{"job_id", "j1"}}));
  EXPECT_EQ(lines_of(plain.events_path()).size(), 20u);
  EXPECT_TRUE(fs::exists(other.path() / "summary.json"));
}

// A head restarted under a running job: the new scheduler's recorder counts the job's events
// the old one wrote (numbers, kinds), drops a line cut short, and serves them all.
TEST(JobRecorder, AResumedJobGoesOnFromTheEventsAlreadyWritten) {
  testing::ScratchDir scratch;
  // A reused run directory: two lines of an older run come first and are never this job's.
  scratch.write("events.jsonl", "{\"event\":\"old\"}\n{\"event\":\"old\"}\n");
  auto options = options_for(scratch.path(), 10);
  options.lines_before = 2;
  {
    JobRecorder first(options);
    ASSERT_TRUE(first.open());
    EXPECT_EQ(first.recorded(), 0u);
    first.record(RunEvent(EventKind::kSubmitted, Json{{"job_id", "j1"}}));
    for (std::int64_t s = 1; s <= 40; ++s) first.record(step_event(s));
  }  // the head dies without finishing the job
  {
    std::ofstream cut(scratch.path() / "events.jsonl", std::ios::app);
    cut << R"({"event":"step","lo)";
  }
  JobRecorder second(options);
  ASSERT_TRUE(second.open());
  EXPECT_EQ(second.recorded(), 41u);
  EXPECT_EQ(second.stats(EventKind::kStep).count, 40u);
  EXPECT_EQ(second.stats(EventKind::kStep).last_step, 40);
  EXPECT_EQ(second.stats(EventKind::kSubmitted).count, 1u);
  EXPECT_EQ(second.kept(), 0u);
  auto restarted = head_restarted_event(2, 0.5, 40);
  restarted.fields["resumed"] = true;
  second.record(std::move(restarted));
  second.record(step_event(41));

  const auto file = lines_of(scratch.path() / "events.jsonl");
  ASSERT_EQ(file.size(), 2u + 43u) << "the cut-off line is gone";
  std::uint64_t dropped = 0;
  const auto events = read_all(second, 0, &dropped);
  EXPECT_EQ(dropped, 0u);
  EXPECT_EQ(events, std::vector<std::string>(file.begin() + 2, file.end()));
  EXPECT_EQ(Json::parse(events.front()).at("event"), "submitted");
  EXPECT_EQ(Json::parse(events[41]).at("event"), "head_restarted");
  // A follower of the old head that had read 30 events reads on from the 31st.
  const auto on = second.page(JobInfo{}, 30);
  ASSERT_FALSE(on.events.empty());
  EXPECT_EQ(Json::parse(on.events.front()).at("step"), 30);
}

TEST(JobRecorder, TheSummaryIsWrittenWholeAndEndsTheRecord) {
  testing::ScratchDir scratch;
  JobRecorder recorder(options_for(scratch.path()));
  ASSERT_TRUE(recorder.open());
  scratch.write("summary.json", "{\"an older run's\": true}\n");
  for (std::int64_t s = 1; s <= 5; ++s) recorder.record(step_event(s));
  recorder.record(finished_event("succeeded", "", 5));
  const auto before = recorder.page(JobInfo{}, 0);
  EXPECT_FALSE(before.finished);
  EXPECT_TRUE(before.summary_json.empty());

  ASSERT_TRUE(recorder.finish(Json{{"job_id", "j1"}, {"status", "succeeded"}, {"steps", 5}}));
  EXPECT_TRUE(recorder.finished());
  const auto text = std::ifstream(scratch.path() / "summary.json");
  std::stringstream read;
  read << text.rdbuf();
  const auto summary = Json::parse(read.str());
  EXPECT_EQ(summary.at("status"), "succeeded");
  EXPECT_EQ(summary.at("events"), (Json{{"step", 5}, {"finished", 1}}));
  EXPECT_EQ(read.str(), recorder.summary() + "\n");
  // Replaced by rename: nothing of the temporary file is left beside it.
  for (const auto& entry : fs::directory_iterator(scratch.path())) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
  }
  // Nothing after the end joins the record.
  EXPECT_FALSE(recorder.record(step_event(6)));
  EXPECT_EQ(lines_of(recorder.events_path()).size(), 6u);

  // The last page says the job finished and carries the summary; an earlier page does not say
  // finished, since events follow.
  auto last = recorder.page(JobInfo{}, 0);
  EXPECT_TRUE(last.finished);
  EXPECT_EQ(last.summary_json, recorder.summary());
  EXPECT_EQ(last.events.size(), 6u);
  auto update = recorder.update(JobInfo{});
  EXPECT_TRUE(update.finished);
  EXPECT_EQ(update.summary_json, recorder.summary());
  EXPECT_TRUE(update.events.empty());
}

TEST(JobRecorder, PagesHoldAtMostTwoThousandEvents) {
  testing::ScratchDir scratch;
  JobRecorder recorder(options_for(scratch.path(), 10'000));
  ASSERT_TRUE(recorder.open());
  for (std::int64_t s = 0; s < 4500; ++s) recorder.record(step_event(s));
  recorder.finish(Json::object());
  auto first = recorder.page(JobInfo{}, 0);
  EXPECT_EQ(first.events.size(), kMaxEventsPerPage);
  EXPECT_FALSE(first.finished);
  auto last = recorder.page(JobInfo{}, 4000);
  EXPECT_EQ(last.events.size(), 500u);
  EXPECT_TRUE(last.finished);
}

// docs/ARCHITECTURE.md's event tables name every kind the recorder writes.
TEST(JobRecorder, EveryKindIsInTheDocumentedTable) {
  std::ifstream in(std::string(OMNILEARN_DOCS_DIR) + "/ARCHITECTURE.md");
  ASSERT_TRUE(in) << "cannot read docs/ARCHITECTURE.md";
  std::set<std::string> documented;
  bool in_events = false;
  const std::regex row(R"(^\| `([a-z_]+)` \|)");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("### ", 0) == 0) in_events = line == "### events.jsonl";
    std::smatch m;
    if (in_events && std::regex_search(line, m, row)) documented.insert(m[1]);
  }
  for (std::size_t i = 0; i < kEventKinds; ++i) {
    const std::string name(event_name(static_cast<EventKind>(i)));
    EXPECT_TRUE(documented.count(name)) << "no row for `" << name << "` in the events table";
  }
  for (const auto& name : documented) {
    EXPECT_TRUE(event_kind(name)) << "the events table documents `" << name
                                  << "`, which is no EventKind";
  }
}

}  // namespace
}  // namespace omnilearn::actors
