// SPDX-License-Identifier: Apache-2.0
#include "cli/batch_args.h"

#include <charconv>
#include <fstream>
#include <limits>
#include <sstream>

namespace dcp::cli {

void AddBatchOptions(CLI::App& app, BatchArgs& args) {
  auto* list = app.add_option("--seqlens", args.seqlens, "Comma-separated sequence lengths");
  auto* file = app.add_option("--seqlens-file", args.seqlens_file,
                              "Text file with one sequence length per line ('#' comments)");
  auto* idx = app.add_option("--idx", args.idx, "Megatron-LM indexed dataset .idx file");
  list->excludes(file, idx);
  file->excludes(idx);
  app.add_option("--dataset", args.dataset,
                 "Synthetic length distribution when no lengths are given: ldc | longalign")
      ->capture_default_str();
  app.add_option("--scale", args.scale, "Length scale of the synthetic distribution")
      ->capture_default_str();
  app.add_option("--tokens", args.tokens, "Token budget of the synthetic batch")
      ->capture_default_str();
  app.add_option("--seed", args.seed, "Seed of the synthetic batch (and of placement)")
      ->capture_default_str();
  app.add_option("--mask", args.mask,
                 "Mask spec for every sequence (docs/mask_spec.md), or @FILE with a JSON mask")
      ->capture_default_str();
  app.add_option("--heads", args.heads, "Query heads")->capture_default_str();
  app.add_option("--kv-heads", args.kv_heads, "Key/value heads (GQA)")->capture_default_str();
  app.add_option("--head-dim", args.head_dim, "Head dimension")->capture_default_str();
  app.add_option("--dtype", args.dtype, "Storage dtype: fp32 | bf16")->capture_default_str();
  app.add_option("--block-size", args.block_size,
                 "Tokens per block, or 'auto' (plan, run, simulate: tuned among 1024, 2048, "
                 "4096; blocks, place: the largest power of two spreading the batch over the "
                 "devices)")
      ->capture_default_str();
  app.add_option("--head-groups", args.head_groups,
                 "Head groups per tile, dividing --kv-heads (default 1; plan, run, simulate also "
                 "try the best candidate with 2)");
  app.add_option("--devices", args.devices,
                 fmt::format("Device count: with --topology, must be its device count; without, "
                             "the topology is 1xN (blocks: the devices --block-size auto spreads "
                             "over, default {})",
                             kDefaultBlockDevices));
  app.add_option("--eps-memory", args.eps_memory, "Memory tolerance, for --block-size auto")
      ->capture_default_str();
}

void AddPlacementOptions(CLI::App& app, PlacementArgs& args) {
  app.add_option("--topology", args.topology,
                 fmt::format("NODESxDEVICES, e.g. 4x8 (default: 1xN with --devices N, else {})",
                             args.default_topology));
  app.add_option("--partitioner", args.partitioner, "builtin | zoltan")->capture_default_str();
  app.add_option("--eps-compute", args.eps_compute,
                 "Compute tolerance per device: at most (1 + this) x its node's mean FLOPs, so "
                 "(1 + eps-inter)(1 + eps-compute) x the mean over all devices (default: tuned; "
                 "0.1 for place)");
  app.add_option("--eps-inter", args.eps_inter,
                 "Compute tolerance per node: at most (1 + this) x the mean node's FLOPs "
                 "(default: tuned; 0.4 for place)");
}

Result<Topology> BuildTopology(const BatchArgs& batch, const PlacementArgs& args) {
  if (!args.topology && !batch.devices) return Topology::Parse(args.default_topology);
  if (!args.topology) {
    // Topology::Validate bounds the count; a value beyond int32 is out of its range anyway.
    const bool fits = *batch.devices >= 1 && *batch.devices <= std::numeric_limits<int32_t>::max();
    const Topology one_node{.nodes = 1,
                            .devices_per_node = fits ? static_cast<int32_t>(*batch.devices) : 0};
    if (Status s = one_node.Validate(); !s.ok()) {
      return Status::InvalidArgument(fmt::format("--devices {} cannot be one node's devices: {}",
                                                 *batch.devices, s.message()));
    }
    return one_node;
  }
  Result<Topology> topology = Topology::Parse(*args.topology);
  if (!topology.ok()) return topology.status().WithContext("--topology");
  if (batch.devices && *batch.devices != topology->devices()) {
    return Status::InvalidArgument(
        fmt::format("--devices {} does not match --topology {} ({} devices)", *batch.devices,
                    *args.topology, topology->devices()));
  }
  return topology;
}

Result<PartitionOptions> BuildPartitionOptions(const BatchArgs& batch, const PlacementArgs& args) {
  DCP_ASSIGN_OR_RETURN(PartitionerKind kind, ParsePartitionerKind(args.partitioner));
  const PartitionOptions defaults;
  PartitionOptions options{.partitioner = kind,
                           .eps_compute = args.eps_compute.value_or(defaults.eps_compute),
                           .eps_inter = args.eps_inter.value_or(defaults.eps_inter),
                           .eps_memory = batch.eps_memory,
                           .seed = batch.seed};
  DCP_RETURN_IF_ERROR(options.Validate());
  return options;
}

namespace {

// `empty_sequences`: set to the empty sequences an --idx file held (left out), else 0.
Result<std::vector<int64_t>> BuildLengths(const BatchArgs& args, int64_t* empty_sequences) {
  *empty_sequences = 0;
  if (args.seqlens) return ParseLengthList(*args.seqlens);
  if (args.seqlens_file) return ReadLengthsFile(*args.seqlens_file);
  if (args.idx) {
    DCP_ASSIGN_OR_RETURN(MegatronIndexLengths index, ReadMegatronIndex(*args.idx));
    *empty_sequences = index.empty_sequences;
    return std::move(index.lengths);
  }
  DCP_ASSIGN_OR_RETURN(LengthDistribution distribution, ParseLengthDistribution(args.dataset));
  return SyntheticBatch(
      SyntheticOptions{.distribution = distribution, .scale = args.scale, .seed = args.seed},
      args.tokens);
}

Result<MaskSpec> BuildMaskSpec(const std::string& text) {
  if (text.empty() || text.front() != '@') return MaskSpec::Parse(text);
  const std::string path = text.substr(1);
  DCP_ASSIGN_OR_RETURN(std::string contents, internal::ReadWholeFile(path));
  Result<MaskSpec> spec = MaskSpec::Parse(contents);
  if (!spec.ok()) return spec.status().WithContext(fmt::format("mask file '{}'", path));
  return spec;
}

}  // namespace

Status WriteTextFile(const std::string& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) return Status::NotFound(fmt::format("cannot write '{}'", path));
  return Status::Ok();
}

Result<Batch> BuildBatch(const BatchArgs& args, int64_t* empty_sequences) {
  int64_t skipped = 0;
  DCP_ASSIGN_OR_RETURN(std::vector<int64_t> lengths, BuildLengths(args, &skipped));
  if (empty_sequences != nullptr) *empty_sequences = skipped;
  DCP_ASSIGN_OR_RETURN(MaskSpec mask, BuildMaskSpec(args.mask));
  DCP_ASSIGN_OR_RETURN(DType dtype, ParseDType(args.dtype));
  const AttentionShape shape{
      .heads = args.heads, .kv_heads = args.kv_heads, .head_dim = args.head_dim, .dtype = dtype};
  return Batch::Create(std::move(lengths), {std::move(mask)}, shape);
}

Result<BlockingOptions> BuildBlockingOptions(const BatchArgs& args, const Batch& batch,
                                             int64_t devices) {
  BlockingOptions options{.head_groups = args.head_groups.value_or(1)};
  // Checked with a pinned block size too: a bad --devices or --eps-memory is an error whether or
  // not this command goes on to use it.
  const BlockSizeOptions spread{.devices = devices, .eps_memory = args.eps_memory};
  DCP_RETURN_IF_ERROR(spread.Validate());
  if (args.block_size == "auto") {
    DCP_ASSIGN_OR_RETURN(BlockSizeChoice choice, ChooseBlockSize(batch.seqlens(), spread));
    options.block_size = choice.block_size;
    return options;
  }
  const std::string& text = args.block_size;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), options.block_size);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return Status::InvalidArgument(
        fmt::format("--block-size '{}' is neither a number nor 'auto'", text));
  }
  DCP_RETURN_IF_ERROR(options.Validate());
  return options;
}

}  // namespace dcp::cli
