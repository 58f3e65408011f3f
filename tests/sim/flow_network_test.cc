// SPDX-License-Identifier: Apache-2.0
// Max-min fair sharing of the flow network against rates and finish times derived by hand,
// including flows that share both resources (one class) next to flows that share only one, and
// over random networks against a reference that water-fills every flow from scratch at each event.
#include "sim/flow_network.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <utility>
#include <vector>

namespace dcp::sim {
namespace {

constexpr double kTolerance = 1e-12;

std::vector<int32_t> TakeSorted(FlowNetwork& network, double time) {
  std::vector<int32_t> ids;
  network.TakeFinished(time, &ids);
  std::sort(ids.begin(), ids.end());
  return ids;
}

// Resources: 0 = egress of X (60 B/s), 1 = egress of Y (300 B/s), 2 = ingress of Z (120 B/s).
// Flows 0 and 1 go X -> Z (30 B each), flow 2 goes Y -> Z (60 B). Progressive filling: X's share
// is 60/2 = 30, Z's 120/3 = 40, Y's 300: X fills first and fixes flows 0 and 1 at 30, leaving Z
// 120 - 2 x 30 = 60 for flow 2 alone. All three finish at 1 s.
TEST(FlowNetwork, AResourceLeftByTwoFlowsOfAPairGivesTheRestToTheOthers) {
  FlowNetwork network({60, 300, 120});
  network.Add(0, 30, 0, 2);
  network.Add(1, 30, 0, 2);
  network.Add(2, 60, 1, 2);
  network.Reallocate(0);
  EXPECT_NEAR(network.NextFinish(), 1.0, kTolerance);
  EXPECT_EQ(TakeSorted(network, network.NextFinish()), (std::vector<int32_t>{0, 1, 2}));
  network.Reallocate(1.0);
  EXPECT_EQ(network.NextFinish(), std::numeric_limits<double>::infinity());
}

// One pair of resources at 10 B/s. Flow 0 (10 B) runs alone from 0; flow 1 (10 B) joins at 0.5,
// when flow 0 has 5 B left: both move at 5 B/s, flow 0 ends at 1.5 with flow 1 at 5 B left, which
// then runs alone at 10 B/s and ends at 2.0.
TEST(FlowNetwork, AFlowJoiningAPairSharesItFromThenOn) {
  FlowNetwork network({10, 10});
  network.Add(0, 10, 0, 1);
  network.Reallocate(0);
  EXPECT_NEAR(network.NextFinish(), 1.0, kTolerance);
  network.Add(1, 10, 0, 1);
  network.Reallocate(0.5);
  EXPECT_NEAR(network.NextFinish(), 1.5, kTolerance);
  EXPECT_EQ(TakeSorted(network, 1.5), std::vector<int32_t>{0});
  network.Reallocate(1.5);
  EXPECT_NEAR(network.NextFinish(), 2.0, kTolerance);
  EXPECT_EQ(TakeSorted(network, 2.0), std::vector<int32_t>{1});
}

// Flows of one pair finish in the order of their sizes, each when its own bytes are through:
// three flows of 10, 20 and 30 B at 30 B/s move at 10 B/s each, and the first ends at 1 s; the
// other two, 10 and 20 B left, move at 15 B/s, and the second ends at 1 + 10/15; the last, 10 B
// left, runs at 30 B/s and ends at 1 + 2/3 + 1/3 = 2 s.
TEST(FlowNetwork, FlowsOfOnePairFinishInTheOrderOfTheirSizes) {
  FlowNetwork network({30, 30});
  network.Add(7, 30, 0, 1);
  network.Add(5, 10, 0, 1);
  network.Add(6, 20, 0, 1);
  network.Reallocate(0);
  const std::vector<std::pair<double, int32_t>> expected = {
      {1.0, 5}, {1.0 + 10.0 / 15.0, 6}, {2.0, 7}};
  for (const auto& [time, id] : expected) {
    ASSERT_NEAR(network.NextFinish(), time, kTolerance) << id;
    EXPECT_EQ(TakeSorted(network, network.NextFinish()), std::vector<int32_t>{id});
    network.Reallocate(time);
  }
  EXPECT_EQ(network.NextFinish(), std::numeric_limits<double>::infinity());
}

// Between TakeFinished and the next Reallocate, NextFinish names the next flow still running at
// the old rates: flows of 10 and 20 B share 30 B/s at 15 B/s each; the first ends at 2/3 s with
// the second at 10 B left, which would end at 2/3 + 2/3 s at 15 B/s, and ends at 2/3 + 1/3 s
// alone at 30 B/s. A class emptied and refilled starts afresh: 30 B added at 2 s end at 3 s.
TEST(FlowNetwork, NextFinishIsTheNextFlowsUntilRatesAreRecomputed) {
  FlowNetwork network({30, 30});
  network.Add(0, 10, 0, 1);
  network.Add(1, 20, 0, 1);
  network.Reallocate(0);
  EXPECT_NEAR(network.NextFinish(), 2.0 / 3.0, kTolerance);
  EXPECT_EQ(TakeSorted(network, 2.0 / 3.0), std::vector<int32_t>{0});
  EXPECT_NEAR(network.NextFinish(), 4.0 / 3.0, kTolerance);
  network.Reallocate(2.0 / 3.0);
  EXPECT_NEAR(network.NextFinish(), 1.0, kTolerance);
  EXPECT_EQ(TakeSorted(network, network.NextFinish()), std::vector<int32_t>{1});
  network.Reallocate(1.0);
  network.Add(2, 30, 0, 1);
  network.Reallocate(2.0);
  EXPECT_NEAR(network.NextFinish(), 3.0, kTolerance);
}

// A flow of the random networks below: `bytes` over resources a and b from `start` on.
struct RandomFlow {
  double start, bytes;
  int32_t a, b;
};

// The reference: at each event, max-min fair rates by water-filling every running flow from
// scratch (fill the resource whose equal share among its unfixed flows is smallest, fix those
// flows at it, repeat), every flow moved at its rate until the next start or finish. Returns each
// flow's finish time.
std::vector<double> ReferenceFinishes(const std::vector<double>& capacity,
                                      const std::vector<RandomFlow>& flows) {
  const size_t n = flows.size();
  std::vector<double> left(n), finish(n, -1), rate(n);
  for (size_t f = 0; f < n; ++f) left[f] = flows[f].bytes;
  double t = 0;
  while (std::count(finish.begin(), finish.end(), -1.0) > 0) {
    std::vector<size_t> running;
    for (size_t f = 0; f < n; ++f) {
      if (finish[f] < 0 && flows[f].start <= t) running.push_back(f);
    }
    std::vector<double> room = capacity;
    std::vector<char> fixed(n, 0);
    for (size_t unfixed = running.size(); unfixed > 0;) {
      double share = std::numeric_limits<double>::infinity();
      int32_t full = -1;
      for (int32_t r = 0; r < static_cast<int32_t>(capacity.size()); ++r) {
        int32_t through = 0;
        for (size_t f : running) through += !fixed[f] && (flows[f].a == r || flows[f].b == r);
        if (through > 0 && room[r] / through < share) {
          share = room[r] / through;
          full = r;
        }
      }
      for (size_t f : running) {
        if (fixed[f] || (flows[f].a != full && flows[f].b != full)) continue;
        fixed[f] = 1;
        rate[f] = share;
        room[flows[f].a] -= share;
        room[flows[f].b] -= share;
        --unfixed;
      }
    }
    double next = std::numeric_limits<double>::infinity();
    for (size_t f = 0; f < n; ++f) {
      if (finish[f] < 0 && flows[f].start > t) next = std::min(next, flows[f].start);
    }
    for (size_t f : running) next = std::min(next, t + left[f] / rate[f]);
    for (size_t f : running) {
      left[f] -= rate[f] * (next - t);
      if (left[f] <= 1e-9 * flows[f].bytes) finish[f] = next;
    }
    t = next;
  }
  return finish;
}

// FlowNetwork driven as the simulator drives it: at each event, take the finished flows, add the
// ones starting, reallocate.
std::vector<double> NetworkFinishes(const std::vector<double>& capacity,
                                    const std::vector<RandomFlow>& flows) {
  FlowNetwork network(capacity);
  std::vector<double> finish(flows.size(), -1);
  std::vector<char> started(flows.size(), 0);
  std::vector<int32_t> done;
  for (double t = 0; t < std::numeric_limits<double>::infinity();) {
    done.clear();
    network.TakeFinished(t, &done);
    for (int32_t f : done) finish[f] = t;
    for (size_t f = 0; f < flows.size(); ++f) {
      if (!started[f] && flows[f].start <= t) {
        started[f] = 1;
        network.Add(static_cast<int32_t>(f), flows[f].bytes, flows[f].a, flows[f].b);
      }
    }
    network.Reallocate(t);
    double next = network.NextFinish();
    for (size_t f = 0; f < flows.size(); ++f) {
      if (!started[f]) next = std::min(next, flows[f].start);
    }
    t = next;
  }
  return finish;
}

TEST(FlowNetwork, FinishTimesMatchWaterFillingFromScratchOnRandomNetworks) {
  for (uint64_t seed = 0; seed < 300; ++seed) {
    std::mt19937_64 rng(seed);
    const auto uniform = [&](int lo, int hi) {
      return std::uniform_int_distribution<>(lo, hi)(rng);
    };
    // Few resources crowd flows into shared classes and resources; many leave classes alone.
    std::vector<double> capacity(uniform(2, 12));
    for (double& c : capacity) c = 10.0 * uniform(1, 8);
    std::vector<RandomFlow> flows(uniform(1, 16));
    for (RandomFlow& f : flows) {
      f.start = uniform(0, 2) == 0 ? 0.25 * uniform(1, 12) : 0;
      f.bytes = uniform(1, 100);
      f.a = uniform(0, static_cast<int>(capacity.size()) - 1);
      do {
        f.b = uniform(0, static_cast<int>(capacity.size()) - 1);
      } while (f.b == f.a);
    }
    const std::vector<double> expected = ReferenceFinishes(capacity, flows);
    const std::vector<double> actual = NetworkFinishes(capacity, flows);
    for (size_t f = 0; f < flows.size(); ++f) {
      ASSERT_NEAR(actual[f], expected[f], 1e-9 * std::max(1.0, expected[f]))
          << "seed " << seed << " flow " << f;
    }
  }
}

}  // namespace
}  // namespace dcp::sim
