// SPDX-License-Identifier: Apache-2.0
// `dcp simulate`: replay a plan (dcp's own, a baseline's, or one read from a file) on a cluster
// model and report each pass's time, exposed communication, traffic and compute balance.
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "cli/commands.h"
#include "cli/planning.h"
#include "dcp/baselines.h"
#include "dcp/sim.h"

namespace dcp::cli {
namespace {

struct SimulateArgs {
  PlacementArgs placement;
  PlannerArgs planner;  // its --cluster is also the cluster simulated
  std::string plan_file;
  std::string strategy = "dcp";
  std::string model;  // --model: adds the rest of each layer (an end-to-end estimate)
  std::string trace;
  bool json = false;
};

// What was simulated and how it was planned.
struct Simulated {
  Plan plan = {};
  SimReport report = {};
  std::optional<double> planning_ms = {};  // none for a plan read from a file
  double simulation_ms = 0;
  nlohmann::json variant_ms = {};  // a strategy of several variants: total ms of each tried
  std::optional<int64_t> padded_tokens = {};
  nlohmann::json candidates = nullptr;  // dcp: the tuning's candidates
};

Result<SimReport> Simulate(const Plan& plan, const ClusterSpec& cluster, bool trace,
                           double* simulation_ms) {
  Stopwatch watch;
  Result<SimReport> report = SimulatePlan(plan, cluster, SimOptions{.trace = trace});
  *simulation_ms = watch.Lap();
  return report;
}

Result<Simulated> FromFile(const SimulateArgs& args, const ClusterSpec& cluster) {
  DCP_ASSIGN_OR_RETURN(std::string bytes, internal::ReadWholeFile(args.plan_file));
  Result<Plan> plan = DecodePlan(bytes);
  if (!plan.ok())
    return plan.status().WithContext(fmt::format("reading plan '{}'", args.plan_file));
  DCP_RETURN_IF_ERROR(cluster.CheckHolds(plan->topology));
  Simulated out{.plan = std::move(plan).value()};
  DCP_ASSIGN_OR_RETURN(out.report,
                       Simulate(out.plan, cluster, !args.trace.empty(), &out.simulation_ms));
  return out;
}

Result<Simulated> WithDcp(const BatchArgs& batch_args, const SimulateArgs& args,
                          const ClusterSpec& cluster) {
  DCP_ASSIGN_OR_RETURN(
      PlannedFromArgs planned,
      PlanFromArgs(batch_args, args.placement, args.planner, /*progress=*/!args.json));
  Simulated out;
  out.plan = std::move(planned.planned.plan);
  out.planning_ms = planned.planned.ms.total();
  out.candidates = CandidatesJson(planned.planned);
  DCP_ASSIGN_OR_RETURN(out.report,
                       Simulate(out.plan, cluster, !args.trace.empty(), &out.simulation_ms));
  return out;
}

Result<Simulated> WithBaseline(Strategy strategy, const BatchArgs& batch_args,
                               const SimulateArgs& args, const Topology& topology,
                               const ClusterSpec& cluster) {
  DCP_ASSIGN_OR_RETURN(Batch batch, BuildBatch(batch_args));
  // Its variants (LoongTrain's inner rings, FCP's block sizes), the fastest kept.
  const std::vector<BaselineVariant> variants =
      BaselineVariants(strategy, batch.shape(), topology);
  std::optional<Simulated> best;
  nlohmann::json tried = nlohmann::json::object();
  Status last_error;
  for (BaselineVariant variant : variants) {
    Stopwatch watch;
    variant.options.max_planning_bytes = args.planner.max_planning_memory;
    Result<BaselinePlan> baseline = PlanBaseline(strategy, batch, variant.options);
    const double planning_ms = watch.Lap();
    if (!baseline.ok()) {
      if (variants.size() == 1) return baseline.status();
      last_error = baseline.status().WithContext(variant.name);
      continue;
    }
    Simulated candidate{.plan = std::move(baseline->plan),
                        .planning_ms = planning_ms,
                        .padded_tokens = baseline->padded_tokens};
    DCP_ASSIGN_OR_RETURN(candidate.report, Simulate(candidate.plan, cluster, !args.trace.empty(),
                                                    &candidate.simulation_ms));
    if (variants.size() > 1) tried[variant.name] = candidate.report.total_s() * 1e3;
    if (!best || candidate.report.total_s() < best->report.total_s()) best = std::move(candidate);
  }
  if (!best) return last_error;
  best->variant_ms = std::move(tried);
  return std::move(*best);
}

struct PassSummary {
  double makespan_ms = 0;
  double busy_ms_max = 0, busy_ms_mean = 0;
  double exposed_ms_max = 0, exposed_ms_mean = 0;
  double idle_ms_max = 0;
  PlanTraffic traffic;
  int64_t flows = 0;
};

PassSummary Summarize(const PassSimReport& r, const Plan& plan, Pass pass) {
  PassSummary s{
      .makespan_ms = r.makespan_s * 1e3, .traffic = MeasureTraffic(plan, pass), .flows = r.flows};
  const auto n = static_cast<double>(std::max<size_t>(r.devices.size(), 1));
  for (const DeviceSimStats& d : r.devices) {
    s.busy_ms_max = std::max(s.busy_ms_max, d.busy_s * 1e3);
    s.exposed_ms_max = std::max(s.exposed_ms_max, d.exposed_comm_s * 1e3);
    s.idle_ms_max = std::max(s.idle_ms_max, d.idle_s * 1e3);
  }
  s.busy_ms_mean = r.total.busy_s * 1e3 / n;
  s.exposed_ms_mean = r.total.exposed_comm_s * 1e3 / n;
  return s;
}

nlohmann::json ToJson(const PassSummary& s) {
  return {{"makespan_ms", s.makespan_ms},
          {"busy_ms_max", s.busy_ms_max},
          {"busy_ms_mean", s.busy_ms_mean},
          {"exposed_comm_ms_max", s.exposed_ms_max},
          {"exposed_comm_ms_mean", s.exposed_ms_mean},
          {"idle_ms_max", s.idle_ms_max},
          {"bytes_inter_node", s.traffic.bytes_inter_node},
          {"bytes_intra_node", s.traffic.bytes_intra_node},
          {"max_device_bytes_inter_node", s.traffic.max_device_bytes_inter_node},
          {"flows", s.flows}};
}

// The options that describe a batch to plan; none of them may come with --plan.
Status CheckPlanFileAlone(const CLI::App& cmd, const SimulateArgs& args) {
  static const std::set<std::string> kAllowed = {"--plan", "--cluster", "--trace", "--json", "--model",
                                                 "--help"};
  for (const CLI::Option* option : cmd.get_options()) {
    if (option->count() == 0 || kAllowed.count(option->get_name()) > 0) continue;
    if (option->get_name() == "--strategy" && args.strategy == "dcp") continue;
    return Status::InvalidArgument(
        fmt::format("{} cannot be combined with --plan: the plan file is simulated as it is",
                    option->get_name()));
  }
  return Status::Ok();
}

int Run(const CLI::App& cmd, BatchArgs batch_args, const SimulateArgs& args) {
  Result<ClusterSpec> cluster = LoadCluster(args.planner.cluster);
  if (!cluster.ok()) return ReportError(cluster.status());
  std::optional<ModelSpec> model;
  if (!args.model.empty()) {
    Result<ModelSpec> parsed = ParseModelSpec(args.model);
    if (!parsed.ok()) return ReportError(parsed.status().WithContext("--model"));
    model = *parsed;
    // The batch's attention is the model's; a shape option given as well must agree with it.
    const std::pair<const char*, int64_t> shape[] = {{"--heads", model->heads},
                                                     {"--kv-heads", model->kv_heads},
                                                     {"--head-dim", model->hidden / model->heads}};
    const int64_t given[] = {batch_args.heads, batch_args.kv_heads, batch_args.head_dim};
    for (size_t i = 0; i < 3; ++i) {
      if (cmd.count(shape[i].first) > 0 && given[i] != shape[i].second) {
        return ReportError(Status::InvalidArgument(fmt::format(
            "{} {} is not the model's ({}): give the attention shape by --model alone",
            shape[i].first, given[i], shape[i].second)));
      }
    }
    batch_args.heads = model->heads;
    batch_args.kv_heads = model->kv_heads;
    batch_args.head_dim = model->hidden / model->heads;
  }
  Result<Strategy> strategy = ParseStrategy(args.strategy);
  if (!strategy.ok()) return ReportError(strategy.status().WithContext("--strategy"));

  Result<Simulated> simulated = Status::Internal("nothing simulated");
  if (!args.plan_file.empty()) {
    if (Status s = CheckPlanFileAlone(cmd, args); !s.ok()) return ReportError(s);
    simulated = FromFile(args, *cluster);
  } else {
    Result<Topology> topology = BuildTopology(batch_args, args.placement);
    if (!topology.ok()) return ReportError(topology.status());
    if (Status s = cluster->CheckHolds(*topology); !s.ok()) return ReportError(s);
    if (Status s = CheckPartitionWithStrategy(args.planner, *strategy); !s.ok()) {
      return ReportError(s);
    }
    simulated = *strategy == Strategy::kDcp
                    ? WithDcp(batch_args, args, *cluster)
                    : WithBaseline(*strategy, batch_args, args, *topology, *cluster);
  }
  if (!simulated.ok()) return ReportError(simulated.status());
  const Plan& plan = simulated->plan;
  const SimReport& report = simulated->report;
  std::optional<EndToEndEstimate> e2e;
  if (model) {
    if (plan.shape.heads != model->heads || plan.shape.kv_heads != model->kv_heads ||
        plan.shape.head_dim != model->hidden / model->heads) {
      return ReportError(Status::InvalidArgument(fmt::format(
          "--model {}: the plan's attention ({} heads, {} KV heads, head dim {}) is not the "
          "model's",
          model->name, plan.shape.heads, plan.shape.kv_heads, plan.shape.head_dim)));
    }
    e2e = EstimateEndToEnd(plan, report, *model, cluster->device);
  }

  if (!args.trace.empty()) {
    std::ofstream out(args.trace, std::ios::binary);
    out << report.trace_json;
    if (!out) return ReportError(Status::NotFound(fmt::format("cannot write '{}'", args.trace)));
  }

  const PassSummary fwd = Summarize(report.forward, plan, Pass::kForward);
  const PassSummary bwd = Summarize(report.backward, plan, Pass::kBackward);
  const double imbalance = report.ComputeImbalance();
  const std::vector<int64_t> peak = PeakBufferBytesPerDevice(plan);
  const int64_t peak_max = peak.empty() ? 0 : *std::max_element(peak.begin(), peak.end());
  const int64_t peak_min = peak.empty() ? 0 : *std::min_element(peak.begin(), peak.end());
  const double peak_imbalance = peak.empty() ? 1 : MaxOverMean(peak);
  const std::string strategy_name(ToString(*strategy));
  if (args.json) {
    nlohmann::json j = {
        {"strategy", strategy_name},
        {"origin", plan.origin},
        {"cluster", cluster->name},
        {"topology", plan.topology.ToString()},
        {"fwd_ms", fwd.makespan_ms},
        {"bwd_ms", bwd.makespan_ms},
        {"total_ms", fwd.makespan_ms + bwd.makespan_ms},
        {"ideal_ms", report.ideal_s * 1e3},
        {"efficiency", report.efficiency()},
        {"fwd_exposed_comm_ms", fwd.exposed_ms_max},
        {"bwd_exposed_comm_ms", bwd.exposed_ms_max},
        {"bytes_inter_node", fwd.traffic.bytes_inter_node + bwd.traffic.bytes_inter_node},
        {"bytes_intra_node", fwd.traffic.bytes_intra_node + bwd.traffic.bytes_intra_node},
        {"compute_imbalance", imbalance},
        {"peak_buffer_bytes", peak},
        {"peak_imbalance", peak_imbalance},
        {"planning_ms", simulated->planning_ms ? nlohmann::json(*simulated->planning_ms)
                                               : nlohmann::json(nullptr)},
        {"simulation_ms", simulated->simulation_ms},
        {"n_divisions", plan.n_divisions},
        {"fwd", ToJson(fwd)},
        {"bwd", ToJson(bwd)}};
    if (!args.plan_file.empty()) j["plan_file"] = args.plan_file;
    if (!simulated->variant_ms.empty()) j["variant_total_ms"] = simulated->variant_ms;
    if (simulated->padded_tokens) j["padded_tokens"] = *simulated->padded_tokens;
    if (!simulated->candidates.is_null()) j["candidates"] = simulated->candidates;
    if (e2e) {
      j["model"] = {{"name", model->name},
                    {"layers", model->layers},
                    {"attention_ms", e2e->attention_s * 1e3},
                    {"linear_ms", e2e->linear_s * 1e3},
                    {"total_ms", e2e->total_s * 1e3}};
    }
    if (!args.trace.empty()) j["trace"] = args.trace;
    fmt::print("{}\n", j.dump(2));
    return 0;
  }

  constexpr double kMiB = 1 << 20;
  std::string planned = simulated->planning_ms
                            ? fmt::format("planned in {:.1f} ms", *simulated->planning_ms)
                            : fmt::format("plan read from '{}'", args.plan_file);
  if (!simulated->variant_ms.empty()) {
    planned += fmt::format(", fastest of {} variants", simulated->variant_ms.size());
  }
  fmt::print("{} on {}, topology {} ({} devices, {} divisions): {}, simulated in {:.1f} ms\n",
             plan.origin.empty() ? strategy_name : plan.origin, cluster->name, plan.topology.ToString(), plan.topology.devices(),
             plan.n_divisions, planned, simulated->simulation_ms);
  fmt::print("{:<9} {:>9} {:>12} {:>25} {:>11} {:>15} {:>15}\n", "pass", "time ms", "busy ms max",
             "exposed comm ms max/mean", "idle ms max", "inter-node MiB", "intra-node MiB");
  for (const auto& [name, s] : {std::pair{"forward", &fwd}, std::pair{"backward", &bwd}}) {
    fmt::print("{:<9} {:>9.3f} {:>12.3f} {:>17.3f} / {:>5.3f} {:>11.3f} {:>15.1f} {:>15.1f}\n",
               name, s->makespan_ms, s->busy_ms_max, s->exposed_ms_max, s->exposed_ms_mean,
               s->idle_ms_max, static_cast<double>(s->traffic.bytes_inter_node) / kMiB,
               static_cast<double>(s->traffic.bytes_intra_node) / kMiB);
  }
  fmt::print("{:<9} {:>9.3f}   ideal {:.3f} ms (efficiency {:.2f}: the FLOPs on every device at "
             "the kernel's best rate, nothing exposed)\n",
             "total", fwd.makespan_ms + bwd.makespan_ms, report.ideal_s * 1e3,
             report.efficiency());
  if (e2e) {
    fmt::print("end to end ({}, {} layers): {:.1f} ms per step = attention {:.1f} + linear layers "
               "{:.1f} (the device with the most tokens)\n",
               model->name, model->layers, e2e->total_s * 1e3, e2e->attention_s * 1e3,
               e2e->linear_s * 1e3);
  }
  fmt::print("compute imbalance {:.3f} (max/mean attention FLOPs per device); peak buffers per "
             "device {:.1f}-{:.1f} MiB (max/mean {:.2f}){}\n",
             imbalance, static_cast<double>(peak_min) / kMiB, static_cast<double>(peak_max) / kMiB,
             peak_imbalance,
             args.trace.empty() ? "" : fmt::format(", trace written to '{}'", args.trace));
  return 0;
}

}  // namespace

CommandRunner AddSimulateCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "simulate", "Replay a plan (dcp's or a baseline's) on a cluster model and report its time");
  auto batch_args = std::make_shared<BatchArgs>();
  auto args = std::make_shared<SimulateArgs>();
  AddBatchOptions(*cmd, *batch_args);
  AddPlacementOptions(*cmd, args->placement);
  AddPlannerOptions(*cmd, args->planner);
  cmd->add_option("--plan", args->plan_file,
                  "Simulate this plan file (written by `dcp plan -o`) instead of planning");
  cmd->add_option("--strategy", args->strategy,
                  "dcp | ring | zigzag | ulysses | te | loongtrain | fcp | magi")
      ->capture_default_str();
  cmd->add_option("--model", args->model,
                  "Add the rest of each transformer layer: llama3-8b or "
                  "layers=L,hidden=H,heads=A,kv_heads=K,ffn=F (sets the attention shape)");
  cmd->add_option("--trace", args->trace, "Write a Chrome/Perfetto trace of both passes here");
  cmd->add_flag("--json", args->json, "Print one JSON object");
  return [cmd, batch_args, args]() -> int {
    if (!cmd->parsed()) return 0;
    return Run(*cmd, *batch_args, *args);
  };
}

}  // namespace dcp::cli
