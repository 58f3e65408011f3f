// SPDX-License-Identifier: Apache-2.0
// The Zoltan backend of PartitionBlocks. Zoltan starts MPI (as a singleton), so this file is part
// of the binary of tests that start MPI (tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include "dcp/partition.h"

namespace dcp {
namespace {

TEST(PartitionBlocks, ZoltanBackendMeetsBothConstraintsAfterRepair) {
  auto batch = Batch::Create({65536, 16384, 8192, 8192, 4096}, {*MaskSpec::Parse("causal")},
                             AttentionShape{.heads = 8, .kv_heads = 2, .head_dim = 64});
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  auto set = MakeBlocks(*batch, {.block_size = 1024});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  const PartitionOptions options{
      .partitioner = PartitionerKind::kZoltan, .eps_compute = 0.1, .eps_memory = 0.2};
  auto result = PartitionBlocks(*set, Topology{.nodes = 2, .devices_per_node = 4}, options);
  if (!result.ok() && result.status().code() == StatusCode::kUnsupported) {
    GTEST_SKIP() << result.status().ToString();  // a build without Zoltan
  }
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(result->balanced);
  EXPECT_LE(result->report.memory_imbalance, 1 + 0.2 + 1e-9);
  EXPECT_EQ(result->placement.compute_device.size(), set->compute_blocks.size());
}

}  // namespace
}  // namespace dcp
