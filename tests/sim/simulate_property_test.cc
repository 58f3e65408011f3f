// SPDX-License-Identifier: Apache-2.0
// Invariants of SimulatePlan over compiled plans of random batches: the time of every device adds
// up, no pass ends before its busiest device has computed, and the bytes match the plan's.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "dcp/baselines.h"
#include "dcp/sim.h"
#include "testing/cases.h"
#include "testing/random_plans.h"
#include "testing/trace.h"

namespace dcp {
namespace {

const char* const kMasks[] = {"causal",
                              "full",
                              "sliding-window:window=100",
                              "lambda:sink=8,window=150",
                              "causal-blockwise:block=64,local=2",
                              "shared-question:question=0.3,answers=3"};

using testing::RandomPlanCase;

RandomPlanCase MakeCase(uint64_t seed) {
  return testing::MakeRandomPlanCase(seed, kMasks, /*block_shifts=*/5,
                                     AttentionShape{.heads = 4, .kv_heads = 2, .head_dim = 64});
}

Result<Plan> CompileCase(const RandomPlanCase& c) { return testing::CompileRandomPlanCase(c); }

TEST(SimulatePlan, InvariantsHoldOnRandomPlans) {
  for (uint64_t seed = 0; seed < testing::RandomCases(150); ++seed) {
    const RandomPlanCase c = MakeCase(seed);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", topology " << c.topology.ToString()
                                      << ", block " << c.block_size << ", mask " << c.mask);
    Result<Plan> plan = CompileCase(c);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    ClusterSpec cluster = *ClusterPreset(seed % 2 == 0 ? "p4de" : "h100");
    cluster.devices_per_node = c.topology.devices_per_node;
    const Result<SimReport> report = SimulatePlan(*plan, cluster);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
      const PassSimReport& p = pass == Pass::kForward ? report->forward : report->backward;
      SCOPED_TRACE(pass == Pass::kForward ? "forward" : "backward");
      ASSERT_EQ(p.devices.size(), static_cast<size_t>(c.topology.devices()));
      double max_busy = 0, max_finish = 0;
      for (size_t d = 0; d < p.devices.size(); ++d) {
        const DeviceSimStats& s = p.devices[d];
        EXPECT_GE(s.busy_s, 0);
        EXPECT_GE(s.exposed_comm_s, 0);
        EXPECT_GE(s.idle_s, 0);
        EXPECT_NEAR(s.busy_s + s.exposed_comm_s + s.idle_s, p.makespan_s, 1e-9 * p.makespan_s)
            << "device " << d;
        max_busy = std::max(max_busy, s.busy_s);
        max_finish = std::max(max_finish, s.busy_s + s.exposed_comm_s);
      }
      EXPECT_GE(p.makespan_s, max_busy);
      EXPECT_NEAR(max_finish, p.makespan_s, 1e-9 * p.makespan_s);
      const PlanTraffic t = MeasureTraffic(*plan, pass);
      EXPECT_EQ(p.total.bytes_sent_inter_node, t.bytes_inter_node);
      EXPECT_EQ(p.total.bytes_sent_intra_node, t.bytes_intra_node);
    }
    // The FLOPs the devices compute are the batch's.
    const Batch batch = *c.MakeBatch();
    const BlockSet blocks =
        *MakeBlocks(batch, {.block_size = c.block_size, .head_groups = c.head_groups});
    EXPECT_EQ(report->forward.total.attention_flops, blocks.flops_fwd);
    EXPECT_EQ(report->backward.total.attention_flops, blocks.flops_bwd);
  }
}

// Calls check(c, cluster, blocks, placement, schedule, plan) on `cases` random cases, for dcp's own
// plan and each other strategy's (ring, zigzag, TE, LoongTrain, FCP, MagiAttention) whose layout
// the case's topology holds, on p4de or h100 by turns; returns how many plans it checked.
template <typename Check>
int CheckEveryStrategysPlan(uint64_t cases, const Check& check) {
  int checked = 0;
  for (uint64_t seed = 0; seed < cases; ++seed) {
    const RandomPlanCase c = MakeCase(seed);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", topology " << c.topology.ToString()
                                      << ", block " << c.block_size << ", mask " << c.mask);
    const Batch batch = *c.MakeBatch();
    ClusterSpec cluster = *ClusterPreset(seed % 2 == 0 ? "p4de" : "h100");
    cluster.devices_per_node = c.topology.devices_per_node;
    const BlockSet blocks =
        *MakeBlocks(batch, {.block_size = c.block_size, .head_groups = c.head_groups});
    const Placement placement = PartitionBlocks(blocks, c.topology, {})->placement;
    const Schedule schedule =
        *ScheduleDivisions(blocks, placement, c.topology, {.divisions = c.divisions});
    const Result<Plan> own = CompilePlan(batch, blocks, placement, schedule, c.topology);
    EXPECT_TRUE(own.ok()) << own.status().ToString();
    if (!own.ok()) continue;
    check(c, cluster, blocks, placement, schedule, *own);
    ++checked;
    for (Strategy s : {Strategy::kRing, Strategy::kZigzag, Strategy::kTe, Strategy::kLoongTrain,
                       Strategy::kFcp, Strategy::kMagi}) {
      const BaselineOptions options{.topology = c.topology, .fcp_block_tokens = c.block_size};
      Result<BaselinePlan> baseline = PlanBaseline(s, batch, options);
      if (!baseline.ok()) continue;  // a layout this topology cannot hold
      check(c, cluster, baseline->blocks, baseline->placement, baseline->schedule, baseline->plan);
      ++checked;
    }
  }
  return checked;
}

// AttentionLowerBoundSeconds never exceeds the simulated time of a plan compiled from the same
// placement and schedule, whatever the strategy (dcp's own, the static layouts, FCP,
// MagiAttention), mask, block size, head groups, divisions and cluster: the tuning skips a
// candidate on it.
TEST(AttentionLowerBoundSeconds, NeverExceedsTheSimulatedTime) {
  const int checked = CheckEveryStrategysPlan(
      testing::RandomCases(40),
      [](const RandomPlanCase& c, const ClusterSpec& cluster, const BlockSet& blocks,
         const Placement& placement, const Schedule& schedule, const Plan& plan) {
        const double bound = AttentionLowerBoundSeconds(blocks, placement, schedule,
                                                        c.topology.devices(), cluster.device);
        const Result<SimReport> report = SimulatePlan(plan, cluster);
        ASSERT_TRUE(report.ok()) << report.status().ToString();
        EXPECT_LE(bound, report->total_s()) << plan.origin;
        EXPECT_EQ(bound > 0, !blocks.compute_blocks.empty()) << plan.origin;
      });
  EXPECT_GT(checked, 5 * static_cast<int>(testing::RandomCases(40)));  // most strategies run
}

// SimulationLowerBoundSeconds never exceeds the simulated time of any strategy's plan, and is at
// least what the replay's own report shows no pass can beat: per pass, the busiest device's
// compute, the bytes it sends inside its node over a switch port, and the bytes a node sends over
// its network port (every message of a compiled plan is waited for).
TEST(SimulationLowerBoundSeconds, LiesBetweenTheBusiestPortOrStreamAndTheSimulatedTime) {
  const int checked = CheckEveryStrategysPlan(
      testing::RandomCases(40),
      [](const RandomPlanCase& c, const ClusterSpec& cluster, const BlockSet&, const Placement&,
         const Schedule&, const Plan& plan) {
        const Result<SimReport> report = SimulatePlan(plan, cluster);
        ASSERT_TRUE(report.ok()) << report.status().ToString();
        const Result<double> bound = SimulationLowerBoundSeconds(plan, cluster);
        ASSERT_TRUE(bound.ok()) << bound.status().ToString();
        double seen = 0;
        for (const PassSimReport* pass : {&report->forward, &report->backward}) {
          double busiest = 0;
          std::vector<double> node_sends(c.topology.nodes, 0);
          for (size_t d = 0; d < pass->devices.size(); ++d) {
            const DeviceSimStats& s = pass->devices[d];
            busiest = std::max(
                {busiest, s.busy_s,
                 static_cast<double>(s.bytes_sent_intra_node) / cluster.intra_node.bytes_per_s});
            node_sends[d / c.topology.devices_per_node] +=
                static_cast<double>(s.bytes_sent_inter_node);
          }
          for (double bytes : node_sends) {
            busiest = std::max(busiest, bytes / cluster.inter_node.bytes_per_s);
          }
          seen += busiest;
        }
        EXPECT_LE(*bound, report->total_s()) << plan.origin;
        EXPECT_GE(*bound, seen * (1 - 1e-6)) << plan.origin;
      });
  EXPECT_GT(checked, 5 * static_cast<int>(testing::RandomCases(40)));  // most strategies run
}

// The bound of a hand-sized case: one 2048-token sequence under a full mask in blocks of 1024, its
// four 1024 x 1024 tiles on device 1 of 2, in two divisions. Each tile: 2^20 pairs x 64 dims x 4
// heads, forward 4 and backward 10 FLOPs per pair and dim, at peak x pass efficiency x
// (1024 / (1024 + half))^2; each division's call one launch per pass.
TEST(AttentionLowerBoundSeconds, IsTheBusiestDevicesAttentionPerPass) {
  const Batch batch = *Batch::Create({2048}, {*MaskSpec::Parse("full")},
                                     AttentionShape{.heads = 4, .kv_heads = 2, .head_dim = 64});
  const BlockSet blocks = *MakeBlocks(batch, {.block_size = 1024});
  ASSERT_EQ(blocks.compute_blocks.size(), 4u);
  Placement placement;
  placement.data_device = {DeviceId{0}, DeviceId{1}};
  placement.compute_device.assign(4, DeviceId{1});
  Schedule schedule;
  schedule.n_divisions = 2;
  schedule.compute_division = {0, 1, 0, 1};
  DeviceSpec device;
  device.peak_flops = 1e14;
  device.attention.forward_efficiency = 0.5;
  device.attention.backward_efficiency = 0.25;
  device.attention.rows_half = 1024;  // each side at half rate
  device.attention.cols_half = 3072;  // and at a quarter
  device.attention.launch_s = 1e-5;
  const double work = 4 * 1048576.0 * 64 * 4;  // tiles x pairs x dims x heads
  const double rate = 1e14 * 0.5 * 0.25;
  const double compute = work * 4 / (rate * 0.5) + work * 10 / (rate * 0.25);
  const double expected = compute + 2 * 2 * 1e-5;  // two calls a pass
  EXPECT_NEAR(AttentionLowerBoundSeconds(blocks, placement, schedule, 2, device), expected,
              1e-12 * expected);
  // Split over the two devices, one division each: the busiest holds half the work, one call.
  placement.compute_device = {DeviceId{0}, DeviceId{1}, DeviceId{0}, DeviceId{1}};
  EXPECT_NEAR(AttentionLowerBoundSeconds(blocks, placement, schedule, 2, device),
              compute / 2 + 2 * 1e-5, 1e-12 * expected);
  // Nothing to compute on no devices.
  EXPECT_EQ(AttentionLowerBoundSeconds(blocks, placement, schedule, 0, device), 0);
}

// The counts are replayed on the threads at once; the schedule chosen is the same on one thread
// and on three (ties go to the earlier count whatever finishes first).
TEST(ScheduleBySimulation, ChoosesTheSameScheduleOnAnyThreadCount) {
  for (uint64_t seed = 0; seed < testing::RandomCases(20); ++seed) {
    const RandomPlanCase c = MakeCase(seed);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", topology " << c.topology.ToString());
    const Batch batch = *c.MakeBatch();
    const BlockSet blocks =
        *MakeBlocks(batch, {.block_size = c.block_size, .head_groups = c.head_groups});
    const Placement placement = PartitionBlocks(blocks, c.topology, {})->placement;
    ClusterSpec cluster;
    cluster.devices_per_node = c.topology.devices_per_node;
    const auto search = [&](int32_t threads) {
      return ScheduleBySimulation(batch, blocks, placement, c.topology,
                                  {.divisions = 0, .threads = threads}, cluster);
    };
    const Result<Schedule> one = search(1), three = search(3);
    ASSERT_TRUE(one.ok() && three.ok()) << one.status().ToString();
    EXPECT_EQ(one->n_divisions, three->n_divisions);
    EXPECT_EQ(one->compute_division, three->compute_division);
  }
}

// Seconds of forward + backward of `batch` on `cluster` with the schedule from ScheduleDivisions
// (search = false) or ScheduleBySimulation, and whether the two schedules are the same.
struct Scheduled {
  double model_s = 0, searched_s = 0;
  bool same = false;
};
Scheduled CompareSchedules(const Batch& batch, int64_t block_size, int64_t head_groups,
                           const Topology& topology, int32_t divisions) {
  const BlockSet blocks = *MakeBlocks(batch, {.block_size = block_size, .head_groups = head_groups});
  const Placement placement = PartitionBlocks(blocks, topology, {})->placement;
  ClusterSpec cluster;
  cluster.devices_per_node = topology.devices_per_node;
  const ScheduleOptions options{.divisions = divisions};
  const Result<Schedule> model = ScheduleDivisions(blocks, placement, topology, options);
  const Result<Schedule> searched =
      ScheduleBySimulation(batch, blocks, placement, topology, options, cluster);
  EXPECT_TRUE(model.ok() && searched.ok()) << searched.status().ToString();
  const auto seconds = [&](const Schedule& schedule) {
    const Plan plan = *CompilePlan(batch, blocks, placement, schedule, topology);
    EXPECT_TRUE(ValidatePlan(plan).ok());
    return SimulatePlan(plan, cluster)->total_s();
  };
  return Scheduled{.model_s = seconds(*model),
                   .searched_s = seconds(*searched),
                   .same = model->compute_division == searched->compute_division &&
                           model->n_divisions == searched->n_divisions};
}

// The division count chosen by simulation: never slower on the cluster than the scheduler's own
// choice, the same schedule when the count is fixed, and the plans stay valid.
TEST(ScheduleBySimulation, IsNeverSlowerThanTheCostModelsChoice) {
  for (uint64_t seed = 0; seed < testing::RandomCases(40); ++seed) {
    const RandomPlanCase c = MakeCase(seed);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", topology " << c.topology.ToString());
    const Batch batch = *c.MakeBatch();
    const Scheduled s = CompareSchedules(batch, c.block_size, c.head_groups, c.topology, c.divisions);
    EXPECT_LE(s.searched_s, s.model_s);
    if (c.divisions != 0) {
      EXPECT_TRUE(s.same);
    }
  }
}

// A batch where the cost model's count is not the fastest: the search finds a faster one (0.91
// against 0.98 ms).
TEST(ScheduleBySimulation, FindsAFasterCountThanTheCostModel) {
  const Batch batch = *Batch::Create({8192, 3000, 1000}, {MaskSpec{}}, AttentionShape{});
  const Scheduled s =
      CompareSchedules(batch, 256, 1, Topology{.nodes = 2, .devices_per_node = 8}, 0);
  EXPECT_LT(s.searched_s, s.model_s);
}

// The search tries a grid of counts and the neighbours of the grid's best: its choice is never
// slower than any count of the grid (the cost model's, 2, 4, 8, 12, 16), each compiled and
// simulated here, nor than the grid's best count's neighbours.
void ExpectNoGridCountFaster(const Batch& batch, int64_t block_size, int64_t head_groups,
                             const Topology& topology) {
  const BlockSet blocks =
      *MakeBlocks(batch, {.block_size = block_size, .head_groups = head_groups});
  const Placement placement = PartitionBlocks(blocks, topology, {})->placement;
  ClusterSpec cluster;
  cluster.devices_per_node = topology.devices_per_node;
  const int32_t model = ScheduleDivisions(blocks, placement, topology, {})->n_divisions;
  // The count's schedule (0: the cost model's) and its time.
  const auto seconds = [&](int32_t divisions) {
    const Schedule schedule = *ScheduleDivisions(blocks, placement, topology,
                                                 {.divisions = divisions == model ? 0 : divisions});
    return SimulatePlan(*CompilePlan(batch, blocks, placement, schedule, topology), cluster)
        ->total_s();
  };
  const Result<Schedule> searched =
      ScheduleBySimulation(batch, blocks, placement, topology, {.divisions = 0}, cluster);
  ASSERT_TRUE(searched.ok()) << searched.status().ToString();
  if (searched->n_divisions == 1) return;  // nothing to hide: the search is not run
  const double chosen = seconds(searched->n_divisions);
  // The grid holds the cost model's count too, first: its best's neighbours are polished.
  int32_t grid_best = model;
  for (const int32_t n : {model, 2, 4, 8, 12, 16}) {
    EXPECT_LE(chosen, seconds(n)) << "count " << n;
    if (seconds(n) < seconds(grid_best)) grid_best = n;
  }
  for (const int32_t n : {grid_best - 1, grid_best + 1}) {
    if (n >= 2 && n <= kMaxSearchedDivisions) {
      EXPECT_LE(chosen, seconds(n)) << "count " << n;
    }
  }
}

TEST(ScheduleBySimulation, IsNeverSlowerThanTheGridOrItsBestCountsNeighbours) {
  for (uint64_t seed = 0; seed < testing::RandomCases(12); ++seed) {
    const RandomPlanCase c = MakeCase(seed);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", topology " << c.topology.ToString());
    ExpectNoGridCountFaster(*c.MakeBatch(), c.block_size, c.head_groups, c.topology);
  }
  // Long sequences, where the most divisions hide the most. On the causal one, time drops by 4%
  // from 13 divisions to 14 and is least at 15: a grid without its top count would stop at 13.
  const Topology two_nodes{.nodes = 2, .devices_per_node = 8};
  ExpectNoGridCountFaster(*Batch::Create({8192, 3000, 1000}, {MaskSpec{}}, AttentionShape{}), 512,
                          1, two_nodes);
  ExpectNoGridCountFaster(*Batch::Create({65536}, {MaskSpec{}}, AttentionShape{}), 1024, 1,
                          two_nodes);
  ExpectNoGridCountFaster(*Batch::Create({131072}, {*MaskSpec::Parse("causal")}, AttentionShape{}),
                          1024, 1, two_nodes);
}

// `plan` simulated with its trace on the p4de model (with the plan's devices per node).
Result<SimReport> SimulateWithTrace(const Plan& plan) {
  ClusterSpec cluster = *ClusterPreset("p4de");
  cluster.devices_per_node = plan.topology.devices_per_node;
  return SimulatePlan(plan, cluster, {.trace = true});
}

// The trace's slices of one track (a device's compute thread, one of its comm threads) never
// overlap, also after rounding to the trace's nanoseconds (issue 18: a slice ended 1 ns after the
// next began when its duration was rounded apart from its start).
TEST(SimulatePlan, TraceSlicesNeverOverlapOnATrack) {
  for (uint64_t seed = 0; seed < testing::RandomCases(40); ++seed) {
    const RandomPlanCase c = MakeCase(seed);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", topology " << c.topology.ToString());
    Result<Plan> plan = CompileCase(c);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    const Result<SimReport> report = SimulateWithTrace(*plan);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_EQ(testing::CountOverlappingSlices(nlohmann::json::parse(report->trace_json)), 0);
  }
}

// Each device's "buffer bytes" counter holds its forward program's workspace from 0, its backward
// program's from the forward's end, and 0 from the backward's end.
TEST(SimulatePlan, TraceCountsEachDevicesBufferBytesPerPass) {
  for (uint64_t seed = 0; seed < testing::RandomCases(20); ++seed) {
    const RandomPlanCase c = MakeCase(seed);
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    Result<Plan> plan = CompileCase(c);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    const Result<SimReport> report = SimulateWithTrace(*plan);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    std::vector<std::vector<std::pair<int64_t, int64_t>>> samples(plan->topology.devices());
    const nlohmann::json trace = nlohmann::json::parse(report->trace_json);
    for (const nlohmann::json& e : trace["traceEvents"]) {
      if (e.value("ph", "") != "C") continue;
      EXPECT_EQ(e.value("name", ""), "buffer bytes");
      samples[e["pid"].get<size_t>()].emplace_back(std::llround(e["ts"].get<double>() * 1000),
                                                   e["args"]["bytes"].get<int64_t>());
    }
    const auto nanos = [](double s) { return std::llround(s * 1e9); };
    for (int32_t d = 0; d < plan->topology.devices(); ++d) {
      const std::vector<std::pair<int64_t, int64_t>> expected = {
          {0, plan->forward[d].PeakBufferBytes()},
          {nanos(report->forward.makespan_s), plan->backward[d].PeakBufferBytes()},
          {nanos(report->forward.makespan_s + report->backward.makespan_s), 0}};
      EXPECT_EQ(samples[d], expected) << "device " << d;
    }
  }
}

TEST(SimulatePlan, IsDeterministic) {
  const Result<Plan> plan = CompileCase(MakeCase(11));
  ASSERT_TRUE(plan.ok());
  ClusterSpec cluster;
  cluster.devices_per_node = plan->topology.devices_per_node;
  const Result<SimReport> a = SimulatePlan(*plan, cluster, {.trace = true});
  const Result<SimReport> b = SimulatePlan(*plan, cluster, {.trace = true});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->total_s(), b->total_s());
  EXPECT_EQ(a->trace_json, b->trace_json);
}

}  // namespace
}  // namespace dcp

namespace dcp {
namespace {

// Plans with a moved, dropped or duplicated instruction: the simulator returns a result or an
// error, never hangs or crashes.
TEST(SimulatePlan, NeverHangsOnDamagedPlans) {
  int errors = 0;
  for (uint64_t seed = 0; seed < testing::RandomCases(200); ++seed) {
    const RandomPlanCase c = MakeCase(seed);
    Result<Plan> plan = CompileCase(c);
    ASSERT_TRUE(plan.ok());
    std::mt19937_64 rng(seed);
    Program& program =
        (rng() % 2 == 0 ? plan->forward : plan->backward)[rng() % c.topology.devices()];
    if (program.instructions.size() < 2) continue;
    const size_t i = rng() % program.instructions.size(), j = rng() % program.instructions.size();
    switch (rng() % 3) {
      case 0:
        std::swap(program.instructions[i], program.instructions[j]);
        break;
      case 1:
        program.instructions.erase(program.instructions.begin() + static_cast<ptrdiff_t>(i));
        break;
      case 2:
        program.instructions.push_back(program.instructions[i]);
        break;
    }
    ClusterSpec cluster;
    cluster.devices_per_node = c.topology.devices_per_node;
    const Result<SimReport> r = SimulatePlan(*plan, cluster);
    if (!r.ok()) {
      ++errors;
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    }
  }
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace dcp
