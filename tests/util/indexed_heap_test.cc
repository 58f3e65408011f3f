// SPDX-License-Identifier: Apache-2.0
// IndexedMinHeap (src/util/indexed_heap.h) against a std::set of (key, item) under random
// inserts, key changes up and down, removals and pops.
#include "util/indexed_heap.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <utility>
#include <vector>

namespace dcp::internal {
namespace {

TEST(IndexedMinHeap, PopsInTheOrderOfASetOfKeyAndItemUnderRandomChanges) {
  for (uint64_t seed = 0; seed < 200; ++seed) {
    std::mt19937_64 rng(seed);
    const int32_t n = std::uniform_int_distribution<int32_t>(1, 40)(rng);
    // Few distinct keys, so ties are common and must fall to the smaller item.
    std::uniform_int_distribution<int32_t> item(0, n - 1), key(0, 6), op(0, 3);
    IndexedMinHeap heap(n);
    std::set<std::pair<double, int32_t>> expected;
    std::vector<double> key_of(n, -1);  // -1: not in the heap
    for (int step = 0; step < 400; ++step) {
      const int32_t x = item(rng);
      switch (op(rng)) {
        case 0:
        case 1: {  // insert, or change a key
          const double k = 0.5 * key(rng);
          if (key_of[x] >= 0) expected.erase({key_of[x], x});
          heap.Set(x, k);
          key_of[x] = k;
          expected.insert({k, x});
          break;
        }
        case 2:
          if (key_of[x] < 0) break;
          heap.Remove(x);
          expected.erase({key_of[x], x});
          key_of[x] = -1;
          break;
        default:
          if (expected.empty()) break;
          ASSERT_EQ(heap.top(), expected.begin()->second) << "seed " << seed << " step " << step;
          ASSERT_EQ(heap.key(heap.top()), expected.begin()->first);
          key_of[heap.top()] = -1;
          heap.Remove(heap.top());
          expected.erase(expected.begin());
      }
      ASSERT_EQ(heap.empty(), expected.empty()) << "seed " << seed << " step " << step;
    }
    heap.Clear();
    EXPECT_TRUE(heap.empty());
    heap.Set(0, 1.0);  // cleared items go in again
    EXPECT_EQ(heap.top(), 0);
  }
}

}  // namespace
}  // namespace dcp::internal
