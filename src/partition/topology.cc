// SPDX-License-Identifier: Apache-2.0
#include <charconv>

#include "dcp/partition.h"

namespace dcp {

Status Topology::Validate() const {
  if (nodes < 1 || devices_per_node < 1 ||
      static_cast<int64_t>(nodes) * devices_per_node > kMaxDevices) {
    return Status::InvalidArgument(fmt::format(
        "topology {}x{} must have at least 1 node, 1 device per node and at most {} devices",
        nodes, devices_per_node, kMaxDevices));
  }
  return Status::Ok();
}

Result<Topology> Topology::Parse(std::string_view text) {
  const size_t x = text.find('x');
  Topology t;
  const auto parse = [](std::string_view part, int32_t* value) {
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), *value);
    return ec == std::errc() && end == part.data() + part.size();
  };
  if (x == std::string_view::npos || !parse(text.substr(0, x), &t.nodes) ||
      !parse(text.substr(x + 1), &t.devices_per_node)) {
    return Status::InvalidArgument(
        fmt::format("topology '{}' is not NODESxDEVICES (e.g. 4x8)", text));
  }
  DCP_RETURN_IF_ERROR(t.Validate());
  return t;
}

std::string Topology::ToString() const { return fmt::format("{}x{}", nodes, devices_per_node); }

}  // namespace dcp
