// SPDX-License-Identifier: Apache-2.0
// The end-to-end estimate: model specs parse or are refused by name, and a step is the simulated
// attention plus the linear layers of the device holding the most tokens, per layer.
#include <gtest/gtest.h>

#include "dcp/planner.h"
#include "dcp/sim.h"

namespace dcp {
namespace {

TEST(ModelSpec, ParsesThePresetAndGenericSpecs) {
  auto llama = ParseModelSpec("llama3-8b");
  ASSERT_TRUE(llama.ok());
  EXPECT_EQ(llama->layers, 32);
  // Q, O: 4096^2 each; K, V: 4096 x 1024 each; MLP: 3 x 4096 x 14336.
  EXPECT_EQ(llama->LinearParameters(),
            2 * 4096LL * 4096 + 2 * 4096LL * 1024 + 3 * 4096LL * 14336);
  auto generic = ParseModelSpec("layers=2,hidden=256,heads=4,kv_heads=2,ffn=512");
  ASSERT_TRUE(generic.ok()) << generic.status().ToString();
  EXPECT_EQ(generic->hidden, 256);
  EXPECT_EQ(generic->kv_heads, 2);
  for (const char* bad : {"gpt5", "layers=2,hidden=256", "layers=2,hidden=256,heads=3,kv_heads=1,ffn=8",
                          "layers=x,hidden=256,heads=4,kv_heads=2,ffn=512",
                          "layers=2,layers=2,hidden=256,heads=4,kv_heads=2,ffn=512",
                          // Sizes whose parameter count would overflow 64 bits.
                          "layers=2,hidden=256,heads=4,kv_heads=2,ffn=4611686018427387904",
                          "layers=9223372036854775807,hidden=256,heads=4,kv_heads=2,ffn=512"}) {
    EXPECT_FALSE(ParseModelSpec(bad).ok()) << bad;
  }
}

TEST(EstimateEndToEnd, AddsTheBusiestDevicesLinearLayersToTheAttentionOfEveryLayer) {
  const ModelSpec model{.name = "tiny", .layers = 3, .hidden = 256, .heads = 4, .kv_heads = 2,
                        .ffn = 512};
  auto batch = Batch::Create({3000, 1000, 700}, {*MaskSpec::Parse("causal")},
                             AttentionShape{.heads = 4, .kv_heads = 2, .head_dim = 64});
  ASSERT_TRUE(batch.ok());
  auto planned = PlanBatch(*batch, SinglePassOptions({.nodes = 1, .devices_per_node = 4}, 256));
  ASSERT_TRUE(planned.ok());
  ClusterSpec cluster;
  cluster.devices_per_node = 4;
  auto report = SimulatePlan(planned->plan, cluster);
  ASSERT_TRUE(report.ok());
  // The tokens each device owns, from the token map's definition: data blocks by owner.
  std::vector<int64_t> tokens(4, 0);
  for (size_t b = 0; b < planned->blocks.data_blocks.size(); ++b) {
    tokens[planned->placed.placement.data_device[b].value] += planned->blocks.data_blocks[b].tokens;
  }
  const double busiest = static_cast<double>(*std::max_element(tokens.begin(), tokens.end()));
  const double params = 2.0 * 256 * 256 + 2.0 * 256 * 128 + 3.0 * 256 * 512;
  const double linear = 3 * (6 * params * busiest / (312e12 * 0.75));
  const EndToEndEstimate e = EstimateEndToEnd(planned->plan, *report, model, cluster.device);
  EXPECT_DOUBLE_EQ(e.attention_s, 3 * report->total_s());
  EXPECT_NEAR(e.linear_s, linear, linear * 1e-12);
  EXPECT_DOUBLE_EQ(e.total_s, e.attention_s + e.linear_s);
}

}  // namespace
}  // namespace dcp
