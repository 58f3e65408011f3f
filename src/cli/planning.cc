// SPDX-License-Identifier: Apache-2.0
#include "cli/planning.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

namespace dcp::cli {

int32_t HardwareThreads() {
  return static_cast<int32_t>(std::clamp(std::thread::hardware_concurrency(), 1u,
                                         static_cast<unsigned>(PartitionOptions::kMaxThreads)));
}

void AddPlannerOptions(CLI::App& app, PlannerArgs& args) {
  app.add_option("--divisions", args.divisions,
                 "Divisions per pass: a number, 'auto' (the scheduler's cost model, for each "
                 "candidate) or 'search' (compile and simulate counts 2-16 on --cluster)")
      ->capture_default_str();
  app.add_option("--cluster", args.cluster,
                 "Cluster model the plan is tuned for: p4de | h100 | FILE.json "
                 "(docs/simulator.md)")
      ->capture_default_str();
  app.add_option("--threads", args.threads,
                 "Planner threads (0: one per core): the tuning's candidates at once, or, with "
                 "every value pinned, the nodes' placements and the devices' programs; the plan "
                 "does not depend on it")
      ->check(CLI::Range(0, PartitionOptions::kMaxThreads))
      ->capture_default_str();
  app.add_option("--max-candidates", args.max_candidates,
                 "At most this many of dcp's own candidates (block sizes x tolerances) are "
                 "planned and simulated: the bound on tuning work")
      ->capture_default_str();
  app.add_flag(
      "--dcp-only", args.dcp_only,
      "Leave the other strategies (ring, zigzag, TE, LoongTrain, FCP, MagiAttention) out of "
      "the candidates");
  app.add_option("--memory-budget", args.memory_budget,
                 "Bytes of buffers each device may hold at its peak (0: no budget); candidates "
                 "above it are skipped")
      ->capture_default_str();
  app.add_option("--max-planning-memory", args.max_planning_memory,
                 "Bytes planning itself may take (0: 80% of the machine's memory, or of ulimit "
                 "-v); a batch whose tiles, or a --strategy whose plan, would need more is refused "
                 "before it is made")
      ->capture_default_str();
  app.add_option("--read-partition", args.read_partition,
                 "Plan this placement instead of dcp's own: a partition file as `dcp place "
                 "--write-partition` or an hMETIS-format partitioner writes it, for the blocks of "
                 "--block-size (default 1024 with this option, as `dcp place`)");
}

Status CheckPartitionWithStrategy(const PlannerArgs& planner, Strategy strategy) {
  if (strategy == Strategy::kDcp || planner.read_partition.empty()) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "--read-partition gives the placement; --strategy {} has its own", ToString(strategy)));
}

Result<ClusterSpec> LoadCluster(const std::string& name) {
  Result<ClusterSpec> preset = ClusterPreset(name);
  if (preset.ok()) return preset;
  if (!std::filesystem::exists(name)) {
    return Status::NotFound(fmt::format(
        "--cluster '{}' is neither a preset (p4de, h100) nor a readable JSON file", name));
  }
  DCP_ASSIGN_OR_RETURN(std::string text, internal::ReadWholeFile(name));
  Result<ClusterSpec> spec = ParseClusterJson(text);
  if (!spec.ok()) return spec.status().WithContext(fmt::format("cluster file '{}'", name));
  return spec;
}

namespace {

Status ParseDivisions(const std::string& text, PlanOptions* options) {
  if (text == "search") {
    options->division_choice = DivisionChoice::kSimulate;
    return Status::Ok();
  }
  if (text == "auto") return Status::Ok();
  const auto [end, ec] =
      std::from_chars(text.data(), text.data() + text.size(), options->divisions);
  if (ec != std::errc() || end != text.data() + text.size() || options->divisions < 1) {
    return Status::InvalidArgument(
        fmt::format("--divisions '{}' is not a number >= 1, 'auto' or 'search'", text));
  }
  return Status::Ok();
}

// The placement in partition file `path`, for the blocks `options` cut the batch into.
Result<Placement> ReadPlacement(const std::string& path, const Batch& batch,
                                const PlanOptions& options) {
  DCP_ASSIGN_OR_RETURN(std::string text, internal::ReadWholeFile(path));
  DCP_ASSIGN_OR_RETURN(const BlockSet blocks,
                       MakeBlocks(batch, BlockingOptions{.block_size = options.block_size,
                                                         .head_groups = options.head_groups}));
  Result<Placement> read = ReadPartition(text, BuildHypergraph(blocks), options.topology);
  if (!read.ok()) {
    return read.status().WithContext(fmt::format(
        "--read-partition {} (blocks of {} tokens: {} compute + {} data vertices)", path,
        options.block_size, blocks.compute_blocks.size(), blocks.data_blocks.size()));
  }
  return read;
}

}  // namespace

Result<PlanOptions> PlanOptionsFromArgs(const BatchArgs& batch_args, const PlacementArgs& placement,
                                        const PlannerArgs& planner) {
  PlanOptions options;
  DCP_ASSIGN_OR_RETURN(options.cluster, LoadCluster(planner.cluster));
  DCP_ASSIGN_OR_RETURN(options.topology, BuildTopology(batch_args, placement));
  if (batch_args.head_groups) {
    options.head_groups = *batch_args.head_groups;
    options.tuning.head_groups.clear();
  }
  if (batch_args.block_size != "auto") {
    const std::string& text = batch_args.block_size;
    const auto [end, ec] =
        std::from_chars(text.data(), text.data() + text.size(), options.block_size);
    if (ec != std::errc() || end != text.data() + text.size() || options.block_size < 1) {
      return Status::InvalidArgument(
          fmt::format("--block-size '{}' is neither a number >= 1 nor 'auto'", text));
    }
  }
  if (!planner.read_partition.empty()) {
    if (placement.eps_compute || placement.eps_inter) {
      return Status::InvalidArgument(
          "--read-partition gives the placement: --eps-compute and --eps-inter have nothing to "
          "bound");
    }
    if (options.block_size == 0) options.block_size = kPlaceBlockSize;
  }
  DCP_ASSIGN_OR_RETURN(options.partition, BuildPartitionOptions(batch_args, placement));
  if (placement.eps_compute || placement.eps_inter) options.tuning.tolerances.clear();
  DCP_RETURN_IF_ERROR(ParseDivisions(planner.divisions, &options));
  options.threads = planner.threads == 0 ? HardwareThreads() : planner.threads;
  options.tuning.max_candidates = planner.max_candidates;
  options.tuning.other_strategies = !planner.dcp_only;
  options.memory_budget_bytes = planner.memory_budget;
  options.max_planning_bytes = planner.max_planning_memory;
  DCP_RETURN_IF_ERROR(options.Validate());
  return options;
}

namespace {

// The planner's progress as one line on a terminal's stderr, rewritten in place at most every
// 0.2 s and only once planning has taken a second; the line is cleared at the end.
class ProgressLine {
 public:
  explicit ProgressLine(bool enabled)
      : monitor_([this](std::string_view phase, int64_t done, int64_t total) {
          Show(phase, done, total);
        }),
        enabled_(enabled && ::isatty(STDERR_FILENO) != 0) {}
  ~ProgressLine() {
    if (shown_) std::fprintf(stderr, "\r%*s\r", static_cast<int>(width_), "");
  }
  const PlanningMonitor* monitor() const { return enabled_ ? &monitor_ : nullptr; }

 private:
  void Show(std::string_view phase, int64_t done, int64_t total) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (seconds < 1 || seconds - last_ < 0.2) return;
    last_ = seconds;
    const std::string line =
        total > 1 ? fmt::format("dcp: planning: {} {}/{} ({:.1f} s)", phase, done, total, seconds)
                  : fmt::format("dcp: planning: {} ({:.1f} s)", phase, seconds);
    width_ = std::max(width_, line.size());
    std::fprintf(stderr, "\r%-*s", static_cast<int>(width_), line.c_str());
    std::fflush(stderr);
    shown_ = true;
  }

  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  PlanningMonitor monitor_;
  bool enabled_;
  bool shown_ = false;
  double last_ = 0;
  size_t width_ = 0;
};

}  // namespace

Result<PlannedFromArgs> PlanFromArgs(const BatchArgs& batch_args, const PlacementArgs& placement,
                                     const PlannerArgs& planner, bool progress) {
  int64_t empty_sequences = 0;
  DCP_ASSIGN_OR_RETURN(Batch batch, BuildBatch(batch_args, &empty_sequences));
  DCP_ASSIGN_OR_RETURN(PlanOptions options, PlanOptionsFromArgs(batch_args, placement, planner));
  if (!planner.read_partition.empty()) {
    DCP_ASSIGN_OR_RETURN(options.placement, ReadPlacement(planner.read_partition, batch, options));
  }
  const ProgressLine line(progress);
  options.monitor = line.monitor();
  DCP_ASSIGN_OR_RETURN(PlannedBatch planned, PlanBatch(batch, options));
  return PlannedFromArgs{
      .batch = std::move(batch), .planned = std::move(planned), .empty_sequences = empty_sequences};
}

nlohmann::json CandidatesJson(const PlannedBatch& planned) {
  nlohmann::json out = nlohmann::json::array();
  for (const CandidateOutcome& c : planned.candidates) {
    out.push_back({{"name", c.name},
                   {"own", c.own},
                   {"simulated_ms", c.simulated_s * 1e3},
                   {"peak_bytes", c.peak_bytes},
                   {"peak_imbalance", c.peak_imbalance},
                   {"peak_share", c.peak_share},
                   {"error", c.error},
                   {"skipped", c.skipped}});
  }
  return out;
}

nlohmann::json TokenMapJson(const TokenMap& map) {
  nlohmann::json devices = nlohmann::json::array();
  for (const std::vector<TokenRun>& runs : map.runs) {
    nlohmann::json device = nlohmann::json::array();
    for (const TokenRun& run : runs) {
      device.push_back(
          {{"sequence", run.sequence.value}, {"begin", run.begin}, {"count", run.count}});
    }
    devices.push_back(std::move(device));
  }
  return devices;
}

}  // namespace dcp::cli
