// SPDX-License-Identifier: Apache-2.0
// Fuzzes cluster files (--cluster FILE.json, docs/simulator.md): ParseClusterJson either refuses
// the text with InvalidArgument, or returns a spec that Validate() accepts, that ClusterToJson
// writes back to an equal spec, and that the simulator replays a small fixed plan on: a ring
// baseline on 2 nodes of the cluster's devices per node (up to kMaxSimulatedDevicesPerNode).
// Byte mutations seldom keep a cluster file valid JSON, so half of the mutations parse the input
// and set one of its numbers to a value near the edges of what Validate() accepts (zero, the
// smallest and largest doubles, subnormals, integer limits) or drop one key
// (LLVMFuzzerCustomMutator below).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "dcp/baselines.h"
#include "dcp/batch.h"
#include "dcp/sim.h"
#include "fuzz_util.h"

namespace dcp::fuzz {
namespace {

constexpr int32_t kMaxSimulatedDevicesPerNode = 8;

// The plan the cluster replays: two causal sequences on 2 x `devices_per_node` devices, made once
// per device count.
const Plan& RingPlan(int32_t devices_per_node) {
  static std::map<int32_t, Plan> plans;
  auto it = plans.find(devices_per_node);
  if (it != plans.end()) return it->second;
  Result<Batch> batch = Batch::Create({3000, 1000}, {MaskSpec{}},
                                      AttentionShape{.heads = 4, .kv_heads = 2, .head_dim = 64});
  DCP_FUZZ_CHECK(batch.ok(), "{}", batch.status().ToString());
  Result<BaselinePlan> baseline =
      PlanBaseline(Strategy::kRing, *batch,
                   BaselineOptions{.topology = {.nodes = 2, .devices_per_node = devices_per_node}});
  DCP_FUZZ_CHECK(baseline.ok(), "{}", baseline.status().ToString());
  return plans.emplace(devices_per_node, std::move(baseline->plan)).first->second;
}

void CheckCluster(std::string_view text) {
  const Result<ClusterSpec> cluster = ParseClusterJson(text);
  Outcome("cluster", cluster.status(), {StatusCode::kInvalidArgument});
  if (!cluster.ok()) return;
  const Status valid = cluster->Validate();
  DCP_FUZZ_CHECK(valid.ok(), "a parsed cluster does not validate: {}", valid.ToString());
  const std::string json = ClusterToJson(*cluster);
  const Result<ClusterSpec> again = ParseClusterJson(json);
  DCP_FUZZ_CHECK(again.ok(), "ClusterToJson's text does not parse: {}\n{}",
                 again.status().ToString(), json);
  DCP_FUZZ_CHECK(*again == *cluster, "ClusterToJson's text parses to another spec:\n{}", json);
  if (cluster->devices_per_node > kMaxSimulatedDevicesPerNode) return;
  const Result<SimReport> report = SimulatePlan(RingPlan(cluster->devices_per_node), *cluster);
  Outcome("simulate", report.status(), {StatusCode::kInvalidArgument});
  if (!report.ok()) return;
  for (const PassSimReport* pass : {&report->forward, &report->backward}) {
    DCP_FUZZ_CHECK(pass->makespan_s >= 0, "makespan {} s", pass->makespan_s);
  }
}

// Every number of `j` (leaves only), and every object holding keys, to change one of them.
void CollectNodes(nlohmann::json& j, std::vector<nlohmann::json*>& numbers,
                  std::vector<nlohmann::json*>& objects) {
  if (j.is_number()) numbers.push_back(&j);
  if (j.is_object() && !j.empty()) objects.push_back(&j);
  if (j.is_structured()) {
    for (nlohmann::json& child : j) CollectNodes(child, numbers, objects);
  }
}

nlohmann::json EdgeValue(std::mt19937_64& rng) {
  using Double = std::numeric_limits<double>;
  switch (rng() % 12) {
    case 0:
      return 0;
    case 1:
      return -1;
    case 2:
      return Double::denorm_min();
    case 3:
      return Double::min();
    case 4:
      return Double::max();
    case 5:
      return 1e-300;
    case 6:
      return 1e300;
    case 7:
      return std::numeric_limits<int32_t>::max();
    case 8:
      return int64_t{std::numeric_limits<int32_t>::max()} + 1;
    case 9:
      return std::numeric_limits<int64_t>::max();
    case 10:
      return 1;
    default:
      return static_cast<double>(rng() % 1000) / 7.0;
  }
}

}  // namespace
}  // namespace dcp::fuzz

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  std::mt19937_64 rng(seed);
  if (rng() % 2 == 0) {
    nlohmann::json j = nlohmann::json::parse(dcp::fuzz::AsText(data, size), nullptr,
                                             /*allow_exceptions=*/false);
    std::vector<nlohmann::json*> numbers, objects;
    if (!j.is_discarded()) dcp::fuzz::CollectNodes(j, numbers, objects);
    bool changed = false;
    if (!numbers.empty() && rng() % 6 != 0) {
      *numbers[rng() % numbers.size()] = dcp::fuzz::EdgeValue(rng);
      changed = true;
    } else if (!objects.empty()) {
      nlohmann::json& object = *objects[rng() % objects.size()];
      auto it = object.begin();
      std::advance(it, static_cast<std::ptrdiff_t>(rng() % object.size()));
      object.erase(it);
      changed = true;
    }
    if (changed) {
      const std::string text = j.dump();
      if (text.size() <= max_size) {
        std::memcpy(data, text.data(), text.size());
        return text.size();
      }
    }
  }
  return LLVMFuzzerMutate(data, size, max_size);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dcp::fuzz::CheckCluster(dcp::fuzz::AsText(data, size));
  return 0;
}
