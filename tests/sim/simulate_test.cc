// SPDX-License-Identifier: Apache-2.0
// SimulatePlan on hand-made plans whose timelines can be worked out on paper (sim_fixtures.h:
// 1e9 bytes/s and 0.1 s latency inside a node, 1e8 bytes/s per node and 0.2 s between nodes).
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "dcp/planner.h"
#include "dcp/sim.h"
#include "plan/plan_fixtures.h"
#include "sim/sim_fixtures.h"

namespace dcp {
namespace {

using testing::CopySeconds;
using testing::EmptyPlan;
using testing::kIntraLatencyS;
using testing::Launch;
using testing::SimpleCluster;
using testing::Wait;

constexpr double kTolerance = 1e-9;

Program& Fwd(Plan& plan, int32_t device) { return plan.forward[device]; }

SimReport MustSimulate(const Plan& plan, const ClusterSpec& cluster, SimOptions options = {}) {
  Result<SimReport> report = SimulatePlan(plan, cluster, options);
  EXPECT_TRUE(report.ok()) << report.status().ToString();
  return report.ok() ? *report : SimReport{};
}

// busy + exposed + idle == makespan on every device of both passes.
void ExpectTimeAccountedFor(const SimReport& report) {
  for (const PassSimReport* pass : {&report.forward, &report.backward}) {
    for (size_t d = 0; d < pass->devices.size(); ++d) {
      const DeviceSimStats& s = pass->devices[d];
      EXPECT_NEAR(s.busy_s + s.exposed_comm_s + s.idle_s, pass->makespan_s, kTolerance)
          << "device " << d;
    }
  }
}

TEST(SimulatePlan, OneTransferTakesLatencyPlusBytesOverBandwidth) {
  Plan plan = EmptyPlan({.nodes = 1, .devices_per_node = 2});
  Launch(Fwd(plan, 0), 0, {1}, {}, 500'000'000);
  Wait(Fwd(plan, 0), 0);
  Launch(Fwd(plan, 1), 0, {}, {0}, 500'000'000);
  Wait(Fwd(plan, 1), 0);
  const SimReport r = MustSimulate(plan, SimpleCluster(2));
  EXPECT_NEAR(r.forward.makespan_s, 0.1 + 0.5, kTolerance);
  EXPECT_NEAR(r.forward.devices[0].exposed_comm_s, 0.6, kTolerance);
  EXPECT_NEAR(r.forward.devices[1].exposed_comm_s, 0.6, kTolerance);
  EXPECT_EQ(r.forward.devices[0].bytes_sent_intra_node, 500'000'000);
  EXPECT_EQ(r.forward.devices[0].bytes_sent_inter_node, 0);
  EXPECT_EQ(r.forward.devices[1].bytes_sent_intra_node, 0);
  EXPECT_EQ(r.forward.flows, 1);
  EXPECT_EQ(r.backward.makespan_s, 0);
  ExpectTimeAccountedFor(r);
}

TEST(SimulatePlan, OneTransferBetweenNodesUsesTheNetwork) {
  Plan plan = EmptyPlan({.nodes = 2, .devices_per_node = 1});
  Launch(Fwd(plan, 0), 0, {1}, {}, 50'000'000);
  Wait(Fwd(plan, 0), 0);
  Launch(Fwd(plan, 1), 0, {}, {0}, 50'000'000);
  Wait(Fwd(plan, 1), 0);
  const SimReport r = MustSimulate(plan, SimpleCluster(1));
  EXPECT_NEAR(r.forward.makespan_s, 0.2 + 0.5, kTolerance);
  EXPECT_EQ(r.forward.devices[0].bytes_sent_inter_node, 50'000'000);
  EXPECT_EQ(r.forward.total.bytes_sent_intra_node, 0);
}

TEST(SimulatePlan, TwoFlowsFromOneDeviceShareItsPort) {
  Plan plan = EmptyPlan({.nodes = 1, .devices_per_node = 3});
  Launch(Fwd(plan, 0), 0, {1, 2}, {}, 1'000'000'000);
  Wait(Fwd(plan, 0), 0);
  for (int32_t d : {1, 2}) {
    Launch(Fwd(plan, d), 0, {}, {0}, 1'000'000'000);
    Wait(Fwd(plan, d), 0);
  }
  const SimReport r = MustSimulate(plan, SimpleCluster(3));
  // Each flow gets half of device 0's egress: 1e9 bytes at 5e8 bytes/s.
  EXPECT_NEAR(r.forward.makespan_s, 0.1 + 2.0, kTolerance);
  for (int32_t d = 0; d < 3; ++d) EXPECT_NEAR(r.forward.devices[d].idle_s, 0, kTolerance);
}

TEST(SimulatePlan, TwoFlowsIntoOneDeviceShareItsPort) {
  Plan plan = EmptyPlan({.nodes = 1, .devices_per_node = 3});
  for (int32_t d : {0, 1}) {
    Launch(Fwd(plan, d), 0, {2}, {}, 1'000'000'000);
    Wait(Fwd(plan, d), 0);
  }
  Launch(Fwd(plan, 2), 0, {}, {0, 1}, 1'000'000'000);
  Wait(Fwd(plan, 2), 0);
  const SimReport r = MustSimulate(plan, SimpleCluster(3));
  EXPECT_NEAR(r.forward.makespan_s, 0.1 + 2.0, kTolerance);
}

TEST(SimulatePlan, AFlowStartingLaterSharesOnlyWhileBothRun) {
  // Device 0 sends 1e9 bytes to device 1 (launch 0) at once and 1e9 bytes to device 2 (launch 1)
  // after a 0.5 s copy. Flow A moves alone at 1e9 from 0.1 to 0.6 (5e8 bytes), then both share
  // device 0's egress at 5e8 each: A ends at 0.6 + 5e8 / 5e8 = 1.6. Flow B has moved 5e8 by then
  // and ends alone at 1.6 + 0.5 = 2.1.
  Plan plan = EmptyPlan({.nodes = 1, .devices_per_node = 3});
  Launch(Fwd(plan, 0), 0, {1}, {}, 1'000'000'000);
  CopySeconds(Fwd(plan, 0), 0.5);
  Launch(Fwd(plan, 0), 1, {2}, {}, 1'000'000'000);
  Wait(Fwd(plan, 0), 0);
  Wait(Fwd(plan, 0), 1);
  Launch(Fwd(plan, 1), 0, {}, {0}, 1'000'000'000);
  Wait(Fwd(plan, 1), 0);
  Launch(Fwd(plan, 2), 1, {}, {0}, 1'000'000'000);
  Wait(Fwd(plan, 2), 1);
  const SimReport r = MustSimulate(plan, SimpleCluster(3));
  const PassSimReport& f = r.forward;
  EXPECT_NEAR(f.makespan_s, 2.1, kTolerance);
  EXPECT_NEAR(f.devices[0].busy_s, 0.5, kTolerance);
  EXPECT_NEAR(f.devices[0].exposed_comm_s, 1.6, kTolerance);
  EXPECT_NEAR(f.devices[1].exposed_comm_s, 1.6, kTolerance);
  EXPECT_NEAR(f.devices[1].idle_s, 0.5, kTolerance);
  EXPECT_NEAR(f.devices[2].exposed_comm_s, 2.1, kTolerance);
  ExpectTimeAccountedFor(r);
}

// Nodes {0, 1} and {2, 3}; forward: device 0 sends 2e8 bytes to device 2 and 1e9 bytes to device
// 1, which then sends 2e8 bytes to device 3; each end waits for its messages.
Plan SwitchAndNetworkFlows() {
  Plan plan = EmptyPlan({.nodes = 2, .devices_per_node = 2});
  Launch(Fwd(plan, 0), 0, {2}, {}, 200'000'000);
  Launch(Fwd(plan, 0), 1, {1}, {}, 1'000'000'000);
  Wait(Fwd(plan, 0), 0);
  Wait(Fwd(plan, 0), 1);
  Launch(Fwd(plan, 1), 1, {}, {0}, 1'000'000'000);
  Wait(Fwd(plan, 1), 1);
  Launch(Fwd(plan, 1), 0, {3}, {}, 200'000'000);
  Wait(Fwd(plan, 1), 0);
  Launch(Fwd(plan, 2), 0, {}, {0}, 200'000'000);
  Wait(Fwd(plan, 2), 0);
  Launch(Fwd(plan, 3), 0, {}, {1}, 200'000'000);
  Wait(Fwd(plan, 3), 0);
  return plan;
}

TEST(SimulatePlan, InterNodeFlowsShareTheNodeNetworkButNotTheSwitch) {
  // Nodes {0, 1} and {2, 3}. At 0, device 0 sends 2e8 bytes to device 2 (network) and 1e9 bytes
  // to device 1 (switch). The switch flow runs at 1e9 from 0.1 to 1.1: it does not touch the
  // network. Device 1 then sends 2e8 bytes to device 3; it starts at 1.3, when 0 -> 2 (alone at
  // 1e8 since 0.2) has 0.9e8 left. Both share node 0's egress at 5e7: 0 -> 2 ends at
  // 1.3 + 0.9e8 / 5e7 = 3.1, and 1 -> 3, with 1.1e8 left, at 3.1 + 1.1 = 4.2.
  const Plan plan = SwitchAndNetworkFlows();
  const SimReport r = MustSimulate(plan, SimpleCluster(2));
  const PassSimReport& f = r.forward;
  EXPECT_NEAR(f.devices[0].exposed_comm_s, 3.1, kTolerance);
  EXPECT_NEAR(f.devices[2].exposed_comm_s, 3.1, kTolerance);
  EXPECT_NEAR(f.devices[1].exposed_comm_s, 4.2, kTolerance);
  EXPECT_NEAR(f.makespan_s, 4.2, kTolerance);
  EXPECT_EQ(f.devices[0].bytes_sent_inter_node, 200'000'000);
  EXPECT_EQ(f.devices[0].bytes_sent_intra_node, 1'000'000'000);
  EXPECT_EQ(f.total.bytes_sent_inter_node, 400'000'000);
  ExpectTimeAccountedFor(r);
}

// The bound of SwitchAndNetworkFlows, with compute and a backward pass added. Forward: the two
// 2e8-byte messages leave node 0 through its network port (4e8 bytes at 1e8: 4 s); device 0's 1e9
// bytes to device 1 take its switch port 1 s; device 0 computes 0.5 s. Backward: device 2
// copies for 3 s, and a 1e9-byte message from device 0 to device 2 that neither end waits for
// does not hold the pass (it is still moving when the pass ends). The replay takes 4.2 + 3 s.
TEST(SimulationLowerBoundSeconds, IsTheBusiestStreamOrWaitedLinkPerPass) {
  Plan plan = SwitchAndNetworkFlows();
  CopySeconds(Fwd(plan, 0), 0.5);  // after its waits: it ends at 3.1 + 0.5, before device 1
  Launch(plan.backward[0], 0, {2}, {}, 1'000'000'000);
  Launch(plan.backward[2], 0, {}, {0}, 1'000'000'000);
  CopySeconds(plan.backward[2], 3.0);
  const SimReport r = MustSimulate(plan, SimpleCluster(2));
  EXPECT_NEAR(r.forward.makespan_s, 4.2, kTolerance);
  EXPECT_NEAR(r.backward.makespan_s, 3.0, kTolerance);
  const Result<double> bound = SimulationLowerBoundSeconds(plan, SimpleCluster(2));
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  EXPECT_NEAR(*bound, 4.0 + 3.0, 1e-8 * 7);  // it gives up 1e-9 of itself to rounding
  EXPECT_LE(*bound, r.total_s());
  // Waited by its receiver, the backward message holds the pass: 1e9 bytes at 1e8 is 10 s.
  Wait(plan.backward[2], 0);
  EXPECT_NEAR(*SimulationLowerBoundSeconds(plan, SimpleCluster(2)), 4.0 + 10.0, 1e-8 * 14);
  // Errors as SimulatePlan's.
  Wait(plan.backward[3], 9);
  const Result<double> bad = SimulationLowerBoundSeconds(plan, SimpleCluster(2));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("CommWait 9"), std::string::npos)
      << bad.status().ToString();
}

TEST(SimulatePlan, ComputeLongerThanTheTransferHidesItCompletely) {
  Plan plan = EmptyPlan({.nodes = 1, .devices_per_node = 2});
  Launch(Fwd(plan, 0), 0, {1}, {}, 500'000'000);  // done at 0.6
  CopySeconds(Fwd(plan, 0), 1.0);
  Wait(Fwd(plan, 0), 0);
  Launch(Fwd(plan, 1), 0, {}, {0}, 500'000'000);
  CopySeconds(Fwd(plan, 1), 1.0);
  Wait(Fwd(plan, 1), 0);
  const SimReport r = MustSimulate(plan, SimpleCluster(2));
  EXPECT_NEAR(r.forward.makespan_s, 1.0, kTolerance);
  for (const DeviceSimStats& s : r.forward.devices) {
    EXPECT_EQ(s.exposed_comm_s, 0);
    EXPECT_NEAR(s.busy_s, 1.0, kTolerance);
  }
}

TEST(SimulatePlan, TheRendezvousWaitsForTheLaterLaunch) {
  // Device 1 launches after a 1 s copy: the flow starts at 1.0 + 0.1 and ends at 1.6.
  Plan plan = EmptyPlan({.nodes = 1, .devices_per_node = 2});
  Launch(Fwd(plan, 0), 0, {1}, {}, 500'000'000);
  Wait(Fwd(plan, 0), 0);
  CopySeconds(Fwd(plan, 1), 1.0);
  Launch(Fwd(plan, 1), 0, {}, {0}, 500'000'000);
  Wait(Fwd(plan, 1), 0);
  const SimReport r = MustSimulate(plan, SimpleCluster(2));
  EXPECT_NEAR(r.forward.makespan_s, 1.6, kTolerance);
  EXPECT_NEAR(r.forward.devices[0].exposed_comm_s, 1.6, kTolerance);
  EXPECT_NEAR(r.forward.devices[1].exposed_comm_s, 0.6, kTolerance);
}

TEST(SimulatePlan, TheBackwardStartsWhenTheForwardHasFinishedEverywhere) {
  Plan plan = EmptyPlan({.nodes = 1, .devices_per_node = 2});
  CopySeconds(Fwd(plan, 0), 0.6);
  CopySeconds(plan.backward[1], 1.0);
  const SimReport r = MustSimulate(plan, SimpleCluster(2), SimOptions{.trace = true});
  EXPECT_NEAR(r.forward.makespan_s, 0.6, kTolerance);
  EXPECT_NEAR(r.backward.makespan_s, 1.0, kTolerance);
  EXPECT_NEAR(r.total_s(), 1.6, kTolerance);
  EXPECT_NEAR(r.forward.devices[1].idle_s, 0.6, kTolerance);
  EXPECT_NEAR(r.backward.devices[0].idle_s, 1.0, kTolerance);
  // In the trace, device 1's backward copy starts at 0.6 s = 600000 us.
  const nlohmann::json trace = nlohmann::json::parse(r.trace_json);
  bool found = false;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    if (e.value("ph", "") == "X" && e.value("pid", -1) == 1 &&
        e.value("name", "").starts_with("BlockwiseCopy")) {
      EXPECT_NEAR(e["ts"].get<double>(), 600000, 1e-3);
      EXPECT_NEAR(e["dur"].get<double>(), 1e6, 1e-3);
      EXPECT_EQ(e["args"].value("pass", ""), "backward");
      found = true;
    }
  }
  EXPECT_TRUE(found) << r.trace_json;
}

TEST(SimulatePlan, TraceHasComputeWaitsAndFlowsOfEveryDevice) {
  Plan plan = EmptyPlan({.nodes = 1, .devices_per_node = 3});
  Launch(Fwd(plan, 0), 0, {1, 2}, {}, 1'000'000'000);
  CopySeconds(Fwd(plan, 0), 0.5);
  Wait(Fwd(plan, 0), 0);
  for (int32_t d : {1, 2}) {
    Launch(Fwd(plan, d), 0, {}, {0}, 1'000'000'000);
    Wait(Fwd(plan, d), 0);
  }
  const SimReport r = MustSimulate(plan, SimpleCluster(3), SimOptions{.trace = true});
  const nlohmann::json trace = nlohmann::json::parse(r.trace_json);
  int flows = 0, waits = 0, copies = 0;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    const std::string name = e.value("name", "");
    if (e.value("ph", "") != "X") continue;
    if (name.starts_with("to ")) {
      ++flows;
      EXPECT_EQ(e.value("pid", -1), 0);
      EXPECT_NEAR(e["ts"].get<double>(), 0.1e6, 1e-3);
      EXPECT_NEAR(e["dur"].get<double>(), 2.0e6, 1e-3);
      EXPECT_GE(e.value("tid", 0), 1);  // a comm thread
    }
    if (name.starts_with("CommWait")) ++waits;
    if (name.starts_with("BlockwiseCopy")) ++copies;
  }
  EXPECT_EQ(flows, 2);
  EXPECT_EQ(waits, 3);
  EXPECT_EQ(copies, 1);
  EXPECT_TRUE(MustSimulate(plan, SimpleCluster(3)).trace_json.empty());
}

TEST(SimulatePlan, RejectsAWaitWithoutALaunch) {
  Plan plan = EmptyPlan({.nodes = 1, .devices_per_node = 2});
  Wait(Fwd(plan, 1), 7);
  const Result<SimReport> r = SimulatePlan(plan, SimpleCluster(2));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("device 1"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("CommWait 7"), std::string::npos) << r.status().ToString();
}

TEST(SimulatePlan, ReportsADeadlockInsteadOfHanging) {
  // Each device waits for its own launch before making the launch the other one needs.
  Plan plan = EmptyPlan({.nodes = 1, .devices_per_node = 2});
  Launch(Fwd(plan, 0), 0, {1}, {}, 100);
  Wait(Fwd(plan, 0), 0);
  Launch(Fwd(plan, 0), 1, {}, {1}, 100);
  Wait(Fwd(plan, 0), 1);
  Launch(Fwd(plan, 1), 1, {0}, {}, 100);
  Wait(Fwd(plan, 1), 1);
  Launch(Fwd(plan, 1), 0, {}, {0}, 100);
  Wait(Fwd(plan, 1), 0);
  const Result<SimReport> r = SimulatePlan(plan, SimpleCluster(2));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("deadlock"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("device 0 waits forever in CommWait 0"), std::string::npos)
      << r.status().ToString();
}

TEST(SimulatePlan, RejectsASendNobodyReceives) {
  Plan plan = EmptyPlan({.nodes = 1, .devices_per_node = 2});
  Launch(Fwd(plan, 0), 0, {1}, {}, 100);
  Launch(Fwd(plan, 1), 0, {}, {}, 100);
  const Result<SimReport> r = SimulatePlan(plan, SimpleCluster(2));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("expects 0 bytes from device 0"), std::string::npos)
      << r.status().ToString();
}

TEST(SimulatePlan, RejectsAReceiveNobodySends) {
  Plan plan = EmptyPlan({.nodes = 1, .devices_per_node = 2});
  Launch(Fwd(plan, 1), 3, {}, {0}, 100);
  Launch(Fwd(plan, 0), 3, {}, {}, 100);
  const Result<SimReport> r = SimulatePlan(plan, SimpleCluster(2));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("device 1"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("CommLaunch 3 expects 100 bytes from device 0"),
            std::string::npos)
      << r.status().ToString();
}

TEST(SimulatePlan, RejectsALaunchWithoutItsPeer) {
  Plan plan = EmptyPlan({.nodes = 1, .devices_per_node = 2});
  Launch(Fwd(plan, 0), 4, {1}, {}, 100);
  const Result<SimReport> r = SimulatePlan(plan, SimpleCluster(2));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("device 1, which has no CommLaunch 4"), std::string::npos)
      << r.status().ToString();
}

TEST(SimulatePlan, RejectsAPeerOutsideTheTopologyAndARepeatedId) {
  Plan plan = EmptyPlan({.nodes = 1, .devices_per_node = 2});
  Launch(Fwd(plan, 0), 0, {5}, {}, 100);
  Result<SimReport> r = SimulatePlan(plan, SimpleCluster(2));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("peer device 5"), std::string::npos) << r.status().ToString();

  plan = EmptyPlan({.nodes = 1, .devices_per_node = 2});
  Launch(Fwd(plan, 0), 2, {}, {}, 100);
  Launch(Fwd(plan, 0), 2, {}, {}, 100);
  r = SimulatePlan(plan, SimpleCluster(2));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("repeats the id"), std::string::npos)
      << r.status().ToString();
}

// A wait names a launch of its own device that comes before it: one for a later launch, or for
// no launch, is refused with the wait's instruction.
TEST(SimulatePlan, RejectsAWaitBeforeItsLaunchOrWithoutOne) {
  Plan plan = EmptyPlan({.nodes = 1, .devices_per_node = 2});
  Launch(Fwd(plan, 0), 0, {}, {}, 100);
  Wait(Fwd(plan, 0), 0);
  Wait(Fwd(plan, 0), 7);
  Result<SimReport> r = SimulatePlan(plan, SimpleCluster(2));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("instruction 2: CommWait 7 has no earlier CommLaunch 7"),
            std::string::npos)
      << r.status().ToString();

  plan = EmptyPlan({.nodes = 1, .devices_per_node = 2});
  Wait(Fwd(plan, 1), 3);
  Launch(Fwd(plan, 1), 3, {}, {}, 100);
  r = SimulatePlan(plan, SimpleCluster(2));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("device 1: instruction 0: CommWait 3 has no earlier"),
            std::string::npos)
      << r.status().ToString();
}

// A plan may use part of each node (4 of 8), never more devices than a node holds.
TEST(SimulatePlan, RejectsAPlanWhoseNodesHoldMoreDevicesThanTheClusters) {
  EXPECT_TRUE(SimulatePlan(EmptyPlan({.nodes = 2, .devices_per_node = 4}), SimpleCluster(8)).ok());
  const Result<SimReport> r =
      SimulatePlan(EmptyPlan({.nodes = 2, .devices_per_node = 4}), SimpleCluster(2));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("4 devices per node, more than a node of cluster"),
            std::string::npos)
      << r.status().ToString();
}

TEST(SimulatePlan, RejectsAPlanPartAndMissingPrograms) {
  Plan plan = EmptyPlan({.nodes = 1, .devices_per_node = 2});
  Plan part = PlanPartForDevice(plan, DeviceId{1});
  EXPECT_FALSE(SimulatePlan(part, SimpleCluster(2)).ok());
  plan.backward.pop_back();
  const Result<SimReport> r = SimulatePlan(plan, SimpleCluster(2));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("1 backward programs for 2 devices"), std::string::npos)
      << r.status().ToString();
}

TEST(SimulatePlan, RejectsASlotThatDoesNotExist) {
  Plan plan = EmptyPlan({.nodes = 1, .devices_per_node = 2});
  Fwd(plan, 0).instructions.emplace_back(std::in_place_type<BlockwiseCopy>,
                                         BlockwiseCopy{.ops = {{0, 3}}});
  const Result<SimReport> r = SimulatePlan(plan, SimpleCluster(2));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("forward pass, device 0: instruction 0"), std::string::npos)
      << r.status().ToString();
}

TEST(SimulatePlan, RejectsAnInvalidCluster) {
  const Plan plan = EmptyPlan({.nodes = 1, .devices_per_node = 2});
  ClusterSpec cluster = SimpleCluster(2);
  cluster.inter_node.bytes_per_s = 0;
  const Result<SimReport> r = SimulatePlan(plan, cluster);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("inter_node.bytes_per_s"), std::string::npos);
}

TEST(SimulatePlan, RejectsATileWhoseRowColumnOrSlicesAreNotInItsCall) {
  const std::function<void(AttentionTile&)> damages[] = {
      [](AttentionTile& t) { t.first_slice = -1; }, [](AttentionTile& t) { t.first_slice = 1; },
      [](AttentionTile& t) { t.row = 1; }, [](AttentionTile& t) { t.column = -1; }};
  for (size_t d = 0; d < std::size(damages); ++d) {
    Plan plan = testing::TwoBlockCausalPlan();
    damages[d](std::get<BlockwiseAttention>(plan.forward[0].instructions[2]).tiles[0]);
    const Result<SimReport> r = SimulatePlan(plan, SimpleCluster(2));
    ASSERT_FALSE(r.ok()) << d;
    EXPECT_NE(r.status().message().find("instruction 2: the row, column or slices of compute "
                                        "block 0 are not in the call"),
              std::string::npos)
        << r.status().ToString();
  }
}

TEST(SimulatePlan, ReplaysTheHandMadeCausalPlan) {
  const Plan plan = testing::TwoBlockCausalPlan();
  ASSERT_TRUE(ValidatePlan(plan).ok());
  const SimReport r = MustSimulate(plan, SimpleCluster(2));
  EXPECT_GT(r.forward.makespan_s, kIntraLatencyS);
  EXPECT_GT(r.backward.makespan_s, kIntraLatencyS);
  ExpectTimeAccountedFor(r);
  // FLOPs of blocks.h: 4 (fwd) or 10 (bwd) x area x head_dim 8 x 4 heads; device 0 computes
  // compute blocks 0 and 1 (areas 10 and 16), device 1 block 2 (area 10).
  EXPECT_EQ(r.forward.devices[0].attention_flops, 4 * 26 * 8 * 4);
  EXPECT_EQ(r.forward.devices[1].attention_flops, 4 * 10 * 8 * 4);
  EXPECT_EQ(r.backward.devices[0].attention_flops, 10 * 26 * 8 * 4);
  for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
    const PassSimReport& p = pass == Pass::kForward ? r.forward : r.backward;
    const PlanTraffic t = MeasureTraffic(plan, pass);
    EXPECT_EQ(p.total.bytes_sent_intra_node, t.bytes_intra_node);
    EXPECT_EQ(p.total.bytes_sent_inter_node, t.bytes_inter_node);
  }
}

}  // namespace
}  // namespace dcp

namespace dcp {
namespace {

// The ideal: the batch's attention FLOPs (blocks.h counts them) over every device at the p4de
// kernel's rate on 4096 x 4096 tiles (72% of 312 TFLOP/s forward, 60% backward, times
// 4096 / (4096 + 105) per side), whatever block size and placement the plan uses.
TEST(SimulatePlan, IdealTimeIsTheBatchFlopsAtTheBestTileRateOnEveryDevice) {
  auto batch = Batch::Create({3000, 1000, 700}, {*MaskSpec::Parse("causal")},
                             AttentionShape{.heads = 8, .kv_heads = 2, .head_dim = 64});
  ASSERT_TRUE(batch.ok());
  auto blocks = MakeBlocks(*batch, {.block_size = 256});
  ASSERT_TRUE(blocks.ok());
  double forward = 0, backward = 0;
  for (const ComputeBlock& c : blocks->compute_blocks) {
    forward += static_cast<double>(blocks->FlopsFwd(c));
    backward += static_cast<double>(blocks->FlopsBwd(c));
  }
  const double side = 4096.0 / (4096.0 + 105.0);
  const double rate = 312e12 * side * side * 4;
  const double expected = forward / (rate * 0.72) + backward / (rate * 0.60);
  ClusterSpec cluster;
  cluster.devices_per_node = 4;
  for (int64_t block_size : {256, 1024}) {
    auto planned =
        PlanBatch(*batch, SinglePassOptions({.nodes = 1, .devices_per_node = 4}, block_size));
    ASSERT_TRUE(planned.ok()) << planned.status().ToString();
    const SimReport report = MustSimulate(planned->plan, cluster);
    EXPECT_NEAR(report.ideal_s, expected, expected * 1e-9) << block_size;
    EXPECT_DOUBLE_EQ(report.efficiency(), report.ideal_s / report.total_s());
    EXPECT_LT(report.efficiency(), 1);
  }
}

}  // namespace
}  // namespace dcp
