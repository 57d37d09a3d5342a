#include "jobs/job_spec.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "training/user_files.hpp"

namespace omnilearn::actors {

JobSpecError::JobSpecError(std::string source, std::uint32_t line, std::uint32_t column,
                           std::string message)
    : std::runtime_error(line > 0 ? fmt::format("{}:{}:{}: {}", source, line, column, message)
                                  : fmt::format("{}: {}", source, message)),
      source_(std::move(source)),
      line_(line),
      column_(column),
      message_(std::move(message)) {}

namespace {

const char* type_name(toml::node_type type) {
  switch (type) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a number";
    case toml::node_type::boolean: return "a boolean";
    default: return "a date/time";
  }
}

// While job_spec_keys() parses its representative jobs, every typed read lands here.
thread_local std::vector<JobKey>* t_recorded_keys = nullptr;

std::string toml_string(const std::string& text) { return "\"" + text + "\""; }

std::string int_range(std::int64_t min, std::int64_t max) {
  if (max == std::numeric_limits<std::int64_t>::max()) return fmt::format(">= {}", min);
  return fmt::format("[{}, {}]", min, max);
}

// One [section] being read: typed getters that fail with the key's location, and a check that
// every key in the file was understood (a typo is an error, not a silently ignored setting).
class Section {
 public:
  Section(const std::string& source, std::string name, const toml::table* table,
          toml::source_region where)
      : source_(source), name_(std::move(name)), table_(table), where_(where) {}

  [[noreturn]] void fail_at(const toml::source_region& region, const std::string& message) const {
    throw JobSpecError(source_, region.begin.line, region.begin.column, message);
  }
  [[noreturn]] void fail(const std::string& key, const std::string& message) const {
    fail_at(region_of(key), fmt::format("[{}] {}: {}", name_, key, message));
  }
  [[noreturn]] void fail_section(const std::string& message) const {
    fail_at(where_, fmt::format("[{}]: {}", name_, message));
  }

  toml::source_region region_of(const std::string& key) const {
    if (table_) {
      if (const auto* node = table_->get(key)) return node->source();
    }
    return where_;
  }
  bool has(const std::string& key) {
    known_.insert(key);
    return table_ && table_->contains(key);
  }

  const toml::node* node(const std::string& key) {
    known_.insert(key);
    return table_ ? table_->get(key) : nullptr;
  }

  // The next typed read's default, in words (a default that other keys decide).
  Section& defaults_to(std::string words) {
    default_words_ = std::move(words);
    return *this;
  }
  // The condition under which the following reads apply (for a key read two ways).
  void when(std::string condition) { when_ = std::move(condition); }

  void string(const std::string& key, std::string& out, std::initializer_list<const char*> allowed = {}) {
    std::string range;
    for (const char* a : allowed) range += (range.empty() ? "" : ", ") + toml_string(a);
    record(key, "string", toml_string(out), range.empty() ? "any" : range);
    const auto* n = node(key);
    if (!n) return;
    auto value = n->value<std::string>();
    if (!n->is_string() || !value) fail(key, fmt::format("expected a string, got {}", type_name(n->type())));
    if (allowed.size() > 0) {
      bool ok = false;
      std::string list;
      for (const char* a : allowed) {
        ok |= *value == a;
        list += (list.empty() ? "\"" : ", \"") + std::string(a) + "\"";
      }
      if (!ok) fail(key, fmt::format("expected one of {}, got \"{}\"", list, *value));
    }
    out = *value;
  }

  template <class Int>
  void integer(const std::string& key, Int& out, std::int64_t min,
               std::int64_t max = std::numeric_limits<std::int64_t>::max()) {
    // The field's own type bounds the value too: `min_batch = 4294967297` must be an error, not
    // a silent 1 in an int.
    // (An unsigned 64-bit field holds every non-negative int64: its max must not wrap to -1.)
    if (static_cast<std::uint64_t>(std::numeric_limits<Int>::max()) <
        static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      max = std::min<std::int64_t>(max, static_cast<std::int64_t>(std::numeric_limits<Int>::max()));
    }
    record(key, "integer", fmt::format("{}", out), int_range(min, max));
    const auto* n = node(key);
    if (!n) return;
    if (!n->is_integer())
      fail(key, fmt::format("expected an integer, got {}", type_name(n->type())));
    auto value = *n->value<std::int64_t>();
    if (value < min || value > max) {
      if (max == std::numeric_limits<std::int64_t>::max()) {
        fail(key, fmt::format("expected an integer >= {}, got {}", min, value));
      }
      fail(key, fmt::format("expected an integer in [{}, {}], got {}", min, max, value));
    }
    out = static_cast<Int>(value);
  }

  void number(const std::string& key, double& out, double min, double max, bool min_open = false) {
    record(key, "number", fmt::format("{}", out),
           fmt::format("{}{}, {}]", min_open ? "(" : "[", min, max));
    const auto* n = node(key);
    if (!n) return;
    if (!n->is_number()) fail(key, fmt::format("expected a number, got {}", type_name(n->type())));
    // toml++ gives no value for an integer beyond 2^53 (no exact double): dereferencing that was
    // undefined behaviour (found by tests/fuzz/job_spec_fuzz). The nearest double is outside
    // every range checked here, so such a number gets the usual out-of-range error.
    const auto exact = n->value<double>();
    double value = exact ? *exact : static_cast<double>(*n->value<std::int64_t>());
    if (!(value >= min && value <= max) || (min_open && value == min)) {
      fail(key, fmt::format("expected a number in {}{}, {}], got {}", min_open ? "(" : "[", min,
                            max, value));
    }
    out = value;
  }

  void boolean(const std::string& key, bool& out) {
    record(key, "boolean", out ? "true" : "false", "true, false");
    const auto* n = node(key);
    if (!n) return;
    if (!n->is_boolean()) fail(key, fmt::format("expected true or false, got {}", type_name(n->type())));
    out = *n->value<bool>();
  }

  void int_list(const std::string& key, std::vector<std::int64_t>& out, std::int64_t min) {
    record(key, "array of integers", fmt::format("[{}]", fmt::join(out, ", ")),
           fmt::format("integers >= {}", min));
    const auto* n = node(key);
    if (!n) return;
    const auto* array = n->as_array();
    if (!array) fail(key, fmt::format("expected an array of integers, got {}", type_name(n->type())));
    std::vector<std::int64_t> values;
    for (const auto& item : *array) {
      if (!item.is_integer() || *item.value<std::int64_t>() < min) {
        fail_at(item.source(), fmt::format("[{}] {}: expected integers >= {}", name_, key, min));
      }
      values.push_back(*item.value<std::int64_t>());
    }
    out = std::move(values);
  }

  // Every key in the file must have been asked for.
  void finish() const {
    if (!table_) return;
    for (const auto& [key, value] : *table_) {
      std::string name(key.str());
      if (known_.count(name)) continue;
      std::string list;
      for (const auto& k : known_) list += (list.empty() ? "" : ", ") + k;
      fail_at(key.source().begin.line ? key.source() : value.source(),
              fmt::format("[{}]: unknown key '{}' (known keys: {})", name_, name, list));
    }
  }

  const std::string& name() const { return name_; }

 private:
  void record(const std::string& key, const char* type, std::string default_value,
              std::string range) {
    std::string words = std::move(default_words_);
    default_words_.clear();
    if (!t_recorded_keys) return;
    t_recorded_keys->push_back(JobKey{name_, key, when_, type,
                                      words.empty() ? std::move(default_value) : words,
                                      std::move(range)});
  }

  const std::string& source_;
  std::string name_;
  const toml::table* table_;
  toml::source_region where_;
  std::set<std::string> known_;
  std::string default_words_;
  std::string when_;
};

// Runs a validate() of a lower layer and turns its std::invalid_argument into a located error.
template <class F>
void located(const Section& section, F&& check) {
  try {
    check();
  } catch (const std::invalid_argument& e) {
    section.fail_section(e.what());
  }
}

// The same for a check about one key's value (a file it names), located at that key.
template <class F>
void located_at(const Section& section, const std::string& key, F&& check) {
  try {
    check();
  } catch (const std::invalid_argument& e) {
    section.fail(key, e.what());
  } catch (const training::DatasetError& e) {
    section.fail(key, e.what());
  } catch (const training::ModelError& e) {
    section.fail(key, e.what());
  }
}

// A relative path in a job file is relative to the job file's directory (`source`'s).
std::string resolve_path(const std::string& source, const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty() || fs::path(path).is_absolute()) return path;
  const fs::path dir = fs::path(source).parent_path();
  return dir.empty() ? path : (dir / path).lexically_normal().string();
}

// [data] keys of a "tensors" dataset, with the fields they fill.
std::vector<std::pair<const char*, std::string*>> tensor_keys(training::TensorFilesSpec& t) {
  return {{"train", &t.train},     {"train_x", &t.train_x}, {"train_y", &t.train_y},
          {"test", &t.test},       {"test_x", &t.test_x},   {"test_y", &t.test_y}};
}

// What `omnilearn submit` can check of a tensors dataset without LibTorch: the files exist, the
// torch.save archives look like archives, and .npy pairs follow the rules in full (types,
// shapes, labels). Each error is located at the key naming the file it is about.
void check_tensor_files_here(const Section& data, const training::TensorFilesSpec& t,
                             const std::string& loss) {
  std::optional<training::SplitFacts> facts[2];
  const std::pair<std::string, const std::string*> splits[2] = {{"train", &t.train},
                                                                {"test", &t.test}};
  for (int i = 0; i < 2; ++i) {
    // Not a structured binding: clang 14 (the fuzz build) cannot capture one in a lambda.
    const std::string& split = splits[i].first;
    const std::string* file = splits[i].second;
    if (!file->empty()) {
      located_at(data, split, [&] { training::check_torch_save_file(*file); });
      continue;
    }
    training::SplitFacts f;
    const std::string x_key = split + "_x", y_key = split + "_y";
    const std::string& x_file = i == 0 ? t.train_x : t.test_x;
    const std::string& y_file = i == 0 ? t.train_y : t.test_y;
    located_at(data, x_key, [&] { f.x = training::npy_facts(x_file, /*read_values=*/false); });
    located_at(data, y_key, [&] { f.y = training::npy_facts(y_file, /*read_values=*/true); });
    try {
      training::check_split(f, loss, t.classes);
    } catch (const training::DatasetError& e) {
      // Located at the key of the file the message is about.
      const bool about_x = std::string_view(e.what()).starts_with(f.x.origin + ":");
      data.fail(about_x ? x_key : y_key, e.what());
    }
    facts[i] = f;
  }
  if (facts[0] && facts[1]) {
    located_at(data, "test_x",
               [&] { training::check_splits(*facts[0], *facts[1], loss, t.classes); });
  }
}

}  // namespace

JobSpec parse_job_spec(std::string_view toml_text, const std::string& source, FileChecks checks) {
  toml::table root;
  try {
    root = toml::parse(toml_text, source);
  } catch (const toml::parse_error& e) {
    throw JobSpecError(source, e.source().begin.line, e.source().begin.column,
                       std::string(e.description()));
  }

  const std::set<std::string> sections = {"job",     "model",   "data",       "train",
                                          "controller", "elastic", "checkpoint", "asp"};
  for (const auto& [key, value] : root) {
    std::string name(key.str());
    if (!sections.count(name)) {
      throw JobSpecError(source, key.source().begin.line, key.source().begin.column,
                         fmt::format("unknown section [{}] (known: job, model, data, train, "
                                     "controller, elastic, checkpoint, asp)",
                                     name));
    }
    if (!value.is_table()) {
      throw JobSpecError(source, value.source().begin.line, value.source().begin.column,
                         fmt::format("'{}' must be a [{}] table", name, name));
    }
  }
  auto section = [&](const std::string& name) {
    const auto* node = root.get(name);
    const toml::table* table = node ? node->as_table() : nullptr;
    toml::source_region where = node ? node->source() : toml::source_region{};
    return Section(source, name, table, where);
  };

  JobSpec spec;

  auto job = section("job");
  if (!job.has("name")) job.fail_section("missing key 'name' (a name for the job)");
  job.defaults_to("required").string("name", spec.name);
  if (spec.name.empty() || spec.name.size() > 64) job.fail("name", "expected 1 to 64 characters");
  job.string("mode", spec.mode, {"bsp", "asp"});
  job.finish();

  // [asp]: asynchronous training's settings (only with mode = "asp").
  auto asp = section("asp");
  asp.integer("servers", spec.asp.servers, 1, 4096);
  asp.string("staleness", spec.asp.staleness, {"none", "inverse", "bound"});
  asp.defaults_to("none (required with \"bound\")")
      .integer("max_staleness", spec.asp.max_staleness, 1);
  if (spec.asp.staleness == "bound" && !asp.has("max_staleness")) {
    asp.fail("staleness", "\"bound\" needs max_staleness (an integer >= 1: pushes staler than "
                          "that are dropped)");
  }
  if (spec.asp.staleness != "bound" && asp.has("max_staleness")) {
    asp.fail("max_staleness", fmt::format("only with staleness = \"bound\" (staleness is \"{}\")",
                                          spec.asp.staleness));
  }
  asp.string("lr_scaling", spec.asp.lr_scaling, {"none", "linear"});
  asp.boolean("scale_lr_by_workers", spec.asp.scale_lr_by_workers);
  asp.integer("refresh_statistics", spec.asp.refresh_statistics, 0, 100000);
  asp.finish();
  if (spec.mode != "asp" && root.contains("asp")) {
    asp.fail_section(fmt::format("only for mode = \"asp\" (mode is \"{}\")", spec.mode));
  }

  auto train = section("train");
  if (!train.has("global_batch")) train.fail_section("missing key 'global_batch'");
  train.defaults_to("required").integer("global_batch", spec.train.global_batch, 1, 1 << 24);
  train.defaults_to("none (set epochs or steps)").integer("epochs", spec.train.epochs, 1);
  train.defaults_to("none (set epochs or steps)").integer("steps", spec.train.steps, 1);
  if ((spec.train.epochs > 0) == (spec.train.steps > 0)) {
    train.fail_section("set exactly one of 'epochs' or 'steps'");
  }
  std::int64_t seed = 0;
  train.integer("seed", seed, 0);
  spec.train.seed = static_cast<std::uint64_t>(seed);
  train.integer("eval_every", spec.train.eval_every, 0);
  train.integer("threads", spec.train.threads, 1, 256);
  train.string("loss", spec.train.loss, {"cross_entropy", "mse"});
  train.string("precision", spec.train.precision, {"float32", "float64"});
  if (spec.train.precision == "float64" && spec.mode == "asp") {
    train.fail("precision",
               "\"float64\" is for mode = \"bsp\" (the parameter servers of mode = \"asp\" "
               "hold float32)");
  }
  auto& opt = spec.optimizer;
  train.string("optimizer", opt.kind, {"sgd", "adam", "adamw"});
  train.number("lr", opt.lr, 0, 1e3, true);
  train.number("momentum", opt.momentum, 0, 1);
  train.boolean("nesterov", opt.nesterov);
  train.number("weight_decay", opt.weight_decay, 0, 1e3);
  train.number("beta1", opt.beta1, 0, 1);
  train.number("beta2", opt.beta2, 0, 1);
  train.string("schedule", opt.schedule.kind, {"constant", "step", "cosine"});
  train.integer("warmup_steps", opt.schedule.warmup_steps, 0);
  train.integer("step_size", opt.schedule.step_size, 0);
  train.number("gamma", opt.schedule.gamma, 0, 1);
  train.number("min_lr", opt.schedule.min_lr, 0, 1e3);
  if (opt.schedule.kind == "cosine" && spec.train.steps > 0) opt.schedule.total_steps = spec.train.steps;
  located(train, [&] {
    // With epochs, the cosine horizon is known only once the trainer has the dataset's size (it
    // fills total_steps in); validate the rest with a horizon past the warmup.
    auto check = opt;
    if (check.schedule.kind == "cosine" && check.schedule.total_steps == 0) {
      check.schedule.total_steps = check.schedule.warmup_steps + 1;
    }
    training::validate(check);
  });
  train.finish();

  auto model = section("model");
  model.string("kind", spec.model.kind, {"mlp", "cnn", "resnet", "torchscript"});
  const bool script = spec.model.kind == "torchscript";
  if (script) {
    for (const char* key : {"hidden", "channels", "fc", "blocks_per_stage"}) {
      if (model.has(key)) {
        model.fail(key, "only for the built-in models (a torchscript model's layers are in its "
                        "file)");
      }
    }
    if (!model.has("path")) {
      model.fail_section("missing key 'path' (the file written by "
                         "torch.jit.script(model).save(path))");
    }
  } else if (model.has("path")) {
    model.fail("path", fmt::format("only for kind = \"torchscript\" (kind is \"{}\")",
                                   spec.model.kind));
  }
  model.string("path", spec.model.path);
  if (script && spec.model.path.empty()) model.fail("path", "expected a file name");
  spec.model.path = resolve_path(source, spec.model.path);
  model.int_list("hidden", spec.model.hidden, 1);
  model.int_list("channels", spec.model.channels, 1);
  model.int_list("fc", spec.model.fc, 1);
  model.integer("blocks_per_stage", spec.model.blocks_per_stage, 1, 16);
  spec.model.seed = spec.train.seed;
  located(model, [&] { training::validate(spec.model); });
  model.finish();
  if (script && checks == FileChecks::kLocal) {
    located_at(model, "path", [&] { training::check_torchscript_file(spec.model.path); });
  }
  located_at(train, "loss", [&] { training::validate_loss(spec.train.loss, spec.model); });

  auto data = section("data");
  data.string("dataset", spec.data.dataset, {"fashion-mnist", "synthetic", "tensors"});
  const bool tensors = spec.data.dataset == "tensors";
  if (tensors) {
    for (const char* key : {"path", "train_size", "test_size"}) {
      if (data.has(key)) {
        data.fail(key, "not for dataset = \"tensors\" (its files are train and test, or "
                       "train_x, train_y, test_x and test_y)");
      }
    }
    data.when("dataset = \"tensors\"");
    for (auto [key, field] : tensor_keys(spec.data.tensors)) {
      data.string(key, *field);
      *field = resolve_path(source, *field);
    }
    data.integer("classes", spec.data.tensors.classes, 2, 1 << 24);
  } else {
    for (auto [key, field] : tensor_keys(spec.data.tensors)) {
      if (data.has(key)) {
        data.fail(key, fmt::format("only for dataset = \"tensors\" (dataset is \"{}\")",
                                   spec.data.dataset));
      }
    }
    data.when("dataset = \"fashion-mnist\"");
    data.string("path", spec.data.path);
    spec.data.path = resolve_path(source, spec.data.path);
    data.when("dataset = \"synthetic\"");
    data.integer("train_size", spec.data.synthetic.train_size, 1);
    data.integer("test_size", spec.data.synthetic.test_size, 1);
    data.integer("classes", spec.data.synthetic.num_classes, 2, 1000);
  }
  spec.data.seed = spec.train.seed;
  located(data, [&] { training::validate(spec.data); });
  if (spec.train.loss == "mse" && !tensors) {
    train.fail("loss", fmt::format("loss = \"mse\" needs [data] dataset = \"tensors\" with "
                                   "floating-point targets; \"{}\" has class labels",
                                   spec.data.dataset));
  }
  data.finish();
  if (tensors && checks == FileChecks::kLocal) {
    check_tensor_files_here(data, spec.data.tensors, spec.train.loss);
  }

  auto controller = section("controller");
  auto& config = spec.controller.config;
  config.global_batch = spec.train.global_batch;
  config.min_batch = 1;
  config.max_batch = spec.train.global_batch;
  std::string policy = std::string(scheduler::to_string(config.policy));
  controller.string("policy", policy, {"uniform", "proportional", "affine"});
  config.policy = *scheduler::parse_policy(policy);
  controller.number("deadband", config.deadband, 0, 0.99);
  controller.number("gain", config.gain, 0, 1, true);
  controller.integer("min_batch", config.min_batch, 1);
  controller.defaults_to("global_batch").integer("max_batch", config.max_batch, 1);
  controller.integer("interval", spec.controller.interval_steps, 1);
  controller.number("interval_s", spec.controller.interval_s, 0, 3600);
  controller.integer("cooldown", spec.controller.cooldown_steps, 0);
  controller.integer("persist_rounds", config.persist_rounds, 0, 1000);
  controller.number("persist_gain", config.persist_gain, 0, 0.99);
  if (config.min_batch > config.max_batch) {
    controller.fail("min_batch", fmt::format("min_batch ({}) is larger than max_batch ({})",
                                             config.min_batch, config.max_batch));
  }
  located(controller, [&] { config.validate(); });
  controller.finish();

  auto elastic = section("elastic");
  elastic.integer("min_workers", spec.elastic.min_workers, 1, 4096);
  // Elastic by default: without max_workers a job takes every worker the cluster has, as many
  // as the batch can feed min_batch samples each (the scheduler places one trainer per slot on
  // every usable node, up to this).
  const bool max_workers_given = elastic.has("max_workers");
  spec.elastic.max_workers = std::max(
      spec.elastic.min_workers, std::clamp(spec.train.global_batch / config.min_batch, 1, 4096));
  elastic.defaults_to("every worker the cluster has, at most global_batch / min_batch (and 4096)")
      .integer("max_workers", spec.elastic.max_workers, 1, 4096);
  elastic.integer("slots", spec.elastic.slots, 1, 64);
  elastic.number("grace_period_s", spec.elastic.grace_period_s, 0, 86400);
  if (spec.elastic.min_workers > spec.elastic.max_workers) {
    elastic.fail("min_workers", fmt::format("min_workers ({}) is larger than max_workers ({})",
                                            spec.elastic.min_workers, spec.elastic.max_workers));
  }
  elastic.finish();

  // Cross-section checks: the batch must be splittable over every worker count the job allows.
  const int B = spec.train.global_batch;
  if (!max_workers_given &&
      static_cast<std::int64_t>(spec.elastic.min_workers) * config.min_batch > B) {
    train.fail("global_batch",
               fmt::format("global_batch {} cannot give {} workers (elastic.min_workers) at least "
                           "controller.min_batch = {} samples each; raise global_batch or lower "
                           "min_workers/min_batch",
                           B, spec.elastic.min_workers, config.min_batch));
  }
  if (static_cast<std::int64_t>(spec.elastic.max_workers) * config.min_batch > B) {
    train.fail("global_batch",
               fmt::format("global_batch {} cannot give {} workers (elastic.max_workers) at least "
                           "controller.min_batch = {} samples each; raise global_batch or lower "
                           "max_workers/min_batch",
                           B, spec.elastic.max_workers, config.min_batch));
  }
  if (static_cast<std::int64_t>(spec.elastic.min_workers) * config.max_batch < B) {
    train.fail("global_batch",
               fmt::format("global_batch {} does not fit {} workers (elastic.min_workers) at most "
                           "controller.max_batch = {} samples each",
                           B, spec.elastic.min_workers, config.max_batch));
  }

  auto checkpoint = section("checkpoint");
  checkpoint.string("dir", spec.checkpoint.dir);
  checkpoint.integer("every", spec.checkpoint.every, 0);
  checkpoint.boolean("shared", spec.checkpoint.shared);
  checkpoint.finish();
  return spec;
}

std::vector<JobKey> job_spec_keys() {
  // Between them these jobs take every branch of the parser: bsp and asp, the built-in and
  // TorchScript models, and both kinds of dataset.
  static constexpr const char* kJobs[] = {
      R"([job]
name = "bsp"
[train]
global_batch = 256
steps = 1
)",
      R"([job]
name = "asp"
mode = "asp"
[model]
kind = "torchscript"
path = "model.pt"
[data]
dataset = "tensors"
train = "train.pt"
test = "test.pt"
[train]
global_batch = 256
steps = 1
[asp]
staleness = "bound"
max_staleness = 1
)"};
  std::vector<JobKey> reads;
  t_recorded_keys = &reads;
  try {
    for (const char* job : kJobs) parse_job_spec(job, "job_spec_keys.toml");
  } catch (...) {
    t_recorded_keys = nullptr;
    throw;
  }
  t_recorded_keys = nullptr;
  // One entry per key, or one per reading where a key is read two ways.
  auto same = [](const JobKey& a, const JobKey& b) {
    return a.type == b.type && a.default_value == b.default_value && a.range == b.range;
  };
  std::vector<JobKey> keys;
  for (const auto& read : reads) {
    bool seen = false;
    for (const auto& k : keys)
      seen |= k.section == read.section && k.key == read.key && same(k, read);
    if (!seen) keys.push_back(read);
  }
  for (auto& k : keys) {
    int readings = 0;
    for (const auto& other : keys) readings += other.section == k.section && other.key == k.key;
    if (readings == 1) k.when.clear();
  }
  return keys;
}

JobSpec load_job_spec(const std::string& path, FileChecks checks) {
  std::ifstream in(path);
  if (!in) throw JobSpecError(path, 0, 0, "cannot read the job file (does it exist?)");
  std::stringstream text;
  text << in.rdbuf();
  return parse_job_spec(text.str(), path, checks);
}

}  // namespace omnilearn::actors
