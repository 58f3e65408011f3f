// SPDX-License-Identifier: Apache-2.0
// SimulatePlan: an event-driven replay of every device's programs (include/dcp/sim.h).
//
// Per pass, the simulator first indexes the programs: the time of every compute instruction, the
// launches of every device by id, and one flow per (launch, source, destination) with the bytes
// the sender lists, checked against what the receiver expects. Then it advances time from event
// to event: a compute stream becoming free, a flow's latency running out (it starts moving bytes),
// a flow finishing. All events at one time are handled before the flows' rates are reallocated.
#include <algorithm>
#include <limits>
#include <queue>
#include <utility>
#include <vector>

#include "dcp/sim.h"
#include "sim/flow_network.h"
#include "sim/instruction_cost.h"
#include "sim/trace.h"

namespace dcp {
namespace sim {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

std::string InstructionName(const Instruction& instruction) {
  if (const auto* call = std::get_if<BlockwiseAttention>(&instruction)) {
    return fmt::format("BlockwiseAttention {} division {}: {} tiles",
                       call->pass == Pass::kForward ? "fwd" : "bwd", call->division,
                       call->tiles.size());
  }
  if (const auto* reduction = std::get_if<BlockwiseReduction>(&instruction)) {
    return fmt::format("BlockwiseReduction {}: {} ops", ToString(reduction->kind),
                       reduction->ops.size());
  }
  if (const auto* copy = std::get_if<BlockwiseCopy>(&instruction)) {
    return fmt::format("BlockwiseCopy: {} ops", copy->ops.size());
  }
  return "";
}

// Appends (peer, bytes) of a launch's send or receive list to *out, one entry per peer, by peer;
// returns where the entries begin.
int32_t AppendBytesByPeer(const std::vector<PeerSlots>& list,
                          std::vector<std::pair<int32_t, int64_t>>* out) {
  const auto begin = static_cast<int32_t>(out->size());
  for (const PeerSlots& p : list) {
    int64_t bytes = 0;
    for (int64_t b : p.bytes) bytes += b;
    out->emplace_back(p.peer.value, bytes);
  }
  std::sort(out->begin() + begin, out->end());
  size_t kept = begin;
  for (size_t i = begin; i < out->size(); ++i) {
    if (kept > static_cast<size_t>(begin) && (*out)[kept - 1].first == (*out)[i].first) {
      (*out)[kept - 1].second += (*out)[i].second;
    } else {
      (*out)[kept++] = (*out)[i];
    }
  }
  out->resize(kept);
  return begin;
}

// A launch of one device. Its lists are ranges of the simulator's flat arrays (one allocation
// per pass, not three per launch: the tuning replays thousands of plans).
struct LaunchState {
  int32_t id = 0;
  size_t instruction = 0;
  int32_t sends = 0, recvs = 0, recvs_end = 0;  // [sends, recvs), [recvs, recvs_end) of peer_bytes_
  int32_t flows = 0, flows_end = 0;  // of launch_flows_: flows with this device at an end
  int32_t pending = 0;               // of those, not finished
  bool launched = false;
  bool waited = false;  // a CommWait of its device waits for it
};

struct FlowState {
  int32_t source = 0, destination = 0;
  int32_t launch_id = 0;
  int32_t source_launch = 0, destination_launch = 0;  // indices into each end's launches
  int64_t bytes = 0;
  bool inter_node = false;
  int32_t arrivals = 0;  // ends that have launched
  double ready_s = 0, start_s = 0;
};

struct DeviceState {
  size_t pc = 0;
  int32_t blocked_launch = -1;  // index into its launches while blocked in CommWait
  double blocked_since = 0;
  bool done = false;
  double finish_s = 0;
};

using TimedEvent = std::pair<double, int32_t>;
using EventQueue = std::priority_queue<TimedEvent, std::vector<TimedEvent>, std::greater<>>;

class PassSimulator {
 public:
  PassSimulator(const Plan& plan, Pass pass, const ClusterSpec& cluster, TraceRecorder* trace)
      : plan_(plan),
        pass_(pass),
        programs_(pass == Pass::kForward ? plan.forward : plan.backward),
        cluster_(cluster),
        trace_(trace),
        devices_(plan.topology.devices()) {}

  Status Prepare() {
    seconds_.resize(devices_);
    launch_of_.resize(devices_);
    launches_.resize(devices_);
    stats_.assign(devices_, DeviceSimStats{});
    // Per device, (launch id, launch index) sorted by id once its program is read.
    std::vector<std::vector<std::pair<int32_t, int32_t>>> by_id(devices_);
    std::vector<std::pair<size_t, int32_t>> waits;  // (instruction, id) of one device's CommWaits
    for (int32_t d = 0; d < devices_; ++d) {
      const Program& program = programs_[d];
      const size_t n = program.instructions.size();
      seconds_[d].assign(n, 0);
      launch_of_[d].assign(n, -1);
      waits.clear();
      for (size_t i = 0; i < n; ++i) {
        const Instruction& instruction = program.instructions[i];
        if (Status status = CheckInstruction(plan_, program, i); !status.ok()) {
          return status.WithContext(
              Where(d));  // formatted only on error: this runs per instruction
        }
        seconds_[d][i] = InstructionSeconds(plan_, program, instruction, cluster_.device);
        if (const auto* call = std::get_if<BlockwiseAttention>(&instruction)) {
          stats_[d].attention_flops += AttentionFlops(plan_, *call);
        } else if (const auto* launch = std::get_if<CommLaunch>(&instruction)) {
          launch_of_[d][i] = static_cast<int32_t>(launches_[d].size());
          by_id[d].emplace_back(launch->id, launch_of_[d][i]);
          LaunchState state{.id = launch->id, .instruction = i};
          state.sends = AppendBytesByPeer(launch->sends, &peer_bytes_);
          state.recvs = AppendBytesByPeer(launch->recvs, &peer_bytes_);
          state.recvs_end = static_cast<int32_t>(peer_bytes_.size());
          launches_[d].push_back(state);
        } else if (const auto* wait = std::get_if<CommWait>(&instruction)) {
          waits.emplace_back(i, wait->id);
        }
      }
      std::vector<std::pair<int32_t, int32_t>>& ids = by_id[d];
      std::sort(ids.begin(), ids.end());
      for (size_t j = 1; j < ids.size(); ++j) {
        if (ids[j].first == ids[j - 1].first) {
          return Status::InvalidArgument(
              fmt::format("{}: instruction {}: CommLaunch {} repeats the id of instruction {}",
                          Where(d), launches_[d][ids[j].second].instruction, ids[j].first,
                          launches_[d][ids[j - 1].second].instruction));
        }
      }
      for (const auto& [i, id] : waits) {
        const int32_t l = Find(d, id, by_id);
        if (l < 0 || launches_[d][l].instruction > i) {
          return Status::InvalidArgument(fmt::format(
              "{}: instruction {}: CommWait {} has no earlier CommLaunch {}", Where(d), i, id, id));
        }
        launch_of_[d][i] = l;
        launches_[d][l].waited = true;
      }
    }
    // One flow per sender's (launch, peer), matched against the receiver's launch.
    for (int32_t d = 0; d < devices_; ++d) {
      for (size_t l = 0; l < launches_[d].size(); ++l) {
        const LaunchState& launch = launches_[d][l];
        for (int32_t e = launch.sends; e < launch.recvs; ++e) {
          const auto [peer, bytes] = peer_bytes_[e];
          const int32_t peer_launch = Find(peer, launch.id, by_id);
          if (peer_launch < 0) {
            return Status::InvalidArgument(fmt::format(
                "{}: instruction {}: CommLaunch {} sends to device {}, which has no CommLaunch {}",
                Where(d), launch.instruction, launch.id, peer, launch.id));
          }
          const LaunchState& other = launches_[peer][peer_launch];
          const auto other_end = peer_bytes_.begin() + other.recvs_end;
          const auto match = std::lower_bound(peer_bytes_.begin() + other.recvs, other_end,
                                              std::pair<int32_t, int64_t>{d, 0});
          if (match == other_end || match->first != d || match->second != bytes) {
            return Status::InvalidArgument(fmt::format(
                "{}: instruction {}: CommLaunch {} sends {} bytes to device {}, whose CommLaunch "
                "{} expects {} bytes from device {}",
                Where(d), launch.instruction, launch.id, bytes, peer, launch.id,
                match == other_end || match->first != d ? 0 : match->second, d));
          }
          flows_.push_back(FlowState{.source = d,
                                     .destination = peer,
                                     .launch_id = launch.id,
                                     .source_launch = static_cast<int32_t>(l),
                                     .destination_launch = peer_launch,
                                     .bytes = bytes,
                                     .inter_node = NodeOf(d) != NodeOf(peer)});
          (NodeOf(d) != NodeOf(peer) ? stats_[d].bytes_sent_inter_node
                                     : stats_[d].bytes_sent_intra_node) += bytes;
        }
      }
    }
    // Every receive has its send: a receive without one would leave its wait blocked forever.
    for (int32_t d = 0; d < devices_; ++d) {
      for (const LaunchState& launch : launches_[d]) {
        for (int32_t e = launch.recvs; e < launch.recvs_end; ++e) {
          const auto [peer, bytes] = peer_bytes_[e];
          const int32_t peer_launch = Find(peer, launch.id, by_id);
          const bool sent =
              peer_launch >= 0 &&
              std::binary_search(peer_bytes_.begin() + launches_[peer][peer_launch].sends,
                                 peer_bytes_.begin() + launches_[peer][peer_launch].recvs,
                                 std::pair<int32_t, int64_t>{d, bytes});
          if (!sent) {
            return Status::InvalidArgument(fmt::format(
                "{}: instruction {}: CommLaunch {} expects {} bytes from device {}, which sends "
                "no such message in a CommLaunch {}",
                Where(d), launch.instruction, launch.id, bytes, peer, launch.id));
          }
        }
      }
    }
    ListFlowsOfLaunches();
    return Status::Ok();
  }

  // What no replay of this pass can beat (REQUIRES: Prepare succeeded): every device runs its
  // compute instructions one after another, and a waited flow has crossed its two resources
  // before its waiting device goes on, at most at their capacities. The others may still move
  // when the pass ends.
  double LowerBoundSeconds() const {
    double bound = 0;
    for (const std::vector<double>& seconds : seconds_) {
      double busy = 0;
      for (double s : seconds) busy += s;
      bound = std::max(bound, busy);
    }
    const std::vector<double> capacities = Capacities();
    std::vector<double> bytes(capacities.size(), 0);
    for (const FlowState& flow : flows_) {
      if (flow.source == flow.destination ||
          !(launches_[flow.source][flow.source_launch].waited ||
            launches_[flow.destination][flow.destination_launch].waited)) {
        continue;
      }
      const auto [a, b] = ResourcesOf(flow);
      bytes[a] += static_cast<double>(flow.bytes);
      bytes[b] += static_cast<double>(flow.bytes);
    }
    for (size_t r = 0; r < bytes.size(); ++r) bound = std::max(bound, bytes[r] / capacities[r]);
    return bound;
  }

  Result<PassSimReport> Run() {
    FlowNetwork network(Capacities());
    state_.assign(devices_, DeviceState{});
    for (int32_t d = 0; d < devices_; ++d) streams_.emplace(0.0, d);

    std::vector<int32_t> finished;
    while (true) {
      const double t =
          std::min({streams_.empty() ? kInfinity : streams_.top().first,
                    starts_.empty() ? kInfinity : starts_.top().first, network.NextFinish()});
      if (t == kInfinity) break;
      finished.clear();
      network.TakeFinished(t, &finished);
      bool changed = !finished.empty();
      for (int32_t f : finished) Finish(f, t);
      for (bool progressed = true; progressed;) {
        progressed = false;
        while (!starts_.empty() && starts_.top().first <= t) {
          const int32_t f = starts_.top().second;
          starts_.pop();
          progressed = true;
          FlowState& flow = flows_[f];
          flow.start_s = t;
          if (flow.bytes == 0 || flow.source == flow.destination) {
            Finish(f, t);  // nothing crosses a link
          } else {
            const auto [a, b] = ResourcesOf(flow);
            network.Add(f, static_cast<double>(flow.bytes), a, b);
            changed = true;
          }
        }
        while (!streams_.empty() && streams_.top().first <= t) {
          const int32_t d = streams_.top().second;
          streams_.pop();
          progressed = true;
          Step(d, t);
        }
      }
      if (changed) network.Reallocate(t);
    }

    for (int32_t d = 0; d < devices_; ++d) {
      if (!state_[d].done) return Deadlock();
    }
    PassSimReport report;
    report.flows = static_cast<int64_t>(flows_.size());
    for (int32_t d = 0; d < devices_; ++d) {
      report.makespan_s = std::max(report.makespan_s, state_[d].finish_s);
    }
    for (int32_t d = 0; d < devices_; ++d) {
      DeviceSimStats& s = stats_[d];
      s.idle_s = report.makespan_s - state_[d].finish_s;
      report.total.busy_s += s.busy_s;
      report.total.exposed_comm_s += s.exposed_comm_s;
      report.total.idle_s += s.idle_s;
      report.total.bytes_sent_intra_node += s.bytes_sent_intra_node;
      report.total.bytes_sent_inter_node += s.bytes_sent_inter_node;
      report.total.attention_flops += s.attention_flops;
    }
    report.devices = std::move(stats_);
    return report;
  }

 private:
  int32_t NodeOf(int32_t device) const { return device / plan_.topology.devices_per_node; }

  // The link resources, by index: switch egress and ingress of every device, then network egress
  // and ingress of every node; their bytes per second.
  std::vector<double> Capacities() const {
    std::vector<double> capacities(2 * static_cast<size_t>(devices_),
                                   cluster_.intra_node.bytes_per_s);
    capacities.insert(capacities.end(), 2 * static_cast<size_t>(plan_.topology.nodes),
                      cluster_.inter_node.bytes_per_s);
    return capacities;
  }

  // The two resources a flow between two devices crosses: the switch's inside a node, the
  // network's between nodes.
  std::pair<int32_t, int32_t> ResourcesOf(const FlowState& flow) const {
    const int32_t n = devices_, nodes = plan_.topology.nodes;
    if (!flow.inter_node) return {flow.source, n + flow.destination};
    return {2 * n + NodeOf(flow.source), 2 * n + nodes + NodeOf(flow.destination)};
  }

  // The index of device d's launch with this id, or -1.
  static int32_t Find(int32_t d, int32_t id,
                      const std::vector<std::vector<std::pair<int32_t, int32_t>>>& by_id) {
    const std::vector<std::pair<int32_t, int32_t>>& ids = by_id[d];
    const auto it = std::lower_bound(ids.begin(), ids.end(), std::pair<int32_t, int32_t>{id, -1});
    return it != ids.end() && it->first == id ? it->second : -1;
  }

  // Each launch's flows, in flow order, into launch_flows_: those it sends and those it receives
  // (a flow to its own device once).
  void ListFlowsOfLaunches() {
    std::vector<int32_t> first_of_device(devices_ + 1, 0);
    for (int32_t d = 0; d < devices_; ++d) {
      first_of_device[d + 1] = first_of_device[d] + static_cast<int32_t>(launches_[d].size());
    }
    std::vector<int32_t> begin(first_of_device[devices_] + 1, 0);
    const auto ends = [&](const FlowState& flow, const auto& f) {
      f(first_of_device[flow.source] + flow.source_launch);
      if (flow.destination != flow.source) {
        f(first_of_device[flow.destination] + flow.destination_launch);
      }
    };
    for (const FlowState& flow : flows_) ends(flow, [&](int32_t g) { ++begin[g + 1]; });
    for (size_t g = 1; g < begin.size(); ++g) begin[g] += begin[g - 1];
    for (int32_t d = 0; d < devices_; ++d) {
      for (size_t l = 0; l < launches_[d].size(); ++l) {
        LaunchState& launch = launches_[d][l];
        const int32_t g = first_of_device[d] + static_cast<int32_t>(l);
        launch.flows = launch.flows_end = begin[g];
        launch.pending = begin[g + 1] - begin[g];
      }
    }
    launch_flows_.resize(begin.back());
    for (size_t f = 0; f < flows_.size(); ++f) {
      const FlowState& flow = flows_[f];
      for (const auto& [device, l] : {std::pair{flow.source, flow.source_launch},
                                      std::pair{flow.destination, flow.destination_launch}}) {
        if (device == flow.destination && flow.source == flow.destination) break;
        launch_flows_[launches_[device][l].flows_end++] = static_cast<int32_t>(f);
      }
    }
  }

  std::string Where(int32_t device) const {
    return fmt::format("{} pass, device {}", ToString(pass_), device);
  }

  double Latency(const FlowState& flow) const {
    if (flow.source == flow.destination) return 0;
    return flow.inter_node ? cluster_.inter_node.latency_s : cluster_.intra_node.latency_s;
  }

  // Runs device d's stream from time t until it starts a compute instruction, blocks or ends.
  void Step(int32_t d, double t) {
    DeviceState& s = state_[d];
    const Program& program = programs_[d];
    while (s.pc < program.instructions.size()) {
      const size_t i = s.pc++;
      const Instruction& instruction = program.instructions[i];
      if (std::holds_alternative<CommLaunch>(instruction)) {
        LaunchState& launch = launches_[d][launch_of_[d][i]];
        launch.launched = true;
        if (trace_ != nullptr) trace_->Launch(d, t, launch.id);
        for (int32_t e = launch.flows; e < launch.flows_end; ++e) {
          const int32_t f = launch_flows_[e];
          FlowState& flow = flows_[f];
          const int32_t needed = flow.source == flow.destination ? 1 : 2;
          if (++flow.arrivals == needed) {
            flow.ready_s = t;
            starts_.emplace(t + Latency(flow), f);
          }
        }
      } else if (std::holds_alternative<CommWait>(instruction)) {
        const int32_t l = launch_of_[d][i];
        if (launches_[d][l].pending > 0) {
          s.blocked_launch = l;
          s.blocked_since = t;
          return;
        }
      } else {
        const double seconds = seconds_[d][i];
        stats_[d].busy_s += seconds;
        if (trace_ != nullptr) trace_->Compute(d, t, t + seconds, InstructionName(instruction));
        if (seconds > 0) {
          streams_.emplace(t + seconds, d);
          return;
        }
      }
    }
    s.done = true;
    s.finish_s = t;
  }

  // Flow f finished at time t: the waits of both ends may go on.
  void Finish(int32_t f, double t) {
    const FlowState& flow = flows_[f];
    if (trace_ != nullptr) {
      trace_->Flow(flow.source, flow.destination, flow.launch_id, flow.bytes, flow.inter_node,
                   flow.ready_s, flow.start_s, t);
    }
    for (const auto& [device, l] : {std::pair{flow.source, flow.source_launch},
                                    std::pair{flow.destination, flow.destination_launch}}) {
      if (device == flow.destination && flow.source == flow.destination) break;
      LaunchState& launch = launches_[device][l];
      DeviceState& s = state_[device];
      if (--launch.pending == 0 && s.blocked_launch == l) {
        stats_[device].exposed_comm_s += t - s.blocked_since;
        if (trace_ != nullptr) trace_->Wait(device, s.blocked_since, t, launch.id);
        s.blocked_launch = -1;
        streams_.emplace(t, device);
      }
    }
  }

  // Names the first blocked device and what it waits for.
  Status Deadlock() const {
    for (int32_t d = 0; d < devices_; ++d) {
      const DeviceState& s = state_[d];
      if (s.done || s.blocked_launch < 0) continue;
      const LaunchState& launch = launches_[d][s.blocked_launch];
      std::string why;
      for (int32_t e = launch.flows; e < launch.flows_end; ++e) {
        const FlowState& flow = flows_[launch_flows_[e]];
        const int32_t peer = flow.source == d ? flow.destination : flow.source;
        const int32_t peer_launch = flow.source == d ? flow.destination_launch : flow.source_launch;
        if (!launches_[peer][peer_launch].launched) {
          const DeviceState& p = state_[peer];
          why = fmt::format(": device {} never reaches its CommLaunch {} (instruction {}); it is ",
                            peer, launch.id, launches_[peer][peer_launch].instruction);
          why += p.blocked_launch >= 0 ? fmt::format("blocked in CommWait {} at instruction {}",
                                                     launches_[peer][p.blocked_launch].id, p.pc - 1)
                                       : std::string("stopped");
          break;
        }
      }
      return Status::InvalidArgument(
          fmt::format("deadlock in the {} pass: device {} waits forever in CommWait {} at "
                      "instruction {}{}",
                      ToString(pass_), d, launch.id, s.pc - 1, why));
    }
    return Status::Internal(fmt::format("the {} pass stopped early", ToString(pass_)));
  }

  const Plan& plan_;
  const Pass pass_;
  const std::vector<Program>& programs_;
  const ClusterSpec& cluster_;
  TraceRecorder* trace_;
  const int32_t devices_;

  std::vector<std::vector<double>> seconds_;     // per device and instruction
  std::vector<std::vector<int32_t>> launch_of_;  // per device and instruction: launch index
  std::vector<std::vector<LaunchState>> launches_;
  std::vector<std::pair<int32_t, int64_t>> peer_bytes_;  // the launches' (peer, bytes) lists
  std::vector<int32_t> launch_flows_;                    // the launches' flow lists
  std::vector<FlowState> flows_;
  std::vector<DeviceSimStats> stats_;
  std::vector<DeviceState> state_;
  EventQueue streams_;  // (time, device): the stream is free to go on
  EventQueue starts_;   // (time, flow): the flow's latency has passed
};

Status CheckPlan(const Plan& plan, const ClusterSpec& cluster) {
  if (plan.part_device >= 0) {
    return Status::InvalidArgument(fmt::format(
        "the plan is device {}'s part; simulating needs the whole plan", plan.part_device));
  }
  DCP_RETURN_IF_ERROR(plan.topology.Validate().WithContext("plan topology"));
  DCP_RETURN_IF_ERROR(cluster.CheckHolds(plan.topology).WithContext("plan"));
  if (plan.shape.head_dim < 1 || plan.shape.heads < 1 || plan.head_groups < 1 ||
      plan.shape.heads % plan.head_groups != 0) {
    return Status::InvalidArgument(
        fmt::format("plan shape: {} heads of dimension {} in {} head groups", plan.shape.heads,
                    plan.shape.head_dim, plan.head_groups));
  }
  const auto devices = static_cast<size_t>(plan.topology.devices());
  for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
    const std::vector<Program>& programs = pass == Pass::kForward ? plan.forward : plan.backward;
    if (programs.size() != devices) {
      return Status::InvalidArgument(fmt::format("the plan has {} {} programs for {} devices",
                                                 programs.size(), ToString(pass), devices));
    }
    for (size_t d = 0; d < devices; ++d) {
      if (programs[d].device.value != static_cast<int32_t>(d) || programs[d].pass != pass) {
        return Status::InvalidArgument(fmt::format("{} program {} is for device {} and the {} pass",
                                                   ToString(pass), d, programs[d].device.value,
                                                   ToString(programs[d].pass)));
      }
    }
  }
  return Status::Ok();
}

}  // namespace
}  // namespace sim

Result<SimReport> SimulatePlan(const Plan& plan, const ClusterSpec& cluster,
                               const SimOptions& options) {
  DCP_RETURN_IF_ERROR(cluster.Validate());
  DCP_RETURN_IF_ERROR(options.Validate());
  DCP_RETURN_IF_ERROR(sim::CheckPlan(plan, cluster));
  sim::TraceRecorder recorder;
  sim::TraceRecorder* trace = options.trace ? &recorder : nullptr;
  SimReport report;
  for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
    if (trace != nullptr) {
      trace->BeginPass(ToString(pass), pass == Pass::kForward ? 0.0 : report.forward.makespan_s);
      for (const Program& program : pass == Pass::kForward ? plan.forward : plan.backward) {
        trace->BufferBytes(program.device.value, 0.0, program.PeakBufferBytes());
      }
    }
    sim::PassSimulator simulator(plan, pass, cluster, trace);
    DCP_RETURN_IF_ERROR(simulator.Prepare());
    DCP_ASSIGN_OR_RETURN(PassSimReport pass_report, simulator.Run());
    (pass == Pass::kForward ? report.forward : report.backward) = std::move(pass_report);
  }
  if (trace != nullptr) {
    for (int32_t d = 0; d < plan.topology.devices(); ++d) {
      trace->BufferBytes(d, report.backward.makespan_s, 0);
    }
    report.trace_json = recorder.ToJson(plan.topology.devices(), plan.topology.devices_per_node);
  }
  report.ideal_s =
      sim::IdealSeconds(report.forward.total.attention_flops, report.backward.total.attention_flops,
                        plan.topology.devices(), cluster.device);
  return report;
}

Result<double> SimulationLowerBoundSeconds(const Plan& plan, const ClusterSpec& cluster) {
  DCP_RETURN_IF_ERROR(cluster.Validate());
  DCP_RETURN_IF_ERROR(sim::CheckPlan(plan, cluster));
  // The sharing's rounding may let a resource carry a few ulps above its capacity.
  constexpr double kRoundingMargin = 1 - 1e-9;
  double bound = 0;
  for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
    sim::PassSimulator simulator(plan, pass, cluster, /*trace=*/nullptr);
    DCP_RETURN_IF_ERROR(simulator.Prepare());
    bound += simulator.LowerBoundSeconds();
  }
  return bound * kRoundingMargin;
}

double SimReport::ComputeImbalance() const {
  double max = 0, total = 0;
  for (size_t d = 0; d < forward.devices.size(); ++d) {
    const auto flops = static_cast<double>(forward.devices[d].attention_flops +
                                           backward.devices[d].attention_flops);
    max = std::max(max, flops);
    total += flops;
  }
  return total == 0 ? 1 : max * static_cast<double>(forward.devices.size()) / total;
}

}  // namespace dcp
