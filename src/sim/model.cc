// SPDX-License-Identifier: Apache-2.0
// ModelSpec and EstimateEndToEnd (include/dcp/sim.h): the rest of a transformer layer around the
// simulated attention.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>

#include "dcp/sim.h"

namespace dcp {

Status ModelSpec::Validate() const {
  if (layers < 1 || hidden < 1 || heads < 1 || kv_heads < 1 || ffn < 1) {
    return Status::InvalidArgument(fmt::format(
        "model '{}': layers, hidden, heads, kv_heads and ffn must be >= 1 (got {}, {}, {}, {}, {})",
        name, layers, hidden, heads, kv_heads, ffn));
  }
  // Far above any model, and low enough that the parameter count (a few products of two of
  // them) fits 64 bits.
  constexpr int64_t kMaxField = int64_t{1} << 24;
  if (std::max({layers, hidden, heads, kv_heads, ffn}) > kMaxField) {
    return Status::InvalidArgument(fmt::format(
        "model '{}': layers, hidden, heads, kv_heads and ffn must be at most {} (got {}, {}, {}, "
        "{}, {})",
        name, kMaxField, layers, hidden, heads, kv_heads, ffn));
  }
  if (hidden % heads != 0 || heads % kv_heads != 0) {
    return Status::InvalidArgument(fmt::format(
        "model '{}': heads {} must divide hidden {} and kv_heads {} must divide heads", name,
        heads, hidden, kv_heads));
  }
  if (!(linear_efficiency > 0 && linear_efficiency <= 1)) {
    return Status::InvalidArgument(fmt::format(
        "model '{}': linear_efficiency {} is not in (0, 1]", name, linear_efficiency));
  }
  return Status::Ok();
}

int64_t ModelSpec::LinearParameters() const {
  const int64_t head_dim = hidden / heads;
  const int64_t q_and_o = 2 * hidden * hidden;
  const int64_t k_and_v = 2 * hidden * kv_heads * head_dim;
  const int64_t mlp = 3 * hidden * ffn;  // gate, up, down (SwiGLU)
  return q_and_o + k_and_v + mlp;
}

Result<ModelSpec> ParseModelSpec(std::string_view text) {
  if (text == "llama3-8b") {
    return ModelSpec{.name = "llama3-8b", .layers = 32, .hidden = 4096, .heads = 32,
                     .kv_heads = 8, .ffn = 14336};
  }
  if (text.find('=') == std::string_view::npos) {
    return Status::NotFound(fmt::format(
        "model '{}' is unknown: use llama3-8b or layers=L,hidden=H,heads=A,kv_heads=K,ffn=F",
        text));
  }
  ModelSpec spec{.name = std::string(text)};
  const std::map<std::string_view, int64_t*> fields = {{"layers", &spec.layers},
                                                       {"hidden", &spec.hidden},
                                                       {"heads", &spec.heads},
                                                       {"kv_heads", &spec.kv_heads},
                                                       {"ffn", &spec.ffn}};
  std::map<std::string_view, bool> seen;
  for (std::string_view rest = text; !rest.empty();) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t eq = item.find('=');
    const std::string_view key = item.substr(0, eq);
    const auto field = fields.find(key);
    if (eq == std::string_view::npos || field == fields.end() || seen[key]) {
      return Status::InvalidArgument(fmt::format(
          "model spec '{}': '{}' is not one of layers=, hidden=, heads=, kv_heads=, ffn= (each "
          "once)",
          text, item));
    }
    seen[key] = true;
    const std::string_view value = item.substr(eq + 1);
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), *field->second);
    if (ec != std::errc() || end != value.data() + value.size()) {
      return Status::InvalidArgument(
          fmt::format("model spec '{}': {} '{}' is not an integer", text, key, value));
    }
  }
  if (seen.size() != fields.size()) {
    return Status::InvalidArgument(fmt::format(
        "model spec '{}' must give layers, hidden, heads, kv_heads and ffn", text));
  }
  DCP_RETURN_IF_ERROR(spec.Validate());
  return spec;
}

EndToEndEstimate EstimateEndToEnd(const Plan& plan, const SimReport& report,
                                  const ModelSpec& model, const DeviceSpec& device) {
  std::vector<int64_t> tokens(static_cast<size_t>(plan.topology.devices()), 0);
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    tokens[static_cast<size_t>(plan.block_owner[b].value)] += plan.blocks[b].tokens;
  }
  const int64_t busiest = tokens.empty() ? 0 : *std::max_element(tokens.begin(), tokens.end());
  // Forward: 2 FLOPs per parameter and token; backward: twice that (input and weight gradients).
  const double rate = device.peak_flops * model.linear_efficiency;
  const double forward_linear =
      2.0 * static_cast<double>(model.LinearParameters()) * static_cast<double>(busiest) / rate;
  EndToEndEstimate e;
  e.attention_s = static_cast<double>(model.layers) * report.total_s();
  e.linear_s = static_cast<double>(model.layers) * 3 * forward_linear;
  e.total_s = e.attention_s + e.linear_s;
  return e;
}

}  // namespace dcp
