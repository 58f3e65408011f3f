// SPDX-License-Identifier: Apache-2.0
// The library planner: one call runs the whole pipeline; its tuning keeps the fastest candidate
// on the cluster model whatever the thread count, static layouts included; the memory budget is
// enforced.
#include "dcp/planner.h"

#include <gtest/gtest.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "baselines/peer_strategies.h"
#include "dcp/baselines.h"

namespace dcp {
namespace {

Batch TestBatch() {
  auto batch = Batch::Create({9000, 3000, 1200, 700}, {*MaskSpec::Parse("causal")},
                             AttentionShape{.heads = 8, .kv_heads = 2, .head_dim = 64});
  EXPECT_TRUE(batch.ok()) << batch.status().ToString();
  return std::move(batch).value();
}

const Topology k2x4{.nodes = 2, .devices_per_node = 4};

// Options on 2x4 with `set` applied. (Designated initializers of PlanOptions temporaries trip
// GCC 12's -Wmaybe-uninitialized on the cluster's name.)
template <typename Set>
PlanOptions On2x4(Set&& set) {
  PlanOptions options;
  options.topology = k2x4;
  set(options);
  return options;
}

// Options on 2x4 for a test of one of the tuning's refinements: dcp's own candidates at blocks of
// 512 and 1024, every refinement off (head groups, tightening, restarts), no other strategies,
// time alone deciding, division counts searched; then `set` turns on what the test is about.
template <typename Set>
PlanOptions RefinementOn2x4(Set&& set) {
  return On2x4([&](PlanOptions& o) {
    o.tuning.block_sizes = {512, 1024};
    o.tuning.head_groups = {};
    o.tuning.tightened.reset();
    o.tuning.placement_restarts = 0;
    o.tuning.other_strategies = false;
    o.tuning.max_peak_imbalance = 1e9;  // time alone decides
    o.division_choice = DivisionChoice::kSimulate;
    set(o);
  });
}

// Every value pinned: one pass of dcp's pipeline, no candidates.
void Pin(PlanOptions& o, int64_t block_size) {
  const Topology topology = o.topology;
  o = SinglePassOptions(topology, block_size);
}

// The p4de model with 4 devices per node, as the planner costs plans for a 2x4 topology.
ClusterSpec Cluster2x4() {
  ClusterSpec cluster;
  cluster.devices_per_node = 4;
  return cluster;
}

double SimulatedSeconds(const Plan& plan) {
  auto report = SimulatePlan(plan, Cluster2x4());
  EXPECT_TRUE(report.ok()) << report.status().ToString();
  return report.ok() ? report->total_s() : 0;
}

bool FasterThan(const CandidateOutcome& a, const CandidateOutcome& b) {
  return a.simulated_s < b.simulated_s;
}

// A candidate of dcp's own made by the tuning's refinements is the pinned pass with its values,
// its division count searched: the same origin, head groups and simulated time.
void ExpectThePinnedPass(const Batch& batch, const CandidateOutcome& candidate, int64_t block_size,
                         Tolerances eps, int64_t head_groups = 1, uint64_t seed = 0) {
  auto pinned = PlanBatch(batch, On2x4([&](PlanOptions& o) {
                            Pin(o, block_size);
                            o.partition.eps_compute = eps.compute;
                            o.partition.eps_inter = eps.inter;
                            o.partition.seed = seed;
                            o.head_groups = head_groups;
                            o.division_choice = DivisionChoice::kSimulate;
                          }));
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  EXPECT_EQ(pinned->plan.origin, candidate.name);
  EXPECT_EQ(pinned->plan.head_groups, head_groups);
  EXPECT_DOUBLE_EQ(candidate.simulated_s, SimulatedSeconds(pinned->plan));
}

TEST(PlanBatch, IsThePipelineOfItsPhases) {
  const Batch batch = TestBatch();
  const PlanOptions options = On2x4([](PlanOptions& o) {
    Pin(o, 512);
    o.partition.seed = 3;
  });
  auto planned = PlanBatch(batch, options);
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  // The same phases called one by one, with the scheduler's cost model sized for the cluster.
  auto blocks = MakeBlocks(batch, {.block_size = 512});
  auto placed = PartitionBlocks(*blocks, k2x4, {.seed = 3});
  const ClusterSpec cluster;
  const ScheduleOptions scheduler{
      .device_flops = cluster.device.peak_flops * cluster.device.attention.forward_efficiency,
      .intra_node_bytes_per_s = cluster.intra_node.bytes_per_s,
      .inter_node_bytes_per_s = cluster.inter_node.bytes_per_s};
  auto schedule = ScheduleDivisions(*blocks, placed->placement, k2x4, scheduler);
  auto plan = CompilePlan(batch, *blocks, placed->placement, *schedule, k2x4);
  ASSERT_TRUE(plan.ok());
  plan->origin = fmt::format("dcp 512:0.1/0.4:{} seed 3", plan->n_divisions);
  EXPECT_EQ(planned->plan, *plan);
  EXPECT_TRUE(ValidatePlan(planned->plan).ok());
  EXPECT_TRUE(planned->candidates.empty());
  EXPECT_EQ(planned->simulated_s, 0);
  EXPECT_GT(planned->ms.total(), 0);
}

// A batch too small for every listed block size (fewer blocks than devices) gets the heuristic's.
TEST(PlanBatch, FallsBackToTheBlockSizeHeuristicWhenNoListedSizeSuits) {
  const Batch batch = TestBatch();
  auto planned = PlanBatch(batch, On2x4([](PlanOptions& o) {
                             Pin(o, 0);
                             o.tuning.block_sizes = {4096, 8192};
                           }));
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  auto choice = ChooseBlockSize(batch.seqlens(), {.devices = 8, .eps_memory = 0.2});
  EXPECT_EQ(planned->plan.block_size, choice->block_size);
}

// A listed block size that cuts the batch into fewer blocks than devices is still tried when its
// blocks spread over the devices within the memory tolerance (GreedySpreadImbalance): one causal
// sequence of 14000 tokens in blocks of 2048 is 7 blocks on 8 devices, max/mean 2048 / 1750 =
// 1.17; of 12000 tokens, 6 blocks, 2048 / 1500 = 1.37, tried only when eps_memory allows it.
TEST(PlanBatch, TriesFewerBlocksThanDevicesWhenTheySpreadWithinTheMemoryTolerance) {
  const auto tried_2048 = [](int64_t tokens, double eps_memory) {
    auto batch = Batch::Create({tokens}, {*MaskSpec::Parse("causal")},
                               AttentionShape{.heads = 8, .kv_heads = 2, .head_dim = 64});
    EXPECT_TRUE(batch.ok()) << batch.status().ToString();
    if (!batch.ok()) return false;
    auto planned = PlanBatch(*batch, On2x4([&](PlanOptions& o) {
      o.tuning.block_sizes = {1024, 2048};
      o.tuning.tolerances = {{0.1, 0.4}};
      o.tuning.tightened.reset();
      o.tuning.head_groups = {};
      o.tuning.other_strategies = false;
      o.partition.eps_memory = eps_memory;
    }));
    EXPECT_TRUE(planned.ok()) << planned.status().ToString();
    if (!planned.ok()) return false;
    return std::any_of(planned->candidates.begin(), planned->candidates.end(),
                       [](const CandidateOutcome& c) { return c.name.starts_with("dcp 2048:"); });
  };
  EXPECT_NEAR(GreedySpreadImbalance({14000}, 2048, 8), 2048.0 / 1750, 1e-12);
  EXPECT_NEAR(GreedySpreadImbalance({12000}, 2048, 8), 2048.0 / 1500, 1e-12);
  EXPECT_TRUE(tried_2048(14000, 0.2));
  EXPECT_FALSE(tried_2048(12000, 0.2));
  EXPECT_TRUE(tried_2048(12000, 0.4));
  EXPECT_TRUE(tried_2048(16384, 0.0));  // 8 blocks: one per device
}

// A listed block size is left out when its blocks make more than tuning.max_tiles_per_device tiles
// per device and a larger listed size is tried. One causal sequence of 16384 tokens on 2x4: blocks
// of 256 make 64 * 65 / 2 = 2080 tiles (260 per device), of 512 528 (66), of 1024 136 (17).
TEST(PlanBatch, LeavesOutBlockSizesThatMakeMoreTilesPerDeviceThanAllowed) {
  auto batch = Batch::Create({16384}, {*MaskSpec::Parse("causal")},
                             AttentionShape{.heads = 8, .kv_heads = 2, .head_dim = 64});
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  const auto tried = [&](int64_t max_tiles_per_device) {
    auto planned = PlanBatch(*batch, On2x4([&](PlanOptions& o) {
      o.tuning.block_sizes = {256, 512, 1024};
      o.tuning.max_tiles_per_device = max_tiles_per_device;
      o.tuning.tolerances = {{0.1, 0.4}};
      o.tuning.tightened.reset();
      o.tuning.head_groups = {};
      o.tuning.placement_restarts = 0;
      o.tuning.other_strategies = false;
    }));
    EXPECT_TRUE(planned.ok()) << planned.status().ToString();
    std::vector<int64_t> sizes;
    if (!planned.ok()) return sizes;
    // A single candidate is the whole planning: it lists none.
    if (planned->candidates.empty()) return std::vector<int64_t>{planned->plan.block_size};
    for (const CandidateOutcome& c : planned->candidates) {
      sizes.push_back(std::stoll(c.name.substr(std::string("dcp ").size())));
    }
    return sizes;
  };
  using Sizes = std::vector<int64_t>;
  EXPECT_EQ(tried(0), (Sizes{256, 512, 1024}));  // no bound
  EXPECT_EQ(tried(260), (Sizes{256, 512, 1024}));
  EXPECT_EQ(tried(259), (Sizes{512, 1024}));
  EXPECT_EQ(tried(66), (Sizes{512, 1024}));
  EXPECT_EQ(tried(65), (Sizes{1024}));
  EXPECT_EQ(tried(1), (Sizes{1024}));  // the largest listed size is always tried
}

// The tuning keeps the candidate the simulator finds fastest among dcp's own placements (each
// planned here on its own, pinned) and the static layouts (planned here by PlanBaseline), and the
// result does not depend on the number of threads. (Every candidate searches its divisions by
// simulation, so the winner is not refined afterwards: the test below.)
TEST(PlanBatch, TuningKeepsTheFastestCandidateWhateverTheThreads) {
  const Batch batch = TestBatch();
  PlanOptions options = On2x4([](PlanOptions& o) {
    o.tuning.block_sizes = {256, 512, 1024};
    o.tuning.tolerances = {{0.1, 0.4}, {0.05, 0.05}};
    o.tuning.tightened.reset();         // TuningTightensTheFastestTwoOwnCandidates
    o.tuning.max_peak_imbalance = 1e9;  // time alone decides (memory: the test below)
    o.tuning.head_groups = {};          // (head groups: a test of their own)
    o.tuning.placement_restarts = 0;    // (restarts: a test of their own)
    o.division_choice = DivisionChoice::kSimulate;
  });
  std::vector<std::pair<std::string, double>> expected;  // in candidate order
  for (int64_t b : options.tuning.block_sizes) {
    for (Tolerances eps : options.tuning.tolerances) {
      auto one = PlanBatch(batch, On2x4([&](PlanOptions& o) {
                             Pin(o, b);
                             o.partition.eps_compute = eps.compute;
                             o.partition.eps_inter = eps.inter;
                             o.division_choice = DivisionChoice::kSimulate;
                           }));
      ASSERT_TRUE(one.ok()) << one.status().ToString();
      expected.emplace_back(one->plan.origin, SimulatedSeconds(one->plan));
    }
  }
  const size_t own = expected.size();
  // The other strategies, written out: ring, zigzag, TE, LoongTrain's inner rings but 1 (TE's
  // layout), FCP's three block sizes, MagiAttention's defaults.
  const auto add = [&](Strategy s, BaselineOptions o, std::string name) {
    o.topology = k2x4;
    auto baseline = PlanBaseline(s, batch, o);
    ASSERT_TRUE(baseline.ok()) << baseline.status().ToString();
    EXPECT_EQ(baseline->plan.origin, name);
    expected.emplace_back(std::move(name), SimulatedSeconds(baseline->plan));
  };
  for (Strategy s : {Strategy::kRing, Strategy::kZigzag, Strategy::kTe}) {
    add(s, {}, std::string(ToString(s)));
  }
  for (int32_t inner : {2, 4}) {  // 8 devices, 2 KV heads: 4 context ranks
    add(Strategy::kLoongTrain, {.inner_ring = inner}, fmt::format("loongtrain:{}", inner));
  }
  for (int64_t tokens : {1024, 2048, 4096}) {
    add(Strategy::kFcp, {.fcp_block_tokens = tokens}, fmt::format("fcp:{}", tokens));
  }
  add(Strategy::kMagi, {}, "magi:1");
  const auto by_time = [](const auto& a, const auto& b) { return a.second < b.second; };
  const auto fastest = std::min_element(expected.begin(), expected.end(), by_time);
  const auto fastest_own = std::min_element(expected.begin(), expected.begin() + own, by_time);

  auto single = PlanBatch(batch, options);
  options.threads = 3;
  auto threaded = PlanBatch(batch, options);
  ASSERT_TRUE(single.ok()) << single.status().ToString();
  ASSERT_TRUE(threaded.ok()) << threaded.status().ToString();
  EXPECT_DOUBLE_EQ(single->simulated_s, fastest->second);
  EXPECT_EQ(single->plan.origin, fastest->first);
  ASSERT_EQ(single->candidates.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const CandidateOutcome& c = single->candidates[i];
    EXPECT_EQ(c.name, expected[i].first);
    EXPECT_EQ(c.own, i < own) << i;
    if (c.skipped) {  // not planned: it is slower than dcp's fastest (all count as balanced here)
      EXPECT_FALSE(c.own) << i;
      EXPECT_GT(expected[i].second, fastest_own->second) << i;
      EXPECT_TRUE(c.error.starts_with("not planned") || c.error.starts_with("not simulated"))
          << c.error;
    } else {
      EXPECT_DOUBLE_EQ(c.simulated_s, expected[i].second) << i;
    }
  }
  ASSERT_TRUE(single->best_own.has_value());
  EXPECT_EQ(single->candidates[*single->best_own].name, fastest_own->first);
  EXPECT_EQ(single->plan, threaded->plan);
  EXPECT_EQ(single->candidates.size(), threaded->candidates.size());
}

// The best of dcp's own candidates and the runner-up are each planned again with their tiles split
// into the KV heads' two groups, as candidates of dcp's own right after the others, and win when
// faster; head groups that do not divide the KV heads, or an empty list, add nothing. Each
// candidate is the pinned pass with its values; the plan is the same on one thread and on three.
// After the splits, the fastest two of dcp's own are each planned once more with the tightened
// tolerances at their block size and head groups, the division count searched: the same plan as
// pinning them, one per block size and head groups. Not when they are no tighter than the
// candidate's own, unset, or the tolerances pinned.
TEST(PlanBatch, TuningTightensTheFastestTwoOwnCandidates) {
  const Batch batch = TestBatch();
  PlanOptions options = RefinementOn2x4([](PlanOptions& o) {
    o.tuning.tolerances = {{0.05, 0.05}};
    o.tuning.tightened = Tolerances{.compute = 0.02, .inter = 0.01};
  });
  auto planned = PlanBatch(batch, options);
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  ASSERT_EQ(planned->candidates.size(), 4u);
  std::vector<CandidateOutcome> own(planned->candidates.begin(), planned->candidates.begin() + 2);
  std::stable_sort(own.begin(), own.end(), FasterThan);
  for (int i : {0, 1}) {  // the best's, then the runner-up's
    const CandidateOutcome& tight = planned->candidates[2 + i];
    EXPECT_TRUE(tight.own);
    int64_t block = 0;
    ASSERT_EQ(std::sscanf(own[i].name.c_str(), "dcp %ld:", &block), 1) << own[i].name;
    const std::string values = fmt::format("dcp {}:0.02/0.01:", block);
    EXPECT_EQ(tight.name.substr(0, values.size()), values) << tight.name;
    ExpectThePinnedPass(batch, tight, block, {.compute = 0.02, .inter = 0.01});
  }
  const CandidateOutcome& fastest =
      *std::min_element(planned->candidates.begin(), planned->candidates.end(), FasterThan);
  EXPECT_EQ(planned->plan.origin, fastest.name);
  options.threads = 3;
  auto threaded = PlanBatch(batch, options);
  ASSERT_TRUE(threaded.ok()) << threaded.status().ToString();
  EXPECT_EQ(planned->plan, threaded->plan);
  // The best two at one block size: one tightened plan.
  PlanOptions one_size = options;
  one_size.tuning.block_sizes = {512};
  one_size.tuning.tolerances = {{0.1, 0.4}, {0.05, 0.05}};
  auto once = PlanBatch(batch, one_size);
  ASSERT_TRUE(once.ok()) << once.status().ToString();
  EXPECT_EQ(once->candidates.size(), 3u);
  // Looser in one; equal; unset; too many tiles per device.
  for (const auto& [tightened, max_tiles] :
       {std::pair{std::optional<Tolerances>{{.compute = 0.02, .inter = 0.5}}, int64_t{256}},
        std::pair{std::optional<Tolerances>{{.compute = 0.05, .inter = 0.05}}, int64_t{256}},
        std::pair{std::optional<Tolerances>{}, int64_t{256}},
        std::pair{std::optional<Tolerances>{{.compute = 0.02, .inter = 0.01}}, int64_t{0}}}) {
    options.tuning.tightened = tightened;
    options.tuning.split_max_tiles_per_device = max_tiles;
    auto untouched = PlanBatch(batch, options);
    ASSERT_TRUE(untouched.ok()) << untouched.status().ToString();
    EXPECT_EQ(untouched->candidates.size(), 2u) << max_tiles;
  }
  options.tuning.split_max_tiles_per_device = 256;
  options.tuning.tightened = Tolerances{.compute = -1, .inter = 0.01};
  auto bad = PlanBatch(batch, options);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tightened"), std::string::npos) << bad.status().ToString();
}

// After the splits and the tightening, the best of dcp's own is placed again from the next
// placement_restarts seeds: each is the pinned pass with its values and that seed, its division
// count searched (" seed N" ends its name), listed among dcp's own, and wins when fastest. The
// plan is the same on one thread and on three. None with no restarts or more tiles per device
// than the refinements allow; a count out of range is named.
TEST(PlanBatch, TuningPlacesTheBestOwnCandidateAgainFromOtherSeeds) {
  const Batch batch = TestBatch();
  PlanOptions options = RefinementOn2x4([](PlanOptions& o) {
    o.tuning.tolerances = {{0.1, 0.4}, {0.05, 0.05}};
    o.tuning.placement_restarts = 2;
    o.partition.seed = 5;
  });
  auto planned = PlanBatch(batch, options);
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  ASSERT_EQ(planned->candidates.size(), 6u);
  std::vector<CandidateOutcome> own(planned->candidates.begin(), planned->candidates.begin() + 4);
  std::stable_sort(own.begin(), own.end(), FasterThan);
  const std::string values = own[0].name.substr(0, own[0].name.rfind(':'));  // "dcp 512:0.1/0.4"
  int64_t block = 0;
  double compute = 0, inter = 0;
  ASSERT_EQ(std::sscanf(values.c_str(), "dcp %ld:%lf/%lf", &block, &compute, &inter), 3);
  EXPECT_TRUE(own[0].name.ends_with(" seed 5")) << own[0].name;
  for (int r : {1, 2}) {
    const CandidateOutcome& restart = planned->candidates[3 + r];
    EXPECT_TRUE(restart.own);
    EXPECT_TRUE(restart.name.starts_with(values + ":")) << restart.name;
    EXPECT_TRUE(restart.name.ends_with(fmt::format(" seed {}", 5 + r))) << restart.name;
    ExpectThePinnedPass(batch, restart, block, {.compute = compute, .inter = inter}, 1,
                        static_cast<uint64_t>(5 + r));
  }
  const CandidateOutcome& fastest =
      *std::min_element(planned->candidates.begin(), planned->candidates.end(), FasterThan);
  EXPECT_EQ(planned->plan.origin, fastest.name);
  options.threads = 3;
  auto threaded = PlanBatch(batch, options);
  ASSERT_TRUE(threaded.ok()) << threaded.status().ToString();
  EXPECT_EQ(planned->plan, threaded->plan);
  for (const auto& [restarts, max_tiles] :
       {std::pair{0, int64_t{256}}, std::pair{2, int64_t{0}}}) {
    options.tuning.placement_restarts = restarts;
    options.tuning.split_max_tiles_per_device = max_tiles;
    auto none = PlanBatch(batch, options);
    ASSERT_TRUE(none.ok()) << none.status().ToString();
    EXPECT_EQ(none->candidates.size(), 4u) << restarts << " " << max_tiles;
  }
  options.tuning.split_max_tiles_per_device = 256;
  for (int32_t bad : {-1, TuningOptions::kMaxPlacementRestarts + 1}) {
    options.tuning.placement_restarts = bad;
    auto refused = PlanBatch(batch, options);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.status().message().find("placement_restarts"), std::string::npos)
        << refused.status().ToString();
  }
}

// In a close call with another strategy, dcp's own is planned again at about two blocks per
// device and about one: the batch's tokens over twice the devices and over the devices, rounded
// down and up to a multiple of 128 (13900 tokens on 8 devices: 768 and 896, 1664 and 1792, each
// cutting the batch into at least 8 blocks), with the tightened tolerances and the best own's head
// groups, the division count searched; each is the pinned pass with those values, placed among
// dcp's own (before the other strategies), and wins when fastest. Not without other strategies,
// with close_call unset, or with the block size pinned; a bad margin is named.
TEST(PlanBatch, TuningTriesTwoBlocksAndOneBlockPerDeviceInACloseCall) {
  const Batch batch = TestBatch();
  const int64_t tokens =
      std::accumulate(batch.seqlens().begin(), batch.seqlens().end(), int64_t{0});
  std::vector<int64_t> sizes;
  for (double per_device : {2.0, 1.0}) {
    const double per_block = static_cast<double>(tokens) / (per_device * k2x4.devices()) / 128;
    sizes.push_back(static_cast<int64_t>(std::floor(per_block)) * 128);
    sizes.push_back(static_cast<int64_t>(std::ceil(per_block)) * 128);
  }
  ASSERT_EQ(sizes, (std::vector<int64_t>{768, 896, 1664, 1792}));
  PlanOptions options = RefinementOn2x4([](PlanOptions& o) {
    o.tuning.tolerances = {{0.05, 0.05}};
    o.tuning.other_strategies = true;  // a close call is with another strategy
    o.tuning.tightened = Tolerances{.compute = 0.02, .inter = 0.01};
    o.tuning.close_call = 1.0;  // every outcome is a close call
    // ... with another strategy planned: no candidate counts as balanced, and the slack keeps
    // the bound above the others' (dcp's own are fast enough here to skip every other).
    o.tuning.max_peak_share = 1e-9;
    o.tuning.balance_slack = 1.0;
  });
  auto planned = PlanBatch(batch, options);
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  ASSERT_GT(planned->candidates.size(), 8u);
  for (size_t i = 0; i < sizes.size(); ++i) {
    const CandidateOutcome& sized = planned->candidates[4 + i];
    EXPECT_TRUE(sized.own);
    const std::string values = fmt::format("dcp {}:0.02/0.01:", sizes[i]);
    EXPECT_EQ(sized.name.substr(0, values.size()), values) << sized.name;
    ExpectThePinnedPass(batch, sized, sizes[i], {.compute = 0.02, .inter = 0.01});
  }
  EXPECT_FALSE(planned->candidates[8].own) << planned->candidates[8].name;
  const auto planned_only = [](std::vector<CandidateOutcome> all) {
    std::erase_if(all, [](const CandidateOutcome& c) { return c.skipped; });
    return all;
  };
  const std::vector<CandidateOutcome> tried = planned_only(planned->candidates);
  EXPECT_EQ(planned->plan.origin, std::min_element(tried.begin(), tried.end(), FasterThan)->name);
  options.threads = 3;
  auto threaded = PlanBatch(batch, options);
  ASSERT_TRUE(threaded.ok()) << threaded.status().ToString();
  EXPECT_EQ(planned->plan, threaded->plan);
  options.threads = 1;

  const auto named = [&](const PlannedBatch& p) {
    return std::any_of(p.candidates.begin(), p.candidates.end(), [&](const CandidateOutcome& c) {
      return std::any_of(sizes.begin(), sizes.end(), [&](int64_t block) {
        return c.name.starts_with(fmt::format("dcp {}:", block));
      });
    });
  };
  for (const auto& [close_call, others] :
       {std::pair{std::optional<double>{}, true}, std::pair{std::optional<double>{1.0}, false}}) {
    options.tuning.close_call = close_call;
    options.tuning.other_strategies = others;
    auto plain = PlanBatch(batch, options);
    ASSERT_TRUE(plain.ok()) << plain.status().ToString();
    EXPECT_FALSE(named(*plain)) << others;
  }
  options.tuning.other_strategies = true;
  options.tuning.close_call = 1.0;
  options.block_size = 512;  // pinned: no other size
  auto pinned = PlanBatch(batch, options);
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  EXPECT_FALSE(named(*pinned));
  options.block_size = 0;
  options.tuning.close_call = -0.1;
  auto bad = PlanBatch(batch, options);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("close_call"), std::string::npos)
      << bad.status().ToString();
}

TEST(PlanBatch, TuningSplitsTheTwoBestOwnCandidatesIntoHeadGroups) {
  const Batch batch = TestBatch();  // 2 KV heads
  PlanOptions options = RefinementOn2x4([](PlanOptions& o) {
    o.tuning.tolerances = {{0.1, 0.4}, {0.02, 0.02}};
    o.tuning.head_groups = {2};
  });
  auto planned = PlanBatch(batch, options);
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  ASSERT_EQ(planned->candidates.size(), 6u);
  std::vector<CandidateOutcome> own(planned->candidates.begin(), planned->candidates.begin() + 4);
  std::stable_sort(own.begin(), own.end(), FasterThan);
  const CandidateOutcome& best = own[0];
  const CandidateOutcome& split = planned->candidates[4];
  EXPECT_TRUE(split.own);
  // The runner-up's split: "dcp <its values>:<divisions> g2".
  const CandidateOutcome& next_split = planned->candidates[5];
  EXPECT_TRUE(next_split.own && next_split.name.ends_with(" g2")) << next_split.name;
  EXPECT_EQ(next_split.name.substr(0, own[1].name.rfind(':')),
            own[1].name.substr(0, own[1].name.rfind(':')))
      << next_split.name << " after " << own[1].name;
  // "dcp 512:0.1/0.4:3" split: "dcp 512:0.1/0.4:<divisions> g2".
  const std::string values = best.name.substr(0, best.name.rfind(':'));
  EXPECT_EQ(split.name.substr(0, values.size()), values) << split.name;
  EXPECT_TRUE(split.name.ends_with(" g2")) << split.name;
  int64_t block = 0;
  double compute = 0, inter = 0;
  ASSERT_EQ(std::sscanf(values.c_str(), "dcp %ld:%lf/%lf", &block, &compute, &inter), 3);
  ExpectThePinnedPass(batch, split, block, {.compute = compute, .inter = inter}, 2);
  const CandidateOutcome& fastest =
      *std::min_element(planned->candidates.begin(), planned->candidates.end(), FasterThan);
  EXPECT_EQ(planned->plan.origin, fastest.name);
  EXPECT_EQ(planned->plan.head_groups, fastest.name.ends_with(" g2") ? 2 : 1);
  options.threads = 3;
  auto threaded = PlanBatch(batch, options);
  ASSERT_TRUE(threaded.ok()) << threaded.status().ToString();
  EXPECT_EQ(planned->plan, threaded->plan);
  // Pinned; 3 does not divide 2 KV heads and 1 is the base; more tiles per device than allowed.
  for (const auto& [none, max_tiles] : {std::pair{std::vector<int64_t>{}, int64_t{256}},
                                        std::pair{std::vector<int64_t>{3, 1}, int64_t{256}},
                                        std::pair{std::vector<int64_t>{2}, int64_t{0}}}) {
    options.tuning.head_groups = none;
    options.tuning.split_max_tiles_per_device = max_tiles;
    auto unsplit = PlanBatch(batch, options);
    ASSERT_TRUE(unsplit.ok()) << unsplit.status().ToString();
    EXPECT_EQ(unsplit->candidates.size(), 4u) << max_tiles;
  }
}

// A candidate of dcp's own ("dcp B:C/I:N", one head group, divisions not searched) has the
// division count the memory rule gives, replayed here on plans with every value pinned: from the
// cost model's count, doubled while the peaks are spread beyond the bound, up to the maximum, as
// long as each doubling spreads them less and costs at most the slack of time over the plan
// before it.
void ExpectDivisionsOfTheMemoryRule(const Batch& batch, const CandidateOutcome& c, double bound,
                                    double slack) {
  int64_t block = 0;
  double compute = 0, inter = 0;
  int32_t divisions = 0;
  ASSERT_EQ(std::sscanf(c.name.c_str(), "dcp %" SCNd64 ":%lf/%lf:%" SCNd32, &block, &compute,
                        &inter, &divisions),
            4)
      << c.name;
  struct Pinned {
    int32_t divisions;
    double seconds, spread;
  };
  // The candidate's plan with every value pinned, at n divisions (0: the cost model's count).
  const auto pinned = [&](int32_t n) -> std::optional<Pinned> {
    auto planned = PlanBatch(batch, On2x4([&](PlanOptions& o) {
                               Pin(o, block);
                               o.partition.eps_compute = compute;
                               o.partition.eps_inter = inter;
                               o.divisions = n;
                             }));
    EXPECT_TRUE(planned.ok()) << planned.status().ToString();
    if (!planned.ok()) return std::nullopt;
    return Pinned{planned->plan.n_divisions, SimulatedSeconds(planned->plan),
                  MaxOverMean(PeakBufferBytesPerDevice(planned->plan))};
  };
  std::optional<Pinned> kept = pinned(0);
  while (kept && kept->spread > bound && kept->divisions < kMaxDivisions) {
    const std::optional<Pinned> more = pinned(std::min(2 * kept->divisions, kMaxDivisions));
    if (!more || more->spread >= kept->spread || more->seconds > kept->seconds * (1 + slack)) {
      break;
    }
    kept = more;
  }
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(divisions, kept->divisions) << c.name << " bound " << bound << " slack " << slack;
}

// Memory stays balanced without a budget: a candidate of dcp's own whose device peaks are spread
// worse than the bound gets more divisions (up to the maximum, while that spreads them less within
// the slack of time), and the chosen plan is the fastest within the bound when that is at most the
// slack slower than the fastest overall.
TEST(PlanBatch, TuningKeepsPeakMemoryBalancedWithinItsSlack) {
  const Batch batch = TestBatch();
  for (double bound : {1.5, 1.2}) {
    for (double slack : {0.0, 0.1, 10.0}) {
      auto planned = PlanBatch(batch, On2x4([&](PlanOptions& o) {
                                 o.tuning.max_peak_imbalance = bound;
                                 o.tuning.balance_slack = slack;
                               }));
      ASSERT_TRUE(planned.ok()) << planned.status().ToString();
      double fastest = std::numeric_limits<double>::infinity();
      double fastest_balanced = std::numeric_limits<double>::infinity();
      ASSERT_TRUE(planned->best_own.has_value());
      // The two fastest of dcp's own unsplit candidates, the head-group splits, the candidates
      // at the tightened tolerances and those placed from other seeds had their divisions
      // searched afterwards (the test below), which keeps a faster count spread worse.
      std::vector<const CandidateOutcome*> unsplit;
      for (const CandidateOutcome& c : planned->candidates) {
        if (c.own && c.error.empty() && !c.name.ends_with(" g2") &&
            c.name.find(" seed ") == std::string::npos) {
          unsplit.push_back(&c);
        }
      }
      std::stable_sort(unsplit.begin(), unsplit.end(), [](const auto* a, const auto* b) {
        return a->simulated_s < b->simulated_s;
      });
      unsplit.resize(std::min<size_t>(unsplit.size(), 2));
      for (const CandidateOutcome& c : planned->candidates) {
        if (!c.error.empty()) continue;
        fastest = std::min(fastest, c.simulated_s);
        if (c.peak_imbalance <= bound) fastest_balanced = std::min(fastest_balanced, c.simulated_s);
        const Tolerances tight = *PlanOptions{}.tuning.tightened;
        const bool searched =
            c.name.ends_with(" g2") || c.name.find(" seed ") != std::string::npos ||
            c.name.find(fmt::format(":{}/{}:", tight.compute, tight.inter)) != std::string::npos ||
            std::find(unsplit.begin(), unsplit.end(), &c) != unsplit.end();
        if (c.own && !searched) ExpectDivisionsOfTheMemoryRule(batch, c, bound, slack);
      }
      const double expected =
          fastest_balanced <= fastest * (1 + slack) ? fastest_balanced : fastest;
      EXPECT_EQ(planned->simulated_s, expected) << bound << " " << slack;
    }
  }
}

// A device's share of TestBatch on 8 devices, by hand: 13900 tokens, each with Q, O, dO, dQ (8
// heads) and K, V, dK, dV (2 heads) of 64 bf16 elements, 2 x 64 x 40 = 5120 bytes, and LSE and
// Delta in fp32, 4 x 2 x 8 = 64 bytes.
TEST(PlanBatch, APlanHoldingMoreSharesThanAllowedCountsAsUnbalanced) {
  const Batch batch = TestBatch();
  const int64_t share = 13900 * (5120 + 64) / 8;
  EXPECT_EQ(BatchShareBytes(batch, 8), share);
  auto free = PlanBatch(batch, On2x4([](PlanOptions& o) { o.tuning.max_peak_share = 1e9; }));
  ASSERT_TRUE(free.ok()) << free.status().ToString();
  double chosen_share = 0;
  for (const CandidateOutcome& c : free->candidates) {
    if (!c.error.empty()) continue;
    EXPECT_DOUBLE_EQ(c.peak_share, static_cast<double>(c.peak_bytes) / static_cast<double>(share));
    if (c.name == free->plan.origin) chosen_share = c.peak_share;
  }
  ASSERT_GT(chosen_share, 1);  // no plan holds less than its share
  // A bound just below the chosen plan's shares: the fastest candidate within both bounds is
  // chosen when one is within the slack (here any), else the fastest.
  const double bound = 0.999 * chosen_share;
  auto bounded = PlanBatch(batch, On2x4([&](PlanOptions& o) {
                             o.tuning.max_peak_share = bound;
                             o.tuning.balance_slack = 10;
                           }));
  ASSERT_TRUE(bounded.ok()) << bounded.status().ToString();
  const CandidateOutcome* fastest = nullptr;
  const CandidateOutcome* balanced = nullptr;
  for (const CandidateOutcome& c : bounded->candidates) {
    if (!c.error.empty() || c.skipped) continue;
    if (fastest == nullptr || c.simulated_s < fastest->simulated_s) fastest = &c;
    if (c.peak_imbalance <= 1.5 && c.peak_share <= bound &&
        (balanced == nullptr || c.simulated_s < balanced->simulated_s)) {
      balanced = &c;
    }
  }
  ASSERT_NE(fastest, nullptr);
  EXPECT_EQ(bounded->plan.origin, (balanced != nullptr ? balanced : fastest)->name);
  EXPECT_NE(bounded->plan.origin, free->plan.origin);
  PlanOptions bad = On2x4([](PlanOptions& o) { o.tuning.max_peak_share = 0; });
  const auto refused = PlanBatch(batch, bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("max_peak_share"), std::string::npos);
}

// Candidates use the scheduler's quick cost model; the winner of dcp's own then gets the division
// count a simulation of every count picks (the plan a pinned pass with DivisionChoice::kSimulate
// makes of the same block size and tolerances) when that is faster.
TEST(PlanBatch, TheBestPlanOfDcpsOwnGetsItsDivisionsSearched) {
  const Batch batch = TestBatch();
  const auto tuned = [&](bool other_strategies) {
    return PlanBatch(batch, On2x4([&](PlanOptions& o) {
                       o.tuning.max_peak_imbalance = 1e9;
                       o.tuning.other_strategies = other_strategies;
                       o.tuning.head_groups = {};  // the pinned passes below use one head group
                     }));
  };
  auto planned = tuned(false);
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  EXPECT_DOUBLE_EQ(planned->simulated_s, SimulatedSeconds(planned->plan));
  int64_t block = 0;
  double compute = 0, inter = 0;
  ASSERT_EQ(std::sscanf(planned->plan.origin.c_str(), "dcp %ld:%lf/%lf:", &block, &compute,
                        &inter),
            3)
      << planned->plan.origin;
  auto cost_model = PlanBatch(batch, On2x4([&](PlanOptions& o) {
                                Pin(o, block);
                                o.partition.eps_compute = compute;
                                o.partition.eps_inter = inter;
                              }));
  auto searched = PlanBatch(batch, On2x4([&](PlanOptions& o) {
                              Pin(o, block);
                              o.partition.eps_compute = compute;
                              o.partition.eps_inter = inter;
                              o.division_choice = DivisionChoice::kSimulate;
                            }));
  ASSERT_TRUE(cost_model.ok() && searched.ok());
  const double cost_model_s = SimulatedSeconds(cost_model->plan);
  if (SimulatedSeconds(searched->plan) < cost_model_s) {
    EXPECT_EQ(planned->plan.n_divisions, searched->plan.n_divisions);
    EXPECT_DOUBLE_EQ(planned->simulated_s, SimulatedSeconds(searched->plan));
  } else {
    EXPECT_EQ(planned->plan.n_divisions, cost_model->plan.n_divisions);
  }
  EXPECT_LE(planned->simulated_s, cost_model_s);
}

// With default options the plan is at least as fast as every static layout on the cluster model.
TEST(PlanBatch, TheDefaultPlanIsNeverSlowerThanAStaticLayout) {
  const Batch batch = TestBatch();
  auto planned = PlanBatch(batch, On2x4([](PlanOptions&) {}));
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  EXPECT_DOUBLE_EQ(planned->simulated_s, SimulatedSeconds(planned->plan));
  for (Strategy s : {Strategy::kRing, Strategy::kZigzag, Strategy::kTe}) {
    auto baseline = PlanBaseline(s, batch, {.topology = k2x4});
    ASSERT_TRUE(baseline.ok());
    EXPECT_LE(planned->simulated_s, SimulatedSeconds(baseline->plan)) << ToString(s);
  }
}

// The choice docs/planner.md states: the fastest candidate whose device peaks are spread within
// max_peak_imbalance, when at most balance_slack slower than the fastest of all; else the fastest.
std::string DocumentedChoice(const std::vector<CandidateOutcome>& candidates,
                             const TuningOptions& tuning) {
  const CandidateOutcome *fastest = nullptr, *balanced = nullptr;
  for (const CandidateOutcome& c : candidates) {
    if (!c.error.empty()) continue;
    if (fastest == nullptr || c.simulated_s < fastest->simulated_s) fastest = &c;
    if (c.peak_imbalance <= tuning.max_peak_imbalance &&
        (balanced == nullptr || c.simulated_s < balanced->simulated_s)) {
      balanced = &c;
    }
  }
  if (fastest == nullptr) return "";
  const bool cheap = balanced != nullptr &&
                     balanced->simulated_s <= fastest->simulated_s * (1 + tuning.balance_slack);
  return cheap ? balanced->name : fastest->name;
}

// Many short sequences: the static layouts cut each into 2 x devices chunks of a few dozen tokens,
// whose tiles run far below the kernel's rate, and the tuning skips them without compiling. The
// skipped candidates, planned here, leave the choice as documented: with the default memory
// balance, and with a bound only the static layouts meet and a slack that lets them win (where a
// bound on skipping that ignored the slack would drop the plan to choose). The plan is the same on
// one thread and on three.
TEST(PlanBatch, TuningSkipsOnlyCandidatesThatCannotWin) {
  std::vector<int64_t> lengths(40);
  for (size_t i = 0; i < lengths.size(); ++i)
    lengths[i] = 100 + static_cast<int64_t>(i * 337 % 1300);
  auto batch = Batch::Create(lengths, {*MaskSpec::Parse("causal")},
                             AttentionShape{.heads = 8, .kv_heads = 2, .head_dim = 64});
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  for (const std::pair<double, double>& setting : {std::pair{1.5, 0.1}, std::pair{1.01, 10.0}}) {
    const double bound = setting.first, slack = setting.second;  // (lambdas capture these)
    SCOPED_TRACE(::testing::Message() << "peak bound " << bound << ", slack " << slack);
    PlanOptions options = On2x4([&](PlanOptions& o) {
      o.tuning.block_sizes = {256, 512};
      o.tuning.max_peak_imbalance = bound;
      o.tuning.balance_slack = slack;
    });
    auto planned = PlanBatch(*batch, options);
    ASSERT_TRUE(planned.ok()) << planned.status().ToString();
    std::vector<CandidateOutcome> all = planned->candidates;
    int skipped = 0;
    for (CandidateOutcome& c : all) {
      if (!c.skipped) continue;
      ++skipped;
      SCOPED_TRACE(c.name);
      EXPECT_FALSE(c.own);
      EXPECT_TRUE(c.error.starts_with("not planned") || c.error.starts_with("not simulated"))
          << c.error;
      // The variant of that name, as the tuning made it.
      const Strategy strategy = *ParseStrategy(c.name.substr(0, c.name.find(':')));
      const std::vector<BaselineVariant> variants =
          BaselineVariants(strategy, batch->shape(), k2x4);
      const auto variant = std::find_if(variants.begin(), variants.end(),
                                        [&](const BaselineVariant& v) { return v.name == c.name; });
      ASSERT_NE(variant, variants.end());
      auto plan = PlanBaseline(strategy, *batch, variant->options);
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      c.simulated_s = SimulatedSeconds(plan->plan);
      c.peak_imbalance = MaxOverMean(PeakBufferBytesPerDevice(plan->plan));
      c.error.clear();
      EXPECT_GT(c.simulated_s, planned->simulated_s);
    }
    EXPECT_GE(skipped, bound == 1.5 ? 3 : 0);  // ring, zigzag and TE at least, by default
    EXPECT_EQ(planned->plan.origin, DocumentedChoice(all, options.tuning));
    if (bound < 1.5) {
      EXPECT_FALSE(planned->plan.origin.starts_with("dcp"));
    }
    options.threads = 3;
    auto threaded = PlanBatch(*batch, options);
    ASSERT_TRUE(threaded.ok()) << threaded.status().ToString();
    EXPECT_EQ(planned->plan, threaded->plan);
    for (size_t i = 0; i < planned->candidates.size(); ++i) {
      EXPECT_EQ(planned->candidates[i].skipped, threaded->candidates[i].skipped) << i;
    }
  }
}

TEST(PlanBatch, RefusesAPlanAboveTheMemoryBudgetNamingTheDevice) {
  const Batch batch = TestBatch();
  auto unbounded = PlanBatch(batch, On2x4([](PlanOptions& o) { Pin(o, 512); }));
  ASSERT_TRUE(unbounded.ok());
  const std::vector<int64_t> peak = PeakBufferBytesPerDevice(unbounded->plan);
  const int64_t worst = *std::max_element(peak.begin(), peak.end());
  const auto with_budget = [&](int64_t budget) {
    return PlanBatch(batch, On2x4([&](PlanOptions& o) {
                       Pin(o, 512);
                       o.memory_budget_bytes = budget;
                     }));
  };
  EXPECT_TRUE(with_budget(worst).ok());
  auto refused = with_budget(worst - 1);
  ASSERT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find(fmt::format("needs {} bytes", worst)),
            std::string::npos)
      << refused.status().ToString();
}

// A batch whose tiles one pass cannot plan within max_planning_bytes is refused before placement,
// naming its tiles; at exactly what they need it plans.
TEST(PlanBatch, RefusesTilesThatWouldNeedMoreThanThePlanningMemoryLimit) {
  const Batch batch = TestBatch();
  const auto with_limit = [&](int64_t limit) {
    return PlanBatch(batch, On2x4([&](PlanOptions& o) {
                       Pin(o, 512);
                       o.max_planning_bytes = limit;
                     }));
  };
  auto unlimited = with_limit(0);
  ASSERT_TRUE(unlimited.ok()) << unlimited.status().ToString();
  const auto tiles = static_cast<int64_t>(unlimited->plan.compute_blocks.size());
  EXPECT_TRUE(with_limit(tiles * kPlanningBytesPerTile).ok());
  auto refused = with_limit(tiles * kPlanningBytesPerTile - 1);
  ASSERT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find(
                fmt::format("planning {} tiles (blocks of 512 tokens)", tiles)),
            std::string::npos)
      << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("max_planning_bytes"), std::string::npos);
}

// Tuned candidates share the planning memory: with two threads each of dcp's own gets a third of
// it (two at once and the best kept).
TEST(PlanBatch, TunedCandidatesShareThePlanningMemory) {
  const Batch batch = TestBatch();
  auto pinned = PlanBatch(batch, On2x4([](PlanOptions& o) { Pin(o, 512); }));
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  const int64_t needs =
      static_cast<int64_t>(pinned->plan.compute_blocks.size()) * kPlanningBytesPerTile;
  const auto tuned = [&](int64_t limit) {
    return PlanBatch(batch, On2x4([&](PlanOptions& o) {
                       o.block_size = 512;
                       o.tuning.other_strategies = false;
                       o.tuning.head_groups = {};
                       o.threads = 2;
                       o.max_planning_bytes = limit;
                     }));
  };
  EXPECT_TRUE(tuned(3 * needs).ok());
  auto refused = tuned(3 * needs - 3);
  ASSERT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("planning"), std::string::npos)
      << refused.status().ToString();
}

// The other strategies' candidates get the same share of the planning memory as dcp's own: with
// two threads, a third of it (two at once and the best kept). Below three times what ring's plan
// needs, ring is refused, naming why, and dcp's own plan still wins.
TEST(PlanBatch, OtherStrategiesShareThePlanningMemory) {
  const Batch batch = TestBatch();
  auto ring = PlanBaseline(Strategy::kRing, batch, {.topology = k2x4});
  ASSERT_TRUE(ring.ok()) << ring.status().ToString();
  const int64_t needs =
      internal::PlanSize{.devices = k2x4.devices(),
                         .divisions = ring->schedule.n_divisions,
                         .transfers = static_cast<int64_t>(ring->schedule.transfers.size()),
                         .tiles = static_cast<int64_t>(ring->blocks.compute_blocks.size()),
                         .data_blocks = static_cast<int64_t>(ring->blocks.data_blocks.size())}
          .Bytes();
  const auto ring_error = [&](int64_t limit) {
    auto planned = PlanBatch(batch, On2x4([&](PlanOptions& o) {
                               o.threads = 2;
                               o.max_planning_bytes = limit;
                             }));
    EXPECT_TRUE(planned.ok()) << planned.status().ToString();
    if (!planned.ok()) return std::string("not planned");
    for (const CandidateOutcome& c : planned->candidates) {
      if (c.name == "ring") return c.error;
    }
    ADD_FAILURE() << "no ring candidate";
    return std::string();
  };
  EXPECT_EQ(ring_error(3 * needs + 3).find("planning it would take"), std::string::npos);
  const std::string refused = ring_error(3 * needs - 3);
  EXPECT_NE(refused.find("ring on 2x4: planning it would take"), std::string::npos) << refused;
}

// Tuning under a budget keeps only candidates within it, and with none within it names the
// smallest peak it saw.
TEST(PlanBatch, TuningSkipsCandidatesAboveTheMemoryBudget) {
  const Batch batch = TestBatch();
  // (Head groups, tightening and restarts pinned: the candidates split into head groups,
  // tightened or placed from other seeds are made only from a planned one.)
  auto unbounded = PlanBatch(batch, On2x4([](PlanOptions& o) {
                               o.tuning.head_groups = {};
                               o.tuning.tightened.reset();
                               o.tuning.placement_restarts = 0;
                             }));
  ASSERT_TRUE(unbounded.ok()) << unbounded.status().ToString();
  int64_t smallest = std::numeric_limits<int64_t>::max(), largest = 0;
  for (const CandidateOutcome& c : unbounded->candidates) {
    int64_t peak = c.peak_bytes;
    if (c.skipped) {  // slower than dcp's own, so never planned there: planned here
      const Strategy strategy = *ParseStrategy(c.name.substr(0, c.name.find(':')));
      const std::vector<BaselineVariant> variants = BaselineVariants(strategy, batch.shape(), k2x4);
      const auto variant = std::find_if(variants.begin(), variants.end(),
                                        [&](const BaselineVariant& v) { return v.name == c.name; });
      ASSERT_NE(variant, variants.end()) << c.name;
      auto plan = PlanBaseline(strategy, batch, variant->options);
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      const std::vector<int64_t> peaks = PeakBufferBytesPerDevice(plan->plan);
      peak = *std::max_element(peaks.begin(), peaks.end());
    } else if (!c.error.empty()) {
      continue;
    }
    smallest = std::min(smallest, peak);
    largest = std::max(largest, peak);
  }
  ASSERT_LT(smallest, largest);
  const int64_t budget = (smallest + largest) / 2;
  auto bounded = PlanBatch(batch, On2x4([&](PlanOptions& o) {
                             o.memory_budget_bytes = budget;
                             o.tuning.head_groups = {};
                             o.tuning.tightened.reset();
                             o.tuning.placement_restarts = 0;
                           }));
  ASSERT_TRUE(bounded.ok()) << bounded.status().ToString();
  const std::vector<int64_t> peak = PeakBufferBytesPerDevice(bounded->plan);
  EXPECT_LE(*std::max_element(peak.begin(), peak.end()), budget);
  for (const CandidateOutcome& c : bounded->candidates) {
    if (!c.skipped) {
      EXPECT_EQ(c.peak_bytes > budget, !c.error.empty()) << c.name;
    }
  }
  auto none = PlanBatch(batch, On2x4([&](PlanOptions& o) {
                          o.memory_budget_bytes = smallest - 1;
                          o.tuning.head_groups = {};
                          o.tuning.tightened.reset();
                          o.tuning.placement_restarts = 0;
                        }));
  ASSERT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find(fmt::format("the smallest peak among the {} candidates "
                                                     "tried is {} bytes",
                                                     unbounded->candidates.size(), smallest)),
            std::string::npos)
      << none.status().ToString();
}

// A placement given by the caller is scheduled and compiled as dcp's own would be: the plan of
// the pinned single pass that made it, but for its origin. Any other placement of the same blocks
// (here: every block on the device of its sequence's first block, the queries' device computing)
// is planned too and validates; one that does not fit the blocks is refused.
TEST(PlanBatch, PlansAGivenPlacement) {
  const Batch batch = TestBatch();
  const PlanOptions pinned = On2x4([](PlanOptions& o) { Pin(o, 512); });
  auto own = PlanBatch(batch, pinned);
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  PlanOptions given = pinned;
  given.placement = own->placed.placement;
  auto replanned = PlanBatch(batch, given);
  ASSERT_TRUE(replanned.ok()) << replanned.status().ToString();
  EXPECT_EQ(replanned->plan.origin, fmt::format("given 512:{}", own->plan.n_divisions));
  replanned->plan.origin = own->plan.origin;
  EXPECT_EQ(replanned->plan, own->plan);
  EXPECT_EQ(replanned->placed.report.km1_bytes, own->placed.report.km1_bytes);

  Placement by_sequence;
  const BlockSet& blocks = own->blocks;
  for (const DataBlock& b : blocks.data_blocks) {
    by_sequence.data_device.push_back(DeviceId{b.sequence.value % k2x4.devices()});
  }
  for (const ComputeBlock& c : blocks.compute_blocks) {
    by_sequence.compute_device.push_back(by_sequence.data_device[c.q_block.value]);
  }
  given.placement = by_sequence;
  auto other = PlanBatch(batch, given);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_TRUE(ValidatePlan(other->plan).ok());
  EXPECT_EQ(other->placed.placement.data_device, by_sequence.data_device);

  given.placement->compute_device.pop_back();
  EXPECT_NE(PlanBatch(batch, given).status().message().find("compute blocks"), std::string::npos);
  given.placement = by_sequence;
  given.placement->data_device.front() = DeviceId{k2x4.devices()};
  EXPECT_EQ(PlanBatch(batch, given).status().code(), StatusCode::kInvalidArgument);
}

// A pinned pass reports its phases in order, the second-level placement node by node; the
// monitor changes nothing in the plan.
TEST(PlanBatch, ReportsItsProgressToTheMonitor) {
  const Batch batch = TestBatch();
  std::vector<std::tuple<std::string, int64_t, int64_t>> seen;
  const PlanningMonitor monitor([&](std::string_view phase, int64_t done, int64_t total) {
    seen.emplace_back(std::string(phase), done, total);
  });
  PlanOptions options = On2x4([](PlanOptions& o) { Pin(o, 512); });
  options.monitor = &monitor;
  auto watched = PlanBatch(batch, options);
  ASSERT_TRUE(watched.ok()) << watched.status().ToString();
  const std::vector<std::tuple<std::string, int64_t, int64_t>> expected = {
      {"blocking", 0, 1},  {"placement", 0, 1}, {"placement", 0, 2}, {"placement", 1, 2},
      {"placement", 2, 2}, {"scheduling", 0, 1}, {"compile", 0, 1},  {"compile", 1, 1}};
  EXPECT_EQ(seen, expected);
  options.monitor = nullptr;
  auto unwatched = PlanBatch(batch, options);
  ASSERT_TRUE(unwatched.ok());
  EXPECT_EQ(watched->plan, unwatched->plan);

  // Tuning reports its candidates, each at most once (the total counts the refinements it may
  // make: a tightened plan equal to another is not made), in order, ending with all done.
  seen.clear();
  options = On2x4([](PlanOptions&) {});
  options.threads = 2;
  options.monitor = &monitor;
  auto tuned = PlanBatch(batch, options);
  ASSERT_TRUE(tuned.ok()) << tuned.status().ToString();
  ASSERT_FALSE(seen.empty());
  const int64_t total = std::get<2>(seen.front());
  EXPECT_GE(total, static_cast<int64_t>(tuned->candidates.size()));
  EXPECT_EQ(seen.front(), std::make_tuple(std::string("candidates"), int64_t{0}, total));
  EXPECT_EQ(seen.back(), std::make_tuple(std::string("candidates"), total, total));
  EXPECT_LE(seen.size(), static_cast<size_t>(total) + 1);
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_LT(std::get<1>(seen[i - 1]), std::get<1>(seen[i])) << i;
    EXPECT_EQ(std::get<2>(seen[i]), total) << i;
  }
}

// Cancelling stops the planning with kCancelled: before it starts, from its own progress report
// (at each phase and node of a pinned pass), and in tuning.
TEST(PlanBatch, StopsWhenCancelled) {
  const Batch batch = TestBatch();
  PlanningMonitor cancelled;
  cancelled.Cancel();
  PlanOptions options = On2x4([](PlanOptions& o) { Pin(o, 512); });
  options.monitor = &cancelled;
  auto r = PlanBatch(batch, options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled);

  for (int stop_at = 0; stop_at < 8; ++stop_at) {  // every report of a pinned pass, and tuning
    SCOPED_TRACE(stop_at);
    int reports = 0;
    PlanningMonitor* self = nullptr;
    PlanningMonitor monitor([&](std::string_view, int64_t, int64_t) {
      if (reports++ == stop_at) self->Cancel();
    });
    self = &monitor;
    options = On2x4([&](PlanOptions& o) {
      if (stop_at < 7) Pin(o, 512);
    });
    options.monitor = &monitor;
    r = PlanBatch(batch, options);
    if (stop_at == 7) {  // tuning: cancelled at its first report, before any candidate
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.status().code(), StatusCode::kCancelled);
      continue;
    }
    ASSERT_FALSE(r.ok()) << "report " << stop_at << " of " << reports;
    EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().ToString();
  }
}

TEST(PlanBatch, RejectsBadOptionsNamingThem) {
  const Batch batch = TestBatch();
  const std::vector<std::pair<PlanOptions, const char*>> cases = {
      {On2x4([](PlanOptions& o) { o.threads = 0; }), "threads"},
      {On2x4([](PlanOptions& o) { o.memory_budget_bytes = -1; }), "memory_budget_bytes"},
      {On2x4([](PlanOptions& o) { o.max_planning_bytes = -1; }), "max_planning_bytes"},
      {On2x4([](PlanOptions& o) { o.block_size = -4; }), "block_size"},
      {On2x4([](PlanOptions& o) { o.block_size = kMaxSequenceLength + 1; }),
       "PlanOptions.block_size 1073741825 must be in [1, 1073741824]"},
      {On2x4([](PlanOptions& o) { o.tuning.block_sizes = {0}; }), "tuning.block_sizes"},
      {On2x4([](PlanOptions& o) { o.tuning.block_sizes = {1024, kMaxSequenceLength + 1}; }),
       "tuning.block_sizes holds 1073741825"},
      {On2x4([](PlanOptions& o) {
         o.tuning.tolerances = {{-1, 0.4}};
       }),
       "tuning.tolerances"},
      {On2x4([](PlanOptions& o) { o.tuning.max_candidates = 0; }), "tuning.max_candidates"},
      {On2x4([](PlanOptions& o) { o.tuning.head_groups = {0}; }), "tuning.head_groups"},
      {On2x4([](PlanOptions& o) { o.tuning.max_tiles_per_device = -1; }),
       "tuning.max_tiles_per_device"},
      {On2x4([](PlanOptions& o) { o.tuning.split_max_tiles_per_device = -1; }),
       "tuning.split_max_tiles_per_device"},
      {On2x4([](PlanOptions& o) { o.topology.nodes = 0; }), "topology"},
      {On2x4([](PlanOptions& o) { o.topology = {.nodes = 1, .devices_per_node = 16}; }),
       "topology 1x16 has 16 devices per node, more than a node of cluster 'p4de' holds (8)"},
      {On2x4([](PlanOptions& o) { o.placement = Placement{}; }), "placement"}};
  for (const auto& [options, field] : cases) {
    auto planned = PlanBatch(batch, options);
    EXPECT_EQ(planned.status().code(), StatusCode::kInvalidArgument) << field;
    EXPECT_NE(planned.status().message().find(field), std::string::npos)
        << planned.status().ToString();
  }
}

}  // namespace
}  // namespace dcp
