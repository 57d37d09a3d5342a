#pragma once
// The job shell's record of one job, shared by both schedulers (SchedulerActor for synchronous
// jobs, AspSchedulerActor for asynchronous ones) and by the JobManager when it must end a job
// itself: the run directory, events.jsonl, the recent events kept in memory for followers
// (`submit --follow`, `logs`, the dashboard), counts per kind of event, summary.json, and the
// pages a JobStatusRequest gets.
//
// Memory is bounded whatever the job's length: the recorder keeps the last `kept_events` events
// (a ring), counts per kind, and a sparse index of events.jsonl (at most kMaxIndexEntries
// positions, the stride doubling as the job grows). A reader behind the ring is served from
// events.jsonl through the index; where the file does not hold every event (it could not be
// opened, or a write to it failed), the reader gets what the ring keeps and is told how many
// events it missed (JobStatusReply::dropped).
//
// Durability of events.jsonl, as for every append-only log here: each event is one write(2)
// of a whole line, made before record() returns (a crash of the head loses no recorded event;
// at worst a line cut short at the end, which open() drops); finish() fsyncs the file before
// summary.json is written (atomically, runtime::write_file_atomically).
//
// Threads: a recorder belongs to one actor; every method runs in that actor's turns.

#include <array>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "state/state_store.hpp"
#include "wire/job_protocol.hpp"

namespace omnilearn::actors {

// Every kind of line events.jsonl holds; docs/ARCHITECTURE.md ("events.jsonl") has a row for
// each, with its fields (jobs_job_recorder_test checks that the table names them all).
enum class EventKind : std::uint8_t {
  // Both kinds of job.
  kSubmitted,
  kSpawn,
  kPlan,
  kTrainerExited,
  kTrainerGone,
  kHeadRestarted,
  kFinished,
  // Synchronous jobs.
  kTrainerReady,
  kGeneration,
  kSynced,
  kGenerationFormed,
  kStep,
  kDrain,
  kRecovered,
  kResumedFromCheckpoint,
  kSupersededStep,
  kFormationFailed,
  kLeaseRefused,
  kTrainerBack,
  kNodeHeldBack,
  // Asynchronous jobs.
  kServerReady,
  kServerRecovered,
  kWorkerJoined,
  kFirstPush,
  kAspInterval,
  kEvalSkipped,
  kCheckpoint,
  kServerHandedOver,
  kServerGone,
  kBatchFenced,
  kFinishing,
  kRestored,
  kBatchUndelivered,
};
inline constexpr std::size_t kEventKinds =
    static_cast<std::size_t>(EventKind::kBatchUndelivered) + 1;

// The kind's name in events.jsonl's `event` field.
std::string_view event_name(EventKind kind);
// The kind a name stands for; nullopt for a name that is no kind.
std::optional<EventKind> event_kind(std::string_view name);

// One event of a job: its kind, when it happened, and its other fields.
struct RunEvent {
  EventKind kind = EventKind::kSubmitted;
  nlohmann::json fields = nlohmann::json::object();  // without `time` and `event`
  double time = 0;                                   // Unix s; 0: when it is recorded

  RunEvent() = default;
  RunEvent(EventKind kind, nlohmann::json fields, double time = 0);
  // An event made elsewhere as one JSON object with its kind in `event` (an asp::AspJob
  // event). Throws std::invalid_argument when `event` names no kind.
  static RunEvent from_json(nlohmann::json event);
  // The line of events.jsonl: one JSON object, `time` and `event` beside the fields.
  std::string line() const;
};

// The events every writer of a run directory shares.
RunEvent finished_event(const std::string& status, const std::string& reason, std::int64_t step);
// A restarted head found the job unfinished; outage_s < 0: unknown (written as null).
RunEvent head_restarted_event(std::uint64_t head_epoch, double outage_s, std::int64_t step);

// Unix time now, in seconds.
double unix_time();

// What the recorder knows of one kind of event without keeping the events.
struct EventKindStats {
  std::uint64_t count = 0;
  double first_time = 0;  // 0 while count is 0
  double last_time = 0;
  std::optional<std::int64_t> first_step;  // the `step` field, for kinds that have one
  std::optional<std::int64_t> last_step;
};

// A place in events.jsonl: the line with this number (from 0, the file's first) starts at this
// byte.
struct EventFilePosition {
  std::uint64_t line = 0;
  std::uint64_t byte = 0;
};

// Whole lines of events.jsonl from line `first`, at most `max`, read from `from` on (a known
// position at or before `first`). `end` is where the lines read end; `at_end` says whether the
// file has no whole line after them; `readable` is false when the file cannot be opened or has
// fewer lines than `first`.
struct EventFileLines {
  std::vector<std::string> lines;
  EventFilePosition end;
  bool at_end = false;
  bool readable = false;
};
EventFileLines read_event_lines(const std::filesystem::path& path, EventFilePosition from,
                                std::uint64_t first, std::size_t max);

// Events per JobStatusReply: a reply stays far below the message size limit, and a reader far
// behind catches up in a few round trips.
inline constexpr std::size_t kMaxEventsPerPage = 2000;

struct JobRecorderOptions {
  std::string job_id;
  std::string run_dir;
  // Lines events.jsonl held before the job's first event (a reused run directory): not the
  // job's, never served as its events.
  std::uint64_t lines_before = 0;
  // The recent events kept in memory: two pages, so a follower up to two pages behind is
  // answered without touching the disk.
  std::size_t kept_events = 2 * kMaxEventsPerPage;
  // Asked before each write to the run directory: a reason means this head may no longer act
  // (its lease may have run out: StateStore::lapsed), and nothing more is written there, since
  // the head that took over may be writing the same files. Events are then kept in memory
  // only. Empty: always written.
  std::function<std::optional<std::string>()> may_write;
};

// The recorder's options for a job of a head over `store`: writes fenced by the store's lapsed()
// (nothing more is written once the head's lease may have run out). A null store: no fence.
JobRecorderOptions recorder_options(std::string job_id, std::string run_dir,
                                    std::uint64_t lines_before,
                                    std::shared_ptr<state::StateStore> store);

class JobRecorder {
 public:
  // The sparse index of events.jsonl keeps at most this many positions.
  static constexpr std::size_t kMaxIndexEntries = 1024;

  explicit JobRecorder(JobRecorderOptions options);
  ~JobRecorder();
  JobRecorder(const JobRecorder&) = delete;
  JobRecorder& operator=(const JobRecorder&) = delete;

  // Creates the run directory and opens events.jsonl for appending. The job's events already
  // there (written by a previous head for a resumed job) count first: the next event's number
  // follows them, and they are counted by kind. A line cut short at the end is dropped. False
  // (with a warning in the log) when the file cannot be written: events are then kept in
  // memory only.
  bool open();
  // Appends one event (stamped with the time now if it has none): one line of events.jsonl,
  // kept among the recent events, counted. After finish() it is not recorded (the job's record
  // ends with its end) and false is returned.
  bool record(RunEvent event);
  // The job's end: fsyncs and closes events.jsonl, adds the counts per kind to the summary
  // (`events`), writes it to summary.json atomically and keeps its text for status pages.
  // Returns false (logged) when summary.json could not be written; the summary is kept anyway.
  bool finish(nlohmann::json summary);

  // A JobStatusRequest's answer: `info`, the events from number `since` (at most
  // kMaxEventsPerPage; from events.jsonl for those older than the kept ones, else `dropped`
  // says how many were skipped), `finished` once the job ended and the page reaches its last
  // event, and the summary once the job ended.
  JobStatusReply page(JobInfo info, std::uint64_t since);
  // What the JobManager is told of the job's state (the summary once the job ended).
  JobStatusReply update(JobInfo info) const;

  bool finished() const { return finished_; }
  const std::string& summary() const { return summary_; }
  const std::filesystem::path& run_dir() const { return run_dir_; }
  std::filesystem::path events_path() const { return run_dir_ / "events.jsonl"; }
  // Events of the job so far (the number the next one gets).
  std::uint64_t recorded() const { return recorded_; }
  // Events held in memory now, and the number of the oldest of them.
  std::size_t kept() const { return kept_.size(); }
  std::uint64_t first_kept() const { return recorded_ - kept_.size(); }
  // Positions the index of events.jsonl holds now.
  std::size_t index_entries() const { return index_.size(); }
  // Whether events.jsonl holds every event of the job (it opened and no write failed).
  bool file_whole() const { return file_whole_; }
  // The job's events events.jsonl holds whole (all of them while file_whole()).
  std::uint64_t events_in_file() const { return in_file_; }
  const EventKindStats& stats(EventKind kind) const {
    return stats_[static_cast<std::size_t>(kind)];
  }
  // Counts per kind, by name, of the kinds seen (summary.json's `events`).
  nlohmann::json counts_json() const;

 private:
  struct Kept {
    EventKind kind;
    std::string line;
  };
  void count(EventKind kind, double time, const std::optional<std::int64_t>& step);
  void index(std::uint64_t event, std::uint64_t byte);
  // The events from `since` read back from events.jsonl; nullopt when it cannot serve them.
  std::optional<std::vector<std::string>> from_file(std::uint64_t since, std::size_t max);
  void write_line(const std::string& line);
  // Whether options_.may_write forbids writing `what` now; then the file is closed and no longer
  // whole (logged once).
  bool fenced(std::string_view what);
  void close_file(bool sync);

  JobRecorderOptions options_;
  std::filesystem::path run_dir_;
  int fd_ = -1;
  bool opened_ = false;
  bool file_whole_ = false;
  bool finished_ = false;
  std::uint64_t file_bytes_ = 0;  // where the next line goes
  std::uint64_t recorded_ = 0;
  std::uint64_t in_file_ = 0;  // the job's events events.jsonl holds whole, from the first
  std::deque<Kept> kept_;
  std::array<EventKindStats, kEventKinds> stats_{};
  // Where events start in events.jsonl: every index_stride_-th event's position.
  std::vector<EventFilePosition> index_;
  std::uint64_t index_stride_ = 1;
  // Where the last page read from the file ended: the next page of a reader reading on.
  std::optional<EventFilePosition> cursor_;
  std::string summary_;
};

}  // namespace omnilearn::actors
