// SPDX-License-Identifier: Apache-2.0
// The rank-local executor: every device holds only its own tokens, in the caller's dtype and
// layout, and together the devices must give the dense single-device reference.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <thread>

#include "dcp/planner.h"
#include "dcp/runtime.h"
#include "testing/end_to_end.h"
#include "testing/local_run.h"
#include "testing/recording_backend.h"

namespace dcp {
namespace {

using testing::KernelCall;
using testing::LocalRunOptions;
using testing::RecordingBackend;
using testing::RunLocalDevices;

Plan MakePlan(const std::vector<int64_t>& lengths, const char* mask, DType dtype,
              Topology topology, int64_t block_size = 32, int64_t head_groups = 1) {
  std::vector<MaskSpec> masks;
  for (int64_t l : lengths) {
    masks.push_back(*MaskSpec::Parse(mask[0] == 'd' && l < 3 ? "causal" : mask));
  }
  auto batch = Batch::Create(
      lengths, masks, AttentionShape{.heads = 4, .kv_heads = 2, .head_dim = 8, .dtype = dtype});
  EXPECT_TRUE(batch.ok()) << batch.status().ToString();
  PlanOptions options = SinglePassOptions(topology, block_size);
  options.head_groups = head_groups;
  auto planned = PlanBatch(*batch, options);
  EXPECT_TRUE(planned.ok()) << planned.status().ToString();
  return std::move(planned->plan);
}

Batch BatchOf(const Plan& plan, const char* mask) {
  std::vector<MaskSpec> masks;
  for (int64_t l : plan.seqlens) {
    masks.push_back(*MaskSpec::Parse(mask[0] == 'd' && l < 3 ? "causal" : mask));
  }
  return *Batch::Create(plan.seqlens, masks, plan.shape);
}

// Runs `plan` as local executors and compares every output with the dense reference.
void ExpectMatchesReference(const Plan& plan, const char* mask, const LocalRunOptions& options) {
  BatchTensors run = BatchTensors::ZerosFor(plan);
  testing::FillInputs(7, plan.shape.dtype, run);
  BatchTensors reference = run;
  const std::vector<Status> status = RunLocalDevices(plan, run, options);
  ASSERT_TRUE(testing::RootCause(status).ok()) << testing::RootCause(status).ToString();
  DenseAttention(BatchOf(plan, mask), 0, reference);
  testing::ExpectWithinTolerance(run, reference, options.dtype);
}

TEST(Executor, MatchesTheDenseReferenceForEveryMaskFamilyInTheCallersDtype) {
  std::mt19937_64 rng(11);
  for (const char* mask : testing::kEndToEndMasks) {
    for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
      std::vector<int64_t> lengths(1 + rng() % 3);
      for (int64_t& l : lengths) l = 1 + static_cast<int64_t>(rng() % 150);
      SCOPED_TRACE(::testing::Message() << mask << " " << ToString(dtype));
      const Plan plan = MakePlan(lengths, mask, dtype, {.nodes = 2, .devices_per_node = 2});
      ExpectMatchesReference(plan, mask, {.dtype = dtype});
    }
  }
}

TEST(Executor, CallerTensorsMayBeBf16ForAnFp32PlanAndStrided) {
  const Plan plan = MakePlan({130, 77}, "lambda:sink=5,window=40", DType::kFloat32,
                             {.nodes = 1, .devices_per_node = 3}, 32, 2);
  ExpectMatchesReference(plan, "lambda:sink=5,window=40", {.token_padding = 3});
}

TEST(Executor, StridedTensorsGiveExactlyTheResultsOfContiguousOnes) {
  const Plan plan = MakePlan({150, 64, 9}, "causal", DType::kBFloat16,
                             {.nodes = 2, .devices_per_node = 2}, 32, 2);
  BatchTensors contiguous = BatchTensors::ZerosFor(plan);
  testing::FillInputs(3, plan.shape.dtype, contiguous);
  BatchTensors strided = contiguous;
  ASSERT_TRUE(testing::RootCause(RunLocalDevices(plan, contiguous, {.dtype = DType::kBFloat16}))
                  .ok());
  ASSERT_TRUE(testing::RootCause(RunLocalDevices(
                                     plan, strided, {.dtype = DType::kBFloat16, .token_padding = 7}))
                  .ok());
  EXPECT_EQ(strided.o, contiguous.o);
  EXPECT_EQ(strided.lse, contiguous.lse);
  EXPECT_EQ(strided.dq, contiguous.dq);
  EXPECT_EQ(strided.dk, contiguous.dk);
  EXPECT_EQ(strided.dv, contiguous.dv);
}

// Which elements of each output are NaN.
std::vector<std::vector<bool>> NanPattern(const BatchTensors& t) {
  std::vector<std::vector<bool>> pattern;
  for (Output output : kOutputs) {
    const std::vector<float>& values = OutputOf(t, output);
    pattern.emplace_back(values.size());
    for (size_t i = 0; i < values.size(); ++i) pattern.back()[i] = std::isnan(values[i]);
  }
  return pattern;
}

// A NaN in an input (of either sign: x86 arithmetic makes negative ones) is never lost: every
// output element the dense reference gives as NaN is NaN in dcp's run too, LSE exactly where
// the reference's is, nothing of the other sequences turns NaN, and every element left finite
// matches the reference (NaN may reach more elements of the poisoned sequence's tiles through
// their products). The CPU kernels took a row with a NaN score for one that sees nothing (O = 0,
// LSE = -inf) and the LSE merge dropped NaN sources, so a diverging model trained on.
TEST(Executor, ANanInAnInputReachesEveryOutputTheDenseReferenceGivesAsNan) {
  std::mt19937_64 rng(29);
  const char* const kinds[] = {"q", "k", "v", "d_o"};
  int cases = 0;
  for (const char* mask : testing::kEndToEndMasks) {
    for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
      for (const char* kind : kinds) {
        std::vector<int64_t> lengths(2 + rng() % 2);
        for (int64_t& l : lengths) l = 20 + static_cast<int64_t>(rng() % 130);
        const Plan plan = MakePlan(lengths, mask, dtype, {.nodes = 2, .devices_per_node = 2});
        BatchTensors run = BatchTensors::ZerosFor(plan);
        testing::FillInputs(rng(), dtype, run);
        // One element of the first sequence becomes NaN.
        const AttentionShape& shape = plan.shape;
        const int64_t token = static_cast<int64_t>(rng() % static_cast<uint64_t>(lengths[0]));
        const bool q_side = kind[0] == 'q' || kind[0] == 'd';
        const int64_t heads = q_side ? shape.heads : shape.kv_heads;
        std::vector<float>& tensor = kind[0] == 'q' ? run.q
                                     : kind[0] == 'k' ? run.k
                                     : kind[0] == 'v' ? run.v
                                                      : run.d_o;
        const int64_t at = (token * heads + static_cast<int64_t>(rng() % heads)) * shape.head_dim +
                           static_cast<int64_t>(rng() % shape.head_dim);
        tensor[static_cast<size_t>(at)] =
            std::copysign(std::numeric_limits<float>::quiet_NaN(), rng() % 2 == 0 ? 1.f : -1.f);
        SCOPED_TRACE(::testing::Message() << mask << " " << ToString(dtype) << " NaN in " << kind
                                          << "[" << at << "] (token " << token << ")");
        BatchTensors reference = run;
        ASSERT_TRUE(testing::RootCause(RunLocalDevices(plan, run, {.dtype = dtype})).ok());
        DenseAttention(BatchOf(plan, mask), 0, reference);

        const std::vector<std::vector<bool>> got = NanPattern(run), want = NanPattern(reference);
        for (size_t o = 0; o < got.size(); ++o) {
          const Output output = kOutputs[o];
          const int64_t per_token =
              static_cast<int64_t>(got[o].size()) / std::accumulate(lengths.begin(), lengths.end(),
                                                                    int64_t{0});
          int64_t lost = 0, poisoned_elsewhere = 0;
          for (size_t i = 0; i < got[o].size(); ++i) {
            lost += want[o][i] && !got[o][i];
            poisoned_elsewhere += got[o][i] && static_cast<int64_t>(i) >= lengths[0] * per_token;
          }
          EXPECT_EQ(lost, 0) << ToString(output) << ": NaN in the reference, finite in dcp";
          EXPECT_EQ(poisoned_elsewhere, 0) << ToString(output) << ": NaN in another sequence";
          if (output == Output::kLse) {
            EXPECT_EQ(got[o], want[o]);
          }
          if (output == Output::kO) {
            // A NaN in dO leaves the forward alone; one in Q, K or V reaches O.
            const auto reached = std::count(got[o].begin(), got[o].end(), true);
            if (kind[0] == 'd') {
              EXPECT_EQ(reached, 0);
            } else {
              EXPECT_GT(reached, 0);
            }
          }
        }
        // Where dcp is NaN both are set to 0; the rest must match.
        for (auto [mine, theirs] : {std::pair{&run.o, &reference.o}, {&run.lse, &reference.lse},
                                    {&run.dq, &reference.dq}, {&run.dk, &reference.dk},
                                    {&run.dv, &reference.dv}}) {
          for (size_t i = 0; i < mine->size(); ++i) {
            if (std::isnan((*mine)[i])) (*mine)[i] = (*theirs)[i] = 0.f;
          }
        }
        testing::ExpectWithinTolerance(run, reference, dtype);
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 64);
}

// The executor reaches data only through its backend: a recording backend sees exactly the calls
// the programs imply, and the results are those of the CPU backend, bit for bit.
TEST(Executor, TouchesDataOnlyThroughItsKernelBackend) {
  const Plan plan = MakePlan({200, 90, 33}, "shared-question:question=0.25,answers=3",
                             DType::kFloat32, {.nodes = 2, .devices_per_node = 2}, 32);
  BatchTensors direct = BatchTensors::ZerosFor(plan);
  testing::FillInputs(5, plan.shape.dtype, direct);
  BatchTensors recorded = direct;
  ASSERT_TRUE(testing::RootCause(RunLocalDevices(plan, direct)).ok());
  std::vector<testing::KernelCounts> counts(static_cast<size_t>(plan.topology.devices()));
  LocalRunOptions options;
  options.make_backend = [&](int32_t d) -> std::unique_ptr<KernelBackend> {
    return std::make_unique<RecordingBackend>(KernelCall::kCount, 0, &counts[static_cast<size_t>(d)]);
  };
  ASSERT_TRUE(testing::RootCause(RunLocalDevices(plan, recorded, options)).ok());
  EXPECT_EQ(recorded.o, direct.o);
  EXPECT_EQ(recorded.dq, direct.dq);
  EXPECT_EQ(recorded.dk, direct.dk);
  EXPECT_EQ(recorded.dv, direct.dv);

  for (int32_t d = 0; d < plan.topology.devices(); ++d) {
    SCOPED_TRACE(::testing::Message() << "device " << d);
    testing::KernelCounts expected;
    expected[KernelCall::kAllocate] = 1;
    for (const Program* p : {&plan.forward[d], &plan.backward[d]}) {
      expected[KernelCall::kCopy] += static_cast<int64_t>(p->inputs.size() + p->outputs.size());
      for (const Instruction& instruction : p->instructions) {
        if (const auto* a = std::get_if<BlockwiseAttention>(&instruction)) {
          const bool fwd = a->pass == Pass::kForward;
          expected[fwd ? KernelCall::kForward : KernelCall::kBackward] += 1;
          (fwd ? expected.forward_tiles : expected.backward_tiles) +=
              static_cast<int64_t>(a->tiles.size());
        } else if (const auto* r = std::get_if<BlockwiseReduction>(&instruction)) {
          const KernelCall kind = r->kind == ReductionKind::kLseMerge ? KernelCall::kMergeLse
                                  : r->kind == ReductionKind::kSum    ? KernelCall::kSum
                                                                      : KernelCall::kDelta;
          expected[kind] += static_cast<int64_t>(r->ops.size());
        } else if (const auto* c = std::get_if<BlockwiseCopy>(&instruction)) {
          expected[KernelCall::kCopy] += static_cast<int64_t>(c->ops.size());
        }
      }
    }
    EXPECT_EQ(counts[static_cast<size_t>(d)].calls, expected.calls);
    EXPECT_EQ(counts[static_cast<size_t>(d)].forward_tiles, expected.forward_tiles);
    EXPECT_EQ(counts[static_cast<size_t>(d)].backward_tiles, expected.backward_tiles);
    EXPECT_GT(expected.forward_tiles, 0);
  }
}

TEST(Executor, TwoExecutorsOfDifferentPlansRunInOneProcessAtOnce) {
  const Plan a = MakePlan({180, 40}, "causal", DType::kFloat32, {.nodes = 1, .devices_per_node = 3});
  const Plan b = MakePlan({99, 120, 7}, "documents:count=3", DType::kBFloat16,
                          {.nodes = 2, .devices_per_node = 2}, 16);
  std::thread other([&] { ExpectMatchesReference(a, "causal", {}); });
  ExpectMatchesReference(b, "documents:count=3", {.dtype = DType::kBFloat16});
  other.join();
}

TEST(Executor, WorkspaceIsTheLargerPassesSlotsAndNothingMore) {
  const Plan plan = MakePlan({300, 45}, "causal", DType::kBFloat16,
                             {.nodes = 1, .devices_per_node = 2});
  auto group = MakeLocalGroup({.size = 2});
  ASSERT_TRUE(group.ok());
  const std::unique_ptr<KernelBackend> kernels = MakeCpuBackend();
  for (int32_t d = 0; d < 2; ++d) {
    auto executor = Executor::Create(plan, DeviceId{d}, *kernels, *(*group)[d]);
    ASSERT_TRUE(executor.ok()) << executor.status().ToString();
    const int64_t peak =
        std::max(plan.forward[d].PeakBufferBytes(), plan.backward[d].PeakBufferBytes());
    const size_t slots = std::max(plan.forward[d].slots.size(), plan.backward[d].slots.size());
    EXPECT_GE((*executor)->workspace_bytes(), static_cast<size_t>(peak));
    EXPECT_LT((*executor)->workspace_bytes(), static_cast<size_t>(peak) + 64 * slots);
    EXPECT_EQ((*executor)->local_tokens(), TokenMap::Of(plan).LocalTokens(DeviceId{d}));
  }
}

TEST(Executor, RefusesWrongShapesDtypesDevicesAndGroups) {
  const Plan plan = MakePlan({100}, "causal", DType::kFloat32, {.nodes = 1, .devices_per_node = 2});
  auto group = MakeLocalGroup({.size = 2, .timeout_s = 2});
  ASSERT_TRUE(group.ok());
  const std::unique_ptr<KernelBackend> kernels = MakeCpuBackend();
  auto three = MakeLocalGroup({.size = 3});
  const Result<std::unique_ptr<Executor>> wrong_group =
      Executor::Create(plan, DeviceId{0}, *kernels, *(*three)[0]);
  EXPECT_EQ(wrong_group.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong_group.status().message().find("rank 0 of 3"), std::string::npos);
  EXPECT_FALSE(Executor::Create(plan, DeviceId{2}, *kernels, *(*group)[0]).ok());
  EXPECT_FALSE(Executor::Create(PlanPartForDevice(plan, DeviceId{1}), DeviceId{0}, *kernels,
                                *(*group)[0])
                   .ok());

  auto executor = Executor::Create(plan, DeviceId{0}, *kernels, *(*group)[0]);
  ASSERT_TRUE(executor.ok());
  const int64_t L = (*executor)->local_tokens();
  std::vector<float> q(static_cast<size_t>(L * 4 * 8)), kv(static_cast<size_t>(L * 2 * 2 * 8)),
      o(q.size()), lse(static_cast<size_t>(L * 4));
  const auto view = [](std::vector<float>& v, std::initializer_list<int64_t> shape,
                       DType dtype = DType::kFloat32) {
    return TensorView::Contiguous(v.data(), dtype, shape);
  };
  Status s = (*executor)->Forward(view(q, {L, 8, 4}), view(kv, {L, 2, 2, 8}), view(o, {L, 4, 8}),
                                  view(lse, {L, 4}));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("device 0: q ["), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("wrong shape"), std::string::npos) << s.ToString();
  s = (*executor)->Forward(view(q, {L, 4, 8}), view(kv, {L, 2, 2, 8}), view(o, {L, 4, 8}),
                           view(lse, {L, 4}, DType::kBFloat16));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("lse"), std::string::npos) << s.ToString();
  // The failure was announced: the other device's next call fails naming device 0.
  auto other = Executor::Create(plan, DeviceId{1}, *kernels, *(*group)[1]);
  ASSERT_TRUE(other.ok());
  const int64_t L1 = (*other)->local_tokens();
  std::vector<float> q1(static_cast<size_t>(L1 * 32)), kv1(static_cast<size_t>(L1 * 32)),
      o1(q1.size()), lse1(static_cast<size_t>(L1 * 4));
  s = (*other)->Forward(view(q1, {L1, 4, 8}), view(kv1, {L1, 2, 2, 8}), view(o1, {L1, 4, 8}),
                        view(lse1, {L1, 4}));
  EXPECT_EQ(s.code(), StatusCode::kCommFailure) << s.ToString();
  EXPECT_NE(s.message().find("rank 0"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace dcp
