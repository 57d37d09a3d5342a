// Checkpoints: a replica's committed state in one file that PyTorch loads
// (torch.load(path)["model"] feeds load_state_dict), written whole through
// runtime::write_file_atomically (a unique temporary name, fsync of the file and its directory,
// then a rename: a crash leaves the old file or the whole new one).
#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/atomic_file.hpp"
#include "training/trainer_impl.hpp"

namespace omnilearn::training {
namespace {

constexpr int64_t kCheckpointFormat = 1;

// Throws CheckpointError(`what`) if `cond` fails.
void expect(bool cond, const std::string& path, const std::string& what) {
  if (!cond) throw CheckpointError("checkpoint " + path + ": " + what);
}

}  // namespace

void Trainer::save_checkpoint(const std::string& path) const {
  const Impl& s = *impl_;
  c10::Dict<std::string, at::Tensor> model;
  for (const auto& [name, t] : s.params) model.insert(name, t.detach().to(at::kCPU).clone());
  for (const auto& [name, t] : s.buffers) model.insert(name, t.detach().to(at::kCPU).clone());
  c10::Dict<std::string, at::Tensor> optimizer;
  for (const auto& [name, t] : s.optimizer->state()) optimizer.insert(name, t.to(at::kCPU).clone());
  c10::Dict<std::string, int64_t> trainer;
  trainer.insert("format", kCheckpointFormat);
  trainer.insert("step", s.step);
  trainer.insert("epoch", s.cursor.epoch);
  trainer.insert("position", s.cursor.position);
  trainer.insert("dataset_size", s.sampler.dataset_size());
  trainer.insert("data_seed", static_cast<int64_t>(s.sampler.seed()));
  // Top level is {"model": state_dict, "optimizer": ..., "trainer": ..., "optimizer_kind": ...}:
  // in Python, torch.load(path)["model"] feeds load_state_dict of the equivalent Sequential
  // (of the same module, for a TorchScript model).
  c10::impl::GenericDict top(c10::StringType::get(), c10::AnyType::get());
  top.insert("model", model);
  top.insert("optimizer", optimizer);
  top.insert("optimizer_kind", s.config.optimizer.kind);
  top.insert("trainer", trainer);
  std::vector<char> bytes;
  try {
    bytes = torch::jit::pickle_save(top);
  } catch (const std::exception& e) {
    throw CheckpointError("cannot serialize checkpoint " + path + ": " + e.what());
  }
  try {
    runtime::write_file_atomically(path, std::string_view(bytes.data(), bytes.size()));
  } catch (const runtime::AtomicWriteError& e) {
    throw CheckpointError(e.what());
  }
}

void Trainer::load_checkpoint(const std::string& path) {
  Impl& s = *impl_;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError("cannot open checkpoint " + path + ": " + std::strerror(errno));
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  c10::IValue value;
  try {
    value = torch::jit::pickle_load(bytes);
  } catch (const std::exception& e) {
    throw CheckpointError("checkpoint " + path + " is not a readable archive: " + e.what());
  }
  expect(value.isGenericDict(), path, "top level is not a dict");
  const c10::impl::GenericDict top = value.toGenericDict();
  for (const char* key : {"model", "optimizer", "optimizer_kind", "trainer"}) {
    expect(top.contains(key), path, std::string("missing entry \"") + key + "\"");
  }
  auto tensors = [&](const char* key) {
    const c10::IValue v = top.at(key);
    expect(v.isGenericDict(), path, std::string("\"") + key + "\" is not a dict");
    std::map<std::string, at::Tensor> out;
    for (const auto& entry : v.toGenericDict()) {
      expect(entry.key().isString() && entry.value().isTensor(), path,
             std::string("\"") + key + "\" must map names to tensors");
      out.emplace(entry.key().toStringRef(), entry.value().toTensor());
    }
    return out;
  };
  const std::map<std::string, at::Tensor> model = tensors("model");
  const std::map<std::string, at::Tensor> optimizer = tensors("optimizer");
  const c10::IValue kind = top.at("optimizer_kind");
  expect(kind.isString() && kind.toStringRef() == s.config.optimizer.kind, path,
         "optimizer kind differs from this trainer's \"" + s.config.optimizer.kind + "\"");
  std::map<std::string, int64_t> counters;
  const c10::IValue trainer = top.at("trainer");
  expect(trainer.isGenericDict(), path, "\"trainer\" is not a dict");
  for (const auto& entry : trainer.toGenericDict()) {
    expect(entry.key().isString() && entry.value().isInt(), path,
           "\"trainer\" must map names to integers");
    counters[entry.key().toStringRef()] = entry.value().toInt();
  }
  for (const char* key : {"format", "step", "epoch", "position", "dataset_size", "data_seed"}) {
    expect(counters.count(key) == 1, path, std::string("missing trainer field \"") + key + "\"");
  }
  expect(counters["format"] == kCheckpointFormat, path,
         "format " + std::to_string(counters["format"]) + " is not " +
             std::to_string(kCheckpointFormat));
  expect(counters["dataset_size"] == s.sampler.dataset_size() &&
             counters["data_seed"] == static_cast<int64_t>(s.sampler.seed()),
         path, "it was written for another dataset size or data seed");
  const Cursor cursor{counters["epoch"], counters["position"]};
  expect(counters["step"] >= 0 && cursor.epoch >= 0 && cursor.position >= 0 &&
             cursor.position < s.sampler.dataset_size(),
         path, "step or cursor out of range");

  auto match = [&](const std::vector<NamedTensor>& live,
                   const std::map<std::string, at::Tensor>& saved, const char* what) {
    expect(live.size() == saved.size(), path,
           std::string(what) + " has " + std::to_string(saved.size()) + " entries, expected " +
               std::to_string(live.size()));
    for (const auto& [name, t] : live) {
      auto it = saved.find(name);
      expect(it != saved.end(), path, std::string(what) + " lacks \"" + name + "\"");
      expect(it->second.sizes() == t.sizes() && it->second.scalar_type() == t.scalar_type(), path,
             std::string(what) + " entry \"" + name + "\" has another shape or type");
    }
  };
  std::vector<NamedTensor> all = s.params;
  all.insert(all.end(), s.buffers.begin(), s.buffers.end());
  match(all, model, "model");
  match(s.optimizer->state(), optimizer, "optimizer");

  c10::NoGradGuard no_grad;
  for (auto& [name, t] : all) t.copy_(model.at(name));
  for (const auto& [name, t] : s.optimizer->state()) {
    at::Tensor live = t;
    live.copy_(optimizer.at(name));
  }
  s.step = counters["step"];
  s.cursor = cursor;
}

}  // namespace omnilearn::training
