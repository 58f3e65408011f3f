// SPDX-License-Identifier: Apache-2.0
// A fault-injecting Communicator for tests: wraps any communicator (the local group's, MPI's) and,
// as its options say, fails this rank at its n-th Launch or Wait, delays every launch, or drops
// its n-th launch; everything else forwards to the wrapped communicator. Header-only, so the MPI
// test binary uses it too.
//
// Thread safety: one thread per FaultyCommunicator, as for the communicator it wraps.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "dcp/communicator.h"

namespace dcp::testing {

struct FaultOptions {
  int64_t fail_at_launch =
      0;  // the n-th Launch (1-based) calls Fail and returns the reason; 0: never
  int64_t fail_at_wait = 0;   // the n-th Wait (1-based) does the same; 0: never
  int64_t drop_launch = 0;    // the n-th Launch (1-based) is never posted; 0: never
  double launch_delay_s = 0;  // every Launch sleeps this long first
};

class FaultyCommunicator final : public Communicator {
 public:
  // `inner` must outlive this wrapper.
  FaultyCommunicator(Communicator& inner, FaultOptions options)
      : inner_(inner), options_(options) {}
  FaultyCommunicator(std::unique_ptr<Communicator> inner, FaultOptions options)
      : owned_(std::move(inner)), inner_(*owned_), options_(options) {}

  std::string_view Name() const override { return inner_.Name(); }
  int32_t rank() const override { return inner_.rank(); }
  int32_t size() const override { return inner_.size(); }

  // The failure: the reason Fail gives the others, "injected" in it; code Internal.
  static Status Injected(std::string_view where, int64_t n, int32_t rank) {
    return Status::Internal(fmt::format("injected failure at {} {} of rank {}", where, n, rank));
  }

  Status Launch(int32_t id, std::vector<SendBuffer> sends, std::vector<RecvBuffer> recvs) override {
    ++launches_;
    if (options_.launch_delay_s > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(options_.launch_delay_s));
    }
    if (launches_ == options_.fail_at_launch) {
      const Status failure = Injected("launch", launches_, rank());
      inner_.Fail(failure);
      return failure;
    }
    if (launches_ == options_.drop_launch) {
      dropped_.insert(id);
      return Status::Ok();
    }
    return inner_.Launch(id, std::move(sends), std::move(recvs));
  }

  // A dropped exchange ends at once with Timeout here; its peers time out waiting for it.
  Result<bool> Test(int32_t id) override {
    if (dropped_.erase(id) > 0) return Dropped(id);
    return inner_.Test(id);
  }

  Status Wait(int32_t id) override {
    ++waits_;
    if (waits_ == options_.fail_at_wait) {
      const Status failure = Injected("wait", waits_, rank());
      inner_.Fail(failure);
      // The exchange ends as a failed Wait ends it, so its buffers are free when this returns.
      if (!dropped_.erase(id)) (void)inner_.Wait(id);
      return failure;
    }
    if (dropped_.erase(id) > 0) return Dropped(id);
    return inner_.Wait(id);
  }

  void Fail(const Status& reason) override { inner_.Fail(reason); }
  void KeepAliveAfterFailure(std::shared_ptr<void> memory) override {
    inner_.KeepAliveAfterFailure(std::move(memory));
  }

 private:
  Status Dropped(int32_t id) const {
    return Status::Timeout(
        fmt::format("rank {}: exchange id {} was dropped by fault injection", rank(), id));
  }

  std::unique_ptr<Communicator> owned_;  // set by the owning constructor
  Communicator& inner_;
  const FaultOptions options_;
  int64_t launches_ = 0;
  int64_t waits_ = 0;
  std::set<int32_t> dropped_;  // ids launched but dropped, not yet waited on
};

}  // namespace dcp::testing
