// SPDX-License-Identifier: Apache-2.0
// The batch options shared by every `dcp` subcommand that plans a batch, and how they become a
// Batch and a BlockSet.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "dcp/batch.h"
#include "dcp/blocks.h"
#include "dcp/partition.h"
#include "util/file.h"

namespace dcp::cli {

// The block size of `dcp blocks` and `dcp place` (no tuning there), and so of the partition files
// `place --write-partition` writes.
inline constexpr int64_t kPlaceBlockSize = 1024;

struct BatchArgs {
  // At most one of the three length sources; given (even empty) means used.
  std::optional<std::string> seqlens;       // --seqlens 4096,1000,...
  std::optional<std::string> seqlens_file;  // --seqlens-file F
  std::optional<std::string> idx;           // --idx F.idx
  std::string dataset = "ldc";  // --dataset ldc|longalign (used when no other source is given)
  double scale = 1.0;
  int64_t tokens = 131072;
  uint64_t seed = 0;
  std::string mask = "causal";
  int64_t heads = 8;
  int64_t kv_heads = 2;
  int64_t head_dim = 128;
  std::string dtype = "bf16";
  std::string block_size = "auto";  // N, or "auto" (tuned; `dcp blocks`/`place`: a heuristic)
  // --head-groups N: pinned when given; otherwise 1, and plan/run/simulate also try the best
  // candidate with the KV heads in 2 groups (PlanOptions::tuning.head_groups).
  std::optional<int64_t> head_groups;
  // --devices N: the device count. With --topology it must be the topology's; without, the
  // topology is 1xN. `dcp blocks`, which has no topology, spreads --block-size auto over N.
  std::optional<int64_t> devices;
  double eps_memory = 0.2;  // for --block-size auto
};

// The devices `dcp blocks --block-size auto` spreads a batch over when --devices is absent.
inline constexpr int64_t kDefaultBlockDevices = 32;

void AddBatchOptions(CLI::App& app, BatchArgs& args);

// The batch the options describe: lengths from exactly one source, the mask, the shape. An --idx
// file's empty sequences are left out; `empty_sequences`, when given, receives their count (0 for
// the other sources) for the commands that summarise the lengths.
Result<Batch> BuildBatch(const BatchArgs& args, int64_t* empty_sequences = nullptr);

// Replaces the file's contents (bytes as given); NotFound names the path when it cannot be written.
Status WriteTextFile(const std::string& path, std::string_view text);

// The placement options shared by `dcp place`, `plan`, `run` and `simulate`.
struct PlacementArgs {
  std::optional<std::string> topology;   // --topology NODESxDEVICES
  std::string default_topology = "4x8";  // without --topology and --devices; set per command
  std::string partitioner = "builtin";
  // Given: pinned; absent: PartitionOptions' defaults (`dcp place`) or tuned (plan, run, simulate).
  std::optional<double> eps_compute;
  std::optional<double> eps_inter;
};

// REQUIRES: args.default_topology is set (it appears in the help).
void AddPlacementOptions(CLI::App& app, PlacementArgs& args);

// The topology the options name: --topology; else one node of --devices devices; else the
// command's default. InvalidArgument when --devices and --topology disagree or either is invalid.
Result<Topology> BuildTopology(const BatchArgs& batch, const PlacementArgs& args);

// Partition options from both groups: --eps-memory and --seed come from the batch options.
Result<PartitionOptions> BuildPartitionOptions(const BatchArgs& batch, const PlacementArgs& args);

// Blocking options from the arguments; resolves --block-size auto with the block-size heuristic,
// which spreads the batch over `devices`.
Result<BlockingOptions> BuildBlockingOptions(const BatchArgs& args, const Batch& batch,
                                             int64_t devices);

}  // namespace dcp::cli
