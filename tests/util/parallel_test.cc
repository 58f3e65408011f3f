// SPDX-License-Identifier: Apache-2.0
// ParallelFor (src/util/parallel.h): every index once on any thread count, and an exception from a
// body reaches the caller instead of terminating the process from a helper thread.
#include "util/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <new>
#include <vector>

namespace dcp::internal {
namespace {

TEST(ParallelFor, CallsEveryIndexOnceOnAnyThreadCount) {
  for (int32_t threads : {0, 1, 2, 7, 64}) {
    std::vector<std::atomic<int32_t>> calls(100);
    ParallelFor(100, threads, [&](int32_t i) { ++calls[i]; });
    for (const std::atomic<int32_t>& c : calls) EXPECT_EQ(c.load(), 1) << threads;
  }
}

// Regression: bad_alloc on a tuning thread aborted `dcp plan` ("terminate called ...").
TEST(ParallelFor, RethrowsTheFirstExceptionOnceEveryThreadHasStopped) {
  for (int32_t threads : {1, 4}) {
    std::atomic<int32_t> ran{0};
    EXPECT_THROW(ParallelFor(1000, threads,
                             [&](int32_t i) {
                               ++ran;
                               if (i == 3) throw std::bad_alloc();
                             }),
                 std::bad_alloc);
    EXPECT_LT(ran.load(), 1000) << "the remaining indices are skipped";
  }
}

}  // namespace
}  // namespace dcp::internal
