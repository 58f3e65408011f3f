// SPDX-License-Identifier: Apache-2.0
#include "sim/trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <numeric>

namespace dcp::sim {
namespace {

constexpr double kMicros = 1e6;
constexpr double kMiB = 1024.0 * 1024.0;
constexpr int32_t kComputeThread = 0;
constexpr int32_t kFirstCommThread = 1;

}  // namespace

void TraceRecorder::BeginPass(std::string_view pass, double offset_s) {
  pass_ = pass;
  offset_s_ = offset_s;
}

void TraceRecorder::Compute(int32_t device, double begin_s, double end_s, std::string name) {
  events_.push_back(Event{.kind = Kind::kCompute,
                          .device = device,
                          .begin_s = begin_s + offset_s_,
                          .end_s = end_s + offset_s_,
                          .pass = pass_,
                          .name = std::move(name)});
}

void TraceRecorder::Wait(int32_t device, double begin_s, double end_s, int32_t launch_id) {
  events_.push_back(Event{.kind = Kind::kWait,
                          .device = device,
                          .launch_id = launch_id,
                          .begin_s = begin_s + offset_s_,
                          .end_s = end_s + offset_s_,
                          .pass = pass_});
}

void TraceRecorder::Launch(int32_t device, double time_s, int32_t launch_id) {
  events_.push_back(Event{.kind = Kind::kLaunch,
                          .device = device,
                          .launch_id = launch_id,
                          .begin_s = time_s + offset_s_,
                          .end_s = time_s + offset_s_,
                          .pass = pass_});
}

void TraceRecorder::Flow(int32_t source, int32_t destination, int32_t launch_id, int64_t bytes,
                         bool inter_node, double ready_s, double start_s, double end_s) {
  events_.push_back(Event{.kind = Kind::kFlow,
                          .device = source,
                          .peer = destination,
                          .launch_id = launch_id,
                          .bytes = bytes,
                          .inter_node = inter_node,
                          .ready_s = ready_s + offset_s_,
                          .begin_s = start_s + offset_s_,
                          .end_s = end_s + offset_s_,
                          .pass = pass_});
}

std::string TraceRecorder::ToJson(int32_t devices, int32_t devices_per_node) const {
  fmt::memory_buffer out;
  auto it = std::back_inserter(out);
  fmt::format_to(it, "{{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
  bool first = true;
  const auto separator = [&] {
    if (!first) fmt::format_to(it, ",\n");
    first = false;
  };
  for (int32_t d = 0; d < devices; ++d) {
    separator();
    fmt::format_to(it,
                   "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"args\":{{\"name\":"
                   "\"device {} (node {})\"}}}}",
                   d, d, d / devices_per_node);
    separator();
    fmt::format_to(it,
                   "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{},\"tid\":{},\"args\":{{"
                   "\"name\":\"compute\"}}}}",
                   d, kComputeThread);
  }

  // Flows go to the first comm thread of their sender whose last flow has ended.
  std::vector<size_t> flows;
  for (size_t i = 0; i < events_.size(); ++i) {
    if (events_[i].kind == Kind::kFlow) flows.push_back(i);
  }
  std::stable_sort(flows.begin(), flows.end(),
                   [&](size_t a, size_t b) { return events_[a].begin_s < events_[b].begin_s; });
  std::vector<std::vector<double>> lane_end(devices);
  std::vector<int32_t> lane(events_.size(), 0);
  for (size_t i : flows) {
    const Event& e = events_[i];
    std::vector<double>& ends = lane_end[e.device];
    size_t l = 0;
    while (l < ends.size() && ends[l] > e.begin_s) ++l;
    if (l == ends.size()) ends.push_back(0);
    ends[l] = e.end_s;
    lane[i] = static_cast<int32_t>(l);
  }
  for (int32_t d = 0; d < devices; ++d) {
    for (size_t l = 0; l < lane_end[d].size(); ++l) {
      separator();
      fmt::format_to(it,
                     "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{},\"tid\":{},\"args\":{{"
                     "\"name\":\"comm {}\"}}}}",
                     d, kFirstCommThread + static_cast<int32_t>(l), l);
    }
  }

  for (size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    const double ts = e.begin_s * kMicros, dur = (e.end_s - e.begin_s) * kMicros;
    separator();
    switch (e.kind) {
      case Kind::kCompute:
        fmt::format_to(it,
                       "{{\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":{:.3f},\"dur\":{:.3f},"
                       "\"name\":\"{}\",\"args\":{{\"pass\":\"{}\"}}}}",
                       e.device, kComputeThread, ts, dur, e.name, e.pass);
        break;
      case Kind::kWait:
        fmt::format_to(it,
                       "{{\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":{:.3f},\"dur\":{:.3f},"
                       "\"name\":\"CommWait {}\",\"args\":{{\"pass\":\"{}\"}}}}",
                       e.device, kComputeThread, ts, dur, e.launch_id, e.pass);
        break;
      case Kind::kLaunch:
        fmt::format_to(it,
                       "{{\"ph\":\"i\",\"s\":\"t\",\"pid\":{},\"tid\":{},\"ts\":{:.3f},"
                       "\"name\":\"CommLaunch {}\",\"args\":{{\"pass\":\"{}\"}}}}",
                       e.device, kComputeThread, ts, e.launch_id, e.pass);
        break;
      case Kind::kFlow:
        fmt::format_to(it,
                       "{{\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":{:.3f},\"dur\":{:.3f},"
                       "\"name\":\"to {}: {:.2f} MiB ({})\",\"args\":{{\"pass\":\"{}\","
                       "\"launch\":{},\"destination\":{},\"bytes\":{},\"ready_us\":{:.3f}}}}}",
                       e.device, kFirstCommThread + lane[i], ts, dur, e.peer,
                       static_cast<double>(e.bytes) / kMiB,
                       e.inter_node ? "inter-node" : "intra-node", e.pass, e.launch_id, e.peer,
                       e.bytes, e.ready_s * kMicros);
        break;
    }
  }
  fmt::format_to(it, "\n]}}\n");
  return fmt::to_string(out);
}

}  // namespace dcp::sim
