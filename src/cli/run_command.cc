// SPDX-License-Identifier: Apache-2.0
// `dcp run`: plan a batch, execute forward and backward with seeded random inputs, and check every
// output against the dense single-device reference. The devices are threads of this process
// (--comm local) or the ranks of an MPI job, one rank per device (--comm mpi, under mpirun).
//
// Over MPI every rank parses the same options. Rank 0 plans once and sends each rank its part of
// the plan (PlanPartForDevice + EncodePlan); each rank decodes it, makes the same seeded inputs,
// runs its forward and then its backward program, and sends rank 0 the outputs of the data blocks
// it owns. Rank 0 tells every rank that all arrived, then checks them against the reference and
// reports exactly as the in-process run does. Every step goes through the Communicator, so an
// error on one rank (it calls Fail) stops every other rank with a CommFailure naming it, within
// --comm-timeout at worst: each rank prints "dcp: error: rank R: ..." and exits non-zero.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "cli/planning.h"
#include "dcp/runtime.h"

namespace dcp::cli {
namespace {

struct RunArgs {
  PlacementArgs placement;
  std::string comm = "local";
  double comm_timeout_s = 30;  // a device gives up after this long without progress
  int32_t divisions = 0;
  std::string dump;
  bool json = false;
  // Failure injection for tests (hidden options, --comm mpi): rank `fail_rank` damages its plan
  // part (`plan`), fails in the middle of its forward or backward program, or stops calling MPI
  // for 3 x comm_timeout_s before its forward pass (`stall`).
  int32_t fail_rank = -1;
  std::string fail_at;  // plan | forward | backward | stall
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

// Seeded random inputs, already representable in the storage dtype: every rank of an MPI run makes
// the same ones.
void FillInputs(uint64_t seed, DType dtype, BatchTensors& t) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (std::vector<float>* v : {&t.q, &t.k, &t.v, &t.d_o}) {
    for (float& x : *v) {
      x = u(rng);
      if (dtype == DType::kBFloat16) x = Bf16ToFloat(FloatToBf16(x));
    }
  }
}

struct RunTimes {  // milliseconds
  double plan = 0, run = 0, reference = 0;
};

// Compares the outputs of `run` with the dense `reference`, writes --dump, prints the table or
// --json, and returns the exit code: 0 when every output is within tolerance.
int CheckAndReport(const RunArgs& args, const Batch& batch, const Plan& plan,
                   const BatchTensors& run, const BatchTensors& reference, const RunTimes& ms) {
  const double tolerance = batch.shape().dtype == DType::kFloat32 ? 1e-5 : 1e-2;
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
  const double scale = 1.0 / std::sqrt(static_cast<double>(batch.shape().head_dim));
  if (!args.dump.empty()) {
    if (Status s = Dump(args.dump, batch, run, scale); !s.ok()) return ReportError(s);
  }
  const int32_t devices = plan.topology.devices();
  if (args.json) {
    const nlohmann::json j = {
        {"errors", errors},
        {"tolerance", tolerance},
        {"within_tolerance", within},
        {"devices", devices},
        {"comm", args.comm},
        {"n_divisions", plan.n_divisions},
        {"ms", {{"plan", ms.plan}, {"run", ms.run}, {"reference", ms.reference}}}};
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print(
        "{} sequences, {} tokens on {} {} ({} divisions): planned in {:.1f} ms, ran "
        "forward+backward in {:.1f} ms (dense reference {:.1f} ms)\n",
        batch.seqlens().size(), batch.total_tokens(), devices,
        args.comm == "mpi" ? "MPI ranks" : "devices", plan.n_divisions, ms.plan, ms.run,
        ms.reference);
    for (const auto& [name, e] : errors.items()) {
      fmt::print("  {:>3}: max abs error {:.3g}, relative {:.3g}\n", name,
                 e["max_abs"].get<double>(), e["relative"].get<double>());
    }
    fmt::print("{} (tolerance {:g})\n",
               within ? "OK: matches the dense reference" : "FAILED: above tolerance", tolerance);
  }
  return within ? 0 : 1;
}

int RunLocal(const BatchArgs& batch_args, const RunArgs& args) {
  Result<PlannedBatch> planned =
      PlanFromArgs(batch_args, args.placement,
                     Scheduling{.options = {.divisions = args.divisions}, .search_on = {}});
  if (!planned.ok()) return ReportError(planned.status());
  const Batch& batch = planned->batch;
  const Plan& plan = planned->plan;
  RunTimes ms{.plan = planned->ms.total()};

  Stopwatch watch;
  BatchTensors run = BatchTensors::ZerosFor(plan);
  FillInputs(batch_args.seed, batch.shape().dtype, run);
  BatchTensors reference = run;
  watch.Lap();
  if (Status s = RunPlanInProcess(plan, run, {}, args.comm_timeout_s); !s.ok()) {
    return ReportError(s);
  }
  ms.run = watch.Lap();
  DenseAttention(batch, 0, reference);
  ms.reference = watch.Lap();
  return CheckAndReport(args, batch, plan, run, reference, ms);
}

// ---------------------------------------------------------------------------------------------
// --comm mpi

// Launch ids of the exchanges `dcp run` makes itself. The programs number theirs up from 0; these
// stay below 32767, the least tag bound MPI allows.
constexpr int32_t kPartSizeExchange = 32000;
constexpr int32_t kPartExchange = 32001;
constexpr int32_t kGatherExchange = 32002;
constexpr int32_t kGatheredExchange = 32003;

bool Injected(const RunArgs& args, int32_t rank, std::string_view where) {
  return args.fail_rank == rank && args.fail_at == where;
}

Status InjectedFailure(const RunArgs& args) {
  return Status::Internal(
      fmt::format("failure injected by --fail-rank {} --fail-at {}", args.fail_rank, args.fail_at));
}

// Fails the first Wait of a program, as if the device had broken down in the middle of its pass;
// otherwise passes every call through. The executor then calls Fail, which tells every rank.
class FailingCommunicator final : public Communicator {
 public:
  FailingCommunicator(Communicator& inner, Status failure)
      : inner_(inner), failure_(std::move(failure)) {}

  std::string_view Name() const override { return inner_.Name(); }
  int32_t rank() const override { return inner_.rank(); }
  int32_t size() const override { return inner_.size(); }
  Status Launch(int32_t id, std::vector<SendBuffer> sends, std::vector<RecvBuffer> recvs) override {
    return inner_.Launch(id, std::move(sends), std::move(recvs));
  }
  Result<bool> Test(int32_t id) override { return inner_.Test(id); }
  Status Wait(int32_t id) override {
    if (!fired_) {
      fired_ = true;
      return failure_;
    }
    return inner_.Wait(id);
  }
  void Fail(const Status& reason) override { inner_.Fail(reason); }
  bool fired() const { return fired_; }

 private:
  Communicator& inner_;
  const Status failure_;
  bool fired_ = false;
};

// Runs one pass of this rank's part of the plan.
Status RunPass(const Plan& part, const Program& program, Communicator& comm, BatchTensors& tensors,
               const RunArgs& args, std::string_view pass) {
  Status status;
  if (Injected(args, comm.rank(), pass)) {
    FailingCommunicator failing(comm, InjectedFailure(args));
    status = ExecuteProgram(part, program, failing, tensors, {});
    if (!failing.fired()) {  // a program without any exchange fails at its end
      status = InjectedFailure(args);
      comm.Fail(status);
    }
  } else {
    status = ExecuteProgram(part, program, comm, tensors, {});
  }
  return status.WithContext(fmt::format("{} pass", pass));
}

std::byte* AsBytes(void* data) { return static_cast<std::byte*>(data); }
// A message in one part.
SendBuffer SendTo(int32_t peer, const std::byte* data, size_t bytes) {
  return {DeviceId{peer}, {std::span<const std::byte>(data, bytes)}};
}
RecvBuffer RecvFrom(int32_t peer, std::byte* data, size_t bytes) {
  return {DeviceId{peer}, {std::span<std::byte>(data, bytes)}};
}

// Rank 0 sends every rank its part of the plan: first the size, then the bytes. `parts` holds one
// encoded part per rank on rank 0 and is empty elsewhere; returns this rank's part.
Result<std::string> ScatterPlanParts(Communicator& comm, std::vector<std::string>& parts) {
  if (comm.rank() == 0) {
    std::vector<uint64_t> sizes(parts.size());
    std::vector<SendBuffer> sends;
    for (int32_t r = 1; r < comm.size(); ++r) {
      sizes[r] = parts[r].size();
      sends.push_back(SendTo(r, AsBytes(&sizes[r]), sizeof(uint64_t)));
    }
    DCP_RETURN_IF_ERROR(comm.Launch(kPartSizeExchange, std::move(sends), {}));
    DCP_RETURN_IF_ERROR(comm.Wait(kPartSizeExchange));
    sends.clear();
    for (int32_t r = 1; r < comm.size(); ++r) {
      sends.push_back(SendTo(r, AsBytes(parts[r].data()), parts[r].size()));
    }
    DCP_RETURN_IF_ERROR(comm.Launch(kPartExchange, std::move(sends), {}));
    DCP_RETURN_IF_ERROR(comm.Wait(kPartExchange));
    return std::move(parts[0]);
  }
  uint64_t size = 0;
  DCP_RETURN_IF_ERROR(
      comm.Launch(kPartSizeExchange, {}, {RecvFrom(0, AsBytes(&size), sizeof(size))}));
  DCP_RETURN_IF_ERROR(comm.Wait(kPartSizeExchange));
  std::string part(size, '\0');
  DCP_RETURN_IF_ERROR(comm.Launch(kPartExchange, {}, {RecvFrom(0, AsBytes(part.data()), size)}));
  DCP_RETURN_IF_ERROR(comm.Wait(kPartExchange));
  return part;
}

// The outputs, each with its floats per token, in the order they travel.
struct OutputTensor {
  std::vector<float> BatchTensors::*member;
  int64_t floats_per_token;
};
std::array<OutputTensor, 5> OutputTensors(const AttentionShape& s) {
  return {OutputTensor{&BatchTensors::o, s.heads * s.head_dim},
          OutputTensor{&BatchTensors::lse, s.heads},
          OutputTensor{&BatchTensors::dq, s.heads * s.head_dim},
          OutputTensor{&BatchTensors::dk, s.kv_heads * s.head_dim},
          OutputTensor{&BatchTensors::dv, s.kv_heads * s.head_dim}};
}

// Visits the outputs of every data block `rank` owns (its inputs and outputs, all head groups):
// fn(tensor, first float, floats), tensor by tensor, blocks in id order.
template <typename Fn>
void ForEachOwnedRange(const Plan& plan, int32_t rank, Fn&& fn) {
  std::vector<int64_t> sequence_begin;
  int64_t begin = 0;
  for (int64_t length : plan.seqlens) {
    sequence_begin.push_back(begin);
    begin += length;
  }
  for (const OutputTensor& tensor : OutputTensors(plan.shape)) {
    for (size_t b = 0; b < plan.blocks.size(); ++b) {
      if (plan.block_owner[b].value != rank) continue;
      const PlanBlock& block = plan.blocks[b];
      const int64_t first_token = sequence_begin[block.sequence.value] + block.token_begin;
      fn(tensor.member, static_cast<size_t>(first_token * tensor.floats_per_token),
         static_cast<size_t>(block.tokens * tensor.floats_per_token));
    }
  }
}

// Every rank sends rank 0 the outputs it owns; once rank 0 has them all it tells every rank, so
// that no rank ends well while another failed.
Status GatherOutputs(Communicator& comm, const Plan& plan, BatchTensors& tensors) {
  const int32_t rank = comm.rank();
  if (rank != 0) {
    std::vector<float> packed;
    ForEachOwnedRange(plan, rank,
                      [&](std::vector<float> BatchTensors::*member, size_t first, size_t n) {
                        const std::vector<float>& from = tensors.*member;
                        packed.insert(packed.end(), from.begin() + static_cast<ptrdiff_t>(first),
                                      from.begin() + static_cast<ptrdiff_t>(first + n));
                      });
    DCP_RETURN_IF_ERROR(comm.Launch(
        kGatherExchange, {SendTo(0, AsBytes(packed.data()), packed.size() * sizeof(float))}, {}));
    DCP_RETURN_IF_ERROR(comm.Wait(kGatherExchange));
    std::byte gathered{0};
    DCP_RETURN_IF_ERROR(comm.Launch(kGatheredExchange, {}, {RecvFrom(0, &gathered, 1)}));
    return comm.Wait(kGatheredExchange);
  }
  std::vector<std::vector<float>> packed(static_cast<size_t>(comm.size()));
  std::vector<RecvBuffer> recvs;
  for (int32_t r = 1; r < comm.size(); ++r) {
    size_t floats = 0;
    ForEachOwnedRange(plan, r, [&](auto, size_t, size_t n) { floats += n; });
    packed[r].resize(floats);
    recvs.push_back(RecvFrom(r, AsBytes(packed[r].data()), floats * sizeof(float)));
  }
  DCP_RETURN_IF_ERROR(comm.Launch(kGatherExchange, {}, std::move(recvs)));
  DCP_RETURN_IF_ERROR(comm.Wait(kGatherExchange));
  for (int32_t r = 1; r < comm.size(); ++r) {
    const float* from = packed[r].data();
    ForEachOwnedRange(
        plan, r, [&](std::vector<float> BatchTensors::*member, size_t first, size_t n) {
          std::copy_n(from, n, (tensors.*member).begin() + static_cast<ptrdiff_t>(first));
          from += n;
        });
  }
  const std::byte gathered{1};
  std::vector<SendBuffer> sends;
  for (int32_t r = 1; r < comm.size(); ++r) sends.push_back(SendTo(r, &gathered, 1));
  DCP_RETURN_IF_ERROR(comm.Launch(kGatheredExchange, std::move(sends), {}));
  return comm.Wait(kGatheredExchange);
}

// One rank's share of `dcp run --comm mpi`; returns the exit code (rank 0 reports the check, the
// others return 0) or the first error.
Result<int> RunRankSteps(const BatchArgs& batch_args, const RunArgs& args, Communicator& comm) {
  const int32_t rank = comm.rank();
  Stopwatch watch;
  RunTimes ms;
  std::optional<PlannedBatch> planned;  // rank 0 only
  std::vector<std::string> parts;       // rank 0 only
  if (rank == 0) {
    Result<PlannedBatch> made =
        PlanFromArgs(batch_args, args.placement,
                     Scheduling{.options = {.divisions = args.divisions}, .search_on = {}});
    if (!made.ok()) return made.status().WithContext("planning");
    planned.emplace(std::move(made).value());
    ms.plan = planned->ms.total();
    parts.resize(static_cast<size_t>(comm.size()));
    for (int32_t r = 0; r < comm.size(); ++r) {
      EncodePlan(PlanPartForDevice(planned->plan, DeviceId{r}), &parts[r]);
    }
  }
  Result<std::string> bytes = ScatterPlanParts(comm, parts);
  if (!bytes.ok()) return bytes.status().WithContext("sending the plan parts from rank 0");
  if (Injected(args, rank, "plan") && !bytes->empty()) bytes->back() ^= '\xff';
  Result<Plan> decoded = DecodePlan(*bytes, DeviceId{rank});
  if (!decoded.ok()) {
    return decoded.status().WithContext(fmt::format(
        "decoding the plan part of device {} ({} bytes from rank 0)", rank, bytes->size()));
  }
  const Plan& part = *decoded;
  if (part.forward.size() != 1 || part.backward.size() != 1) {
    return Status::Corrupt(fmt::format(
        "the plan part of device {} has {} forward and {} backward programs, not one of each", rank,
        part.forward.size(), part.backward.size()));
  }

  BatchTensors tensors = BatchTensors::ZerosFor(part);
  FillInputs(batch_args.seed, part.shape.dtype, tensors);
  BatchTensors reference;
  if (rank == 0) reference = tensors;
  if (Injected(args, rank, "stall")) {  // a rank that stops responding, as if stopped
    std::this_thread::sleep_for(std::chrono::duration<double>(3 * args.comm_timeout_s));
  }
  watch.Lap();
  DCP_RETURN_IF_ERROR(RunPass(part, part.forward[0], comm, tensors, args, "forward"));
  DCP_RETURN_IF_ERROR(RunPass(part, part.backward[0], comm, tensors, args, "backward"));
  DCP_RETURN_IF_ERROR(
      GatherOutputs(comm, part, tensors).WithContext("gathering the outputs on rank 0"));
  ms.run = watch.Lap();
  if (rank != 0) return 0;
  DenseAttention(planned->batch, 0, reference);
  ms.reference = watch.Lap();
  return CheckAndReport(args, planned->batch, planned->plan, tensors, reference, ms);
}

// Checks that every rank makes alike, so no rank needs telling, then this rank's steps; on an
// error it tells the other ranks (Communicator::Fail).
Result<int> RunRank(const BatchArgs& batch_args, const RunArgs& args, Communicator& comm) {
  DCP_ASSIGN_OR_RETURN(Topology topology, Topology::Parse(args.placement.topology));
  if (topology.devices() != comm.size()) {
    return Status::InvalidArgument(fmt::format(
        "--comm mpi: the plan is for {} devices (topology {}) but this MPI job has {} ranks; "
        "start one rank per device (mpirun -np {})",
        topology.devices(), topology.ToString(), comm.size(), topology.devices()));
  }
  if (args.fail_rank >= comm.size()) {
    return Status::InvalidArgument(
        fmt::format("--fail-rank {}: the job has ranks 0 to {}", args.fail_rank, comm.size() - 1));
  }
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
  if ((args.fail_rank >= 0) != !args.fail_at.empty()) {
    return ReportError(Status::InvalidArgument("--fail-rank and --fail-at go together"));
  }
  if (args.comm == "local") {
    if (args.fail_rank >= 0) {
      return ReportError(Status::InvalidArgument("--fail-rank and --fail-at need --comm mpi"));
    }
    return RunLocal(batch_args, args);
  }
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
  batch_args->block_size = "256";
  auto args = std::make_shared<RunArgs>();
  args->placement.topology = "1x4";
  AddBatchOptions(*cmd, *batch_args);
  AddPlacementOptions(*cmd, args->placement);
  cmd->add_option("--comm", args->comm,
                  "Communicator: local (in-process devices) or mpi (one rank per device, started "
                  "by mpirun -np DEVICES)")
      ->capture_default_str();
  cmd->add_option("--comm-timeout", args->comm_timeout_s,
                  "Seconds a device waits for a peer without progress before it gives up")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  // Hidden: failure injection for the tests of the failure path.
  cmd->add_option("--fail-rank", args->fail_rank, "Rank that fails (with --fail-at)")->group("");
  cmd->add_option("--fail-at", args->fail_at,
                  "Where it fails: plan (its plan part arrives damaged), forward, backward, stall "
                  "(it stops responding for 3 x --comm-timeout)")
      ->check(CLI::IsMember({"plan", "forward", "backward", "stall"}))
      ->group("");
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
