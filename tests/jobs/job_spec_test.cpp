// The job file parser on inputs the fuzzer and reviews found: numbers that do not fit the field
// they are meant for are located errors, never silent truncation or undefined behaviour.

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "jobs/job_spec.hpp"

namespace omnilearn::actors {
namespace {

const std::string kBase = R"([job]
name = "t"
[model]
kind = "mlp"
hidden = [8]
[data]
dataset = "synthetic"
[train]
global_batch = 64
steps = 10
)";

std::string error_of(const std::string& text) {
  try {
    parse_job_spec(text, "job.toml");
  } catch (const JobSpecError& e) {
    return e.what();
  }
  return "";
}

TEST(JobSpecNumbers, AValidJobParses) {
  auto spec = parse_job_spec(kBase, "job.toml");
  EXPECT_EQ(spec.train.global_batch, 64);
  EXPECT_EQ(spec.train.steps, 10);
}

TEST(JobSpecNumbers, AnIntegerTooLargeForItsFieldIsALocatedError) {
  auto error = error_of(kBase + "[controller]\nmin_batch = 4294967297\n");
  EXPECT_NE(error.find("job.toml:"), std::string::npos) << error;
  EXPECT_NE(error.find("min_batch"), std::string::npos) << error;
}

TEST(JobSpecNumbers, AnIntegerBeyondTwoToThe53IsARangeErrorForAFloatField) {
  auto text = kBase;
  text.insert(text.find("steps = 10"), "lr = 9007199254740993\n");
  auto error = error_of(text);
  EXPECT_NE(error.find("lr"), std::string::npos) << error;
}

// Smoothing across rounds: on by default, set or turned off from the job file, and a
// value out of range is located.
TEST(JobSpecController, PersistKeysParseDefaultAndAreLocatedWhenBad) {
  auto spec = parse_job_spec(kBase, "job.toml");
  EXPECT_EQ(spec.controller.config.persist_rounds, 3u);
  EXPECT_DOUBLE_EQ(spec.controller.config.persist_gain, 0.02);
  spec = parse_job_spec(kBase + "[controller]\npersist_rounds = 0\npersist_gain = 0.05\n",
                        "job.toml");
  EXPECT_EQ(spec.controller.config.persist_rounds, 0u);
  EXPECT_DOUBLE_EQ(spec.controller.config.persist_gain, 0.05);
  auto error = error_of(kBase + "[controller]\npersist_gain = 1.5\n");
  EXPECT_NE(error.find("job.toml:12:"), std::string::npos) << error;
  EXPECT_NE(error.find("persist_gain"), std::string::npos) << error;
  error = error_of(kBase + "[controller]\npersist_rounds = -1\n");
  EXPECT_NE(error.find("job.toml:12:"), std::string::npos) << error;
  EXPECT_NE(error.find("persist_rounds"), std::string::npos) << error;
}

// [train] precision: float32 unless asked, float64 on request, anything else a located error;
// float64 is refused for asynchronous jobs, whose parameter servers hold float32.
TEST(JobSpecPrecision, Float32UnlessAskedFloat64OnRequestOtherValuesAreLocated) {
  EXPECT_EQ(parse_job_spec(kBase, "job.toml").train.precision, "float32");
  EXPECT_EQ(parse_job_spec(kBase + "precision = \"float64\"\n", "job.toml").train.precision,
            "float64");
  auto error = error_of(kBase + "precision = \"double\"\n");
  EXPECT_EQ(error.rfind("job.toml:11:13:", 0), 0u) << error;
  EXPECT_NE(error.find("[train] precision: expected one of \"float32\", \"float64\", got "
                       "\"double\""),
            std::string::npos)
      << error;
  error = error_of(kBase + "precision = 64\n");
  EXPECT_EQ(error.rfind("job.toml:11:13:", 0), 0u) << error;
  std::string asp = kBase;
  asp.insert(asp.find("[model]"), "mode = \"asp\"\n");
  asp.insert(asp.find("steps = 10"), "precision = \"float64\"\n");
  error = error_of(asp);
  EXPECT_EQ(error.rfind("job.toml:11:13:", 0), 0u) << error;
  EXPECT_NE(error.find("is for mode = \"bsp\""), std::string::npos) << error;
  asp.replace(asp.find("float64"), 7, "float32");
  EXPECT_EQ(parse_job_spec(asp, "job.toml").train.precision, "float32");
}

// Users' own models and data: the keys, where a bad value is located, relative paths, and what
// `omnilearn submit` checks of the files on its own machine (FileChecks::kLocal).
class JobSpecUserFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ol_job_files_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& bytes) const {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  // A .npy file as numpy.save writes it (format 1.0), with `payload` as its data.
  std::string write_npy(const std::string& name, const std::string& descr,
                        const std::string& shape, const std::string& payload) const {
    std::string header =
        "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
    header.append(63 - (10 + header.size()) % 64, ' ');  // pad so the data starts 64-aligned
    header += '\n';
    std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
    bytes += static_cast<char>(header.size() & 0xff);
    bytes += static_cast<char>(header.size() >> 8);
    return write(name, bytes + header + payload);
  }
  static std::string int64s(std::initializer_list<std::int64_t> values) {
    std::string out;
    for (std::int64_t v : values) out.append(reinterpret_cast<const char*>(&v), 8);
    return out;
  }
  // The job file, written into the scratch directory (relative paths resolve against it).
  std::string job(const std::string& model, const std::string& data,
                  const std::string& train = "") const {
    return write("job.toml", "[job]\nname = \"t\"\n[model]\n" + model + "[data]\n" + data +
                                 "[train]\nglobal_batch = 64\nsteps = 10\n" + train);
  }
  static std::string error_of(const std::string& path, FileChecks checks) {
    try {
      load_job_spec(path, checks);
    } catch (const JobSpecError& e) {
      return e.what();
    }
    return "";
  }

  std::filesystem::path dir_;
};

constexpr const char* kScriptModel = "kind = \"torchscript\"\npath = \"model.pt\"\n";
constexpr const char* kPtData = "dataset = \"tensors\"\ntrain = \"train.pt\"\ntest = \"test.pt\"\n";

TEST_F(JobSpecUserFiles, RelativePathsResolveAgainstTheJobFilesDirectory) {
  const std::string path = job(kScriptModel, kPtData, "loss = \"cross_entropy\"\n");
  const JobSpec spec = load_job_spec(path);
  EXPECT_EQ(spec.model.kind, "torchscript");
  EXPECT_EQ(spec.model.path, (dir_ / "model.pt").string());
  EXPECT_EQ(spec.data.dataset, "tensors");
  EXPECT_EQ(spec.data.tensors.train, (dir_ / "train.pt").string());
  EXPECT_EQ(spec.data.tensors.test, (dir_ / "test.pt").string());
  EXPECT_EQ(spec.train.loss, "cross_entropy");
  // Absolute paths stay; a source without a directory leaves them relative (to the CLI's cwd).
  const std::string text = "[job]\nname = \"t\"\n[model]\nkind = \"torchscript\"\npath = "
                           "\"/models/m.pt\"\n[data]\ndataset = \"tensors\"\ntrain_x = "
                           "\"x.npy\"\ntrain_y = \"../y.npy\"\ntest = \"t.pt\"\nclasses = 3\n"
                           "[train]\nglobal_batch = 64\nsteps = 10\n";
  const JobSpec here = parse_job_spec(text, "job.toml");
  EXPECT_EQ(here.model.path, "/models/m.pt");
  EXPECT_EQ(here.data.tensors.train_x, "x.npy");
  EXPECT_EQ(here.data.tensors.classes, 3);
  EXPECT_EQ(parse_job_spec(text, "/jobs/a/job.toml").data.tensors.train_y, "/jobs/y.npy");
}

TEST_F(JobSpecUserFiles, KeysOfAnotherKindAreLocatedErrors) {
  struct Case {
    std::string model, data, train, expected;
  };
  const std::vector<Case> cases = {
      {std::string(kScriptModel) + "hidden = [8]\n", kPtData, "",
       "job.toml:6:10: [model] hidden: only for the built-in models"},
      {"kind = \"torchscript\"\n", kPtData, "", "[model]: missing key 'path'"},
      {"kind = \"mlp\"\npath = \"m.pt\"\n", kPtData, "",
       "job.toml:5:8: [model] path: only for kind = \"torchscript\""},
      {kScriptModel, std::string(kPtData) + "path = \"/data\"\n", "",
       "job.toml:10:8: [data] path: not for dataset = \"tensors\""},
      {"kind = \"mlp\"\n", "dataset = \"synthetic\"\ntrain = \"t.pt\"\n", "",
       "job.toml:7:9: [data] train: only for dataset = \"tensors\""},
      {kScriptModel, std::string(kPtData) + "train_z = \"z.npy\"\n", "",
       "job.toml:10:1: [data]: unknown key 'train_z'"},
      {kScriptModel, "dataset = \"tensors\"\ntrain = \"train.pt\"\n", "",
       "[data]: a tensors dataset needs data.test"},
      {kScriptModel, kPtData, "loss = \"hinge\"\n", "[train] loss: expected one of"},
      {"kind = \"cnn\"\n", kPtData, "loss = \"mse\"\n",
       "[train] loss: loss = \"mse\" needs model.kind = \"torchscript\""},
      {kScriptModel, "dataset = \"fashion-mnist\"\n", "loss = \"mse\"\n",
       "[train] loss: loss = \"mse\" needs [data] dataset = \"tensors\""},
  };
  for (const auto& c : cases) {
    const std::string error = error_of(job(c.model, c.data, c.train), FileChecks::kNone);
    EXPECT_NE(error.find(c.expected), std::string::npos)
        << "expected: " << c.expected << "\n     got: " << error;
    EXPECT_EQ(error.rfind((dir_ / "job.toml").string() + ":", 0), 0u) << error;
  }
}

TEST_F(JobSpecUserFiles, SubmitChecksTheFilesItCanReadAndLocatesTheKey) {
  const std::string path = job(kScriptModel, kPtData);
  // The head and the trainers do not look at the files while parsing.
  EXPECT_EQ(error_of(path, FileChecks::kNone), "");
  std::string error = error_of(path, FileChecks::kLocal);
  EXPECT_NE(error.find("job.toml:5:8: [model] path: model file " + (dir_ / "model.pt").string() +
                       " does not exist"),
            std::string::npos)
      << error;
  write("model.pt", "not a zip");
  error = error_of(path, FileChecks::kLocal);
  EXPECT_NE(error.find("not a TorchScript archive"), std::string::npos) << error;
  write("model.pt", std::string("PK\x03\x04", 4) + "rest of a zip");
  error = error_of(path, FileChecks::kLocal);
  EXPECT_NE(error.find("job.toml:8:9: [data] train: tensor file"), std::string::npos) << error;
  write("train.pt", std::string("PK\x03\x04", 4));
  write("test.pt", "\x80\x02legacy pickle");
  error = error_of(path, FileChecks::kLocal);
  EXPECT_NE(error.find("[data] test: " + (dir_ / "test.pt").string() + ": not a torch.save"),
            std::string::npos)
      << error;
  write("test.pt", std::string("PK\x03\x04", 4));
  EXPECT_EQ(error_of(path, FileChecks::kLocal), "");
}

TEST_F(JobSpecUserFiles, SubmitChecksNpyPairsInFull) {
  const std::string data =
      "dataset = \"tensors\"\ntrain_x = \"x.npy\"\ntrain_y = \"y.npy\"\ntest = \"test.pt\"\n"
      "classes = 3\n";
  write("model.pt", std::string("PK\x03\x04", 4));
  write("test.pt", std::string("PK\x03\x04", 4));
  const std::string path = job(kScriptModel, data);
  write_npy("x.npy", "<f4", "(4, 2)", std::string(32, '\0'));
  write_npy("y.npy", "<i8", "(4,)", int64s({0, 1, 2, 1}));
  EXPECT_EQ(error_of(path, FileChecks::kLocal), "");

  write_npy("y.npy", "<i8", "(4,)", int64s({0, 1, 3, 1}));  // classes = 3
  std::string error = error_of(path, FileChecks::kLocal);
  EXPECT_NE(error.find("job.toml:9:11: [data] train_y: " + (dir_ / "y.npy").string() +
                       ": label 3 is outside [0, 3)"),
            std::string::npos)
      << error;
  write_npy("y.npy", "<i8", "(3,)", int64s({0, 1, 2}));
  error = error_of(path, FileChecks::kLocal);
  EXPECT_NE(error.find("[data] train_y:"), std::string::npos) << error;
  EXPECT_NE(error.find("holds 3 samples but"), std::string::npos) << error;
  write_npy("y.npy", "<f8", "(4,)", std::string(32, '\0'));
  error = error_of(path, FileChecks::kLocal);
  EXPECT_NE(error.find("integer class labels"), std::string::npos) << error;
  write_npy("y.npy", "<i8", "(4,)", int64s({0, 1, 2, 1}));
  write_npy("x.npy", "<f2", "(4, 2)", std::string(16, '\0'));
  error = error_of(path, FileChecks::kLocal);
  EXPECT_NE(error.find("job.toml:8:11: [data] train_x:"), std::string::npos) << error;
  EXPECT_NE(error.find("'<f2' is not supported"), std::string::npos) << error;
  write_npy("x.npy", "<f4", "(4, 2)", std::string(31, '\0'));
  error = error_of(path, FileChecks::kLocal);
  EXPECT_NE(error.find("truncated"), std::string::npos) << error;
}

// [asp]: validated in full, every error located at its key; a bsp job may not carry
// the table.
std::string asp_job(const std::string& table) {
  std::string text = kBase;
  text.insert(text.find("[model]"), "mode = \"asp\"\n");
  return text + "[asp]\n" + table;  // [asp] is line 12, its first key line 13
}

TEST(JobSpecAsp, AValidTableParses) {
  const JobSpec bound = parse_job_spec(
      asp_job("servers = 2\nstaleness = \"bound\"\nmax_staleness = 3\nlr_scaling = \"none\"\n"),
      "job.toml");
  EXPECT_EQ(bound.mode, "asp");
  EXPECT_EQ(bound.asp.servers, 2);
  EXPECT_EQ(bound.asp.staleness, "bound");
  EXPECT_EQ(bound.asp.max_staleness, 3);
  EXPECT_EQ(bound.asp.lr_scaling, "none");
  const JobSpec inverse =
      parse_job_spec(asp_job("staleness = \"inverse\"\nlr_scaling = \"linear\"\n"
                             "refresh_statistics = 0\n"),
                     "job.toml");
  EXPECT_EQ(inverse.asp.staleness, "inverse");
  EXPECT_EQ(inverse.asp.lr_scaling, "linear");
  EXPECT_EQ(inverse.asp.refresh_statistics, 0);
  // Without the table: the defaults.
  const JobSpec plain = parse_job_spec(asp_job("").substr(0, asp_job("").find("[asp]")), "job.toml");
  EXPECT_EQ(plain.mode, "asp");
  EXPECT_EQ(plain.asp.servers, 1);
}

TEST(JobSpecAsp, DefaultsAreOneServerNoStalenessRuleAndLinearScaling) {
  const AspSection asp;
  EXPECT_EQ(asp.servers, 1);
  EXPECT_EQ(asp.staleness, "none");
  EXPECT_EQ(asp.max_staleness, 0);
  EXPECT_EQ(asp.lr_scaling, "linear");
  EXPECT_EQ(asp.refresh_statistics, 32);
  EXPECT_EQ(parse_job_spec(kBase, "job.toml").asp.lr_scaling, "linear");
}

TEST(JobSpecAsp, BadSettingsAreLocatedErrors) {
  struct Case {
    std::string table;
    std::string where;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"servers = 0\n", "job.toml:13:11:", "[asp] servers: expected an integer in [1, 4096], got 0"},
      {"servers = \"two\"\n", "job.toml:13:11:", "expected an integer, got a string"},
      {"staleness = \"bounded\"\n", "job.toml:13:13:",
       "expected one of \"none\", \"inverse\", \"bound\", got \"bounded\""},
      {"staleness = \"bound\"\n", "job.toml:13:13:", "\"bound\" needs max_staleness"},
      {"staleness = \"bound\"\nmax_staleness = 0\n", "job.toml:14:17:",
       "[asp] max_staleness: expected an integer >= 1, got 0"},
      {"staleness = \"inverse\"\nmax_staleness = 4\n", "job.toml:14:17:",
       "only with staleness = \"bound\" (staleness is \"inverse\")"},
      {"max_staleness = 4\n", "job.toml:13:17:", "only with staleness = \"bound\" (staleness is \"none\")"},
      {"lr_scaling = \"sqrt\"\n", "job.toml:13:14:", "expected one of \"none\", \"linear\", got \"sqrt\""},
      {"refresh_statistics = -1\n", "job.toml:13:22:",
       "[asp] refresh_statistics: expected an integer in [0, 100000], got -1"},
      {"server = 2\n", "job.toml:13:1:", "[asp]: unknown key 'server'"},
  };
  for (const auto& c : cases) {
    const auto error = error_of(asp_job(c.table));
    EXPECT_EQ(error.rfind(c.where, 0), 0u) << c.table << " -> " << error;
    EXPECT_NE(error.find(c.says), std::string::npos) << c.table << " -> " << error;
  }
}

TEST(JobSpecAsp, ABspJobMayNotCarryTheTable) {
  const auto error = error_of(kBase + "[asp]\nservers = 2\n");
  EXPECT_EQ(error.rfind("job.toml:11:1:", 0), 0u) << error;
  EXPECT_NE(error.find("only for mode = \"asp\" (mode is \"bsp\")"), std::string::npos) << error;
}

// Elastic by default: a job without max_workers takes every worker the cluster has, as many as
// the batch can feed min_batch samples each.
TEST(JobSpecElastic, WithoutMaxWorkersAJobTakesAsManyWorkersAsTheBatchCanFeed) {
  EXPECT_EQ(parse_job_spec(kBase, "job.toml").elastic.max_workers, 64);
  EXPECT_EQ(parse_job_spec(kBase + "[controller]\nmin_batch = 8\n", "job.toml").elastic.max_workers,
            8);
  EXPECT_EQ(parse_job_spec(kBase + "[elastic]\nmin_workers = 3\n", "job.toml").elastic.max_workers,
            64);
  // Set, it is kept.
  EXPECT_EQ(parse_job_spec(kBase + "[elastic]\nmax_workers = 2\n", "job.toml").elastic.max_workers,
            2);
  // More min_workers than the batch can feed names min_workers, not the key the user left out.
  auto error = error_of(kBase + "[controller]\nmin_batch = 16\n[elastic]\nmin_workers = 5\n");
  EXPECT_NE(error.find("5 workers (elastic.min_workers)"), std::string::npos) << error;
}

// The recorded keys are the parser's: a range it enforces, the default a job gets.
TEST(JobSpecKeys, RecordTheParsersRangesAndDefaults) {
  auto keys = job_spec_keys();
  auto find = [&](const std::string& section, const std::string& key,
                  const std::string& when = "") -> const JobKey* {
    for (const auto& k : keys) {
      if (k.section == section && k.key == key && k.when == when) return &k;
    }
    return nullptr;
  };
  const JobKey* gain = find("controller", "gain");
  ASSERT_NE(gain, nullptr);
  EXPECT_EQ(gain->type, "number");
  EXPECT_EQ(gain->default_value, "1");
  EXPECT_EQ(gain->range, "(0, 1]");
  const JobKey* mode = find("job", "mode");
  ASSERT_NE(mode, nullptr);
  EXPECT_EQ(mode->default_value, "\"bsp\"");
  EXPECT_EQ(mode->range, "\"bsp\", \"asp\"");
  const JobKey* servers = find("asp", "servers");
  ASSERT_NE(servers, nullptr);
  EXPECT_EQ(servers->range, "[1, 4096]");
  // A key read two ways is listed once per reading.
  EXPECT_NE(find("data", "classes", "dataset = \"tensors\""), nullptr);
  EXPECT_EQ(find("data", "classes"), nullptr);
  // Every section is there, and every key once per reading.
  for (const char* section :
       {"job", "model", "data", "train", "controller", "elastic", "checkpoint", "asp"}) {
    bool any = false;
    for (const auto& k : keys) any |= k.section == section;
    EXPECT_TRUE(any) << section;
  }
}

}  // namespace
}  // namespace omnilearn::actors
