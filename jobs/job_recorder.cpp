#include "jobs/job_recorder.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <system_error>

#include "runtime/atomic_file.hpp"

namespace omnilearn::actors {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

// The value after `"key":` in a line this recorder wrote (nlohmann's compact dump: no spaces,
// keys in order, so the first match is the top-level key: no event nests one of these keys
// before its own). Used only when reading back a resumed job's lines, where parsing every line
// of a long job's file would hold up the scheduler's start.
std::optional<std::string_view> raw_value(std::string_view line, std::string_view key) {
  std::string pattern;
  pattern.reserve(key.size() + 3);
  pattern += '"';
  pattern += key;
  pattern += "\":";
  const auto at = line.find(pattern);
  if (at == std::string_view::npos) return std::nullopt;
  return line.substr(at + pattern.size());
}

std::optional<std::int64_t> step_of(const Json& fields) {
  const auto it = fields.find("step");
  if (it == fields.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<std::int64_t>();
}

}  // namespace

std::string_view event_name(EventKind kind) {
  // A switch, so that a kind added without its name does not compile quietly (-Wswitch).
  switch (kind) {
    case EventKind::kSubmitted:
      return "submitted";
    case EventKind::kSpawn:
      return "spawn";
    case EventKind::kPlan:
      return "plan";
    case EventKind::kTrainerExited:
      return "trainer_exited";
    case EventKind::kTrainerGone:
      return "trainer_gone";
    case EventKind::kHeadRestarted:
      return "head_restarted";
    case EventKind::kFinished:
      return "finished";
    case EventKind::kTrainerReady:
      return "trainer_ready";
    case EventKind::kGeneration:
      return "generation";
    case EventKind::kSynced:
      return "synced";
    case EventKind::kGenerationFormed:
      return "generation_formed";
    case EventKind::kStep:
      return "step";
    case EventKind::kDrain:
      return "drain";
    case EventKind::kRecovered:
      return "recovered";
    case EventKind::kResumedFromCheckpoint:
      return "resumed_from_checkpoint";
    case EventKind::kSupersededStep:
      return "superseded_step";
    case EventKind::kFormationFailed:
      return "formation_failed";
    case EventKind::kLeaseRefused:
      return "lease_refused";
    case EventKind::kTrainerBack:
      return "trainer_back";
    case EventKind::kNodeHeldBack:
      return "node_held_back";
    case EventKind::kServerReady:
      return "server_ready";
    case EventKind::kServerRecovered:
      return "server_recovered";
    case EventKind::kWorkerJoined:
      return "worker_joined";
    case EventKind::kFirstPush:
      return "first_push";
    case EventKind::kAspInterval:
      return "asp_interval";
    case EventKind::kEvalSkipped:
      return "eval_skipped";
    case EventKind::kCheckpoint:
      return "checkpoint";
    case EventKind::kServerHandedOver:
      return "server_handed_over";
    case EventKind::kServerGone:
      return "server_gone";
    case EventKind::kBatchFenced:
      return "batch_fenced";
    case EventKind::kFinishing:
      return "finishing";
    case EventKind::kRestored:
      return "restored";
    case EventKind::kBatchUndelivered:
      return "batch_undelivered";
  }
  throw std::logic_error("an EventKind out of range: " + std::to_string(static_cast<int>(kind)));
}

std::optional<EventKind> event_kind(std::string_view name) {
  for (std::size_t i = 0; i < kEventKinds; ++i) {
    const auto kind = static_cast<EventKind>(i);
    if (event_name(kind) == name) return kind;
  }
  return std::nullopt;
}

double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

RunEvent::RunEvent(EventKind k, Json f, double t) : kind(k), fields(std::move(f)), time(t) {
  if (!fields.is_object()) throw std::logic_error("an event's fields must be a JSON object");
}

RunEvent RunEvent::from_json(Json event) {
  if (!event.is_object()) throw std::invalid_argument("an event is a JSON object: " + event.dump());
  const auto name = event.find("event");
  if (name == event.end() || !name->is_string()) {
    throw std::invalid_argument("an event without its kind (\"event\"): " + event.dump());
  }
  const auto kind = event_kind(name->get<std::string>());
  if (!kind) {
    throw std::invalid_argument("no event kind is called '" + name->get<std::string>() +
                                "' (jobs/job_recorder.hpp lists them)");
  }
  double time = 0;
  if (const auto t = event.find("time"); t != event.end() && t->is_number())
    time = t->get<double>();
  event.erase("event");
  event.erase("time");
  return RunEvent(*kind, std::move(event), time);
}

std::string RunEvent::line() const {
  Json out = fields;
  out["time"] = time;
  out["event"] = std::string(event_name(kind));
  return out.dump();
}

RunEvent finished_event(const std::string& status, const std::string& reason, std::int64_t step) {
  return RunEvent(EventKind::kFinished,
                  Json{{"status", status}, {"reason", reason}, {"step", step}});
}

RunEvent head_restarted_event(std::uint64_t head_epoch, double outage_s, std::int64_t step) {
  return RunEvent(EventKind::kHeadRestarted,
                  Json{{"head_epoch", head_epoch},
                       {"outage_s", outage_s >= 0 ? Json(outage_s) : Json(nullptr)},
                       {"step", step}});
}

EventFileLines read_event_lines(const fs::path& path, EventFilePosition from, std::uint64_t first,
                                std::size_t max) {
  EventFileLines out;
  std::ifstream in(path, std::ios::binary);
  if (!in) return out;
  in.seekg(static_cast<std::streamoff>(from.byte));
  if (!in) return out;
  EventFilePosition at = from;
  std::string text;
  // Only whole lines count: a line without its newline is still being written (or was cut off).
  auto next_line = [&] {
    if (!std::getline(in, text) || in.eof()) return false;
    ++at.line;
    at.byte += text.size() + 1;
    return true;
  };
  while (at.line < first) {
    if (!next_line()) return out;
  }
  out.readable = true;
  while (out.lines.size() < max && next_line()) out.lines.push_back(text);
  out.end = at;
  out.at_end = out.lines.size() < max || in.peek() == std::ifstream::traits_type::eof();
  return out;
}

JobRecorderOptions recorder_options(std::string job_id, std::string run_dir,
                                    std::uint64_t lines_before,
                                    std::shared_ptr<state::StateStore> store) {
  JobRecorderOptions options;
  options.job_id = std::move(job_id);
  options.run_dir = std::move(run_dir);
  options.lines_before = lines_before;
  if (store) options.may_write = [store = std::move(store)] { return store->lapsed(); };
  return options;
}

JobRecorder::JobRecorder(JobRecorderOptions options)
    : options_(std::move(options)), run_dir_(options_.run_dir) {
  if (options_.kept_events == 0) options_.kept_events = 1;
}

JobRecorder::~JobRecorder() { close_file(false); }

bool JobRecorder::open() {
  if (opened_) return fd_ >= 0;
  opened_ = true;
  std::error_code ec;
  fs::create_directories(run_dir_, ec);
  const fs::path path = events_path();
  // The job's events already in the file (a resumed job's, written by a previous head) come
  // first: their numbers, their counts, their places in the index.
  {
    std::ifstream in(path, std::ios::binary);
    std::uint64_t line = 0;
    std::uint64_t byte = 0;
    std::string text;
    while (in && std::getline(in, text) && !in.eof()) {
      if (line >= options_.lines_before) {
        const std::uint64_t event = line - options_.lines_before;
        index(event, byte);
        std::optional<EventKind> kind;
        if (auto v = raw_value(text, "event"); v && !v->empty() && v->front() == '"') {
          const auto end = v->find('"', 1);
          if (end != std::string_view::npos) kind = event_kind(v->substr(1, end - 1));
        }
        if (kind) {
          double time = 0;
          std::optional<std::int64_t> step;
          if (auto v = raw_value(text, "time"))
            time = std::strtod(std::string(v->substr(0, 32)).c_str(), nullptr);
          if (auto v = raw_value(text, "step");
              v && !v->empty() &&
              (std::isdigit(static_cast<unsigned char>(v->front())) || v->front() == '-')) {
            step = std::strtoll(std::string(v->substr(0, 24)).c_str(), nullptr, 10);
          }
          count(*kind, time, step);
        }
        ++recorded_;
      }
      ++line;
      byte += text.size() + 1;
    }
    // A head killed while writing leaves at most a line cut short at the end: dropped, so that
    // what is appended starts on a line of its own and every line of the file is a whole event.
    const auto size = fs::file_size(path, ec);
    if (!ec && size > byte) {
      fs::resize_file(path, byte, ec);
      if (ec) {
        spdlog::warn("job {}: cannot drop the cut-off last line of {}: {}", options_.job_id,
                     path.string(), ec.message());
      }
    }
    file_bytes_ = byte;
    in_file_ = recorded_;
  }
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    spdlog::warn("job {}: cannot write {}: {}; its events are kept in memory only", options_.job_id,
                 path.string(), std::strerror(errno));
    return false;
  }
  file_whole_ = true;
  return true;
}

void JobRecorder::index(std::uint64_t event, std::uint64_t byte) {
  if (event % index_stride_ != 0) return;
  index_.push_back({options_.lines_before + event, byte});
  if (index_.size() <= kMaxIndexEntries) return;
  // Full: every other position goes and the stride doubles, so the index spans the whole job
  // in bounded memory (a reader far behind reads at most one stride of lines to find its place).
  const std::uint64_t stride = index_stride_ * 2;
  std::vector<EventFilePosition> kept;
  kept.reserve(index_.size() / 2 + 1);
  for (const auto& p : index_) {
    if ((p.line - options_.lines_before) % stride == 0) kept.push_back(p);
  }
  index_ = std::move(kept);
  index_stride_ = stride;
}

void JobRecorder::count(EventKind kind, double time, const std::optional<std::int64_t>& step) {
  auto& s = stats_[static_cast<std::size_t>(kind)];
  if (s.count == 0) s.first_time = time;
  ++s.count;
  s.last_time = time;
  if (step) {
    if (!s.first_step) s.first_step = step;
    s.last_step = step;
  }
}

bool JobRecorder::fenced(std::string_view what) {
  if (!options_.may_write) return false;
  const std::optional<std::string> why = options_.may_write();
  if (!why) return false;
  if (file_whole_ || fd_ >= 0) {
    spdlog::warn("job {}: not writing {} to {}: {}", options_.job_id, what, run_dir_.string(),
                 *why);
  }
  file_whole_ = false;
  close_file(false);
  return true;
}

void JobRecorder::write_line(const std::string& line) {
  if (fd_ < 0 || !file_whole_) return;
  if (fenced("events")) return;
  std::string out = line;
  out += '\n';
  const char* data = out.data();
  std::size_t left = out.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // The file no longer holds every event: readers behind the ring are told what they miss
      // instead of being served a file whose line numbers no longer match the events'.
      spdlog::warn("job {}: cannot append to {}: {}; later events are kept in memory only",
                   options_.job_id, events_path().string(),
                   n < 0 ? std::strerror(errno) : "nothing written");
      file_whole_ = false;
      close_file(false);
      return;
    }
    data += n;
    left -= static_cast<std::size_t>(n);
  }
  index(recorded_, file_bytes_);
  file_bytes_ += out.size();
  ++in_file_;
}

bool JobRecorder::record(RunEvent event) {
  if (finished_) {
    spdlog::debug("job {}: {} after the job's end is not recorded", options_.job_id,
                  event_name(event.kind));
    return false;
  }
  if (!opened_) open();
  if (event.time <= 0) event.time = unix_time();
  std::string line = event.line();
  write_line(line);
  count(event.kind, event.time, step_of(event.fields));
  kept_.push_back(Kept{event.kind, std::move(line)});
  if (kept_.size() > options_.kept_events) kept_.pop_front();
  ++recorded_;
  return true;
}

void JobRecorder::close_file(bool sync) {
  if (fd_ < 0) return;
  if (sync && ::fsync(fd_) != 0) {
    spdlog::warn("job {}: cannot flush {} to disk: {}", options_.job_id, events_path().string(),
                 std::strerror(errno));
  }
  ::close(fd_);
  fd_ = -1;
}

Json JobRecorder::counts_json() const {
  Json out = Json::object();
  for (std::size_t i = 0; i < kEventKinds; ++i) {
    if (stats_[i].count > 0)
      out[std::string(event_name(static_cast<EventKind>(i)))] = stats_[i].count;
  }
  return out;
}

bool JobRecorder::finish(Json summary) {
  if (finished_) return true;
  finished_ = true;
  if (!opened_) open();
  // The last event is on disk before the summary that says the job ended.
  close_file(true);
  if (summary.is_object()) summary["events"] = counts_json();
  summary_ = summary.dump(2);
  if (fenced("the summary")) return false;
  try {
    runtime::write_file_atomically(run_dir_ / "summary.json", summary_ + "\n");
    return true;
  } catch (const runtime::AtomicWriteError& e) {
    spdlog::warn("job {}: {}", options_.job_id, e.what());
    return false;
  }
}

std::optional<std::vector<std::string>> JobRecorder::from_file(std::uint64_t since,
                                                               std::size_t max) {
  const std::uint64_t line = options_.lines_before + since;
  // The nearest known position at or before the line: the last page's end, or the index.
  EventFilePosition from{};
  auto after =
      std::upper_bound(index_.begin(), index_.end(), line,
                       [](std::uint64_t l, const EventFilePosition& p) { return l < p.line; });
  if (after != index_.begin()) from = *std::prev(after);
  if (cursor_ && cursor_->line <= line && cursor_->line > from.line) from = *cursor_;
  auto read = read_event_lines(events_path(), from, line, max);
  if (!read.readable || read.lines.size() < max) {
    // The file holds less than was written to it (changed behind the head's back).
    cursor_.reset();
    return std::nullopt;
  }
  cursor_ = read.end;
  return std::move(read.lines);
}

JobStatusReply JobRecorder::page(JobInfo info, std::uint64_t since) {
  JobStatusReply status;
  status.found = true;
  status.job = std::move(info);
  std::uint64_t from = since;
  if (from < first_kept()) {
    std::optional<std::vector<std::string>> lines;
    if (from < in_file_) {
      lines = from_file(from, static_cast<std::size_t>(
                                  std::min<std::uint64_t>(kMaxEventsPerPage, in_file_ - from)));
    }
    if (lines) {
      status.events = std::move(*lines);
    } else {
      status.dropped = first_kept() - from;
      from = first_kept();
    }
  }
  if (status.events.empty()) {
    for (std::uint64_t i = from; i < recorded_ && status.events.size() < kMaxEventsPerPage; ++i) {
      status.events.push_back(kept_[static_cast<std::size_t>(i - first_kept())].line);
    }
  }
  status.next = from + status.events.size();
  status.finished = finished_ && status.next >= recorded_;
  if (finished_) status.summary_json = summary_;
  return status;
}

JobStatusReply JobRecorder::update(JobInfo info) const {
  JobStatusReply status;
  status.found = true;
  status.job = std::move(info);
  status.finished = finished_;
  if (finished_) status.summary_json = summary_;
  return status;
}

}  // namespace omnilearn::actors
