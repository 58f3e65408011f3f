// SPDX-License-Identifier: Apache-2.0
// `dcp blocks`: cut a batch into data and compute blocks and report their sizes and FLOPs.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "cli/batch_args.h"
#include "cli/commands.h"

namespace dcp::cli {
namespace {

struct SequenceSummary {
  int64_t data_blocks = 0;
  int64_t compute_blocks = 0;
  int64_t flops_fwd = 0;
  int64_t flops_bwd = 0;
};

std::vector<SequenceSummary> Summarize(const BlockSet& set, size_t n_sequences) {
  std::vector<SequenceSummary> rows(n_sequences);
  for (const DataBlock& d : set.data_blocks) rows[d.sequence.value].data_blocks++;
  for (const ComputeBlock& c : set.compute_blocks) {
    SequenceSummary& r = rows[c.sequence.value];
    r.compute_blocks++;
    r.flops_fwd += set.FlopsFwd(c);
    r.flops_bwd += set.FlopsBwd(c);
  }
  return rows;
}

nlohmann::json ToJson(const Batch& batch, const BlockSet& set, int64_t empty_sequences) {
  const std::vector<SequenceSummary> rows = Summarize(set, batch.seqlens().size());
  nlohmann::json sequences = nlohmann::json::array();
  for (size_t s = 0; s < rows.size(); ++s) {
    const int64_t area = batch.masks()[s].TotalArea();
    sequences.push_back(
        {{"length", batch.seqlens()[s]},
         {"mask", batch.mask_specs()[s].ToString()},
         {"n_data_blocks", rows[s].data_blocks},
         {"n_compute_blocks", rows[s].compute_blocks},
         {"flops_fwd", rows[s].flops_fwd},
         {"flops_bwd", rows[s].flops_bwd},
         {"mask_area", area},
         {"density_vs_causal",
          static_cast<double>(area) / static_cast<double>(CausalArea(batch.seqlens()[s]))}});
  }
  int64_t data_bytes = 0;
  for (const DataBlock& d : set.data_blocks) data_bytes += d.bytes.Total();
  return {{"block_size", set.block_size},
          {"head_groups", set.head_groups},
          {"n_sequences", batch.seqlens().size()},
          {"empty_sequences_skipped", empty_sequences},
          {"total_tokens", batch.total_tokens()},
          {"n_data_blocks", set.data_blocks.size()},
          {"n_compute_blocks", set.compute_blocks.size()},
          {"flops_fwd", set.flops_fwd},
          {"flops_bwd", set.flops_bwd},
          {"mask_area", set.mask_area},
          {"density_vs_causal", set.DensityVsCausal()},
          {"data_bytes", data_bytes},
          {"shape",
           {{"heads", batch.shape().heads},
            {"kv_heads", batch.shape().kv_heads},
            {"head_dim", batch.shape().head_dim},
            {"dtype", ToString(batch.shape().dtype)}}},
          {"sequences", sequences}};
}

void PrintTable(const Batch& batch, const BlockSet& set, int64_t empty_sequences) {
  const std::vector<SequenceSummary> rows = Summarize(set, batch.seqlens().size());
  fmt::print("{:>5} {:>9} {:>8} {:>10} {:>12} {:>12} {:>8}  {}\n", "seq", "tokens", "data",
             "compute", "fwd GFLOP", "bwd GFLOP", "density", "mask");
  for (size_t s = 0; s < rows.size(); ++s) {
    const double density = static_cast<double>(batch.masks()[s].TotalArea()) /
                           static_cast<double>(CausalArea(batch.seqlens()[s]));
    fmt::print(
        "{:>5} {:>9} {:>8} {:>10} {:>12.3f} {:>12.3f} {:>8.4f}  {}\n", s, batch.seqlens()[s],
        rows[s].data_blocks, rows[s].compute_blocks, static_cast<double>(rows[s].flops_fwd) * 1e-9,
        static_cast<double>(rows[s].flops_bwd) * 1e-9, density, batch.mask_specs()[s].ToString());
  }
  fmt::print("{:>5} {:>9} {:>8} {:>10} {:>12.3f} {:>12.3f} {:>8.4f}\n", "total",
             batch.total_tokens(), set.data_blocks.size(), set.compute_blocks.size(),
             static_cast<double>(set.flops_fwd) * 1e-9, static_cast<double>(set.flops_bwd) * 1e-9,
             set.DensityVsCausal());
  fmt::print("block size {}, {} head group(s), {} query / {} KV heads, head dim {}, {}\n",
             set.block_size, set.head_groups, batch.shape().heads, batch.shape().kv_heads,
             batch.shape().head_dim, ToString(batch.shape().dtype));
  if (empty_sequences > 0) {
    fmt::print("{} empty sequence(s) of the index skipped\n", empty_sequences);
  }
}

}  // namespace

CommandRunner AddBlocksCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "blocks", "Cut a batch into data blocks and compute blocks; report sizes and FLOPs");
  auto args = std::make_shared<BatchArgs>();
  auto json = std::make_shared<bool>(false);
  args->block_size = std::to_string(kPlaceBlockSize);  // blocks only: no tuning here
  AddBatchOptions(*cmd, *args);
  cmd->add_flag("--json", *json, "Print one JSON object instead of a table");
  return [cmd, args, json]() -> int {
    if (!cmd->parsed()) return 0;
    int64_t empty_sequences = 0;
    Result<Batch> batch = BuildBatch(*args, &empty_sequences);
    if (!batch.ok()) return ReportError(batch.status());
    Result<BlockingOptions> options =
        BuildBlockingOptions(*args, *batch, args->devices.value_or(kDefaultBlockDevices));
    if (!options.ok()) return ReportError(options.status());
    Result<BlockSet> set = MakeBlocks(*batch, *options);
    if (!set.ok()) return ReportError(set.status());
    if (*json) {
      fmt::print("{}\n", ToJson(*batch, *set, empty_sequences).dump(2));
    } else {
      PrintTable(*batch, *set, empty_sequences);
    }
    return 0;
  };
}

}  // namespace dcp::cli
