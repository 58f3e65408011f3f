// SPDX-License-Identifier: Apache-2.0
// The memory the guards allow for: the machine's physical memory, or less under ulimit -v.
#include "util/memory.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

namespace dcp::internal {
namespace {

int64_t PhysicalBytes() {
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) *
         static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

TEST(ProcessMemoryBytes, IsThePhysicalMemoryWithoutALimit) {
  rlimit address_space{};
  ASSERT_EQ(getrlimit(RLIMIT_AS, &address_space), 0);
  if (address_space.rlim_cur != RLIM_INFINITY) GTEST_SKIP() << "ulimit -v is set";
  EXPECT_EQ(ProcessMemoryBytes(), PhysicalBytes());
}

// In a child (the limit would outlive the test): an address-space limit below the machine's
// memory is what the process may have, and one above it changes nothing.
TEST(ProcessMemoryBytes, FollowsAnAddressSpaceLimit) {
  const int64_t physical = PhysicalBytes();
  ASSERT_GT(physical, int64_t{1} << 30);
  for (const int64_t limit : {int64_t{1} << 30, 2 * physical}) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      rlimit address_space{};
      getrlimit(RLIMIT_AS, &address_space);
      address_space.rlim_cur = static_cast<rlim_t>(limit);
      if (address_space.rlim_max != RLIM_INFINITY) {
        address_space.rlim_cur = std::min(address_space.rlim_cur, address_space.rlim_max);
      }
      if (setrlimit(RLIMIT_AS, &address_space) != 0) _exit(2);
      _exit(ProcessMemoryBytes() == std::min(physical, static_cast<int64_t>(address_space.rlim_cur))
                ? 0
                : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "limit " << limit;
  }
}

}  // namespace
}  // namespace dcp::internal
