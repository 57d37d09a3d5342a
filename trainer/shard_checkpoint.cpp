#include "trainer/shard_checkpoint.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <map>
#include <span>
#include <stdexcept>

#include "runtime/atomic_file.hpp"
#include "training/trainer.hpp"

namespace omnilearn::actors {

void apply_push(ShardState& s, std::int64_t from_version, double weight,
                std::span<const float> gradient) {
  if (static_cast<std::int64_t>(gradient.size()) != s.params.numel()) {
    throw std::invalid_argument(fmt::format("asp: a gradient of {} floats for a shard of {}",
                                            gradient.size(), s.params.numel()));
  }
  c10::NoGradGuard no_grad;
  at::Tensor grad = s.params.mutable_grad();
  grad.copy_(at::from_blob(const_cast<float*>(gradient.data()),
                           {static_cast<int64_t>(gradient.size())},
                           at::TensorOptions().dtype(at::kFloat)));
  if (weight != 1.0) grad.mul_(weight);
  s.optimizer->step(training::scheduled_lr(s.optimizer_spec, from_version) * s.lr_factor,
                    from_version + 1);
}

std::unique_ptr<ShardState> make_shard_state(const asp::ShardLayout& layout, std::int32_t shard,
                                             const std::vector<float>& initial,
                                             const training::OptimizerSpec& optimizer,
                                             const std::vector<float>& buffers) {
  if (static_cast<std::int64_t>(initial.size()) != layout.parameters()) {
    throw std::invalid_argument(fmt::format("the shard layout is for {} parameters, not {}",
                                            layout.parameters(), initial.size()));
  }
  auto s = std::make_unique<ShardState>();
  s->shard = shard;
  s->parameters = layout.parameters();
  s->slice = layout.slice(shard);
  s->optimizer_spec = optimizer;
  s->params = at::from_blob(const_cast<float*>(initial.data()) + s->slice.offset,
                            {s->slice.size}, at::TensorOptions().dtype(at::kFloat))
                  .clone();
  s->params.mutable_grad() = at::zeros_like(s->params);
  if (!buffers.empty()) {
    s->buffers = at::from_blob(const_cast<float*>(buffers.data()),
                               {static_cast<int64_t>(buffers.size())},
                               at::TensorOptions().dtype(at::kFloat))
                     .clone();
  }
  s->optimizer = std::make_unique<training::Optimizer>(
      s->optimizer_spec, std::vector<training::NamedTensor>{{"shard", s->params}});
  return s;
}

void save_shard(const ShardState& s, const asp::ServerCheckpoint& checkpoint) {
  c10::Dict<std::string, at::Tensor> shard;
  shard.insert("params", s.params.detach().clone());
  if (s.buffers.defined()) shard.insert("buffers", s.buffers.clone());
  c10::Dict<std::string, at::Tensor> optimizer;
  for (const auto& [name, t] : s.optimizer->state()) optimizer.insert(name, t.clone());
  c10::Dict<std::string, int64_t> meta;
  meta.insert("shard", s.shard);
  meta.insert("offset", s.slice.offset);
  meta.insert("size", s.slice.size);
  meta.insert("parameters", s.parameters);
  meta.insert("version", checkpoint.version);
  meta.insert("incarnation", checkpoint.incarnation);
  const std::vector<std::uint8_t> core = asp::encode_checkpoint(checkpoint);
  at::Tensor core_bytes =
      at::from_blob(const_cast<std::uint8_t*>(core.data()), {static_cast<int64_t>(core.size())},
                    at::TensorOptions().dtype(at::kByte))
          .clone();
  c10::impl::GenericDict top(c10::StringType::get(), c10::AnyType::get());
  top.insert("shard", shard);
  top.insert("optimizer", optimizer);
  top.insert("optimizer_kind", s.optimizer_spec.kind);
  top.insert("asp", meta);
  top.insert("core", core_bytes);
  const std::vector<char> bytes = torch::jit::pickle_save(top);
  runtime::write_file_atomically(s.checkpoint_path, std::string_view(bytes.data(), bytes.size()));
}

asp::ServerCheckpoint load_shard(ShardState& s, const std::vector<char>& bytes,
                                 const std::string& what, std::int64_t version) {
  auto fail = [&](const std::string& why) {
    throw std::runtime_error("server checkpoint " + what + ": " + why);
  };
  c10::IValue value;
  try {
    value = torch::jit::pickle_load(bytes);
  } catch (const std::exception& e) {
    fail(std::string("not a checkpoint (") + e.what() + ")");
  }
  if (!value.isGenericDict()) fail("top level is not a dict");
  const auto top = value.toGenericDict();
  for (const char* key : {"shard", "optimizer", "asp", "core"}) {
    if (!top.contains(key)) fail(std::string("missing \"") + key + "\"");
  }
  std::map<std::string, int64_t> meta;
  for (const auto& e : top.at("asp").toGenericDict())
    meta[e.key().toStringRef()] = e.value().toInt();
  if (meta["offset"] != s.slice.offset || meta["size"] != s.slice.size ||
      meta["parameters"] != s.parameters) {
    fail("written for another shard layout");
  }
  const at::Tensor core = top.at("core").toTensor().contiguous();
  auto checkpoint = asp::decode_checkpoint(std::span<const std::uint8_t>(
      core.data_ptr<std::uint8_t>(), static_cast<std::size_t>(core.numel())));
  if (!checkpoint) fail("its server state does not decode");
  if (version >= 0 && checkpoint->version != version) {
    // Rewritten after the report the scheduler recorded: by an incarnation declared gone that
    // still runs (cut off, on a shared disk). No fence answered for that state.
    fail(fmt::format("holds version {}, the scheduler recorded version {} for it",
                     checkpoint->version, version));
  }
  const auto saved_shard = top.at("shard").toGenericDict();
  const at::Tensor params = saved_shard.at("params").toTensor();
  if (params.numel() != s.slice.size) fail("its parameters have the wrong size");
  // A file written before shard 0 kept the buffers has none: it resumes with the shard's
  // (initial) ones, as an OLASPCK1 core resumes with no taken batches. One with buffers must
  // match the model's.
  at::Tensor buffers;
  if (saved_shard.contains("buffers")) buffers = saved_shard.at("buffers").toTensor();
  if (buffers.defined() && (!s.buffers.defined() || buffers.numel() != s.buffers.numel())) {
    fail(fmt::format("it holds {} buffer values, this shard {}", buffers.numel(),
                     s.buffers.defined() ? s.buffers.numel() : 0));
  }
  const auto saved = top.at("optimizer").toGenericDict();
  for (const auto& [name, t] : s.optimizer->state()) {
    if (!saved.contains(name) || saved.at(name).toTensor().numel() != t.numel()) {
      fail("its optimizer state does not match (" + name + ")");
    }
  }
  c10::NoGradGuard no_grad;
  s.params.copy_(params.reshape({-1}));
  if (buffers.defined()) s.buffers.copy_(buffers.reshape({-1}));
  for (const auto& [name, t] : s.optimizer->state()) {
    const_cast<at::Tensor&>(t).copy_(saved.at(name).toTensor().reshape(t.sizes()));
  }
  return *checkpoint;
}

ResumedShard resume_shard(ShardState& s, const ResumeSources& sources) {
  ResumedShard out;
  out.resumed_from = "initial";
  auto try_load = [&](const std::vector<char>& bytes, const std::string& what, const char* source,
                      std::int64_t version) {
    try {
      out.from = load_shard(s, bytes, what, version);  // changes nothing when it throws
      out.resumed_from = source;
    } catch (const std::exception& e) {
      out.refused.push_back(e.what());
    }
  };
  if (sources.local && !sources.local->empty()) {
    try_load(*sources.local, sources.local_path, "local", sources.local_version);
  }
  if (sources.head_copy && sources.head_version > out.from.version) {
    try_load(*sources.head_copy, "(the head's copy)", "head", -1);
  }
  return out;
}

}  // namespace omnilearn::actors
