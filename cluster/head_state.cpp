#include "cluster/head_state.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

namespace omnilearn::actors {
namespace {

using Json = nlohmann::json;

[[noreturn]] void unreadable(const state::StateStore& store, const std::string& key,
                             const std::string& why) {
  throw state::StateStoreError(fmt::format(
      "the head's state store {} holds a record it cannot read ('{}': {}). Nothing was "
      "changed; move the state directory aside to start with an empty state, or restore it "
      "from a backup",
      store.describe(), key, why));
}

}  // namespace

std::string node_key(const std::string& node_id) { return "nodes/" + node_id; }
std::string name_key(const std::string& name) { return "names/" + name; }
std::string job_key(const std::string& job_id) { return "jobs/" + job_id; }
std::string drained_key(const std::string& node_name) { return "drained/" + node_name; }
std::string run_key(const std::string& job_id) { return "runs/" + job_id; }

std::string encode_node(const NodeRecord& node) {
  return Json{{"id", node.id},
              {"name", node.name},
              {"system", node.system},
              {"machine_id", node.machine_id},
              {"incarnation", node.incarnation},
              {"resources",
               {{"cpus", node.resources.cpus},
                {"memory_bytes", node.resources.memory_bytes},
                {"gpus", node.resources.gpus},
                {"labels", node.resources.labels}}}}
      .dump();
}

std::string encode_job(const StoredJob& job) {
  const auto& info = job.info;
  return Json{{"id", info.id},
              {"name", info.name},
              {"state", info.state},
              {"reason", info.reason},
              {"step", info.step},
              {"total_steps", info.total_steps},
              {"generation", info.generation},
              {"checkpoint", info.checkpoint},
              {"checkpoint_node", info.checkpoint_node},
              {"run_dir", job.run_dir},
              {"events_skipped", job.events_skipped},
              {"finished", job.finished},
              {"summary_json", job.summary_json},
              {"toml", job.toml},
              {"source_name", job.source_name},
              {"submitted_at", job.submitted_at}}
      .dump();
}

RestoredHead start_head_epoch(state::StateStore& store, double now_unix) {
  RestoredHead out;
  out.info.store = store.describe();
  out.info.started_at = now_unix;
  const auto everything = store.load("");
  auto number = [&](const char* key) -> std::optional<double> {
    auto it = everything.find(key);
    if (it == everything.end()) return std::nullopt;
    try {
      return std::stod(it->second);
    } catch (const std::exception&) {
      unreadable(store, key, "not a number");
    }
  };
  const auto epoch = number(kHeadEpochKey);
  out.info.epoch = static_cast<std::uint64_t>(epoch.value_or(0)) + 1;
  if (auto alive = number(kHeadAliveKey)) out.info.outage_s = std::max(0.0, now_unix - *alive);

  std::map<std::string, std::string> runs;  // by job id
  for (const auto& [key, value] : everything) {
    try {
      if (key.rfind("runs/", 0) == 0) {
        if (!Json::parse(value).is_object()) unreadable(store, key, "not a JSON object");
        runs[key.substr(5)] = value;
      } else if (key.rfind("nodes/", 0) == 0) {
        auto json = Json::parse(value);
        NodeRecord node;
        node.id = json.at("id").get<std::string>();
        node.name = json.at("name").get<std::string>();
        node.system = json.at("system").get<std::string>();
        node.machine_id = json.at("machine_id").get<std::string>();
        node.incarnation = json.at("incarnation").get<std::uint64_t>();
        const auto& resources = json.at("resources");
        node.resources.cpus = resources.at("cpus").get<double>();
        node.resources.memory_bytes = resources.at("memory_bytes").get<std::int64_t>();
        node.resources.gpus = resources.at("gpus").get<std::int32_t>();
        node.resources.labels = resources.at("labels").get<std::map<std::string, std::string>>();
        if (node_key(node.id) != key) unreadable(store, key, "its id does not match its key");
        out.nodes.push_back(std::move(node));
      } else if (key.rfind("drained/", 0) == 0) {
        out.drained.insert(key.substr(8));
      } else if (key.rfind("names/", 0) == 0) {
        out.incarnations[key.substr(6)] = std::stoull(value);
      } else if (key.rfind("jobs/", 0) == 0) {
        auto json = Json::parse(value);
        StoredJob job;
        job.info.id = json.at("id").get<std::string>();
        job.info.name = json.at("name").get<std::string>();
        job.info.state = json.at("state").get<std::string>();
        job.info.reason = json.at("reason").get<std::string>();
        job.info.step = json.at("step").get<std::int64_t>();
        job.info.total_steps = json.at("total_steps").get<std::int64_t>();
        job.info.generation = json.at("generation").get<std::int64_t>();
        job.info.checkpoint = json.at("checkpoint").get<std::string>();
        job.info.checkpoint_node = json.at("checkpoint_node").get<std::string>();
        job.run_dir = json.at("run_dir").get<std::string>();
        job.events_skipped = json.at("events_skipped").get<std::uint64_t>();
        job.finished = json.at("finished").get<bool>();
        job.summary_json = json.at("summary_json").get<std::string>();
        job.toml = json.at("toml").get<std::string>();
        job.source_name = json.at("source_name").get<std::string>();
        job.submitted_at = json.at("submitted_at").get<double>();
        if (job_key(job.info.id) != key) unreadable(store, key, "its id does not match its key");
        out.jobs.push_back(std::move(job));
      }
    } catch (const state::StateStoreError&) {
      throw;
    } catch (const std::exception& e) {
      unreadable(store, key, e.what());
    }
  }
  // A name's counter never falls behind a live incarnation of it (a record is written in the
  // same batch as its counter, but the counter is the one the next registration reads).
  for (const auto& node : out.nodes) {
    auto& last = out.incarnations[node.name];
    last = std::max(last, node.incarnation);
  }
  for (auto& job : out.jobs) {
    auto run = runs.find(job.info.id);
    if (run != runs.end() && !job.finished) job.run_state = std::move(run->second);
  }
  std::stable_sort(out.jobs.begin(), out.jobs.end(), [](const StoredJob& a, const StoredJob& b) {
    return a.submitted_at < b.submitted_at;
  });
  out.info.restored_nodes = static_cast<std::int32_t>(out.nodes.size());
  out.info.restored_jobs = static_cast<std::int32_t>(out.jobs.size());
  store.commit({{kHeadEpochKey, std::to_string(out.info.epoch)},
                {kHeadAliveKey, fmt::format("{:.3f}", now_unix)}});
  return out;
}


}  // namespace omnilearn::actors
