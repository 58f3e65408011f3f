// SPDX-License-Identifier: Apache-2.0
// A parallel loop over independent indices, for the planner's phases whose pieces do not depend
// on one another (node-level placements, per-device compilation, tuning candidates).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace dcp::internal {

// Calls body(i) for every i in [0, n) on up to `threads` threads (the caller's among them), each
// index once, and returns when all are done. Which thread runs an index is not fixed, so a body
// that writes only its own index's results gives the same results on any thread count.
//
// An exception a body throws (std::bad_alloc, most likely) ends the loop's remaining indices and
// is rethrown to the caller once every thread has stopped, instead of terminating the process
// from a helper thread. A helper that cannot be started leaves its share to the others.
template <typename Body>
void ParallelFor(int32_t n, int32_t threads, const Body& body) {
  std::atomic<int32_t> next{0};
  std::mutex failure_mutex;
  std::exception_ptr failure;
  const auto work = [&] {
    try {
      for (int32_t i = next++; i < n; i = next++) body(i);
    } catch (...) {
      next = n;
      const std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  };
  const int32_t helpers = std::min(std::max(threads, 1), n) - 1;
  std::vector<std::thread> pool;
  for (int32_t t = 0; t < helpers; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // no more threads to be had (ulimit -u, memory for stacks)
    }
  }
  work();
  for (std::thread& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace dcp::internal
