// SPDX-License-Identifier: Apache-2.0
// `dcp bench`: the DCP paper's attention micro-benchmark on the simulator. For every dataset,
// length scale and mask, several seeded batches are planned by dcp with its default options (the
// planner's own tuning: what a user gets) and by every static baseline, simulated on the
// cluster, and compared: predicted forward + backward time, bytes moved between nodes, compute
// imbalance, planning time, and dcp's speedup over the best baseline. dcp's row also shows the
// candidate the tuning chose and the fastest of dcp's own placements among its candidates.
// Writes bench.md, bench.csv and bench.svg into --output and prints the table.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>

#include "cli/batch_args.h"
#include "cli/commands.h"
#include "cli/planning.h"
#include "dcp/baselines.h"
#include "dcp/planner.h"
#include "dcp/sim.h"

namespace dcp::cli {
namespace {

constexpr Strategy kStrategies[] = {Strategy::kDcp,        Strategy::kRing, Strategy::kZigzag,
                                    Strategy::kUlysses,    Strategy::kTe,   Strategy::kLoongTrain,
                                    Strategy::kFcp,        Strategy::kMagi};

struct BenchArgs {
  bool quick = false;
  std::string cluster = "p4de";
  std::string topology = "4x8";
  std::string output = "bench-out";
  int64_t tokens = 131072;
  int32_t batches = 3;
  uint64_t first_seed = 0;  // batch b of a cell has seed first_seed + b
  std::string model;        // --model: the attention shape and an end-to-end column
};

struct Cell {
  LengthDistribution dataset;
  double scale;
  std::string mask;
};

// One strategy's result on one cell, averaged over its batches.
struct Outcome {
  bool supported = true;
  std::string reason;         // why not, when unsupported
  double total_ms = 0;        // forward + backward, mean over batches
  double fwd_ms = 0, bwd_ms = 0;
  double bytes_inter_node = 0;  // both passes, mean
  double compute_imbalance = 0;  // max / mean attention FLOPs per device, mean
  std::string choice;  // dcp: the candidate chosen per batch; others: the fastest variant's name
  double efficiency = 0;   // ideal time / time, mean (SimReport::efficiency)
  double own_ms = 0;       // dcp: the fastest of its own placements among the candidates, mean
  double planning_ms = 0;  // dcp: planning with tuning, mean
  double e2e_ms = 0;       // with --model: the step estimate (EstimateEndToEnd), mean
  // Peak buffer bytes of the largest device (PeakBufferBytesPerDevice), and max / mean over the
  // devices, means over batches.
  double peak_bytes = 0, peak_imbalance = 0;
};

struct Measured {
  SimReport report;
  PlanTraffic forward, backward;
  double e2e_s = 0;  // with a model
  double peak_bytes = 0, peak_imbalance = 0;  // the largest device's, and max / mean
};

Result<Measured> Simulate(const Plan& plan, const ClusterSpec& cluster, const ModelSpec* model) {
  DCP_ASSIGN_OR_RETURN(SimReport report, SimulatePlan(plan, cluster));
  const double e2e = model ? EstimateEndToEnd(plan, report, *model, cluster.device).total_s : 0;
  const std::vector<int64_t> peaks = PeakBufferBytesPerDevice(plan);
  return Measured{std::move(report),
                  MeasureTraffic(plan, Pass::kForward),
                  MeasureTraffic(plan, Pass::kBackward),
                  e2e,
                  static_cast<double>(*std::max_element(peaks.begin(), peaks.end())),
                  MaxOverMean(peaks)};
}

// The fastest of a strategy's variants on one batch (BaselineVariants); dcp: its default plan.
struct Best {
  Measured measured;
  std::string choice;
  bool found = false;
  double own_s = 0;        // dcp: its fastest own candidate
  double planning_ms = 0;  // dcp
};

Status Consider(Best& best, Result<Plan> plan, const ClusterSpec& cluster, const ModelSpec* model,
                std::string choice) {
  if (!plan.ok()) return plan.status();
  DCP_ASSIGN_OR_RETURN(Measured m, Simulate(*plan, cluster, model));
  if (!best.found || m.report.total_s() < best.measured.report.total_s()) {
    best = Best{std::move(m), std::move(choice), true};
  }
  return Status::Ok();
}

Result<Best> RunStrategy(Strategy strategy, const Batch& batch, const Topology& topology,
                         const ClusterSpec& cluster, const ModelSpec* model) {
  Best best;
  if (strategy == Strategy::kDcp) {
    // What `dcp plan` gives with default options: the planner tunes on the cluster.
    PlanOptions options;
    options.topology = topology;
    options.cluster = cluster;
    options.threads = HardwareThreads();
    DCP_ASSIGN_OR_RETURN(PlannedBatch planned, PlanBatch(batch, options));
    std::string origin = planned.plan.origin;
    DCP_RETURN_IF_ERROR(Consider(best, std::move(planned.plan), cluster, model, std::move(origin)));
    best.planning_ms = planned.ms.total();
    if (planned.best_own) best.own_s = planned.candidates[*planned.best_own].simulated_s;
    return best;
  }
  const std::vector<BaselineVariant> variants =
      BaselineVariants(strategy, batch.shape(), topology);
  for (const BaselineVariant& v : variants) {
    DCP_ASSIGN_OR_RETURN(BaselinePlan planned, PlanBaseline(strategy, batch, v.options));
    DCP_RETURN_IF_ERROR(Consider(best, std::move(planned.plan), cluster, model,
                                 variants.size() > 1 ? v.name : ""));
  }
  return best;
}

// Runs every strategy on the cell's batches.
Result<std::map<Strategy, Outcome>> RunCell(const Cell& cell, const BenchArgs& args,
                                            const Topology& topology, const ClusterSpec& cluster,
                                            const ModelSpec* model,
                                            const std::function<void()>& tick) {
  std::map<Strategy, Outcome> outcomes;
  for (int32_t b = 0; b < args.batches; ++b) {
    DCP_ASSIGN_OR_RETURN(
        std::vector<int64_t> lengths,
        SyntheticBatch({.distribution = cell.dataset,
                        .scale = cell.scale,
                        .seed = args.first_seed + static_cast<uint64_t>(b)},
                       args.tokens));
    DCP_ASSIGN_OR_RETURN(MaskSpec mask, MaskSpec::Parse(cell.mask));
    AttentionShape shape;
    if (model) {
      shape.heads = model->heads;
      shape.kv_heads = model->kv_heads;
      shape.head_dim = model->hidden / model->heads;
    }
    DCP_ASSIGN_OR_RETURN(Batch batch, Batch::Create(lengths, {mask}, shape));
    for (Strategy strategy : kStrategies) {
      Outcome& o = outcomes[strategy];
      Result<Best> best = RunStrategy(strategy, batch, topology, cluster, model);
      tick();
      if (!best.ok() && best.status().code() == StatusCode::kUnsupported) {
        o.supported = false;
        o.reason = best.status().message();
        continue;
      }
      if (!best.ok()) {
        return best.status().WithContext(fmt::format("{} on batch {}", ToString(strategy), b));
      }
      const Measured& m = best->measured;
      const double n = args.batches;
      o.total_ms += 1e3 * m.report.total_s() / n;
      o.fwd_ms += 1e3 * m.report.forward.makespan_s / n;
      o.bwd_ms += 1e3 * m.report.backward.makespan_s / n;
      o.bytes_inter_node +=
          static_cast<double>(m.forward.bytes_inter_node + m.backward.bytes_inter_node) / n;
      o.compute_imbalance += m.report.ComputeImbalance() / n;
      o.efficiency += m.report.efficiency() / n;
      o.own_ms += 1e3 * best->own_s / n;
      o.planning_ms += best->planning_ms / n;
      o.e2e_ms += 1e3 * m.e2e_s / n;
      o.peak_bytes += m.peak_bytes / n;
      o.peak_imbalance += m.peak_imbalance / n;
      if (!best->choice.empty()) o.choice += (o.choice.empty() ? "" : ", ") + best->choice;
    }
  }
  return outcomes;
}

struct Row {
  Cell cell;
  std::map<Strategy, Outcome> outcomes;

  // The fastest supported baseline and dcp's speedup over it.
  std::pair<Strategy, double> BestBaseline() const {
    Strategy best = Strategy::kRing;
    double best_ms = std::numeric_limits<double>::infinity();
    for (const auto& [s, o] : outcomes) {
      if (s != Strategy::kDcp && o.supported && o.total_ms < best_ms) {
        best = s;
        best_ms = o.total_ms;
      }
    }
    return {best, best_ms / outcomes.at(Strategy::kDcp).total_ms};
  }
};

std::string DatasetName(LengthDistribution d) {
  return d == LengthDistribution::kLongDataCollections ? "ldc" : "longalign";
}

std::string Markdown(const std::vector<Row>& rows) {
  std::string out =
      "| dataset | scale | mask | strategy | fwd+bwd ms | fwd ms | bwd ms | inter-node GB | "
      "compute imbalance | efficiency | peak MiB | peak max/mean | chosen | dcp's own best ms | "
      "planning ms | step ms (--model) | speedup of dcp |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Row& row : rows) {
    const auto [best, speedup] = row.BestBaseline();
    for (const auto& [s, o] : row.outcomes) {
      const std::string head = fmt::format("| {} | {} | {} | {} ", DatasetName(row.cell.dataset),
                                            row.cell.scale, row.cell.mask, ToString(s));
      if (!o.supported) {
        out += head + fmt::format("| n/a ({}) | | | | | | | | | | | | |\n", o.reason);
        continue;
      }
      const double dcp_ms = row.outcomes.at(Strategy::kDcp).total_ms;
      const bool dcp = s == Strategy::kDcp;
      out += head + fmt::format(
                        "| {:.2f} | {:.2f} | {:.2f} | {:.3f} | {:.3f} | {:.2f} | {:.1f} | {:.2f} | "
                        "{} | {} | {} | {} | {} |\n",
                        o.total_ms, o.fwd_ms, o.bwd_ms, o.bytes_inter_node / 1e9,
                        o.compute_imbalance, o.efficiency, o.peak_bytes / (1 << 20),
                        o.peak_imbalance, o.choice, dcp ? fmt::format("{:.2f}", o.own_ms) : "",
                        dcp ? fmt::format("{:.0f}", o.planning_ms) : "",
                        o.e2e_ms > 0 ? fmt::format("{:.1f}", o.e2e_ms) : "",
                        s == Strategy::kDcp
                            ? fmt::format("**{:.2f}x over {}**", speedup, ToString(best))
                            : fmt::format("{:.2f}x", o.total_ms / dcp_ms));
    }
  }
  return out;
}

std::string Csv(const std::vector<Row>& rows) {
  std::string out =
      "dataset,scale,mask,strategy,supported,total_ms,fwd_ms,bwd_ms,bytes_inter_node,"
      "compute_imbalance,efficiency,variant,own_best_ms,planning_ms,e2e_ms,dcp_speedup,"
      "peak_bytes,peak_imbalance\n";
  for (const Row& row : rows) {
    const double dcp_ms = row.outcomes.at(Strategy::kDcp).total_ms;
    for (const auto& [s, o] : row.outcomes) {
      out += fmt::format(
          "{},{},{},{},{},{:.4f},{:.4f},{:.4f},{:.0f},{:.4f},{:.4f},\"{}\",{:.4f},{:.1f},{:.2f},{:."
          "4f},{:.0f},{:.4f}\n",
          DatasetName(row.cell.dataset), row.cell.scale, row.cell.mask, ToString(s),
          o.supported ? 1 : 0, o.total_ms, o.fwd_ms, o.bwd_ms, o.bytes_inter_node,
          o.compute_imbalance, o.efficiency, o.choice, o.own_ms, o.planning_ms, o.e2e_ms,
          o.supported && o.total_ms > 0 ? o.total_ms / dcp_ms : 0.0, o.peak_bytes,
          o.peak_imbalance);
    }
  }
  return out;
}

// Bars of every strategy's time relative to dcp's (dcp = 1), one panel per dataset and mask with
// its own vertical scale (the causal panels sit near 1, the sparse ones far above), one bar group
// per length scale, as in the paper's micro-benchmark figure. The legend lists only strategies
// drawn somewhere; the caption names the setting.
std::string Svg(const std::vector<Row>& rows, const BenchArgs& args) {
  std::vector<std::pair<LengthDistribution, std::string>> panels;
  std::vector<double> scales;
  std::vector<Strategy> drawn;
  for (const Row& r : rows) {
    if (std::find(panels.begin(), panels.end(), std::pair{r.cell.dataset, r.cell.mask}) ==
        panels.end()) {
      panels.emplace_back(r.cell.dataset, r.cell.mask);
    }
    if (std::find(scales.begin(), scales.end(), r.cell.scale) == scales.end()) {
      scales.push_back(r.cell.scale);
    }
    for (const auto& [s, o] : r.outcomes) {
      if (o.supported && std::find(drawn.begin(), drawn.end(), s) == drawn.end()) {
        drawn.push_back(s);
      }
    }
  }
  std::sort(drawn.begin(), drawn.end());
  const char* colors[] = {"#d62728", "#1f77b4", "#ff7f0e", "#2ca02c",
                          "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  static_assert(std::size(colors) == std::size(kStrategies));
  const int panel_w = 300, panel_h = 200, margin = 60;
  const int n_panels = static_cast<int>(panels.size());
  const int columns = std::min(4, std::max(1, n_panels));
  const int width = columns * (panel_w + margin) + margin;
  const int rows_of_panels = (n_panels + columns - 1) / columns;
  const int height = rows_of_panels * (panel_h + 2 * margin) + 3 * margin;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n",
      width, height);
  svg += fmt::format(
      "<text x=\"{}\" y=\"18\" font-size=\"13\">Simulated attention time (forward + backward) "
      "of each strategy relative to dcp's default plan; {} tokens per batch, {} batch(es) per "
      "cell, topology {}, cluster {}</text>\n",
      margin, args.tokens, args.batches, args.topology, args.cluster);
  for (size_t k = 0; k < drawn.size(); ++k) {  // legend
    svg += fmt::format(
        "<rect x=\"{}\" y=\"30\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{}\" "
        "y=\"39\">{}</text>\n",
        margin + 110 * k, colors[static_cast<int>(drawn[k])], margin + 110 * k + 14,
        ToString(drawn[k]));
  }
  for (int p = 0; p < n_panels; ++p) {
    const int x0 = margin + (p % columns) * (panel_w + margin);
    const int y0 = 3 * margin + (p / columns) * (panel_h + 2 * margin);
    double top = 1;  // this panel's scale: its tallest bar, rounded up
    for (const Row& r : rows) {
      if (std::pair{r.cell.dataset, r.cell.mask} != panels[p]) continue;
      for (const auto& [s, o] : r.outcomes) {
        if (o.supported) top = std::max(top, o.total_ms / r.outcomes.at(Strategy::kDcp).total_ms);
      }
    }
    top = top <= 2 ? std::ceil(top * 4) / 4 : std::ceil(top);
    svg += fmt::format(
        "<text x=\"{}\" y=\"{}\" font-weight=\"bold\">{} {}</text>\n<line x1=\"{}\" "
        "y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/><line x1=\"{}\" y1=\"{}\" "
        "x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n",
        x0, y0 - 8, DatasetName(panels[p].first), panels[p].second, x0, y0 + panel_h,
        x0 + panel_w, y0 + panel_h, x0, y0, x0, y0 + panel_h);
    for (double tick : {0.0, 0.5, 1.0}) {  // y axis: 0, half the scale, the scale
      const double y = y0 + panel_h - panel_h * tick;
      svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:g}</text>\n",
                         x0 - 4, y + 4, top * tick);
    }
    const double one = y0 + panel_h - panel_h / top;
    svg += fmt::format(
        "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"gray\" "
        "stroke-dasharray=\"3\"/>\n<text x=\"{}\" y=\"{}\" transform=\"rotate(-90 {} {})\" "
        "text-anchor=\"middle\">time / dcp's time</text>\n<text x=\"{}\" y=\"{}\" "
        "text-anchor=\"middle\">length scale</text>\n",
        x0, one, x0 + panel_w, one, x0 - 36, y0 + panel_h / 2, x0 - 36, y0 + panel_h / 2,
        x0 + panel_w / 2, y0 + panel_h + 30);
    const double group_w = static_cast<double>(panel_w) / static_cast<double>(scales.size());
    const double bar_w = group_w / (static_cast<double>(drawn.size()) + 1);
    for (const Row& r : rows) {
      if (std::pair{r.cell.dataset, r.cell.mask} != panels[p]) continue;
      const auto g = std::find(scales.begin(), scales.end(), r.cell.scale) - scales.begin();
      const double gx = x0 + static_cast<double>(g) * group_w;
      svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">x{}</text>\n",
                         gx + group_w / 2, y0 + panel_h + 14, r.cell.scale);
      for (size_t k = 0; k < drawn.size(); ++k) {
        const Outcome& o = r.outcomes.at(drawn[k]);
        if (!o.supported) continue;
        const double ratio = o.total_ms / r.outcomes.at(Strategy::kDcp).total_ms;
        const double h = panel_h * ratio / top;
        svg += fmt::format(
            "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
            "fill=\"{}\"><title>{} {:.2f}x</title></rect>\n",
            gx + bar_w * (static_cast<double>(k) + 0.5), y0 + panel_h - h, bar_w * 0.9, h,
            colors[static_cast<int>(drawn[k])], ToString(drawn[k]), ratio);
      }
    }
  }
  return svg + "</svg>\n";
}

// A progress bar on a terminal, a line every tenth otherwise.
class Progress {
 public:
  explicit Progress(int64_t total) : total_(total), tty_(isatty(fileno(stderr)) != 0) {}
  void Tick() {
    ++done_;
    if (tty_) {
      const int64_t filled = 40 * done_ / total_;
      fmt::print(stderr, "\r[{:<40}] {}/{} plans", std::string(filled, '#'), done_, total_);
      if (done_ == total_) fmt::print(stderr, "\n");
    } else if (done_ * 10 / total_ != (done_ - 1) * 10 / total_) {
      fmt::print(stderr, "dcp bench: {}/{} plans\n", done_, total_);
    }
    std::fflush(stderr);
  }

 private:
  int64_t total_, done_ = 0;
  bool tty_;
};

Status RunBench(const BenchArgs& args) {
  DCP_ASSIGN_OR_RETURN(const Topology topology, Topology::Parse(args.topology));
  DCP_ASSIGN_OR_RETURN(ClusterSpec cluster, ClusterPreset(args.cluster));
  if (args.batches < 1) {
    return Status::InvalidArgument(fmt::format("--batches={} is not positive", args.batches));
  }
  std::optional<ModelSpec> model;
  if (!args.model.empty()) {
    Result<ModelSpec> parsed = ParseModelSpec(args.model);
    if (!parsed.ok()) return parsed.status().WithContext("--model");
    model = *parsed;
  }
  if (args.tokens < 1) {
    return Status::InvalidArgument(fmt::format("--tokens={} is not positive", args.tokens));
  }
  DCP_RETURN_IF_ERROR(cluster.CheckHolds(topology));
  std::vector<Cell> cells;
  const std::vector<LengthDistribution> datasets =
      args.quick ? std::vector{LengthDistribution::kLongDataCollections}
                 : std::vector{LengthDistribution::kLongDataCollections,
                               LengthDistribution::kLongAlign};
  const std::vector<double> scales =
      args.quick ? std::vector{0.5, 4.0} : std::vector{0.5, 1.0, 2.0, 4.0};
  const std::vector<std::string> masks =
      args.quick ? std::vector<std::string>{"causal", "lambda"}
                 : std::vector<std::string>{"causal", "lambda", "causal-blockwise",
                                            "shared-question"};
  for (LengthDistribution d : datasets) {
    for (const std::string& m : masks) {
      for (double s : scales) cells.push_back({d, s, m});
    }
  }
  // The output directory first: a bad -o fails now, not after the whole run.
  const std::filesystem::path dir(args.output);
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return Status::NotFound(
        fmt::format("-o: cannot create '{}': {}", dir.string(), error.message()));
  }
  Progress progress(static_cast<int64_t>(cells.size()) * args.batches *
                    static_cast<int64_t>(std::size(kStrategies)));
  std::vector<Row> rows;
  for (const Cell& cell : cells) {
    DCP_ASSIGN_OR_RETURN(auto outcomes,
                         RunCell(cell, args, topology, cluster, model ? &*model : nullptr,
                                 [&] { progress.Tick(); }));
    rows.push_back({cell, std::move(outcomes)});
  }
  const std::string table = Markdown(rows);
  DCP_RETURN_IF_ERROR(WriteTextFile((dir / "bench.md").string(), table));
  DCP_RETURN_IF_ERROR(WriteTextFile((dir / "bench.csv").string(), Csv(rows)));
  DCP_RETURN_IF_ERROR(WriteTextFile((dir / "bench.svg").string(), Svg(rows, args)));
  fmt::print("{} tokens per batch, {} batches per cell, topology {}, cluster {}\n\n{}\n",
             args.tokens, args.batches, topology.ToString(), cluster.name, table);
  fmt::print("wrote {}/bench.md, bench.csv, bench.svg\n", dir.string());
  return Status::Ok();
}

}  // namespace

CommandRunner AddBenchCommand(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "The paper's micro-benchmark: dcp against static baselines on the simulator");
  cmd->add_flag("--quick", args->quick,
                "A small version (one dataset, scales 0.5 and 4, causal and lambda, one batch, "
                "32768 tokens on 2x8)");
  cmd->add_option("--cluster", args->cluster, "Cluster preset: p4de or h100")
      ->capture_default_str();
  cmd->add_option("--topology", args->topology, "Nodes x devices per node")->capture_default_str();
  cmd->add_option("--tokens", args->tokens, "Tokens per batch")->capture_default_str();
  cmd->add_option("--batches", args->batches, "Seeded batches per cell")->capture_default_str();
  cmd->add_option("--model", args->model,
                  "Also estimate a training step of this model (llama3-8b or layers=..,hidden=..,"
                  "heads=..,kv_heads=..,ffn=..; the batches get its attention shape): column e2e")
      ->capture_default_str();
  cmd->add_option("--first-seed", args->first_seed,
                  "Seed of each cell's first batch (the next ones count up from it)")
      ->capture_default_str();
  cmd->add_option("-o,--output", args->output, "Directory for bench.md, bench.csv, bench.svg")
      ->capture_default_str();
  return [cmd, args] {
    if (!cmd->parsed()) return 0;
    BenchArgs run = *args;
    if (run.quick) {
      if (cmd->count("--tokens") == 0) run.tokens = 32768;
      if (cmd->count("--topology") == 0) run.topology = "2x8";
      if (cmd->count("--batches") == 0) run.batches = 1;
    }
    const Status status = RunBench(run);
    return status.ok() ? 0 : ReportError(status);
  };
}

}  // namespace dcp::cli
