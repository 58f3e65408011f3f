// SPDX-License-Identifier: Apache-2.0
// Failures of a run on in-process devices, met the way `dcp run --comm mpi` meets them on ranks:
// one device's plan is damaged (a corrupt plan part, a broken program), that device reports the
// root cause and calls Fail, and every other device ends with a CommFailure naming it rather than
// waiting for its deadline. As in the MPI run, each device ends with an exchange with every other
// one, so no device can finish well while another failed.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "dcp/runtime.h"

namespace dcp {
namespace {

constexpr int32_t kDevices = 4;
constexpr int32_t kFinishExchange = 1 << 20;  // far from the programs' own ids

Plan SmallPlan() {
  auto batch = Batch::Create({200, 90}, {MaskSpec{}},
                             AttentionShape{.heads = 4, .kv_heads = 2, .head_dim = 8});
  EXPECT_TRUE(batch.ok()) << batch.status().ToString();
  auto blocks = MakeBlocks(*batch, {.block_size = 32});
  const Topology topology{.nodes = 1, .devices_per_node = kDevices};
  auto placed = PartitionBlocks(*blocks, topology, {});
  auto schedule = ScheduleDivisions(*blocks, placed->placement, topology, {});
  auto plan = CompilePlan(*batch, *blocks, placed->placement, *schedule, topology);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return std::move(plan).value();
}

// One byte to and from every other device.
Status FinishTogether(Communicator& comm) {
  std::vector<std::byte> out(static_cast<size_t>(comm.size()), std::byte{1});
  std::vector<std::byte> in(static_cast<size_t>(comm.size()));
  std::vector<SendBuffer> sends;
  std::vector<RecvBuffer> recvs;
  for (int32_t peer = 0; peer < comm.size(); ++peer) {
    if (peer == comm.rank()) continue;
    sends.push_back(
        {DeviceId{peer}, {std::span<const std::byte>(&out[static_cast<size_t>(peer)], 1)}});
    recvs.push_back({DeviceId{peer}, {std::span<std::byte>(&in[static_cast<size_t>(peer)], 1)}});
  }
  DCP_RETURN_IF_ERROR(comm.Launch(kFinishExchange, std::move(sends), std::move(recvs)));
  return comm.Wait(kFinishExchange);
}

// Every device on its own thread: it gets its plan part from `part_of` (an error there is the
// device's own failure), runs forward, backward and the final exchange, and on error calls Fail.
// Returns each device's status.
std::vector<Status> RunDevices(const std::function<Result<Plan>(int32_t)>& part_of) {
  auto group = MakeLocalGroup({.size = kDevices, .timeout_s = 60.0});  // far longer than a run
  EXPECT_TRUE(group.ok()) << group.status().ToString();
  std::vector<Status> status(kDevices);
  std::vector<std::thread> threads;
  for (int32_t d = 0; d < kDevices; ++d) {
    threads.emplace_back([&, d] {
      Communicator& comm = *(*group)[static_cast<size_t>(d)];
      Status& s = status[static_cast<size_t>(d)];
      Result<Plan> part = part_of(d);
      if (!part.ok()) {
        s = part.status();
      } else {
        BatchTensors tensors = BatchTensors::ZerosFor(*part);
        s = ExecuteProgram(*part, part->forward[0], comm, tensors, {});
        if (s.ok()) s = ExecuteProgram(*part, part->backward[0], comm, tensors, {});
        if (s.ok()) s = FinishTogether(comm);
      }
      if (!s.ok()) comm.Fail(s);
    });
  }
  for (std::thread& t : threads) t.join();
  return status;
}

// The failing device reports its own error; every other one a CommFailure naming it.
void ExpectEveryOtherDeviceNames(const std::vector<Status>& status, int32_t failing,
                                 const std::string& detail) {
  for (int32_t d = 0; d < kDevices; ++d) {
    if (d == failing) continue;
    const Status& s = status[static_cast<size_t>(d)];
    SCOPED_TRACE("device " + std::to_string(d) + ": " + s.ToString());
    EXPECT_EQ(s.code(), StatusCode::kCommFailure);
    EXPECT_NE(s.message().find("rank " + std::to_string(failing) + " failed"), std::string::npos);
    EXPECT_NE(s.message().find(detail), std::string::npos);
  }
}

TEST(InProcessFailure, EveryDeviceFinishesWellWhenNothingFails) {
  const Plan plan = SmallPlan();
  const std::vector<Status> status =
      RunDevices([&](int32_t d) -> Result<Plan> { return PlanPartForDevice(plan, DeviceId{d}); });
  for (const Status& s : status) EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(InProcessFailure, ACorruptPlanPartEndsEveryDeviceWithAClearError) {
  const Plan plan = SmallPlan();
  const std::vector<Status> status = RunDevices([&](int32_t d) -> Result<Plan> {
    std::string bytes;
    EncodePlan(PlanPartForDevice(plan, DeviceId{d}), &bytes);
    if (d == 2) bytes.back() ^= '\x01';  // damaged on the way
    return DecodePlan(bytes, DeviceId{d});
  });
  EXPECT_EQ(status[2].code(), StatusCode::kCorrupt) << status[2].ToString();
  EXPECT_NE(status[2].message().find("checksum"), std::string::npos) << status[2].ToString();
  ExpectEveryOtherDeviceNames(status, 2, "checksum");
}

TEST(InProcessFailure, ABrokenProgramEndsEveryDeviceWithAClearError) {
  Plan plan = SmallPlan();
  // Device 1 waits, half-way through its forward program, for an exchange it never launched.
  std::vector<Instruction>& code = plan.forward[1].instructions;
  code.emplace(code.begin() + static_cast<ptrdiff_t>(code.size() / 2), std::in_place_type<CommWait>,
               CommWait{.id = 99});
  const std::vector<Status> status =
      RunDevices([&](int32_t d) -> Result<Plan> { return PlanPartForDevice(plan, DeviceId{d}); });
  EXPECT_EQ(status[1].code(), StatusCode::kInvalidArgument) << status[1].ToString();
  for (const char* part : {"device 1 instruction", "id 99"}) {
    EXPECT_NE(status[1].message().find(part), std::string::npos) << status[1].ToString();
  }
  ExpectEveryOtherDeviceNames(status, 1, "id 99");
}

}  // namespace
}  // namespace dcp
