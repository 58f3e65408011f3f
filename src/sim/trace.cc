// SPDX-License-Identifier: Apache-2.0
#include "sim/trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <numeric>

namespace dcp::sim {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr int32_t kComputeThread = 0;
constexpr int32_t kFirstCommThread = 1;

// The trace holds whole nanoseconds, and a slice spans from its rounded start to its rounded end
// (not its start plus a rounded duration): rounding is monotone, so slices that merely touch in
// the simulation never overlap on their track once rounded.
int64_t Nanos(double seconds) { return std::llround(seconds * 1e9); }

// `ns` as the trace's microseconds, exactly: "12.345". REQUIRES: ns >= 0 (simulated times are).
std::string Micros(int64_t ns) { return fmt::format("{}.{:03}", ns / 1000, ns % 1000); }

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

void TraceRecorder::BufferBytes(int32_t device, double time_s, int64_t bytes) {
  events_.push_back(Event{.kind = Kind::kBufferBytes,
                          .device = device,
                          .bytes = bytes,
                          .begin_s = time_s + offset_s_,
                          .end_s = time_s + offset_s_,
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
  std::vector<std::vector<int64_t>> lane_end(devices);  // nanoseconds
  std::vector<int32_t> lane(events_.size(), 0);
  for (size_t i : flows) {
    const Event& e = events_[i];
    std::vector<int64_t>& ends = lane_end[e.device];
    size_t l = 0;
    while (l < ends.size() && ends[l] > Nanos(e.begin_s)) ++l;
    if (l == ends.size()) ends.push_back(0);
    ends[l] = Nanos(e.end_s);
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
    const int64_t begin_ns = Nanos(e.begin_s);
    const std::string ts = Micros(begin_ns), dur = Micros(Nanos(e.end_s) - begin_ns);
    separator();
    switch (e.kind) {
      case Kind::kCompute:
        fmt::format_to(it,
                       "{{\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{},"
                       "\"name\":\"{}\",\"args\":{{\"pass\":\"{}\"}}}}",
                       e.device, kComputeThread, ts, dur, e.name, e.pass);
        break;
      case Kind::kWait:
        fmt::format_to(it,
                       "{{\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{},"
                       "\"name\":\"CommWait {}\",\"args\":{{\"pass\":\"{}\"}}}}",
                       e.device, kComputeThread, ts, dur, e.launch_id, e.pass);
        break;
      case Kind::kLaunch:
        fmt::format_to(it,
                       "{{\"ph\":\"i\",\"s\":\"t\",\"pid\":{},\"tid\":{},\"ts\":{},"
                       "\"name\":\"CommLaunch {}\",\"args\":{{\"pass\":\"{}\"}}}}",
                       e.device, kComputeThread, ts, e.launch_id, e.pass);
        break;
      case Kind::kFlow:
        fmt::format_to(it,
                       "{{\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{},"
                       "\"name\":\"to {}: {:.2f} MiB ({})\",\"args\":{{\"pass\":\"{}\","
                       "\"launch\":{},\"destination\":{},\"bytes\":{},\"ready_us\":{}}}}}",
                       e.device, kFirstCommThread + lane[i], ts, dur, e.peer,
                       static_cast<double>(e.bytes) / kMiB,
                       e.inter_node ? "inter-node" : "intra-node", e.pass, e.launch_id, e.peer,
                       e.bytes, Micros(Nanos(e.ready_s)));
        break;
      case Kind::kBufferBytes:
        fmt::format_to(it,
                       "{{\"ph\":\"C\",\"pid\":{},\"ts\":{},\"name\":\"buffer bytes\","
                       "\"args\":{{\"bytes\":{}}}}}",
                       e.device, ts, e.bytes);
        break;
    }
  }
  fmt::format_to(it, "\n]}}\n");
  return fmt::to_string(out);
}

}  // namespace dcp::sim
