// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <numeric>

#include "dcp/partition.h"

namespace dcp {

double MaxOverMean(const std::vector<int64_t>& loads) {
  const int64_t total = std::accumulate(loads.begin(), loads.end(), int64_t{0});
  if (total == 0) return 1;
  const double mean = static_cast<double>(total) / static_cast<double>(loads.size());
  return static_cast<double>(*std::max_element(loads.begin(), loads.end())) / mean;
}

Result<PlacementReport> EvaluatePlacement(const Hypergraph& graph, const Placement& placement,
                                          const Topology& topology) {
  DCP_RETURN_IF_ERROR(topology.Validate());
  if (static_cast<int32_t>(placement.compute_device.size()) != graph.n_compute ||
      static_cast<int32_t>(placement.data_device.size()) != graph.n_data) {
    return Status::InvalidArgument(
        fmt::format("placement has {} compute and {} data blocks, the hypergraph {} and {}",
                    placement.compute_device.size(), placement.data_device.size(), graph.n_compute,
                    graph.n_data));
  }
  const int32_t k = topology.devices();
  std::vector<int32_t> part(graph.n_vertices());
  for (int32_t v = 0; v < graph.n_vertices(); ++v) {
    const DeviceId d = v < graph.n_compute ? placement.compute_device[v]
                                           : placement.data_device[v - graph.n_compute];
    if (d.value < 0 || d.value >= k) {
      return Status::InvalidArgument(
          fmt::format("block {} is placed on device {}, not in [0, {})", v, d.value, k));
    }
    part[v] = d.value;
  }

  PlacementReport r;
  r.device_compute.assign(k, 0);
  r.device_memory.assign(k, 0);
  for (int32_t v = 0; v < graph.n_vertices(); ++v) {
    r.device_compute[part[v]] += graph.compute_weight[v];
    r.device_memory[part[v]] += graph.memory_weight[v];
  }
  r.compute_imbalance = MaxOverMean(r.device_compute);
  r.memory_imbalance = MaxOverMean(r.device_memory);

  std::vector<int32_t> pins_on(k, 0);  // pins of the current net per device
  std::vector<int64_t> received_inter(k, 0);
  std::vector<int32_t> touched;
  for (int32_t n = 0; n < graph.n_nets(); ++n) {
    touched.clear();
    for (int32_t i = graph.net_begin[n]; i < graph.net_begin[n + 1]; ++i) {
      const int32_t d = part[graph.pins[i]];
      if (pins_on[d]++ == 0) touched.push_back(d);
    }
    std::sort(touched.begin(), touched.end());
    const int64_t w = graph.net_weight[n];
    const int32_t source_node =
        topology.NodeOf(DeviceId{part[graph.n_compute + graph.net_data_block[n]]});
    r.km1_bytes += w * static_cast<int64_t>(touched.size() - 1);
    // Devices are node-major, so the touched devices of one node are consecutive. The network
    // carries the block once into each other node, to the device there with the most pins.
    for (size_t i = 0; i < touched.size();) {
      const int32_t node = topology.NodeOf(DeviceId{touched[i]});
      int32_t receiver = touched[i];
      for (; i < touched.size() && topology.NodeOf(DeviceId{touched[i]}) == node; ++i) {
        if (pins_on[touched[i]] > pins_on[receiver]) receiver = touched[i];
      }
      if (node != source_node) {
        r.bytes_inter_node += w;
        received_inter[receiver] += w;
      }
    }
    for (int32_t d : touched) pins_on[d] = 0;
  }
  r.bytes_intra_node = r.km1_bytes - r.bytes_inter_node;
  r.max_device_bytes_inter_node = *std::max_element(received_inter.begin(), received_inter.end());
  return r;
}

}  // namespace dcp
