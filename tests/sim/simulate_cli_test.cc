// SPDX-License-Identifier: Apache-2.0
// End-to-end tests of `dcp simulate`: run the binary, parse its --json output, check exit codes
// and error messages.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "testing/cli.h"
#include "testing/trace.h"

namespace {

using dcp::testing::CliRun;
using dcp::testing::ParseJson;
using dcp::testing::RunDcp;
using dcp::testing::TempPath;

std::vector<std::string> SmallBatch(std::vector<std::string> more) {
  std::vector<std::string> args = {
      "simulate", "--seqlens", "8192,3000,1000", "--block-size", "512", "--topology", "2x8"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

void ExpectSimulated(const nlohmann::json& j, const std::string& strategy) {
  for (const char* key :
       {"strategy", "fwd_ms", "bwd_ms", "total_ms", "bytes_inter_node", "compute_imbalance",
        "fwd_exposed_comm_ms", "bwd_exposed_comm_ms", "planning_ms"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j.value("strategy", ""), strategy);
  EXPECT_GT(j.value("fwd_ms", 0.0), 0);
  EXPECT_GT(j.value("bwd_ms", 0.0), j.value("fwd_ms", 0.0));  // 2.5x the FLOPs
  EXPECT_NEAR(j.value("total_ms", 0.0), j.value("fwd_ms", 0.0) + j.value("bwd_ms", 0.0), 1e-9);
  EXPECT_GT(j.value("bytes_inter_node", int64_t{0}), 0);
  EXPECT_GE(j.value("compute_imbalance", 0.0), 1.0);
  EXPECT_GE(j.value("fwd_exposed_comm_ms", -1.0), 0);
  EXPECT_LE(j.value("fwd_exposed_comm_ms", 1e9), j.value("fwd_ms", 0.0));
  EXPECT_GT(j.value("planning_ms", 0.0), 0);
  ASSERT_TRUE(j.contains("fwd"));
  EXPECT_EQ(j["fwd"].value("bytes_inter_node", int64_t{0}) +
                j["bwd"].value("bytes_inter_node", int64_t{0}),
            j.value("bytes_inter_node", int64_t{-1}));
}

TEST(CliSimulate, SimulatesDcpOnASmallBatchAsJson) {
  const nlohmann::json j = ParseJson(RunDcp(SmallBatch({"--json"})));
  ExpectSimulated(j, "dcp");
  EXPECT_EQ(j.value("cluster", ""), "p4de");
  EXPECT_EQ(j.value("topology", ""), "2x8");
}

// --divisions search simulates every count and keeps the fastest: never slower than auto.
TEST(CliSimulate, DivisionSearchIsNeverSlowerThanTheCostModel) {
  const nlohmann::json searched = ParseJson(RunDcp(SmallBatch({"--divisions", "search", "--json"})));
  const nlohmann::json model = ParseJson(RunDcp(SmallBatch({"--json"})));
  ExpectSimulated(searched, "dcp");
  EXPECT_LE(searched.value("total_ms", 1e9), model.value("total_ms", 0.0));
}

TEST(CliSimulate, SimulatesRingOnTheSameBatch) {
  const CliRun run = RunDcp(SmallBatch({"--strategy", "ring", "--json"}));
  const nlohmann::json j = ParseJson(run);
  ExpectSimulated(j, "ring");
}

// FCP and MagiAttention go through the same path as the static baselines: JSON and the table.
TEST(CliSimulate, SimulatesFcpAndMagi) {
  // FCP's 4096-token blocks: the long sequence is 16 pairs, one per device, across both nodes.
  const std::vector<std::string> fcp_batch = {"simulate", "--seqlens", "131072,8192", "--topology",
                                              "2x8"};
  for (const auto& [strategy, batch] :
       {std::pair{"fcp", fcp_batch}, std::pair{"magi", SmallBatch({})}}) {
    SCOPED_TRACE(strategy);
    std::vector<std::string> args = batch;
    args.insert(args.end(), {"--strategy", strategy});
    const CliRun table = RunDcp(args);
    ASSERT_EQ(table.exit_code, 0) << table.err;
    EXPECT_EQ(table.out.rfind(std::string(strategy) + ":", 0), 0u) << table.out;
    EXPECT_NE(table.out.find(" on p4de, topology 2x8"), std::string::npos)
        << table.out;
    EXPECT_NE(table.out.find("compute imbalance"), std::string::npos) << table.out;
    args.push_back("--json");
    const nlohmann::json j = ParseJson(RunDcp(args));
    ExpectSimulated(j, strategy);
    // FCP: the fastest of its block sizes, each listed; Magi: its one default configuration.
    if (std::string(strategy) == "fcp") {
      EXPECT_EQ(j["variant_total_ms"].size(), 3u);
      EXPECT_NEAR(j["variant_total_ms"].value(j.value("origin", std::string()), 0.0),
                  j.value("total_ms", -1.0), 1e-9);
    } else {
      EXPECT_EQ(j.value("origin", ""), "magi:1");
    }
    EXPECT_TRUE(j.contains("padded_tokens"));
  }
}

TEST(CliSimulate, KeepsTheFastestLoongTrainInnerRing) {
  const nlohmann::json j = ParseJson(RunDcp(SmallBatch({"--strategy", "loongtrain", "--json"})));
  ExpectSimulated(j, "loongtrain");
  ASSERT_TRUE(j.contains("variant_total_ms"));
  // 16 devices, 2 KV heads: 8 context ranks, inner rings 1, 2, 4 and 8 all divide them.
  double best = 1e18;
  for (const auto& [ring, ms] : j["variant_total_ms"].items())
    best = std::min(best, ms.get<double>());
  EXPECT_EQ(j["variant_total_ms"].size(), 4u);
  EXPECT_DOUBLE_EQ(j.value("total_ms", 0.0), best);
  // The plan names the fastest.
  EXPECT_EQ(j["variant_total_ms"].value(j.value("origin", std::string()), 0.0), best);
}

TEST(CliSimulate, SimulatesAPlanFileAsItsBatchWould) {
  const std::string plan_path = TempPath(".plan");
  const CliRun planned = RunDcp({"plan", "--seqlens", "8192,3000,1000", "--block-size", "512",
                                 "--topology", "2x8", "-o", plan_path});
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const nlohmann::json from_file = ParseJson(RunDcp({"simulate", "--plan", plan_path, "--json"}));
  const nlohmann::json from_batch = ParseJson(RunDcp(SmallBatch({"--json"})));
  EXPECT_DOUBLE_EQ(from_file.value("total_ms", 0.0), from_batch.value("total_ms", -1.0));
  EXPECT_TRUE(from_file["planning_ms"].is_null());
  EXPECT_EQ(from_file.value("bytes_inter_node", int64_t{0}),
            from_batch.value("bytes_inter_node", int64_t{-1}));

  const CliRun mixed = RunDcp({"simulate", "--plan", plan_path, "--seqlens", "100"});
  EXPECT_NE(mixed.exit_code, 0);
  EXPECT_NE(mixed.err.find("--seqlens cannot be combined with --plan"), std::string::npos)
      << mixed.err;
  std::remove(plan_path.c_str());
}

TEST(CliSimulate, WritesATraceAndReadsAClusterFile) {
  const std::string trace_path = TempPath(".trace.json");
  const std::string cluster_path = TempPath(".cluster.json");
  std::ofstream(cluster_path) << R"({"preset": "h100", "inter_node": {"bytes_per_s": 1e9}})";
  const nlohmann::json slow =
      ParseJson(RunDcp(SmallBatch({"--cluster", cluster_path, "--trace", trace_path, "--json"})));
  const nlohmann::json fast = ParseJson(RunDcp(SmallBatch({"--cluster", "h100", "--json"})));
  EXPECT_EQ(slow.value("cluster", ""), "h100");
  EXPECT_GT(slow.value("total_ms", 0.0), fast.value("total_ms", 0.0));
  std::ifstream in(trace_path);
  const nlohmann::json trace = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(trace.is_object());
  EXPECT_GT(trace["traceEvents"].size(), 16u);
  std::remove(trace_path.c_str());
  std::remove(cluster_path.c_str());
}

// Issue 18's example: 189 slices overlapped their track's previous one by a rounding nanosecond.
TEST(CliSimulate, TraceSlicesNeverOverlapOnATrack) {
  const std::string trace_path = TempPath(".trace.json");
#ifdef DCP_SANITIZE  // the default tuning of 131072 tokens takes minutes there
  const char* const tokens = "32768";
#else
  const char* const tokens = "131072";
#endif
  const CliRun run = RunDcp({"simulate", "--dataset", "ldc", "--seed", "1", "--mask", "causal",
                             "--tokens", tokens, "--topology", "4x8", "--trace", trace_path});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::ifstream in(trace_path);
  const nlohmann::json trace = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(trace.is_object());
  EXPECT_GT(trace["traceEvents"].size(), 1000u);
  EXPECT_EQ(dcp::testing::CountOverlappingSlices(trace), 0);
  std::remove(trace_path.c_str());
}

TEST(CliSimulate, PrintsASummaryTable) {
  const CliRun run = RunDcp(SmallBatch({}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("forward"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("backward"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("compute imbalance"), std::string::npos) << run.out;
}

TEST(CliSimulate, SimulatesPartNodesAndRefusesNodesLargerThanTheClusters) {
  const CliRun part = RunDcp({"simulate", "--seqlens", "4096", "--topology", "2x4", "--json"});
  EXPECT_EQ(part.exit_code, 0) << part.err;
  const CliRun run = RunDcp({"simulate", "--seqlens", "4096", "--topology", "1x16"});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("topology 1x16 has 16 devices per node, more than a node of cluster "
                         "'p4de' holds (8)"),
            std::string::npos)
      << run.err;
}

TEST(CliSimulate, RejectsBadInputWithClearErrors) {
  const std::string cluster_path = TempPath(".cluster.json");
  std::ofstream(cluster_path) << R"({"intra_node": {"bandwidth": 1}})";
  struct Case {
    std::vector<std::string> args;
    std::string fragment;
  };
  const Case cases[] = {
      {{"simulate", "--seqlens", "4096", "--cluster", "tpu"}, "neither a preset"},
      {{"simulate", "--seqlens", "4096", "--cluster", cluster_path}, "intra_node.bandwidth"},
      {{"simulate", "--seqlens", "4096", "--strategy", "magic"}, "--strategy"},
      {{"simulate", "--plan", "/nonexistent/x.plan"}, "/nonexistent/x.plan"},
      {{"simulate", "--seqlens", "4096", "--divisions", "lots"}, "--divisions 'lots'"},
  };
  for (const Case& c : cases) {
    const CliRun run = RunDcp(c.args);
    EXPECT_NE(run.exit_code, 0) << c.fragment;
    EXPECT_NE(run.err.find(c.fragment), std::string::npos) << run.err;
  }
  std::remove(cluster_path.c_str());
}

}  // namespace
