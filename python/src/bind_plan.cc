// SPDX-License-Identifier: Apache-2.0
// dcp.plan() (the library planner, run without the GIL), dcp.Plan (a plan with its planning
// record: serialization, token map, validation, per-device parts), dcp.plan_baseline() and
// dcp.simulate().
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings.h"
#include "py_plan.h"
#include "dcp/baselines.h"
#include "dcp/planner.h"
#include "dcp/sim.h"
#include "dcp/token_map.h"

namespace py = pybind11;

namespace dcp::python {
namespace {

ClusterSpec ClusterFrom(const std::string& cluster) {
  if (!cluster.empty() && cluster.front() == '{') return ValueOrThrow(ParseClusterJson(cluster));
  return ValueOrThrow(ClusterPreset(cluster));
}

py::array_t<int64_t> ToArray(const std::vector<int64_t>& values) {
  return py::array_t<int64_t>(static_cast<py::ssize_t>(values.size()), values.data());
}

// 64-bit FNV-1a.
uint64_t Fnv1a(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char c : bytes) {
    hash ^= static_cast<uint8_t>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

std::string Encode(const Plan& plan) {
  std::string bytes;
  EncodePlan(plan, &bytes);
  return bytes;
}

PyPlan Decode(const py::buffer& data, std::optional<int32_t> expected_device) {
  const py::buffer_info info = data.request();
  if (info.ndim != 1 || info.itemsize != 1 || (info.size > 1 && info.strides[0] != 1)) {
    throw py::value_error("a plan's bytes must be a contiguous bytes-like object of bytes");
  }
  const std::string_view bytes(static_cast<const char*>(info.ptr), static_cast<size_t>(info.size));
  std::optional<DeviceId> device;
  if (expected_device) device = DeviceId{*expected_device};
  return PyPlan{.plan = ValueOrThrow(DecodePlan(bytes, device))};
}

py::dict PassDict(const PassSimReport& pass) {
  py::dict d;
  d["makespan_s"] = pass.makespan_s;
  d["busy_s"] = pass.total.busy_s;
  d["exposed_comm_s"] = pass.total.exposed_comm_s;
  d["idle_s"] = pass.total.idle_s;
  d["bytes_sent_intra_node"] = pass.total.bytes_sent_intra_node;
  d["bytes_sent_inter_node"] = pass.total.bytes_sent_inter_node;
  d["attention_flops"] = pass.total.attention_flops;
  d["flows"] = pass.flows;
  return d;
}

PyPlan PlanBatchNoGil(const Batch& batch, const std::string& topology, int64_t block_size,
                      int64_t head_groups, std::optional<std::pair<double, double>> tolerances,
                      double eps_memory, int32_t divisions, const std::string& division_choice,
                      const std::string& cluster,
                      std::optional<std::vector<int64_t>> candidate_block_sizes,
                      std::optional<std::vector<std::pair<double, double>>> candidate_tolerances,
                      bool other_strategies, int32_t max_candidates, int32_t threads,
                      int64_t memory_budget_bytes, int64_t max_planning_bytes, uint64_t seed,
                      const std::string& partitioner) {
  PlanOptions options;
  options.topology = ValueOrThrow(Topology::Parse(topology));
  options.cluster = ClusterFrom(cluster);
  options.block_size = block_size;
  if (head_groups != 0) {  // 0 (None in Python): tuned
    options.head_groups = head_groups;
    options.tuning.head_groups.clear();
  }
  options.divisions = divisions;
  options.threads = threads;
  options.memory_budget_bytes = memory_budget_bytes;
  options.max_planning_bytes = max_planning_bytes;
  options.partition.partitioner = ValueOrThrow(ParsePartitionerKind(partitioner));
  options.partition.eps_memory = eps_memory;
  options.partition.seed = seed;
  if (candidate_block_sizes) options.tuning.block_sizes = std::move(*candidate_block_sizes);
  if (candidate_tolerances) {
    options.tuning.tolerances.clear();
    for (const auto& [compute, inter] : *candidate_tolerances) {
      options.tuning.tolerances.push_back(Tolerances{.compute = compute, .inter = inter});
    }
  }
  if (tolerances) {  // pinned
    options.partition.eps_compute = tolerances->first;
    options.partition.eps_inter = tolerances->second;
    options.tuning.tolerances.clear();
  }
  options.tuning.other_strategies = other_strategies;
  options.tuning.max_candidates = max_candidates;
  if (division_choice == "cost_model") {
    options.division_choice = DivisionChoice::kCostModel;
  } else if (division_choice == "simulate") {
    options.division_choice = DivisionChoice::kSimulate;
  } else {
    throw py::value_error("division_choice '" + division_choice +
                          "' is not 'cost_model' or 'simulate'");
  }
  ThrowIfError(options.Validate());

  Result<PlannedBatch> planned = Status::Internal("not planned");
  {
    py::gil_scoped_release release;
    planned = PlanBatch(batch, options);
  }
  PlannedBatch p = ValueOrThrow(std::move(planned));
  return PyPlan{.plan = std::move(p.plan),
                .times = p.ms,
                .simulated_s = p.simulated_s,
                .candidates = std::move(p.candidates)};
}

}  // namespace

void BindPlan(py::module_& m) {
  py::class_<PyPlan>(m, "Plan", R"(A compiled plan: one forward and one backward program per device.

Made by dcp.plan(), dcp.plan_baseline() or Plan.from_bytes(). Plans compare equal when their
programs are; hash() is the same on every rank holding the same plan. Immutable.)")
      .def_static("from_bytes", &Decode, py::arg("data"), py::arg("expected_device") = py::none(),
                  "Decodes bytes of to_bytes() (docs/plan_format.md). ValueError for damaged\n"
                  "bytes, another format version, or the part of another device than\n"
                  "`expected_device`.")
      .def(
          "to_bytes", [](const PyPlan& p) { return py::bytes(Encode(p.plan)); },
          "The plan in dcp's versioned binary format.")
      .def(
          "hash",
          [](const PyPlan& p) {
            py::gil_scoped_release release;  // tens of ms on a large plan
            return Fnv1a(Encode(p.plan));
          },
          "64-bit FNV-1a hash of to_bytes(): equal on ranks that hold the same plan.")
      .def(
          "validate",
          [](const PyPlan& p) {
            Status status;
            {
              py::gil_scoped_release release;
              status = ValidatePlan(p.plan);
            }
            ThrowIfError(status);
          },
          "Executes every device's programs symbolically; raises on the first violation.")
      .def(
          "part_for",
          [](const PyPlan& p, int64_t rank) {
            const DeviceId device = p.Rank(rank);
            if (p.plan.part_device >= 0 && p.plan.part_device != device.value) {
              throw py::value_error("this plan is the part of device " +
                                    std::to_string(p.plan.part_device) + ", not of device " +
                                    std::to_string(rank));
            }
            return PyPlan{.plan = PlanPartForDevice(p.plan, device),
                          .times = p.times,
                          .simulated_s = p.simulated_s,
                          .candidates = p.candidates};
          },
          py::arg("rank"), "The part of the plan one device needs (its two programs).")
      .def_property_readonly("devices", [](const PyPlan& p) { return p.plan.topology.devices(); })
      .def_property_readonly(
          "topology",
          [](const PyPlan& p) {
            return std::make_tuple(p.plan.topology.nodes, p.plan.topology.devices_per_node);
          },
          "(nodes, devices per node).")
      .def_property_readonly(
          "part_device",
          [](const PyPlan& p) -> std::optional<int32_t> {
            if (p.plan.part_device < 0) return std::nullopt;
            return p.plan.part_device;
          },
          "The device whose part this is; None for a whole plan.")
      .def_property_readonly("n_divisions", [](const PyPlan& p) { return p.plan.n_divisions; })
      .def_property_readonly("block_size", [](const PyPlan& p) { return p.plan.block_size; })
      .def_property_readonly("head_groups", [](const PyPlan& p) { return p.plan.head_groups; })
      .def_property_readonly("seqlens", [](const PyPlan& p) { return p.plan.seqlens; })
      .def_property_readonly("shape", [](const PyPlan& p) { return p.plan.shape; })
      .def_property_readonly(
          "origin", [](const PyPlan& p) { return p.plan.origin; },
          "What made the plan: 'dcp <block size>:<eps compute>/<eps inter>:<divisions>' for "
          "dcp's placement, the strategy for a static layout ('zigzag', 'loongtrain:2').")
      .def_property_readonly(
          "simulated_s", [](const PyPlan& p) { return p.simulated_s; },
          "Simulated forward + backward seconds on the cluster when candidates were compared, "
          "else 0.")
      .def_property_readonly(
          "candidates",
          [](const PyPlan& p) {
            py::list out;
            for (const CandidateOutcome& c : p.candidates) {
              py::dict d;
              d["name"] = c.name;
              d["own"] = c.own;
              d["simulated_s"] = c.simulated_s;
              d["peak_bytes"] = c.peak_bytes;
              d["error"] = c.error;
              d["skipped"] = c.skipped;
              out.append(d);
            }
            return out;
          },
          "The tuning's candidates in order: dicts of name, own (dcp's placement or a static "
          "layout), simulated_s, peak_bytes, error, skipped (not planned: it could not have "
          "won); [] for a single pinned pass.")
      .def_property_readonly(
          "planning_ms",
          [](const PyPlan& p) {
            py::dict d;
            if (p.times) {
              d["blocking"] = p.times->blocking;
              d["placement"] = p.times->placement;
              d["scheduling"] = p.times->scheduling;
              d["compile"] = p.times->compile;
              d["search"] = p.times->search;
              d["total"] = p.times->total();
            }
            return d;
          },
          "Milliseconds per planning phase and 'total'; empty when not planned here.")
      .def(
          "peak_buffer_bytes",
          [](const PyPlan& p) {
            if (p.plan.part_device >= 0) {
              throw py::value_error("peak_buffer_bytes needs a whole plan, not a part");
            }
            return PeakBufferBytesPerDevice(p.plan);
          },
          "Per device: the larger of its forward and backward programs' buffer bytes.")
      .def(
          "token_map",
          [](PyPlan& p) {
            std::vector<std::vector<std::tuple<int32_t, int64_t, int64_t>>> out;
            for (const std::vector<TokenRun>& runs : p.Map().runs) {
              auto& device = out.emplace_back();
              for (const TokenRun& r : runs)
                device.emplace_back(r.sequence.value, r.begin, r.count);
            }
            return out;
          },
          "Per device, its tokens in its local order as runs (sequence, first token, count).")
      .def(
          "local_tokens", [](PyPlan& p, int64_t rank) { return p.Map().LocalTokens(p.Rank(rank)); },
          py::arg("rank"), "Number of tokens device `rank` owns.")
      .def(
          "local_token_indices",
          [](PyPlan& p, int64_t rank) { return ToArray(p.Map().GlobalIndices(p.Rank(rank))); },
          py::arg("rank"),
          "int64 [local tokens]: per local token of `rank`, its index in the packed batch.")
      .def(
          "position_ids",
          [](PyPlan& p, int64_t rank) { return ToArray(p.Map().PositionIds(p.Rank(rank))); },
          py::arg("rank"),
          "int64 [local tokens]: per local token of `rank`, its position in its sequence.")
      .def(
          "dump", [](const PyPlan& p) { return DumpPlan(p.plan); }, "A listing for people.")
      .def(
          "__eq__", [](const PyPlan& a, const PyPlan& b) { return a.plan == b.plan; },
          py::is_operator())
      .def("__repr__",
           [](const PyPlan& p) {
             std::string text = "Plan(topology=" + p.plan.topology.ToString() +
                                ", sequences=" + std::to_string(p.plan.seqlens.size()) +
                                ", block_size=" + std::to_string(p.plan.block_size) +
                                ", divisions=" + std::to_string(p.plan.n_divisions);
             if (p.plan.part_device >= 0)
               text += ", part_device=" + std::to_string(p.plan.part_device);
             return text + ")";
           })
      .def(py::pickle([](const PyPlan& p) { return py::bytes(Encode(p.plan)); },
                      [](const py::bytes& b) {
                        return Decode(py::reinterpret_borrow<py::buffer>(b), std::nullopt);
                      }));

  m.def("plan", &PlanBatchNoGil, py::arg("batch"), py::arg("topology"), py::arg("block_size"),
        py::arg("head_groups"), py::arg("tolerances"), py::arg("eps_memory"),
        py::arg("divisions"), py::arg("division_choice"), py::arg("cluster"),
        py::arg("candidate_block_sizes"), py::arg("candidate_tolerances"),
        py::arg("other_strategies"), py::arg("max_candidates"), py::arg("threads"),
        py::arg("memory_budget_bytes"), py::arg("max_planning_bytes"), py::arg("seed"),
        py::arg("partitioner"),
        "The library planner (dcp::PlanBatch); see dcp.plan.");

  m.def(
      "plan_baseline",
      [](const std::string& strategy, const Batch& batch, const std::string& topology,
         int32_t inner_ring) {
        const Strategy s = ValueOrThrow(ParseStrategy(strategy));
        if (s == Strategy::kDcp) throw py::value_error("plan_baseline: use dcp.plan for 'dcp'");
        const BaselineOptions options{.topology = ValueOrThrow(Topology::Parse(topology)),
                                      .inner_ring = inner_ring};
        Result<BaselinePlan> planned = Status::Internal("not planned");
        {
          py::gil_scoped_release release;
          planned = PlanBaseline(s, batch, options);
        }
        return PyPlan{.plan = ValueOrThrow(std::move(planned)).plan};
      },
      py::arg("strategy"), py::arg("batch"), py::arg("topology"), py::arg("inner_ring") = 1,
      "A static strategy's plan; see dcp.plan_baseline.");

  m.def(
      "simulate",
      [](const PyPlan& p, const std::string& cluster, bool trace) {
        const ClusterSpec spec = ClusterFrom(cluster);
        Result<SimReport> report = Status::Internal("not simulated");
        {
          py::gil_scoped_release release;
          report = SimulatePlan(p.plan, spec, SimOptions{.trace = trace});
        }
        const SimReport r = ValueOrThrow(std::move(report));
        py::dict d;
        d["cluster"] = spec.name;
        d["forward"] = PassDict(r.forward);
        d["backward"] = PassDict(r.backward);
        d["total_s"] = r.total_s();
        d["ideal_s"] = r.ideal_s;
        d["efficiency"] = r.efficiency();
        d["compute_imbalance"] = r.ComputeImbalance();
        if (trace) d["trace_json"] = r.trace_json;
        return d;
      },
      py::arg("plan"), py::arg("cluster") = "p4de", py::arg("trace") = false,
      "Replays a whole plan on a cluster model; see dcp.simulate.");
}

}  // namespace dcp::python
