// SPDX-License-Identifier: Apache-2.0
// A parallel loop over independent indices, for the planner's phases whose pieces do not depend
// on one another (node-level placements, per-device compilation, tuning candidates).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace dcp::internal {

// Calls body(i) for every i in [0, n) on up to `threads` threads (the caller's among them), each
// index once, and returns when all are done. Which thread runs an index is not fixed, so a body
// that writes only its own index's results gives the same results on any thread count.
template <typename Body>
void ParallelFor(int32_t n, int32_t threads, const Body& body) {
  std::atomic<int32_t> next{0};
  const auto work = [&] {
    for (int32_t i = next++; i < n; i = next++) body(i);
  };
  const int32_t helpers = std::min(std::max(threads, 1), n) - 1;
  std::vector<std::thread> pool;
  for (int32_t t = 0; t < helpers; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

}  // namespace dcp::internal
