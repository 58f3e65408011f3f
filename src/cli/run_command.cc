// SPDX-License-Identifier: Apache-2.0
// `dcp run`: plan a batch, execute forward and backward on in-process devices with seeded random
// inputs, and check every output against the dense single-device reference.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <tuple>

#include "cli/commands.h"
#include "cli/planning.h"
#include "dcp/runtime.h"

namespace dcp::cli {
namespace {

struct RunArgs {
  PlacementArgs placement;
  std::string comm = "local";
  int32_t divisions = 0;
  std::string dump;
  bool json = false;
};

// NumPy .npy (format 1.0) of a float32 array.
Status WriteNpy(const std::filesystem::path& path, const std::vector<float>& data,
                const std::vector<int64_t>& shape) {
  std::string dims;
  for (int64_t d : shape) dims += fmt::format("{}, ", d);
  if (shape.size() > 1) dims.resize(dims.size() - 2);
  std::string header =
      fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), }}", dims);
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  const auto header_len = static_cast<uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  out.put(static_cast<char>(header_len & 0xff));
  out.put(static_cast<char>(header_len >> 8));
  out << header;
  out.write(reinterpret_cast<const char*>(data.data()),
            static_cast<std::streamsize>(data.size() * sizeof(float)));
  if (!out) return Status::NotFound(fmt::format("cannot write '{}'", path.string()));
  return Status::Ok();
}

Status Dump(const std::string& dir, const Batch& batch, const BatchTensors& t, double scale) {
  std::filesystem::create_directories(dir);
  const AttentionShape& s = batch.shape();
  const int64_t tokens = batch.total_tokens();
  const std::vector<int64_t> q_shape = {tokens, s.heads, s.head_dim};
  const std::vector<int64_t> kv_shape = {tokens, s.kv_heads, s.head_dim};
  for (const auto& [name, data, shape] :
       {std::tuple{"q", &t.q, q_shape}, std::tuple{"k", &t.k, kv_shape},
        std::tuple{"v", &t.v, kv_shape}, std::tuple{"do", &t.d_o, q_shape},
        std::tuple{"o", &t.o, q_shape},
        std::tuple{"lse", &t.lse, std::vector<int64_t>{tokens, s.heads}},
        std::tuple{"dq", &t.dq, q_shape}, std::tuple{"dk", &t.dk, kv_shape},
        std::tuple{"dv", &t.dv, kv_shape}}) {
    DCP_RETURN_IF_ERROR(
        WriteNpy(std::filesystem::path(dir) / (std::string(name) + ".npy"), *data, shape));
  }
  nlohmann::json masks = nlohmann::json::array();
  for (const MaskSpec& m : batch.mask_specs()) masks.push_back(m.ToString());
  const nlohmann::json j = {{"seqlens", batch.seqlens()}, {"masks", masks},
                            {"heads", s.heads},           {"kv_heads", s.kv_heads},
                            {"head_dim", s.head_dim},     {"softmax_scale", scale}};
  std::ofstream out(std::filesystem::path(dir) / "batch.json");
  out << j.dump(2) << '\n';
  if (!out) return Status::NotFound(fmt::format("cannot write '{}/batch.json'", dir));
  return Status::Ok();
}

int Run(const BatchArgs& batch_args, const RunArgs& args) {
  if (args.comm != "local") {
    return ReportError(Status::Unsupported(
        fmt::format("--comm {}: only 'local' (in-process) is available in this build", args.comm)));
  }
  Result<PlannedBatch> planned =
      PlanFromArgs(batch_args, args.placement, ScheduleOptions{.divisions = args.divisions});
  if (!planned.ok()) return ReportError(planned.status());
  const Batch* batch = &planned->batch;
  const Plan* plan = &planned->plan;
  const Topology* topology = &planned->topology;
  const double plan_ms = planned->ms.total();

  Stopwatch watch;
  BatchTensors run = BatchTensors::ZerosFor(*plan);
  std::mt19937_64 rng(batch_args.seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (std::vector<float>* v : {&run.q, &run.k, &run.v, &run.d_o}) {
    for (float& x : *v) {
      x = u(rng);
      if (batch->shape().dtype == DType::kBFloat16) x = Bf16ToFloat(FloatToBf16(x));
    }
  }
  BatchTensors reference = run;
  watch.Lap();
  if (Status s = RunPlanInProcess(*plan, run, {}); !s.ok()) return ReportError(s);
  const double run_ms = watch.Lap();
  DenseAttention(*batch, 0, reference);
  const double reference_ms = watch.Lap();

  const double tolerance = batch->shape().dtype == DType::kFloat32 ? 1e-5 : 1e-2;
  nlohmann::json errors;
  bool within = true;
  for (const auto& [name, actual, expected] :
       {std::tuple{"o", &run.o, &reference.o}, std::tuple{"lse", &run.lse, &reference.lse},
        std::tuple{"dq", &run.dq, &reference.dq}, std::tuple{"dk", &run.dk, &reference.dk},
        std::tuple{"dv", &run.dv, &reference.dv}}) {
    const TensorError e = CompareTensors(*actual, *expected);
    errors[name] = {{"max_abs", e.max_abs}, {"relative", e.relative}};
    within = within && e.relative <= tolerance;
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(batch->shape().head_dim));
  if (!args.dump.empty()) {
    if (Status s = Dump(args.dump, *batch, run, scale); !s.ok()) return ReportError(s);
  }
  if (args.json) {
    const nlohmann::json j = {
        {"errors", errors},
        {"tolerance", tolerance},
        {"within_tolerance", within},
        {"devices", topology->devices()},
        {"n_divisions", plan->n_divisions},
        {"ms", {{"plan", plan_ms}, {"run", run_ms}, {"reference", reference_ms}}}};
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print(
        "{} sequences, {} tokens on {} devices ({} divisions): planned in {:.1f} ms, ran "
        "forward+backward in {:.1f} ms (dense reference {:.1f} ms)\n",
        batch->seqlens().size(), batch->total_tokens(), topology->devices(), plan->n_divisions,
        plan_ms, run_ms, reference_ms);
    for (const auto& [name, e] : errors.items()) {
      fmt::print("  {:>3}: max abs error {:.3g}, relative {:.3g}\n", name,
                 e["max_abs"].get<double>(), e["relative"].get<double>());
    }
    fmt::print("{} (tolerance {:g})\n",
               within ? "OK: matches the dense reference" : "FAILED: above tolerance", tolerance);
  }
  return within ? 0 : 1;
}

}  // namespace

CommandRunner AddRunCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "run", "Plan and execute forward and backward on in-process devices; check the numerics");
  auto batch_args = std::make_shared<BatchArgs>();
  // The dense reference is O(tokens^2): a small batch by default.
  batch_args->tokens = 2048;
  batch_args->block_size = "256";
  auto args = std::make_shared<RunArgs>();
  args->placement.topology = "1x4";
  AddBatchOptions(*cmd, *batch_args);
  AddPlacementOptions(*cmd, args->placement);
  cmd->add_option("--comm", args->comm, "Communicator: local")->capture_default_str();
  cmd->add_option("--divisions", args->divisions, "Number of divisions, 0 = auto")
      ->capture_default_str();
  cmd->add_option("--dump", args->dump, "Write the batch as .npy files and batch.json here");
  cmd->add_flag("--json", args->json, "Print one JSON object");
  return [cmd, batch_args, args]() -> int {
    if (!cmd->parsed()) return 0;
    // --devices N (a batch option, also used by --block-size auto) means one node of N devices
    // unless --topology is given.
    if (cmd->count("--devices") > 0 && cmd->count("--topology") == 0) {
      args->placement.topology = fmt::format("1x{}", batch_args->devices);
    }
    return Run(*batch_args, *args);
  };
}

}  // namespace dcp::cli
