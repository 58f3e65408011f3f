// SPDX-License-Identifier: Apache-2.0
// Chrome trace event JSON (chrome://tracing, ui.perfetto.dev) of a simulated plan.
//
// One process per device. Thread 0 "compute" holds every instruction the stream ran and the spans
// it was blocked in CommWait; threads "comm N" hold the device's outgoing flows, spread over as
// few threads as keeps the spans of one thread from overlapping. Times are microseconds in whole
// nanoseconds, each span from its rounded start to its rounded end, so the spans of one thread
// never overlap in the trace either. A counter track "buffer bytes" per device holds the bytes of
// the slots of the pass it runs (its program's peak buffer bytes: the slots are allocated for the
// whole pass), and 0 once the backward pass has ended.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dcp::sim {

class TraceRecorder {
 public:
  // Events recorded from now on belong to `pass` and are shifted by `offset_s`.
  void BeginPass(std::string_view pass, double offset_s);

  void Compute(int32_t device, double begin_s, double end_s, std::string name);
  void Wait(int32_t device, double begin_s, double end_s, int32_t launch_id);
  void Launch(int32_t device, double time_s, int32_t launch_id);
  // A flow from `source` to `destination`: both ends launched at ready_s, bytes moved from
  // start_s (ready_s + latency) to end_s.
  void Flow(int32_t source, int32_t destination, int32_t launch_id, int64_t bytes, bool inter_node,
            double ready_s, double start_s, double end_s);
  // From time_s on, `device` holds `bytes` of buffers.
  void BufferBytes(int32_t device, double time_s, int64_t bytes);

  // The whole trace; `devices_per_node` names each device's node.
  std::string ToJson(int32_t devices, int32_t devices_per_node) const;

 private:
  enum class Kind : uint8_t { kCompute, kWait, kLaunch, kFlow, kBufferBytes };
  struct Event {
    Kind kind = Kind::kCompute;
    int32_t device = 0;
    int32_t peer = -1;
    int32_t launch_id = -1;
    int64_t bytes = 0;
    bool inter_node = false;
    double ready_s = 0, begin_s = 0, end_s = 0;  // already shifted
    std::string_view pass = "";
    std::string name = {};
  };
  std::vector<Event> events_;
  std::string_view pass_ = "forward";  // a static string (ToString(Pass))
  double offset_s_ = 0;
};

}  // namespace dcp::sim
