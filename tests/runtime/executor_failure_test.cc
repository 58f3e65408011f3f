// SPDX-License-Identifier: Apache-2.0
// Failures of rank-local executors on in-process devices: a device fails at any kind of
// instruction (attention, reduction, copy, communication launch or wait: a broken kernel or
// link, injected by a recording kernel backend or a faulty communicator), or gets a damaged plan,
// or its link drops a message. The failing device reports the root cause and every other device
// ends with a CommFailure naming it, well within the communicator's timeout; no device hangs.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>

#include "dcp/planner.h"
#include "dcp/runtime.h"
#include "testing/faulty_communicator.h"
#include "testing/local_run.h"
#include "testing/recording_backend.h"

namespace dcp {
namespace {

using testing::FaultOptions;
using testing::FaultyCommunicator;
using testing::KernelCall;
using testing::LocalRunOptions;
using testing::RecordingBackend;

constexpr int32_t kFailing = 2;
constexpr double kTimeoutS = 20;  // far longer than a run: a failure must not wait for it

Plan SmallPlan() {
  auto batch = Batch::Create({200, 90, 40}, {MaskSpec{}},
                             AttentionShape{.heads = 4, .kv_heads = 2, .head_dim = 8});
  EXPECT_TRUE(batch.ok()) << batch.status().ToString();
  PlanOptions options = SinglePassOptions({.nodes = 2, .devices_per_node = 2}, 32);
  options.divisions = 3;
  auto planned = PlanBatch(*batch, options);
  EXPECT_TRUE(planned.ok()) << planned.status().ToString();
  return std::move(planned->plan);
}

struct Outcome {
  std::vector<Status> status;
  double seconds = 0;
};

// Every device runs forward, backward and a last exchange with every other device (as the next
// collective of a training step): a device failing after the plan's last exchange is noticed there.
Outcome RunAll(const Plan& plan, LocalRunOptions options) {
  options.finish_together = true;
  BatchTensors tensors = BatchTensors::ZerosFor(plan);
  const auto start = std::chrono::steady_clock::now();
  Outcome out{.status = testing::RunLocalDevices(plan, tensors, options)};
  out.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

// The failing device reports its own error; every other one a CommFailure naming it, quickly.
void ExpectEveryOtherDeviceNamesTheFailure(const Outcome& out, const std::string& detail) {
  const Status& own = out.status[kFailing];
  EXPECT_FALSE(own.ok());
  EXPECT_NE(own.ToString().find(detail), std::string::npos) << own.ToString();
  for (int32_t d = 0; d < static_cast<int32_t>(out.status.size()); ++d) {
    if (d == kFailing) continue;
    const Status& s = out.status[static_cast<size_t>(d)];
    SCOPED_TRACE("device " + std::to_string(d) + ": " + s.ToString());
    EXPECT_EQ(s.code(), StatusCode::kCommFailure);
    EXPECT_NE(s.message().find("rank " + std::to_string(kFailing)), std::string::npos);
    EXPECT_NE(s.message().find(detail), std::string::npos);
  }
  EXPECT_LT(out.seconds, kTimeoutS / 2);
}

TEST(ExecutorFailure, EveryDeviceFinishesWellWhenNothingFails) {
  const Outcome out = RunAll(SmallPlan(), {.timeout_s = kTimeoutS});
  for (const Status& s : out.status) EXPECT_TRUE(s.ok()) << s.ToString();
}

// A kernel of every kind the programs use breaks down on the failing device, at its first call
// of that kind and at its last.
TEST(ExecutorFailure, AKernelFailingAtEveryInstructionKindStopsEveryDevice) {
  const Plan plan = SmallPlan();
  testing::KernelCounts counts;  // of the failing device, from a clean run
  {
    LocalRunOptions options{.timeout_s = kTimeoutS};
    options.make_backend = [&](int32_t d) -> std::unique_ptr<KernelBackend> {
      return std::make_unique<RecordingBackend>(KernelCall::kCount, 0,
                                                d == kFailing ? &counts : nullptr);
    };
    ASSERT_TRUE(testing::RootCause(RunAll(plan, options).status).ok());
  }
  for (KernelCall kind : {KernelCall::kCopy, KernelCall::kForward, KernelCall::kBackward,
                          KernelCall::kMergeLse, KernelCall::kSum, KernelCall::kDelta}) {
    ASSERT_GT(counts[kind], 0) << "the plan has no call of kind " << static_cast<int>(kind);
    for (int64_t at : {int64_t{1}, counts[kind]}) {
      SCOPED_TRACE(::testing::Message() << "kind " << static_cast<int>(kind) << " call " << at);
      LocalRunOptions options{.timeout_s = kTimeoutS};
      options.make_backend = [&](int32_t d) -> std::unique_ptr<KernelBackend> {
        return d == kFailing ? std::make_unique<RecordingBackend>(kind, at)
                             : std::make_unique<RecordingBackend>();
      };
      ExpectEveryOtherDeviceNamesTheFailure(RunAll(plan, options), "injected kernel failure");
    }
  }
}

// The failing device's link breaks at a communication launch or wait: its first, a middle one
// and its last.
TEST(ExecutorFailure, ACommunicationFailureAtAnyLaunchOrWaitStopsEveryDevice) {
  const Plan plan = SmallPlan();
  int64_t launches = 0;
  for (const Program* p : {&plan.forward[kFailing], &plan.backward[kFailing]}) {
    for (const Instruction& i : p->instructions) launches += std::holds_alternative<CommLaunch>(i);
  }
  ASSERT_GT(launches, 2);
  for (int64_t at : {int64_t{1}, launches / 2, launches}) {
    for (bool at_wait : {false, true}) {
      SCOPED_TRACE(::testing::Message() << (at_wait ? "wait " : "launch ") << at);
      LocalRunOptions options{.timeout_s = kTimeoutS};
      options.wrap_comm = [&](std::unique_ptr<Communicator> comm, int32_t d) {
        FaultOptions fault;
        if (d == kFailing) (at_wait ? fault.fail_at_wait : fault.fail_at_launch) = at;
        return std::unique_ptr<Communicator>(
            std::make_unique<FaultyCommunicator>(std::move(comm), fault));
      };
      ExpectEveryOtherDeviceNamesTheFailure(RunAll(plan, options), "injected failure");
    }
  }
}

TEST(ExecutorFailure, ADroppedMessageEndsEveryDeviceWithAnError) {
  const Plan plan = SmallPlan();
  LocalRunOptions options{.timeout_s = kTimeoutS};
  options.wrap_comm = [&](std::unique_ptr<Communicator> comm, int32_t d) {
    return std::unique_ptr<Communicator>(std::make_unique<FaultyCommunicator>(
        std::move(comm), FaultOptions{.drop_launch = d == kFailing ? 2 : 0}));
  };
  ExpectEveryOtherDeviceNamesTheFailure(RunAll(plan, options), "dropped");
}

TEST(ExecutorFailure, SlowLinksAreNotFailures) {
  LocalRunOptions options{.timeout_s = kTimeoutS};
  options.wrap_comm = [&](std::unique_ptr<Communicator> comm, int32_t d) {
    return std::unique_ptr<Communicator>(std::make_unique<FaultyCommunicator>(
        std::move(comm), FaultOptions{.launch_delay_s = d == kFailing ? 0.02 : 0}));
  };
  for (const Status& s : RunAll(SmallPlan(), options).status) EXPECT_TRUE(s.ok()) << s.ToString();
}

// A device that stops on an error hands its workspace to its communicator (MPI may still read the
// sends it could not cancel), instead of freeing it under the transport.
TEST(ExecutorFailure, AFailedDeviceHandsItsWorkspaceToTheCommunicator) {
  const Plan plan = SmallPlan();
  std::vector<std::pair<int32_t, std::shared_ptr<void>>> kept;  // (rank, memory)
  std::mutex mutex;
  class Keeping final : public Communicator {
   public:
    Keeping(std::unique_ptr<Communicator> inner,
            std::vector<std::pair<int32_t, std::shared_ptr<void>>>* kept, std::mutex* mutex)
        : inner_(std::move(inner)), kept_(kept), mutex_(mutex) {}
    std::string_view Name() const override { return inner_->Name(); }
    int32_t rank() const override { return inner_->rank(); }
    int32_t size() const override { return inner_->size(); }
    Status Launch(int32_t id, std::vector<SendBuffer> s, std::vector<RecvBuffer> r) override {
      return inner_->Launch(id, std::move(s), std::move(r));
    }
    Result<bool> Test(int32_t id) override { return inner_->Test(id); }
    Status Wait(int32_t id) override { return inner_->Wait(id); }
    void Fail(const Status& reason) override { inner_->Fail(reason); }
    void KeepAliveAfterFailure(std::shared_ptr<void> memory) override {
      std::lock_guard lock(*mutex_);
      kept_->emplace_back(inner_->rank(), std::move(memory));
    }

   private:
    std::unique_ptr<Communicator> inner_;
    std::vector<std::pair<int32_t, std::shared_ptr<void>>>* kept_;
    std::mutex* mutex_;
  };
  LocalRunOptions options{.timeout_s = kTimeoutS};
  options.make_backend = [&](int32_t d) -> std::unique_ptr<KernelBackend> {
    return d == kFailing ? std::make_unique<RecordingBackend>(KernelCall::kForward, 1)
                         : std::make_unique<RecordingBackend>();
  };
  options.wrap_comm = [&](std::unique_ptr<Communicator> comm, int32_t) {
    return std::unique_ptr<Communicator>(std::make_unique<Keeping>(std::move(comm), &kept, &mutex));
  };
  const Outcome out = RunAll(plan, options);
  ASSERT_FALSE(out.status[kFailing].ok());
  // The failing device handed its workspace over; so did every device whose executor stopped on
  // the failure (one that needed nothing more from it finished its passes and failed only in the
  // last exchange, outside the executor). Each at most once.
  std::vector<int32_t> ranks;
  for (const auto& [rank, memory] : kept) {
    EXPECT_NE(memory, nullptr);
    ranks.push_back(rank);
  }
  std::sort(ranks.begin(), ranks.end());
  EXPECT_TRUE(std::binary_search(ranks.begin(), ranks.end(), kFailing));
  EXPECT_EQ(std::adjacent_find(ranks.begin(), ranks.end()), ranks.end());
}

TEST(ExecutorFailure, ACorruptPlanPartEndsEveryDeviceWithAClearError) {
  const Plan plan = SmallPlan();
  LocalRunOptions options{.timeout_s = kTimeoutS};
  options.part_of = [&](int32_t d) -> Result<Plan> {
    std::string bytes;
    EncodePlan(PlanPartForDevice(plan, DeviceId{d}), &bytes);
    if (d == kFailing) bytes.back() ^= '\x01';  // damaged on the way
    return DecodePlan(bytes, DeviceId{d});
  };
  const Outcome out = RunAll(plan, options);
  EXPECT_EQ(out.status[kFailing].code(), StatusCode::kCorrupt) << out.status[kFailing].ToString();
  ExpectEveryOtherDeviceNamesTheFailure(out, "checksum");
}

TEST(ExecutorFailure, ABrokenProgramEndsEveryDeviceWithAClearError) {
  Plan plan = SmallPlan();
  // The failing device waits, half-way through its forward program, for an exchange it never
  // launched.
  std::vector<Instruction>& code = plan.forward[kFailing].instructions;
  code.emplace(code.begin() + static_cast<ptrdiff_t>(code.size() / 2),
               std::in_place_type<CommWait>, CommWait{.id = 99});
  const Outcome out = RunAll(plan, {.timeout_s = kTimeoutS});
  EXPECT_EQ(out.status[kFailing].code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.status[kFailing].message().find("forward pass, device 2, instruction"),
            std::string::npos)
      << out.status[kFailing].ToString();
  ExpectEveryOtherDeviceNamesTheFailure(out, "id 99");
}

}  // namespace
}  // namespace dcp
