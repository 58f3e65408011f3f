// SPDX-License-Identifier: Apache-2.0
// Cluster presets and their JSON form.
#include <gtest/gtest.h>

#include <string>

#include "dcp/sim.h"

namespace dcp {
namespace {

void ExpectRejected(const std::string& json, const std::string& fragment) {
  const Result<ClusterSpec> spec = ParseClusterJson(json);
  ASSERT_FALSE(spec.ok()) << json;
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(spec.status().message().find(fragment), std::string::npos) << spec.status().ToString();
}

TEST(ClusterPreset, P4deHasThePapersInterconnect) {
  const Result<ClusterSpec> p4de = ClusterPreset("p4de");
  ASSERT_TRUE(p4de.ok());
  EXPECT_EQ(p4de->devices_per_node, 8);
  EXPECT_EQ(p4de->intra_node.bytes_per_s, 300e9);  // 600 GB/s NVSwitch, bidirectional
  EXPECT_EQ(p4de->inter_node.bytes_per_s, 50e9);   // 4 x 100 Gbps EFA per node
  EXPECT_EQ(p4de->device.peak_flops, 312e12);
  EXPECT_TRUE(p4de->Validate().ok());
  EXPECT_TRUE(*p4de == ClusterSpec{});
}

TEST(ClusterPreset, H100HasNvlinkAndEightNicsPerNode) {
  const Result<ClusterSpec> h100 = ClusterPreset("h100");
  ASSERT_TRUE(h100.ok());
  EXPECT_EQ(h100->devices_per_node, 8);
  EXPECT_EQ(h100->intra_node.bytes_per_s, 450e9);  // 900 GB/s NVLink, bidirectional
  EXPECT_EQ(h100->inter_node.bytes_per_s, 400e9);  // 8 x 400 Gbps per node
  EXPECT_EQ(h100->device.peak_flops, 989e12);
  EXPECT_TRUE(h100->Validate().ok());
}

TEST(ClusterPreset, NamesThePresetsForAnUnknownName) {
  const Result<ClusterSpec> spec = ClusterPreset("tpu");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), StatusCode::kNotFound);
  EXPECT_NE(spec.status().message().find("p4de, h100"), std::string::npos);
}

TEST(ClusterJson, PresetsRoundTrip) {
  for (const char* name : {"p4de", "h100"}) {
    SCOPED_TRACE(name);
    const ClusterSpec preset = *ClusterPreset(name);
    const std::string json = ClusterToJson(preset);
    const Result<ClusterSpec> parsed = ParseClusterJson(json);
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString() << "\n" << json;
    EXPECT_TRUE(*parsed == preset) << json;
    EXPECT_EQ(ClusterToJson(*parsed), json);
  }
}

TEST(ClusterJson, AnEditedSpecRoundTrips) {
  ClusterSpec spec = *ClusterPreset("h100");
  spec.name = "my cluster";
  spec.devices_per_node = 4;
  spec.inter_node.bytes_per_s = 12.5e9;
  spec.device.attention.sm_count = 0;
  spec.device.attention.rows_half = 0.1;
  const Result<ClusterSpec> parsed = ParseClusterJson(ClusterToJson(spec));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(*parsed == spec);
}

TEST(ClusterJson, MissingKeysKeepThePresetsValues) {
  const Result<ClusterSpec> spec = ParseClusterJson(
      R"({"preset": "h100", "devices_per_node": 4, "inter_node": {"bytes_per_s": 1e11}})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ClusterSpec expected = *ClusterPreset("h100");
  expected.devices_per_node = 4;
  expected.inter_node.bytes_per_s = 1e11;
  EXPECT_TRUE(*spec == expected);

  const Result<ClusterSpec> empty = ParseClusterJson("{}");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(*empty == *ClusterPreset("p4de"));
}

TEST(ClusterJson, RejectsUnknownKeysByTheirPath) {
  ExpectRejected(R"({"devices": 8})", "'devices' is unknown");
  ExpectRejected(R"({"intra_node": {"bandwidth": 1}})", "'intra_node.bandwidth' is unknown");
  ExpectRejected(R"({"device": {"attention": {"tile": 64}}})",
                 "'device.attention.tile' is unknown");
  ExpectRejected(R"({"intra_node": 5})", "'intra_node': expected an object");
}

TEST(ClusterJson, RejectsBadValuesByTheirKey) {
  ExpectRejected(R"({"devices_per_node": 0})", "devices_per_node");
  ExpectRejected(R"({"devices_per_node": 2.5})", "'devices_per_node': 2.5 is not a valid number");
  ExpectRejected(R"({"devices_per_node": 1e20})", "devices_per_node");
  ExpectRejected(R"({"intra_node": {"bytes_per_s": -1}})", "intra_node.bytes_per_s");
  ExpectRejected(R"({"inter_node": {"latency_s": "fast"}})", "inter_node.latency_s");
  ExpectRejected(R"({"device": {"attention": {"forward_efficiency": 1.5}}})",
                 "device.attention.forward_efficiency");
  ExpectRejected(R"({"device": {"attention": {"mask_tile_rows": 0}}})",
                 "device.attention.mask_tile_rows");
  ExpectRejected(R"({"device": {"attention": {"sm_count": -1}}})", "device.attention.sm_count");
  ExpectRejected(R"({"device": {"peak_flops": 0}})", "device.peak_flops");
  // Values that describe no machine and broke the simulator (found by fuzzing): a rate so small
  // that every time overflows, a kernel tile whose arithmetic overflows int64.
  ExpectRejected(R"({"device": {"peak_flops": 1e-300}})", "device.peak_flops");
  ExpectRejected(R"({"device": {"hbm_bytes_per_s": 2.2e-308}})", "device.hbm_bytes_per_s");
  ExpectRejected(R"({"device": {"attention": {"backward_efficiency": 1e-300}}})",
                 "device.attention.backward_efficiency");
  ExpectRejected(R"({"device": {"attention": {"mask_tile_cols": 9223372036854775807}}})",
                 "device.attention.mask_tile_cols");
  ExpectRejected(R"({"inter_node": {"latency_s": 1e300}})", "inter_node.latency_s");
  ExpectRejected(R"({"name": 3})", "'name'");
  ExpectRejected(R"({"preset": "dgx"})", "'preset'");
}

TEST(ClusterJson, RejectsTextThatIsNotAnObject) {
  ExpectRejected("{\"devices_per_node\": ", "does not parse");
  ExpectRejected("[1, 2]", "must be an object");
}

// Regression: a cluster file nested 60,000 levels deep (120 KB) overflowed the stack while the
// error message printed the value; it is refused while parsing, with a short message.
TEST(ClusterJson, RejectsJsonNestedDeeperThanTheLimit) {
  const std::string deep =
      "{\"device\": " + std::string(60000, '[') + std::string(60000, ']') + "}";
  ExpectRejected(deep, "cluster JSON is nested deeper than 64 levels");
  EXPECT_LT(ParseClusterJson(deep).status().message().size(), 400u);
}

// Values in error messages are quoted by a short excerpt.
TEST(ClusterJson, QuotesLongValuesByAnExcerpt) {
  const std::string name(100000, 'n');
  ExpectRejected("{\"preset\": \"" + name + "\"}", "... (100000 bytes)");
  ExpectRejected("{\"device\": \"" + name + "\"}", "... (100002 bytes)");
  EXPECT_LT(ParseClusterJson("{\"name\": [\"" + name + "\"]}").status().message().size(), 400u);
}

}  // namespace
}  // namespace dcp
