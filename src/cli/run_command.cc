// SPDX-License-Identifier: Apache-2.0
// `dcp run`: plan a batch, execute forward and backward with seeded random inputs, and check every
// output against the dense single-device reference. The devices are threads of this process
// (--comm local) or the ranks of an MPI job, one rank per device (--comm mpi, under mpirun).
//
// Over MPI every rank parses the same options. Rank 0 plans once and sends each rank its part of
// the plan (PlanPartForDevice + EncodePlan); each rank decodes it, makes the seeded inputs of its
// own tokens only (the token map's; every input value is a function of the seed and its place in
// the batch), runs a rank-local Executor forward and backward, and sends rank 0 its local
// outputs. Rank 0 tells every rank that all arrived, then checks them against the reference and
// reports exactly as the in-process run does. With --no-reference nothing is gathered or checked,
// and no rank ever holds more than its own tokens. Every step goes through the Communicator, so an
// error on one rank (it calls Fail) stops every other rank with a CommFailure naming it, within
// --comm-timeout at worst: each rank prints "dcp: error: rank R: ..." and exits non-zero.
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <random>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "cli/planning.h"
#include "dcp/baselines.h"
#include "dcp/runtime.h"
#include "util/memory.h"
#include "util/random.h"

namespace dcp::cli {
namespace {

struct RunArgs {
  PlacementArgs placement;
  std::string strategy = "dcp";  // dcp's planner, or a baseline's plan (include/dcp/baselines.h)
  std::string comm = "local";
  double comm_timeout_s = 30;  // a device gives up after this long without progress
  PlannerArgs planner;
  std::string dump;
  bool json = false;
  bool no_reference = false;  // run only: no gathering, no dense reference, no check
  bool force = false;         // run even above the memory and reference-time limits
};

// The dense reference's speed on one core, in the FLOPs dcp counts (forward 4 and backward 10 per
// query-key pair, head and head dimension): 1.3-1.5 GFLOP/s measured on the project's 2-core
// machine (a 4096-token causal sequence, 8 heads, head dim 128: 94 s). Estimates use 1 GFLOP/s, so
// they err long.
constexpr double kReferenceFlopsPerSecond = 1e9;
// Without --force, `dcp run` refuses a dense reference estimated longer than this, and a local
// run needing more than this fraction of the machine's memory.
constexpr double kMaxReferenceSeconds = 600;
constexpr double kMaxMemoryFraction = 0.8;

double ReferenceSeconds(const Batch& batch) {
  double area = 0;
  for (const Mask& mask : batch.masks()) area += static_cast<double>(mask.TotalArea());
  const AttentionShape& s = batch.shape();
  return area * 14 * static_cast<double>(s.heads * s.head_dim) / kReferenceFlopsPerSecond;
}

// InvalidArgument when the dense reference would take longer than the limit, unless forced.
Status CheckReferenceTime(const RunArgs& args, const Batch& batch) {
  const double seconds = ReferenceSeconds(batch);
  if (args.force || args.no_reference || seconds <= kMaxReferenceSeconds) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "the dense reference check of {} tokens would take about {:.0f} minutes on one core (the "
      "limit is {:.0f}); pass --no-reference to run without it, or --force to wait",
      batch.total_tokens(), seconds / 60, kMaxReferenceSeconds / 60));
}

// Bytes a local run holds at once: the whole batch's inputs and outputs (twice with the
// reference, which also accumulates dK and dV in double), and every device's buffers at its peak.
double LocalRunBytes(const Plan& plan, int64_t tokens, bool reference) {
  const AttentionShape& s = plan.shape;
  const double floats_per_token =
      static_cast<double>(4 * s.heads * s.head_dim + 4 * s.kv_heads * s.head_dim + s.heads);
  double bytes = static_cast<double>(tokens) * floats_per_token * sizeof(float);
  if (reference) {
    bytes = 2 * bytes + static_cast<double>(tokens * 2 * s.kv_heads * s.head_dim) * sizeof(double);
  }
  for (const int64_t peak : PeakBufferBytesPerDevice(plan)) bytes += static_cast<double>(peak);
  return bytes;
}

// InvalidArgument when a local run would need more than the limit of the machine's memory,
// unless forced.
Status CheckLocalMemory(const RunArgs& args, const Plan& plan, int64_t tokens) {
  const double bytes = LocalRunBytes(plan, tokens, !args.no_reference);
  const auto machine = static_cast<double>(internal::ProcessMemoryBytes());
  if (args.force || machine <= 0 || bytes <= kMaxMemoryFraction * machine) return Status::Ok();
  constexpr double kGiB = 1 << 30;
  return Status::InvalidArgument(fmt::format(
      "this run needs about {:.1f} GiB in one process (the batch's tensors{} and all {} devices' "
      "buffers), more than {:.0f}% of the {:.1f} GiB this process may have (the machine's memory, "
      "or ulimit -v); use fewer --tokens,{} --comm "
      "mpi, or --force",
      bytes / kGiB, args.no_reference ? "" : " twice, for the reference", plan.topology.devices(),
      kMaxMemoryFraction * 100, machine / kGiB, args.no_reference ? "" : " --no-reference,"));
}

// One line of progress on stderr, when it is a terminal and the output is not --json.
void Progress(const RunArgs& args, const std::string& line) {
  if (args.json || !::isatty(STDERR_FILENO)) return;
  std::fprintf(stderr, "dcp run: %s\n", line.c_str());
  std::fflush(stderr);
}

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
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return Status::NotFound(
        fmt::format("--dump: cannot create the directory '{}': {}", dir, error.message()));
  }
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
                            {"head_dim", s.head_dim},     {"softmax_scale", scale},
                            {"dtype", ToString(s.dtype)}};
  std::ofstream out(std::filesystem::path(dir) / "batch.json");
  out << j.dump(2) << '\n';
  if (!out) return Status::NotFound(fmt::format("cannot write '{}/batch.json'", dir));
  return Status::Ok();
}

// Seeded random inputs, already representable in the storage dtype. Every value is a function of
// the seed, the tensor and the element's index in the packed batch, so each rank of an MPI run
// makes just its own tokens' values and they agree with the whole batch's.
float InputValue(uint64_t seed, uint64_t tensor, uint64_t index, DType dtype) {
  const uint64_t x = Mix64(seed * 0x9e3779b97f4a7c15ull + tensor * 0xbf58476d1ce4e5b9ull + index);
  const float u = static_cast<float>(x >> 40) / static_cast<float>(1 << 24) * 2.f - 1.f;
  return dtype == DType::kBFloat16 ? Bf16ToFloat(FloatToBf16(u)) : u;
}

enum InputTensor : uint64_t { kInputQ = 0, kInputK = 1, kInputV = 2, kInputDO = 3 };

// `width` values per token of input `tensor` for the tokens at `global` (packed indices).
std::vector<float> InputRows(uint64_t seed, InputTensor tensor, const std::vector<int64_t>& global,
                             int64_t width, DType dtype) {
  std::vector<float> out;
  out.reserve(global.size() * static_cast<size_t>(width));
  for (int64_t g : global) {
    for (int64_t i = 0; i < width; ++i) {
      out.push_back(InputValue(seed, tensor, static_cast<uint64_t>(g * width + i), dtype));
    }
  }
  return out;
}

void FillInputs(uint64_t seed, DType dtype, const Plan& plan, BatchTensors& t) {
  std::vector<int64_t> all(t.lse.size() / static_cast<size_t>(plan.shape.heads));
  std::iota(all.begin(), all.end(), int64_t{0});
  const int64_t q_width = plan.shape.heads * plan.shape.head_dim;
  const int64_t kv_width = plan.shape.kv_heads * plan.shape.head_dim;
  t.q = InputRows(seed, kInputQ, all, q_width, dtype);
  t.k = InputRows(seed, kInputK, all, kv_width, dtype);
  t.v = InputRows(seed, kInputV, all, kv_width, dtype);
  t.d_o = InputRows(seed, kInputDO, all, q_width, dtype);
}

struct RunTimes {  // milliseconds
  double plan = 0, run = 0, reference = 0;
};

// The batch planned by dcp's planner or, with --strategy, by a baseline on --topology with its
// default options (loongtrain: an inner ring of 1).
Result<PlannedFromArgs> PlanForRun(const BatchArgs& batch_args, const RunArgs& args) {
  Result<Strategy> strategy = ParseStrategy(args.strategy);
  if (!strategy.ok()) return strategy.status().WithContext("--strategy");
  if (*strategy == Strategy::kDcp) {
    return PlanFromArgs(batch_args, args.placement, args.planner, /*progress=*/!args.json);
  }
  DCP_RETURN_IF_ERROR(CheckPartitionWithStrategy(args.planner, *strategy));
  DCP_ASSIGN_OR_RETURN(const Topology topology, BuildTopology(batch_args, args.placement));
  int64_t empty_sequences = 0;
  DCP_ASSIGN_OR_RETURN(Batch batch, BuildBatch(batch_args, &empty_sequences));
  Stopwatch watch;
  DCP_ASSIGN_OR_RETURN(BaselinePlan baseline,
                       PlanBaseline(*strategy, batch,
                                    BaselineOptions{.topology = topology,
                                                    .max_planning_bytes =
                                                        args.planner.max_planning_memory}));
  PlannedFromArgs out{.batch = std::move(batch), .planned = {}};
  out.empty_sequences = empty_sequences;
  out.planned.blocks = std::move(baseline.blocks);
  out.planned.plan = std::move(baseline.plan);
  out.planned.ms.compile = watch.Lap();
  return out;
}

// Compares the outputs of `run` with the dense `reference`, writes --dump, prints the table or
// --json, and returns the exit code: 0 when every output is within tolerance. `planned` holds the
// batch, its plan and the empty sequences of an --idx file left out of the batch.
int CheckAndReport(const RunArgs& args, const PlannedFromArgs& planned, const BatchTensors& run,
                   const BatchTensors& reference, const RunTimes& ms) {
  const Batch& batch = planned.batch;
  const Plan& plan = planned.planned.plan;
  nlohmann::json errors;
  bool within = true;
  const std::vector<TensorError> compared = CompareOutputs(run, reference, batch.shape().dtype);
  for (size_t i = 0; i < compared.size(); ++i) {
    const Output output = kOutputs[i];
    const TensorError& e = compared[i];
    errors[ToString(output)] = {{"max_abs", e.max_abs},     {"relative", e.relative},
                                {"worst", e.worst},         {"rtol", e.tolerance.rtol},
                                {"atol", e.tolerance.atol}, {"within_tolerance", e.within()}};
    within = within && e.within();
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(batch.shape().head_dim));
  if (!args.dump.empty()) {
    if (Status s = Dump(args.dump, batch, run, scale); !s.ok()) return ReportError(s);
  }
  const int32_t devices = plan.topology.devices();
  if (args.json) {
    const nlohmann::json j = {
        {"errors", errors},
        {"within_tolerance", within},
        {"devices", devices},
        {"comm", args.comm},
        {"n_divisions", plan.n_divisions},
        {"ms", {{"plan", ms.plan}, {"run", ms.run}, {"reference", ms.reference}}}};
    fmt::print("{}\n", j.dump(2));
  } else {
    const std::string skipped =
        planned.empty_sequences > 0
            ? fmt::format(" ({} empty ones of the index skipped)", planned.empty_sequences)
            : "";
    fmt::print(
        "{} sequences{}, {} tokens on {} {}, plan {}: planned in {:.1f} ms, ran "
        "forward+backward in {:.1f} ms (dense reference {:.1f} ms)\n",
        batch.seqlens().size(), skipped, batch.total_tokens(), devices,
        args.comm == "mpi" ? "MPI ranks" : "devices", plan.origin, ms.plan, ms.run, ms.reference);
    for (const auto& [name, e] : errors.items()) {
      fmt::print(
          "  {:>3}: max abs error {:.3g}, relative {:.3g}; worst element at {:.2f} of its bound "
          "{:.3g} + {:.3g} |reference|\n",
          name, e["max_abs"].get<double>(), e["relative"].get<double>(), e["worst"].get<double>(),
          e["atol"].get<double>(), e["rtol"].get<double>());
    }
    fmt::print("{}\n", within ? "OK: every element matches the dense reference within its bound"
                              : "FAILED: an element is past its bound");
  }
  return within ? 0 : 1;
}

// The most resident memory this process has held, in bytes.
int64_t PeakResidentBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

// --no-reference: one line per process (each MPI rank prints its own) with the run time and the
// process's peak resident memory.
int ReportRunOnly(const RunArgs& args, const Plan& plan, int32_t rank, const RunTimes& ms) {
  const int64_t tokens = TokenMap::Of(plan).LocalTokens(DeviceId{rank});
  if (args.json) {
    const nlohmann::json j = {{"rank", rank},
                              {"comm", args.comm},
                              {"devices", plan.topology.devices()},
                              {"local_tokens", tokens},
                              {"peak_rss_bytes", PeakResidentBytes()},
                              {"ms", {{"plan", ms.plan}, {"run", ms.run}}}};
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print(
        "rank {}: {} local tokens, ran forward+backward in {:.1f} ms, peak resident memory "
        "{:.1f} MiB (no reference check)\n",
        rank, tokens, ms.run, static_cast<double>(PeakResidentBytes()) / (1 << 20));
  }
  std::fflush(stdout);
  return 0;
}

int RunLocal(const BatchArgs& batch_args, const RunArgs& args) {
  // The reference's time follows from the batch alone: refuse before planning, not after. (A batch
  // that does not build is reported by PlanForRun.)
  if (Result<Batch> batch = BuildBatch(batch_args); batch.ok()) {
    if (Status s = CheckReferenceTime(args, *batch); !s.ok()) return ReportError(s);
  }
  Result<PlannedFromArgs> planned = PlanForRun(batch_args, args);
  if (!planned.ok()) return ReportError(planned.status());
  const Batch& batch = planned->batch;
  const Plan& plan = planned->planned.plan;
  RunTimes ms{.plan = planned->planned.ms.total()};
  if (Status s = CheckLocalMemory(args, plan, batch.total_tokens()); !s.ok()) {
    return ReportError(s);
  }

  Progress(args, fmt::format("running forward and backward on {} devices ({})",
                             plan.topology.devices(), plan.origin));
  Stopwatch watch;
  BatchTensors run = BatchTensors::ZerosFor(plan);
  FillInputs(batch_args.seed, batch.shape().dtype, plan, run);
  BatchTensors reference = run;
  watch.Lap();
  if (Status s = RunPlanInProcess(plan, run, {}, args.comm_timeout_s); !s.ok()) {
    return ReportError(s);
  }
  ms.run = watch.Lap();
  if (args.no_reference) return ReportRunOnly(args, plan, 0, ms);
  Progress(args, fmt::format("dense reference check, about {:.0f} s on one core",
                             ReferenceSeconds(batch)));
  DenseAttention(batch, 0, reference);
  ms.reference = watch.Lap();
  return CheckAndReport(args, *planned, run, reference, ms);
}

// ---------------------------------------------------------------------------------------------
// --comm mpi

// Launch ids of the exchanges `dcp run` makes itself. The programs number theirs up from 0; these
// stay below 32767, the least tag bound MPI allows.
constexpr int32_t kPartSizeExchange = 32000;
constexpr int32_t kPartExchange = 32001;
constexpr int32_t kGatherExchange = 32002;
constexpr int32_t kGatheredExchange = 32003;

std::byte* AsBytes(void* data) { return static_cast<std::byte*>(data); }

// Rank 0 sends every rank its part of the plan: first the size, then the bytes. `parts` holds one
// encoded part per rank on rank 0 and is empty elsewhere; returns this rank's part.
Result<std::string> ScatterPlanParts(Communicator& comm, std::vector<std::string>& parts) {
  if (comm.rank() == 0) {
    std::vector<uint64_t> sizes(parts.size());
    std::vector<SendBuffer> sends;
    for (int32_t r = 1; r < comm.size(); ++r) {
      sizes[r] = parts[r].size();
      sends.push_back({DeviceId{r}, {{AsBytes(&sizes[r]), sizeof(uint64_t)}}});
    }
    DCP_RETURN_IF_ERROR(comm.Launch(kPartSizeExchange, std::move(sends), {}));
    DCP_RETURN_IF_ERROR(comm.Wait(kPartSizeExchange));
    sends.clear();
    for (int32_t r = 1; r < comm.size(); ++r) {
      sends.push_back({DeviceId{r}, {{AsBytes(parts[r].data()), parts[r].size()}}});
    }
    DCP_RETURN_IF_ERROR(comm.Launch(kPartExchange, std::move(sends), {}));
    DCP_RETURN_IF_ERROR(comm.Wait(kPartExchange));
    return std::move(parts[0]);
  }
  uint64_t size = 0;
  DCP_RETURN_IF_ERROR(
      comm.Launch(kPartSizeExchange, {}, {{DeviceId{0}, {{AsBytes(&size), sizeof(size)}}}}));
  DCP_RETURN_IF_ERROR(comm.Wait(kPartSizeExchange));
  std::string part(size, '\0');
  DCP_RETURN_IF_ERROR(
      comm.Launch(kPartExchange, {}, {{DeviceId{0}, {{AsBytes(part.data()), size}}}}));
  DCP_RETURN_IF_ERROR(comm.Wait(kPartExchange));
  return part;
}

// The spans of a rank's local outputs, in the order they travel: o, lse, dq, dkv.
template <typename Span>
std::vector<Span> OutputParts(LocalTensors& t) {
  std::vector<Span> parts;
  for (std::vector<float>* v : {&t.o, &t.lse, &t.dq, &t.dkv}) {
    parts.emplace_back(AsBytes(v->data()), v->size() * sizeof(float));
  }
  return parts;
}

// Every rank sends rank 0 its local outputs, straight from where they lie; once rank 0 has them
// all it tells every rank, so that no rank ends well while another failed. On rank 0, `tensors`
// receives every rank's outputs at their places in the batch.
Status GatherOutputs(Communicator& comm, const Plan& part, LocalTensors& mine,
                     BatchTensors& tensors) {
  const int32_t rank = comm.rank();
  if (rank != 0) {
    DCP_RETURN_IF_ERROR(comm.Launch(
        kGatherExchange, {{DeviceId{0}, OutputParts<std::span<const std::byte>>(mine)}}, {}));
    DCP_RETURN_IF_ERROR(comm.Wait(kGatherExchange));
    std::byte gathered{0};
    DCP_RETURN_IF_ERROR(comm.Launch(kGatheredExchange, {}, {{DeviceId{0}, {{&gathered, 1}}}}));
    return comm.Wait(kGatheredExchange);
  }
  std::vector<LocalTensors> theirs(static_cast<size_t>(comm.size()));
  std::vector<RecvBuffer> recvs;
  const TokenMap map = TokenMap::Of(part);
  const AttentionShape& s = part.shape;
  for (int32_t r = 1; r < comm.size(); ++r) {
    const auto tokens = static_cast<size_t>(map.LocalTokens(DeviceId{r}));
    LocalTensors& t = theirs[static_cast<size_t>(r)];
    t.o = t.dq = std::vector<float>(tokens * static_cast<size_t>(s.heads * s.head_dim));
    t.lse = std::vector<float>(tokens * static_cast<size_t>(s.heads));
    t.dkv = std::vector<float>(tokens * static_cast<size_t>(2 * s.kv_heads * s.head_dim));
    recvs.push_back({DeviceId{r}, OutputParts<std::span<std::byte>>(t)});
  }
  DCP_RETURN_IF_ERROR(comm.Launch(kGatherExchange, {}, std::move(recvs)));
  DCP_RETURN_IF_ERROR(comm.Wait(kGatherExchange));
  mine.Undispatch(part, DeviceId{0}, tensors);
  for (int32_t r = 1; r < comm.size(); ++r) {
    theirs[static_cast<size_t>(r)].Undispatch(part, DeviceId{r}, tensors);
  }
  std::vector<SendBuffer> sends;
  const std::byte gathered{1};
  for (int32_t r = 1; r < comm.size(); ++r) sends.push_back({DeviceId{r}, {{&gathered, 1}}});
  DCP_RETURN_IF_ERROR(comm.Launch(kGatheredExchange, std::move(sends), {}));
  return comm.Wait(kGatheredExchange);
}

// This rank's local inputs (its own tokens only), zeroed outputs.
LocalTensors LocalInputs(uint64_t seed, const Plan& part, DeviceId device) {
  const std::vector<int64_t> global = TokenMap::Of(part).GlobalIndices(device);
  const AttentionShape& s = part.shape;
  const int64_t q_width = s.heads * s.head_dim, kv_width = s.kv_heads * s.head_dim;
  LocalTensors t;
  t.q = InputRows(seed, kInputQ, global, q_width, s.dtype);
  t.d_o = InputRows(seed, kInputDO, global, q_width, s.dtype);
  const std::vector<float> k = InputRows(seed, kInputK, global, kv_width, s.dtype);
  const std::vector<float> v = InputRows(seed, kInputV, global, kv_width, s.dtype);
  for (size_t i = 0; i < global.size(); ++i) {  // [tokens][2][kv_heads][head_dim]
    t.kv.insert(t.kv.end(), k.begin() + i * kv_width, k.begin() + (i + 1) * kv_width);
    t.kv.insert(t.kv.end(), v.begin() + i * kv_width, v.begin() + (i + 1) * kv_width);
  }
  t.o = t.dq = std::vector<float>(t.q.size());
  t.dkv = std::vector<float>(t.kv.size());
  t.lse = std::vector<float>(global.size() * static_cast<size_t>(s.heads));
  return t;
}

// Forward, then backward, of this rank's part on its local tensors.
Status RunExecutor(const Plan& part, Communicator& comm, LocalTensors& t) {
  const std::unique_ptr<KernelBackend> kernels = MakeCpuBackend();
  DCP_ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor,
                       Executor::Create(part, DeviceId{comm.rank()}, *kernels, comm));
  const AttentionShape& s = part.shape;
  const int64_t L = executor->local_tokens();
  const auto q_like = [&](std::vector<float>& v) {
    return TensorView::Contiguous(v.data(), DType::kFloat32, {L, s.heads, s.head_dim});
  };
  const auto kv_like = [&](std::vector<float>& v) {
    return TensorView::Contiguous(v.data(), DType::kFloat32, {L, 2, s.kv_heads, s.head_dim});
  };
  const TensorView lse = TensorView::Contiguous(t.lse.data(), DType::kFloat32, {L, s.heads});
  DCP_RETURN_IF_ERROR(
      executor->Forward(q_like(t.q), kv_like(t.kv), q_like(t.o), lse).WithContext("forward pass"));
  return executor
      ->Backward(q_like(t.q), kv_like(t.kv), q_like(t.o), lse, q_like(t.d_o), q_like(t.dq),
                 kv_like(t.dkv))
      .WithContext("backward pass");
}

// One rank's share of `dcp run --comm mpi`; returns the exit code (rank 0 reports the check, the
// others return 0) or the first error.
Result<int> RunRankSteps(const BatchArgs& batch_args, const RunArgs& args, Communicator& comm) {
  const int32_t rank = comm.rank();
  Stopwatch watch;
  RunTimes ms;
  std::optional<PlannedFromArgs> planned;  // rank 0 only
  std::vector<std::string> parts;          // rank 0 only
  if (rank == 0) {
    Result<PlannedFromArgs> made = PlanForRun(batch_args, args);
    if (!made.ok()) return made.status().WithContext("planning");
    planned.emplace(std::move(made).value());
    ms.plan = planned->planned.ms.total();
    parts.resize(static_cast<size_t>(comm.size()));
    for (int32_t r = 0; r < comm.size(); ++r) {
      EncodePlan(PlanPartForDevice(planned->planned.plan, DeviceId{r}), &parts[r]);
    }
  }
  Result<std::string> bytes = ScatterPlanParts(comm, parts);
  if (!bytes.ok()) return bytes.status().WithContext("sending the plan parts from rank 0");
  Result<Plan> decoded = DecodePlan(*bytes, DeviceId{rank});
  if (!decoded.ok()) {
    return decoded.status().WithContext(fmt::format(
        "decoding the plan part of device {} ({} bytes from rank 0)", rank, bytes->size()));
  }
  const Plan& part = *decoded;
  LocalTensors local = LocalInputs(batch_args.seed, part, DeviceId{rank});
  watch.Lap();
  DCP_RETURN_IF_ERROR(RunExecutor(part, comm, local));
  ms.run = watch.Lap();
  if (args.no_reference) return ReportRunOnly(args, part, rank, ms);
  BatchTensors tensors;
  if (rank == 0) tensors = BatchTensors::ZerosFor(part);
  DCP_RETURN_IF_ERROR(
      GatherOutputs(comm, part, local, tensors).WithContext("gathering the outputs on rank 0"));
  if (rank != 0) return 0;
  BatchTensors reference = BatchTensors::ZerosFor(part);
  FillInputs(batch_args.seed, part.shape.dtype, part, reference);
  tensors.q = reference.q;
  tensors.k = reference.k;
  tensors.v = reference.v;
  tensors.d_o = reference.d_o;
  watch.Lap();
  Progress(args, fmt::format("dense reference check, about {:.0f} s on one core",
                             ReferenceSeconds(planned->batch)));
  DenseAttention(planned->batch, 0, reference);
  ms.reference = watch.Lap();
  return CheckAndReport(args, *planned, tensors, reference, ms);
}

// Checks that every rank makes alike, so no rank needs telling, then this rank's steps; on an
// error it tells the other ranks (Communicator::Fail).
Result<int> RunRank(const BatchArgs& batch_args, const RunArgs& args, Communicator& comm) {
  DCP_ASSIGN_OR_RETURN(Topology topology, BuildTopology(batch_args, args.placement));
  if (topology.devices() != comm.size()) {
    return Status::InvalidArgument(fmt::format(
        "--comm mpi: the plan is for {} devices (topology {}) but this MPI job has {} ranks; "
        "start one rank per device (mpirun -np {})",
        topology.devices(), topology.ToString(), comm.size(), topology.devices()));
  }
  // Rank 0 alone runs the reference, but every rank can tell from the batch that it is too long.
  DCP_ASSIGN_OR_RETURN(const Batch batch, BuildBatch(batch_args));
  DCP_RETURN_IF_ERROR(CheckReferenceTime(args, batch));
  Result<int> result = RunRankSteps(batch_args, args, comm);
  if (!result.ok()) comm.Fail(result.status());
  return result;
}

// MPI_Finalize waits for every rank. After an error that is quick unless a rank no longer
// responds (stopped, or stuck far from its next Wait), so a failed rank waits for it at most
// `seconds`, then says so and exits without it; mpirun then ends the whole job. A signal handler
// can only use what is prepared before, hence the message buffer.
char finalize_timeout_message[256];
size_t finalize_timeout_message_bytes = 0;

extern "C" void ExitOnFinalizeTimeout(int /*signal*/) {
  if (::write(STDERR_FILENO, finalize_timeout_message, finalize_timeout_message_bytes) < 0) {
    // Nothing more to do: the process ends either way.
  }
  ::_exit(1);
}

void BoundFinalizeAfterError(int32_t rank, double seconds) {
  const int n =
      std::snprintf(finalize_timeout_message, sizeof(finalize_timeout_message),
                    "dcp: error: rank %d: MPI_Finalize did not finish within %g s (a rank "
                    "does not respond); exiting without it\n",
                    rank, seconds);
  finalize_timeout_message_bytes =
      std::min(static_cast<size_t>(std::max(n, 0)), sizeof(finalize_timeout_message) - 1);
  std::signal(SIGALRM, ExitOnFinalizeTimeout);
  ::alarm(static_cast<unsigned>(std::clamp(std::ceil(seconds), 1.0, 86400.0)));
}

int RunMpi(const BatchArgs& batch_args, const RunArgs& args) {
  Result<std::unique_ptr<Communicator>> made =
      MakeMpiCommunicator(MpiOptions{.timeout_s = args.comm_timeout_s});
  // MPI stays as it is when no communicator could be made: finalizing could wait forever for
  // ranks that never came, and mpirun ends a job whose process exits without it.
  if (!made.ok()) return ReportError(made.status().WithContext("--comm mpi"));
  std::unique_ptr<Communicator> comm = std::move(made).value();
  const int32_t rank = comm->rank();
  const Result<int> result = RunRank(batch_args, args, *comm);
  if (!result.ok()) {
    std::fprintf(stderr, "dcp: error: rank %d: %s\n", rank, result.status().ToString().c_str());
  }
  std::fflush(stdout);
  std::fflush(stderr);
  comm.reset();
  // After success every rank passed the final exchange and finalizes soon, though rank 0 may
  // first spend long on the dense reference: only a failed rank bounds its wait.
  if (!result.ok()) BoundFinalizeAfterError(rank, args.comm_timeout_s);
  const Status finalized = FinalizeMpi();
  ::alarm(0);
  if (!finalized.ok()) {
    std::fprintf(stderr, "dcp: error: rank %d: %s\n", rank, finalized.ToString().c_str());
    return 1;
  }
  return result.ok() ? *result : 1;
}

int Run(const BatchArgs& batch_args, const RunArgs& args) {
  if (args.comm == "local") return RunLocal(batch_args, args);
  if (args.comm == "mpi") return RunMpi(batch_args, args);
  return ReportError(Status::Unsupported(
      fmt::format("--comm {}: this build has 'local' (in-process) and 'mpi'", args.comm)));
}

}  // namespace

CommandRunner AddRunCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("run",
                                     "Plan and execute forward and backward on in-process devices "
                                     "or MPI ranks; check the numerics");
  auto batch_args = std::make_shared<BatchArgs>();
  // The dense reference is O(tokens^2): a small batch by default.
  batch_args->tokens = 2048;
  auto args = std::make_shared<RunArgs>();
  args->placement.default_topology = "1x4";
  AddBatchOptions(*cmd, *batch_args);
  AddPlacementOptions(*cmd, args->placement);
  cmd->add_option("--comm", args->comm,
                  "Communicator: local (in-process devices) or mpi (one rank per device, started "
                  "by mpirun -np DEVICES)")
      ->capture_default_str();
  cmd->add_option("--comm-timeout", args->comm_timeout_s,
                  "Seconds a device waits for a peer without progress before it gives up")
      ->check(CLI::Validator(
          [](const std::string& text) {
            double seconds = 0;
            const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
            return ec == std::errc() && end == text.data() + text.size() && seconds > 0
                       ? std::string()
                       : "--comm-timeout must be a number of seconds > 0, not " + text;
          },
          "SECONDS > 0"))
      ->capture_default_str();
  AddPlannerOptions(*cmd, args->planner);
  cmd->add_option("--strategy", args->strategy,
                  "dcp | ring | zigzag | ulysses | te | loongtrain | fcp | magi: plan with dcp's "
                  "planner or as that strategy would (its default options)")
      ->capture_default_str();
  cmd->add_flag("--no-reference", args->no_reference,
                "Only run: no dense reference, no check (and over MPI, no gathering on rank 0)");
  cmd->add_flag("--force", args->force,
                "Run even when the dense reference would take over 10 minutes or a local run "
                "would need over 80% of this machine's memory");
  cmd->add_option("--dump", args->dump, "Write the batch as .npy files and batch.json here");
  cmd->add_flag("--json", args->json, "Print one JSON object");
  return [cmd, batch_args, args]() -> int {
    if (!cmd->parsed()) return 0;
    return Run(*batch_args, *args);
  };
}

}  // namespace dcp::cli
