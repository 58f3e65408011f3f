// SPDX-License-Identifier: Apache-2.0
// FCP, "Flexible Context Parallelism" (MLSys 2026, arXiv 2605.08524), from its published
// description (no code is public; sources and marks in docs/baselines.md):
//
//   Blocks.    Every sequence is cut into blocks of `fcp_block_tokens` tokens, the last shorter.
//   Units.     A causal sequence's blocks are paired i with n-1-i (the middle one of an odd count
//              stays single), so each pair holds about the same causal work. Every other mask's
//              blocks are single units: the paper covers causal and full masks only, a full
//              mask's rows all weigh the same (pairing changes nothing), and for the other
//              families no pairing is described; the greedy below balances their exact work.
//   Placement. Units in decreasing order of compute (the FLOPs, forward and backward, of the
//              tiles of their query blocks; ties: more bytes first, then batch order) each go to
//              the device with the least compute so far, ties to the least data bytes, then the
//              lowest id: a min-heap, O(K log N) for K units.
//   Compute.   Every tile runs on the device of its query block.
//   Traffic.   A device needs the KV of every block some tile of its own reads; each block goes
//              once to each device needing it. The (sender, receiver) device pairs with anything
//              to send form a bipartite graph, split into congestion-free rounds (no device sends
//              or receives twice in a round) by repeated maximum matchings (Hopcroft-Karp): all
//              the KV one device sends another moves in their pair's round. Topology is ignored.
//   Divisions. Round r is division r + 1: its KV moves while division r computes, and the tiles
//              that read it compute in it. Division 0 holds the tiles whose KV is local.
//   Backward.  The compiler's default: KV moves again in the same rounds, dQ stays home (queries
//              never move), and each remote tile's partial dKV returns to its owner right after
//              its division (the reverse of its round's edge, so the returns of one round are
//              congestion-free too), the last round's in the output exchange.
#include <algorithm>
#include <queue>
#include <tuple>

#include "baselines/peer_strategies.h"
#include "dcp/schedule.h"

namespace dcp::internal {
namespace {

struct Unit {
  std::vector<int32_t> blocks;  // one or two data blocks of one sequence
  int64_t compute = 0;          // FLOPs forward + backward of the tiles of its query blocks
  int64_t bytes = 0;            // bytes of its data blocks, forward and backward
};

std::vector<Unit> MakeUnits(const Batch& batch, const BlockSet& set) {
  std::vector<int64_t> row_compute(set.data_blocks.size(), 0);
  for (const ComputeBlock& c : set.compute_blocks) {
    row_compute[c.q_block.value] += set.FlopsFwd(c) + set.FlopsBwd(c);
  }
  std::vector<Unit> units;
  const auto add = [&](std::vector<int32_t> blocks) {
    Unit u{.blocks = std::move(blocks)};
    for (int32_t b : u.blocks) {
      u.compute += row_compute[b];
      u.bytes += set.data_blocks[b].bytes.Total();
    }
    units.push_back(std::move(u));
  };
  for (size_t s = 0; s < batch.seqlens().size(); ++s) {
    const int32_t first = set.sequence_first_block[s], last = set.sequence_first_block[s + 1];
    if (batch.mask_specs()[s].family == MaskFamily::kCausal) {
      for (int32_t i = first, j = last - 1; i <= j; ++i, --j) {
        add(i < j ? std::vector<int32_t>{i, j} : std::vector<int32_t>{i});
      }
    } else {
      for (int32_t b = first; b < last; ++b) add({b});
    }
  }
  return units;
}

// Longest first onto the least-loaded device (compute, then bytes, then id).
std::vector<DeviceId> PlaceUnits(const std::vector<Unit>& units, size_t n_blocks, int32_t devices) {
  std::vector<size_t> order(units.size());
  for (size_t u = 0; u < order.size(); ++u) order[u] = u;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(units[b].compute, units[b].bytes) < std::tie(units[a].compute, units[a].bytes);
  });
  using Load = std::tuple<int64_t, int64_t, int32_t>;  // compute, bytes, device
  std::priority_queue<Load, std::vector<Load>, std::greater<>> least;
  for (int32_t d = 0; d < devices; ++d) least.emplace(0, 0, d);
  std::vector<DeviceId> device_of(n_blocks);
  for (size_t u : order) {
    auto [compute, bytes, d] = least.top();
    least.pop();
    for (int32_t b : units[u].blocks) device_of[b] = DeviceId{d};
    least.emplace(compute + units[u].compute, bytes + units[u].bytes, d);
  }
  return device_of;
}

}  // namespace

Result<BaselinePlan> PlanFcp(const Batch& batch, const BaselineOptions& options) {
  const int32_t p = options.topology.devices();
  BaselinePlan out;
  // Its tiles as they are made, beside its data blocks and one division per device; the rounds
  // and transfers are counted before the compile (CompileBaseline).
  PlanSize size{.devices = p, .divisions = 1};
  for (int64_t length : batch.seqlens()) {
    size.data_blocks += (length + options.fcp_block_tokens - 1) / options.fcp_block_tokens;
  }
  DCP_RETURN_IF_ERROR(CheckPlanSize(Strategy::kFcp, size, options));
  // (Its options are validated, so MakeBlocks fails only past the tiles allowed.)
  Result<BlockSet> blocks = MakeBlocks(
      batch,
      BlockingOptions{.block_size = options.fcp_block_tokens,
                      .head_groups = 1,
                      .max_compute_blocks = std::max<int64_t>(1, TilesWithin(size, options))});
  if (!blocks.ok()) return TilesDoNotFit(Strategy::kFcp, size, options);
  out.blocks = std::move(*blocks);
  BlockSet& set = out.blocks;
  // Slots hold the longest block, not a nominal size no sequence reaches.
  int64_t longest = 0;
  for (const DataBlock& d : set.data_blocks) longest = std::max(longest, d.tokens);
  set.block_size = longest;

  out.placement.data_device = PlaceUnits(MakeUnits(batch, set), set.data_blocks.size(), p);
  const std::vector<DeviceId>& owner = out.placement.data_device;
  for (const ComputeBlock& c : set.compute_blocks) {
    out.placement.compute_device.push_back(owner[c.q_block.value]);
  }

  // What each device needs from each other, and the rounds of those device pairs.
  std::vector<std::pair<int32_t, int32_t>> needs;  // (kv block, destination device)
  std::vector<DeviceEdge> edges;
  for (const ComputeBlock& c : set.compute_blocks) {
    const int32_t from = owner[c.kv_block.value].value, to = owner[c.q_block.value].value;
    if (from == to) continue;
    needs.emplace_back(c.kv_block.value, to);
    edges.emplace_back(from, to);
  }
  std::sort(needs.begin(), needs.end());
  needs.erase(std::unique(needs.begin(), needs.end()), needs.end());
  const std::vector<std::vector<DeviceEdge>> rounds = CongestionFreeRounds(p, std::move(edges));
  // Per device pair that exchanges anything, its round + 1, sorted: a table over all pairs was
  // 1 GB on 2048x8 however few of them exchange.
  std::vector<std::pair<DeviceEdge, int32_t>> division_of;
  for (size_t r = 0; r < rounds.size(); ++r) {
    for (const DeviceEdge& edge : rounds[r]) {
      division_of.emplace_back(edge, static_cast<int32_t>(r) + 1);
    }
  }
  std::sort(division_of.begin(), division_of.end());
  const auto division = [&](int32_t from, int32_t to) {
    if (from == to) return 0;
    const DeviceEdge edge{from, to};
    const auto it = std::lower_bound(division_of.begin(), division_of.end(), std::pair{edge, 0});
    DCP_CHECK(it != division_of.end() && it->first == edge, "every exchanging pair has a round");
    return it->second;
  };

  Schedule& schedule = out.schedule;
  schedule.n_divisions = static_cast<int32_t>(rounds.size()) + 1;
  for (const ComputeBlock& c : set.compute_blocks) {
    schedule.compute_division.push_back(
        division(owner[c.kv_block.value].value, owner[c.q_block.value].value));
  }
  for (const auto& [block, to] : needs) {
    const DeviceId from = owner[block];
    schedule.transfers.push_back(Transfer{.block = DataBlockId{block},
                                          .side = Side::kColumn,
                                          .source = from,
                                          .destination = DeviceId{to},
                                          .division = division(from.value, to)});
  }
  std::stable_sort(schedule.transfers.begin(), schedule.transfers.end(),
                   [](const Transfer& a, const Transfer& b) {
                     return std::tie(a.division, a.phase, a.source, a.destination) <
                            std::tie(b.division, b.phase, b.source, b.destination);
                   });
  return out;
}

}  // namespace dcp::internal
