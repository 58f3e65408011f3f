// SPDX-License-Identifier: Apache-2.0
// Cluster specs: validation, the built-in presets and their JSON form. The calibration of the
// presets and its sources are in docs/simulator.md.
#include <cmath>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "dcp/sim.h"
#include "util/excerpt.h"
#include "util/json.h"

namespace dcp {
namespace {

// One JSON key of the spec: its path, how to write it and how to read it into a spec.
struct Field {
  std::string path;  // "device.attention.sm_count"
  std::function<nlohmann::json(const ClusterSpec&)> get;
  // Reads `value` into the spec; false when the JSON type is wrong.
  std::function<bool(const nlohmann::json& value, ClusterSpec& spec)> set;
};

// A numeric field: `read` gives its value, `write` a reference to it.
template <typename T, typename Read, typename Write>
Field NumberField(std::string path, Read read, Write write) {
  return Field{
      .path = std::move(path),
      .get = [read](const ClusterSpec& c) { return nlohmann::json(read(c)); },
      .set =
          [write](const nlohmann::json& v, ClusterSpec& c) {
            if constexpr (std::is_integral_v<T>) {
              if (!v.is_number_integer()) return false;
              const auto wide = v.get<int64_t>();
              if (wide < std::numeric_limits<T>::min() || wide > std::numeric_limits<T>::max()) {
                return false;
              }
              write(c) = static_cast<T>(wide);
            } else {
              if (!v.is_number()) return false;
              write(c) = v.get<T>();
            }
            return true;
          }};
}

#define DCP_SIM_FIELD(type, path, expr)                  \
  NumberField<type>(                                     \
      path, [](const ClusterSpec& c) { return c.expr; }, \
      [](ClusterSpec& c) -> type& { return c.expr; })

// Every key of the JSON form, in the order ClusterToJson writes them.
const std::vector<Field>& Fields() {
  static const std::vector<Field> fields = {
      Field{.path = "name",
            .get = [](const ClusterSpec& c) { return nlohmann::json(c.name); },
            .set =
                [](const nlohmann::json& v, ClusterSpec& c) {
                  if (!v.is_string()) return false;
                  c.name = v.get<std::string>();
                  return true;
                }},
      DCP_SIM_FIELD(int32_t, "devices_per_node", devices_per_node),
      DCP_SIM_FIELD(double, "intra_node.bytes_per_s", intra_node.bytes_per_s),
      DCP_SIM_FIELD(double, "intra_node.latency_s", intra_node.latency_s),
      DCP_SIM_FIELD(double, "inter_node.bytes_per_s", inter_node.bytes_per_s),
      DCP_SIM_FIELD(double, "inter_node.latency_s", inter_node.latency_s),
      DCP_SIM_FIELD(double, "device.peak_flops", device.peak_flops),
      DCP_SIM_FIELD(double, "device.hbm_bytes_per_s", device.hbm_bytes_per_s),
      DCP_SIM_FIELD(double, "device.memory_op_launch_s", device.memory_op_launch_s),
      DCP_SIM_FIELD(double, "device.attention.forward_efficiency",
                    device.attention.forward_efficiency),
      DCP_SIM_FIELD(double, "device.attention.backward_efficiency",
                    device.attention.backward_efficiency),
      DCP_SIM_FIELD(double, "device.attention.rows_half", device.attention.rows_half),
      DCP_SIM_FIELD(double, "device.attention.cols_half", device.attention.cols_half),
      DCP_SIM_FIELD(int64_t, "device.attention.mask_tile_rows", device.attention.mask_tile_rows),
      DCP_SIM_FIELD(int64_t, "device.attention.mask_tile_cols", device.attention.mask_tile_cols),
      DCP_SIM_FIELD(int32_t, "device.attention.sm_count", device.attention.sm_count),
      DCP_SIM_FIELD(double, "device.attention.launch_s", device.attention.launch_s),
  };
  return fields;
}

#undef DCP_SIM_FIELD

// Splits "a.b.c" into its keys.
std::vector<std::string> SplitPath(const std::string& path) {
  std::vector<std::string> keys;
  size_t begin = 0;
  while (true) {
    const size_t dot = path.find('.', begin);
    keys.push_back(path.substr(begin, dot - begin));
    if (dot == std::string::npos) return keys;
    begin = dot + 1;
  }
}

// Checks that every key of `object` (at `prefix`) is a known field or a known group of fields.
Status CheckKeys(const nlohmann::json& object, const std::string& prefix) {
  for (const auto& [key, value] : object.items()) {
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    if (prefix.empty() && key == "preset") continue;
    bool leaf = false, group = false;
    for (const Field& f : Fields()) {
      if (f.path == path) leaf = true;
      if (f.path.size() > path.size() && f.path.compare(0, path.size(), path) == 0 &&
          f.path[path.size()] == '.') {
        group = true;
      }
    }
    if (group) {
      if (!value.is_object()) {
        return Status::InvalidArgument(fmt::format("cluster key '{}': expected an object, got {}",
                                                   internal::Excerpt(path),
                                                   internal::JsonExcerpt(value)));
      }
      DCP_RETURN_IF_ERROR(CheckKeys(value, path));
    } else if (!leaf) {
      return Status::InvalidArgument(
          fmt::format("cluster key '{}' is unknown", internal::Excerpt(path)));
    }
  }
  return Status::Ok();
}

// A value must lie in [lo, hi]: outside it no machine is described, and the simulator's times
// would overflow or vanish (a rate of 1e-300 bytes per second makes every message take forever).
Status CheckRange(double value, double lo, double hi, std::string_view field) {
  if (!std::isfinite(value) || value < lo || value > hi) {
    return Status::InvalidArgument(
        fmt::format("cluster key '{}': {} is not in [{:g}, {:g}]", field, value, lo, hi));
  }
  return Status::Ok();
}

ClusterSpec P4de() { return ClusterSpec{}; }

ClusterSpec H100() {
  return ClusterSpec{
      .name = "h100",
      .devices_per_node = 8,
      .intra_node = {.bytes_per_s = 450e9, .latency_s = 4e-6},
      .inter_node = {.bytes_per_s = 400e9, .latency_s = 12e-6},
      .device = {.peak_flops = 989e12,
                 .hbm_bytes_per_s = 2.8e12,
                 .memory_op_launch_s = 4e-6,
                 .attention = {.forward_efficiency = 0.65,
                               .backward_efficiency = 0.50,
                               .rows_half = 105,
                               .cols_half = 105,
                               .mask_tile_rows = 128,
                               .mask_tile_cols = 128,
                               .sm_count = 132,
                               .launch_s = 8e-6}},
  };
}

}  // namespace

Status ClusterSpec::CheckHolds(const Topology& topology) const {
  if (topology.devices_per_node <= devices_per_node) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "topology {} has {} devices per node, more than a node of cluster '{}' holds ({}); pass a "
      "topology of at most {} devices per node, or a cluster file with devices_per_node {}",
      topology.ToString(), topology.devices_per_node, name, devices_per_node, devices_per_node,
      topology.devices_per_node));
}

Status ClusterSpec::Validate() const {
  if (devices_per_node < 1) {
    return Status::InvalidArgument(
        fmt::format("cluster key 'devices_per_node': {} is not >= 1", devices_per_node));
  }
  // Rates from 1 MB/s (links) or 1 GFLOP/s and 1 GB/s (devices) to 1e18; latencies and launch
  // costs up to a second; kernel efficiencies from 1e-3; kernel tiles and SMs up to 2^16 and 2^20.
  constexpr double kMaxRate = 1e18, kMaxSeconds = 1;
  const AttentionKernelModel& a = device.attention;
  for (const auto& [value, lo, hi, field] : {
           std::tuple{intra_node.bytes_per_s, 1e6, kMaxRate, "intra_node.bytes_per_s"},
           std::tuple{intra_node.latency_s, 0.0, kMaxSeconds, "intra_node.latency_s"},
           std::tuple{inter_node.bytes_per_s, 1e6, kMaxRate, "inter_node.bytes_per_s"},
           std::tuple{inter_node.latency_s, 0.0, kMaxSeconds, "inter_node.latency_s"},
           std::tuple{device.peak_flops, 1e9, kMaxRate, "device.peak_flops"},
           std::tuple{device.hbm_bytes_per_s, 1e9, kMaxRate, "device.hbm_bytes_per_s"},
           std::tuple{device.memory_op_launch_s, 0.0, kMaxSeconds, "device.memory_op_launch_s"},
           std::tuple{a.forward_efficiency, 1e-3, 1.0, "device.attention.forward_efficiency"},
           std::tuple{a.backward_efficiency, 1e-3, 1.0, "device.attention.backward_efficiency"},
           std::tuple{a.rows_half, 0.0, 1e6, "device.attention.rows_half"},
           std::tuple{a.cols_half, 0.0, 1e6, "device.attention.cols_half"},
           std::tuple{static_cast<double>(a.mask_tile_rows), 1.0, 65536.0,
                      "device.attention.mask_tile_rows"},
           std::tuple{static_cast<double>(a.mask_tile_cols), 1.0, 65536.0,
                      "device.attention.mask_tile_cols"},
           std::tuple{static_cast<double>(a.sm_count), 0.0, 1048576.0,
                      "device.attention.sm_count"},
           std::tuple{a.launch_s, 0.0, kMaxSeconds, "device.attention.launch_s"}}) {
    DCP_RETURN_IF_ERROR(CheckRange(value, lo, hi, field));
  }
  return Status::Ok();
}

Result<ClusterSpec> ClusterPreset(std::string_view name) {
  if (name == "p4de") return P4de();
  if (name == "h100") return H100();
  return Status::NotFound(
      fmt::format("cluster preset '{}' is unknown (presets: p4de, h100)", internal::Excerpt(name)));
}

std::string ClusterToJson(const ClusterSpec& cluster) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const Field& f : Fields()) {
    nlohmann::ordered_json* node = &j;
    const std::vector<std::string> keys = SplitPath(f.path);
    for (size_t i = 0; i + 1 < keys.size(); ++i) node = &(*node)[keys[i]];
    (*node)[keys.back()] = f.get(cluster);
  }
  return j.dump(2);
}

Result<ClusterSpec> ParseClusterJson(std::string_view json) {
  DCP_ASSIGN_OR_RETURN(const nlohmann::json j, internal::ParseJson(json, "cluster JSON"));
  if (!j.is_object()) {
    return Status::InvalidArgument(
        fmt::format("cluster JSON must be an object, got {}", j.type_name()));
  }
  DCP_RETURN_IF_ERROR(CheckKeys(j, ""));
  std::string preset = "p4de";
  if (j.contains("preset")) {
    if (!j["preset"].is_string()) {
      return Status::InvalidArgument(fmt::format("cluster key 'preset': expected a string, got {}",
                                                 internal::JsonExcerpt(j["preset"])));
    }
    preset = j["preset"].get<std::string>();
  }
  Result<ClusterSpec> base = ClusterPreset(preset);
  if (!base.ok()) {
    return Status::InvalidArgument(
        fmt::format("cluster key 'preset': {}", base.status().message()));
  }
  ClusterSpec spec = *base;
  for (const Field& f : Fields()) {
    const nlohmann::json* node = &j;
    for (const std::string& key : SplitPath(f.path)) {
      if (!node->is_object() || !node->contains(key)) {
        node = nullptr;
        break;
      }
      node = &(*node)[key];
    }
    if (node == nullptr) continue;
    if (!f.set(*node, spec)) {
      return Status::InvalidArgument(fmt::format("cluster key '{}': {} is not a valid {}", f.path,
                                                 internal::JsonExcerpt(*node),
                                                 f.path == "name" ? "string" : "number"));
    }
  }
  DCP_RETURN_IF_ERROR(spec.Validate());
  return spec;
}

Status SimOptions::Validate() const { return Status::Ok(); }

}  // namespace dcp
