// SPDX-License-Identifier: Apache-2.0
// hMETIS export and partition-file import, so external partitioners can run on the same instance.
#include <charconv>
#include <iterator>
#include <cmath>
#include <numeric>

#include "dcp/partition.h"

namespace dcp {
namespace {

// Scale so that the sum of the weights stays below 2^30 (room for partitioners' own sums).
double ScaleFor(const std::vector<int64_t>& weights) {
  const double total =
      static_cast<double>(std::accumulate(weights.begin(), weights.end(), int64_t{0}));
  constexpr double kLimit = static_cast<double>(int64_t{1} << 30);
  return total > kLimit ? total / kLimit : 1.0;
}

int64_t Scaled(int64_t weight, double scale) {
  return std::max<int64_t>(1, std::llround(static_cast<double>(weight) / scale));
}

}  // namespace

HmetisScale WriteHmetis(const Hypergraph& graph, std::string* out) {
  HmetisScale scale{.compute = ScaleFor(graph.compute_weight),
                    .memory = ScaleFor(graph.memory_weight),
                    .net = ScaleFor(graph.net_weight)};
  fmt::format_to(std::back_inserter(*out),
                 "% dcp hypergraph: vertices 1..{} are compute blocks (weight = FLOPs / {}), "
                 "{}..{} data blocks (weight = bytes / {}); net weight = bytes / {}\n",
                 graph.n_compute, scale.compute, graph.n_compute + 1, graph.n_vertices(),
                 scale.memory, scale.net);
  fmt::format_to(std::back_inserter(*out), "{} {} 11\n", graph.n_nets(), graph.n_vertices());
  for (int32_t n = 0; n < graph.n_nets(); ++n) {
    fmt::format_to(std::back_inserter(*out), "{}", Scaled(graph.net_weight[n], scale.net));
    for (int32_t i = graph.net_begin[n]; i < graph.net_begin[n + 1]; ++i) {
      fmt::format_to(std::back_inserter(*out), " {}", graph.pins[i] + 1);
    }
    out->push_back('\n');
  }
  for (int32_t v = 0; v < graph.n_vertices(); ++v) {
    const int64_t w = v < graph.n_compute ? Scaled(graph.compute_weight[v], scale.compute)
                                          : Scaled(graph.memory_weight[v], scale.memory);
    fmt::format_to(std::back_inserter(*out), "{}\n", w);
  }
  return scale;
}

Result<Placement> ReadPartition(std::string_view text, const Hypergraph& graph,
                                const Topology& topology) {
  DCP_RETURN_IF_ERROR(topology.Validate());
  std::vector<DeviceId> parts;
  parts.reserve(graph.n_vertices());
  int line = 0;
  while (!text.empty()) {
    ++line;
    const size_t nl = text.find('\n');
    std::string_view item = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    while (!item.empty() && (item.back() == '\r' || item.back() == ' ')) item.remove_suffix(1);
    if (item.empty()) continue;
    int32_t part = -1;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), part);
    if (ec != std::errc() || end != item.data() + item.size() || part < 0 ||
        part >= topology.devices()) {
      return Status::InvalidArgument(fmt::format("partition line {}: '{}' is not a part in [0, {})",
                                                 line, item, topology.devices()));
    }
    parts.push_back(DeviceId{part});
  }
  if (static_cast<int32_t>(parts.size()) != graph.n_vertices()) {
    return Status::InvalidArgument(
        fmt::format("partition has {} parts but the hypergraph has {} "
                    "vertices",
                    parts.size(), graph.n_vertices()));
  }
  Placement p;
  p.compute_device.assign(parts.begin(), parts.begin() + graph.n_compute);
  p.data_device.assign(parts.begin() + graph.n_compute, parts.end());
  return p;
}

std::string WritePartition(const Placement& placement) {
  std::string out;
  for (const auto* devices : {&placement.compute_device, &placement.data_device}) {
    for (const DeviceId d : *devices) fmt::format_to(std::back_inserter(out), "{}\n", d.value);
  }
  return out;
}

}  // namespace dcp
