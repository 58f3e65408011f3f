// SPDX-License-Identifier: Apache-2.0
// The rank-local executor over MPI, run under mpirun with 2 and 4 ranks (tests/CMakeLists.txt):
// every rank plans the same batch (planning is deterministic), runs its own tokens only, and
// compares its local outputs with its rows of the dense reference. Failures injected into one
// rank (a faulty communicator, a failing kernel) end every rank with an error naming it.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <mutex>

#include "dcp/planner.h"
#include "dcp/runtime.h"
#include "testing/end_to_end.h"
#include "testing/faulty_communicator.h"
#include "testing/local_run.h"
#include "testing/mpi_environment.h"
#include "testing/recording_backend.h"

namespace dcp {
namespace {

constexpr double kTimeoutS = 20;

Topology TopologyFor(int32_t ranks) {
  return ranks % 2 == 0 && ranks > 2 ? Topology{.nodes = 2, .devices_per_node = ranks / 2}
                                     : Topology{.nodes = 1, .devices_per_node = ranks};
}

struct Job {
  Batch batch;
  Plan plan;
};

Job PlanFor(int32_t ranks, const char* mask, DType dtype) {
  std::vector<MaskSpec> masks;
  const std::vector<int64_t> lengths = {170, 66, 3};
  for (int64_t l : lengths) masks.push_back(*MaskSpec::Parse(mask[0] == 'd' && l < 3 ? "causal" : mask));
  auto batch = Batch::Create(
      lengths, masks, AttentionShape{.heads = 4, .kv_heads = 2, .head_dim = 8, .dtype = dtype});
  EXPECT_TRUE(batch.ok()) << batch.status().ToString();
  auto planned = PlanBatch(*batch, SinglePassOptions(TopologyFor(ranks), 32));
  EXPECT_TRUE(planned.ok()) << planned.status().ToString();
  return {std::move(batch).value(), std::move(planned->plan)};
}

std::unique_ptr<Communicator> MakeComm() {
  auto comm = MakeMpiCommunicator({.timeout_s = kTimeoutS});
  EXPECT_TRUE(comm.ok()) << comm.status().ToString();
  return std::move(comm).value();
}

TEST(MpiExecutor, EveryRankMatchesItsRowsOfTheDenseReference) {
  for (const char* mask : testing::kEndToEndMasks) {
    for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
      std::unique_ptr<Communicator> comm = MakeComm();
      const int32_t rank = comm->rank();
      SCOPED_TRACE(::testing::Message() << mask << " " << ToString(dtype) << " rank " << rank);
      const Job job = PlanFor(comm->size(), mask, dtype);
      BatchTensors run = BatchTensors::ZerosFor(job.plan);
      testing::FillInputs(3, dtype, run);
      BatchTensors reference = run;
      std::mutex mutex;
      const std::unique_ptr<KernelBackend> kernels = MakeCpuBackend();
      const Status s = testing::RunOneDevice(job.plan, rank, run, *kernels, *comm,
                                             {.dtype = dtype}, mutex);
      ASSERT_TRUE(s.ok()) << s.ToString();
      DenseAttention(job.batch, 0, reference);
      const TokenMap map = TokenMap::Of(job.plan);
      const AttentionShape& sh = job.plan.shape;
      for (const auto& [output, actual, expected, width] :
           {std::tuple{Output::kO, &run.o, &reference.o, sh.heads * sh.head_dim},
            std::tuple{Output::kLse, &run.lse, &reference.lse, sh.heads},
            std::tuple{Output::kDq, &run.dq, &reference.dq, sh.heads * sh.head_dim},
            std::tuple{Output::kDk, &run.dk, &reference.dk, sh.kv_heads * sh.head_dim},
            std::tuple{Output::kDv, &run.dv, &reference.dv, sh.kv_heads * sh.head_dim}}) {
        const std::vector<float> mine = Dispatch<float>(*actual, width, map, DeviceId{rank});
        const std::vector<float> theirs = Dispatch<float>(*expected, width, map, DeviceId{rank});
        // The bound of the whole tensor (its atol comes from the whole tensor's magnitude).
        const TensorError e =
            CompareTensors(mine, theirs, OutputTolerance(output, dtype, *expected));
        EXPECT_TRUE(e.within()) << ToString(output) << ": element " << e.worst_index << " is "
                                << e.worst << "x its bound";
      }
    }
  }
}

// Rank 1 fails (its link at a launch, or a kernel); every rank ends with an error naming it.
void ExpectEveryRankNamesRank1(const testing::FaultOptions& fault, testing::KernelCall kind) {
  std::unique_ptr<Communicator> mpi = MakeComm();
  const int32_t rank = mpi->rank();
  ASSERT_GE(mpi->size(), 2) << "run under mpirun with 2 or more ranks";
  testing::FaultyCommunicator comm(*mpi, rank == 1 ? fault : testing::FaultOptions{});
  const Job job = PlanFor(mpi->size(), "causal", DType::kFloat32);
  BatchTensors run = BatchTensors::ZerosFor(job.plan);
  std::mutex mutex;
  testing::RecordingBackend kernels(rank == 1 ? kind : testing::KernelCall::kCount, 1);
  const auto start = std::chrono::steady_clock::now();
  const Status s = testing::RunOneDevice(job.plan, rank, run, kernels, comm, {}, mutex);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(s.ok());
  if (rank == 1) {
    EXPECT_NE(s.message().find("injected"), std::string::npos) << s.ToString();
  } else {
    EXPECT_EQ(s.code(), StatusCode::kCommFailure) << s.ToString();
    EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("injected"), std::string::npos) << s.ToString();
  }
  EXPECT_LT(seconds, kTimeoutS / 2);
}

TEST(MpiExecutor, ARankWhoseLinkFailsStopsEveryRankNamingIt) {
  ExpectEveryRankNamesRank1({.fail_at_launch = 2}, testing::KernelCall::kCount);
}

TEST(MpiExecutor, ARankWhoseWaitFailsStopsEveryRankNamingIt) {
  ExpectEveryRankNamesRank1({.fail_at_wait = 3}, testing::KernelCall::kCount);
}

TEST(MpiExecutor, ARankWhoseKernelFailsStopsEveryRankNamingIt) {
  ExpectEveryRankNamesRank1({}, testing::KernelCall::kBackward);
}

}  // namespace
}  // namespace dcp
