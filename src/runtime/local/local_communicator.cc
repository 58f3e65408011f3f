// SPDX-License-Identifier: Apache-2.0
// The in-process communicator: the ranks of a group are threads of one process and share one
// GroupState. Launch copies each send into the destination rank's mailbox, keyed by (exchange
// id, source rank), so a sender never waits for its receiver; Wait blocks on the receiving
// rank's condition variable until every expected message of the id is there, then copies them
// out. Messages for ids a rank has not launched yet stay in its mailbox until it does, so a fast
// rank may run several ids ahead. Messages with the same key queue in launch order, so an id may
// be reused once both sides have waited on it.
//
// Thread safety: one thread per LocalCommunicator (as for every Communicator); the shared
// GroupState is guarded by its one mutex.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "dcp/runtime.h"
#include "runtime/check_peers.h"

namespace dcp {
namespace {

constexpr int32_t kMaxLocalGroupSize = 4096;
// A Wait sleeps at most this long in one go, so that converting a huge timeout_s to clock ticks
// cannot overflow; it then checks the no-progress deadline again.
constexpr double kMaxSleepSeconds = 3600.0;

using Bytes = std::vector<std::byte>;

// Key of a message in a mailbox: (exchange id, source rank).
using MessageKey = std::pair<int32_t, int32_t>;

struct Mailbox {
  std::condition_variable arrived;  // notified on every delivery and on Fail
  std::map<MessageKey, std::deque<Bytes>> messages;
};

// What all ranks of one group share.
struct GroupState {
  explicit GroupState(int32_t size) : mailboxes(static_cast<size_t>(size)) {}

  std::mutex mutex;
  std::vector<Mailbox> mailboxes;  // one per rank; guarded by mutex
  bool failed = false;             // guarded by mutex
  int32_t failed_rank = -1;        // guarded by mutex
  std::string failed_reason;       // guarded by mutex
};

std::string JoinRanks(const std::vector<int32_t>& ranks) {
  std::string out = "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(ranks[i]);
  }
  return out + "]";
}

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<GroupState> group, int32_t rank, int32_t size, double timeout_s)
      : group_(std::move(group)), rank_(rank), size_(size), timeout_s_(timeout_s) {}

  std::string_view Name() const override { return "local"; }
  int32_t rank() const override { return rank_; }
  int32_t size() const override { return size_; }

  Status Launch(int32_t id, std::vector<SendBuffer> sends, std::vector<RecvBuffer> recvs) override {
    if (pending_.contains(id)) {
      return Status::InvalidArgument(fmt::format(
          "local communicator rank {}: Launch(id {}): id {} is already launched and not yet "
          "waited on",
          rank_, id, id));
    }
    DCP_RETURN_IF_ERROR(CheckPeers(id, "send", sends));
    DCP_RETURN_IF_ERROR(CheckPeers(id, "recv", recvs));

    // Copy outside the lock; only the hand-over into the mailboxes is serialised.
    std::vector<std::pair<int32_t, Bytes>> copies;
    copies.reserve(sends.size());
    for (const SendBuffer& send : sends) {
      copies.emplace_back(send.peer.value, internal::Gathered(send.parts));
    }
    {
      std::lock_guard<std::mutex> lock(group_->mutex);
      for (auto& [peer, bytes] : copies) {
        Mailbox& box = group_->mailboxes[static_cast<size_t>(peer)];
        box.messages[MessageKey{id, rank_}].push_back(std::move(bytes));
        box.arrived.notify_all();
      }
    }
    pending_.emplace(id, std::move(recvs));
    return Status::Ok();
  }

  Status Wait(int32_t id) override {
    auto it = pending_.find(id);
    if (it == pending_.end()) return internal::NotLaunched("local", rank_, id);
    // The exchange is over once Wait returns, whatever the outcome.
    const std::vector<RecvBuffer> recvs = std::move(it->second);
    pending_.erase(it);

    std::vector<Bytes> received(recvs.size());
    {
      std::unique_lock<std::mutex> lock(group_->mutex);
      Mailbox& box = group_->mailboxes[static_cast<size_t>(rank_)];
      size_t arrived_before = CountArrived(box, id, recvs);
      auto last_progress = std::chrono::steady_clock::now();
      while (true) {
        if (group_->failed) {
          return Status::CommFailure(
              fmt::format("rank {} failed: {}", group_->failed_rank, group_->failed_reason));
        }
        const size_t arrived = CountArrived(box, id, recvs);
        if (arrived == recvs.size()) break;
        const auto now = std::chrono::steady_clock::now();
        if (arrived > arrived_before) {  // progress: the no-progress deadline starts over
          arrived_before = arrived;
          last_progress = now;
        }
        const double idle_s = std::chrono::duration<double>(now - last_progress).count();
        if (idle_s >= timeout_s_) {
          std::vector<int32_t> missing;
          for (const RecvBuffer& recv : recvs) {
            if (!box.messages.contains(MessageKey{id, recv.peer.value})) {
              missing.push_back(recv.peer.value);
            }
          }
          return Status::Timeout(fmt::format(
              "local communicator rank {}: Wait(id {}): no progress for {} s; still missing "
              "messages from peers {}",
              rank_, id, timeout_s_, JoinRanks(missing)));
        }
        const double sleep_s = std::min(timeout_s_ - idle_s, kMaxSleepSeconds);
        box.arrived.wait_until(
            lock, now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(sleep_s)));
      }
      for (size_t i = 0; i < recvs.size(); ++i) {
        auto message = box.messages.find(MessageKey{id, recvs[i].peer.value});
        received[i] = std::move(message->second.front());
        message->second.pop_front();
        if (message->second.empty()) box.messages.erase(message);
      }
    }

    for (size_t i = 0; i < recvs.size(); ++i) {
      if (received[i].size() != recvs[i].bytes()) {
        return Status::CommFailure(fmt::format(
            "local communicator rank {}: Wait(id {}): message from peer {} has {} bytes but its "
            "receive buffer has {} bytes",
            rank_, id, recvs[i].peer.value, received[i].size(), recvs[i].bytes()));
      }
    }
    for (size_t i = 0; i < recvs.size(); ++i) {
      internal::Scatter(received[i].data(), recvs[i].parts);
    }
    return Status::Ok();
  }

  Result<bool> Test(int32_t id) override {
    return Status::Unsupported(fmt::format("local communicator: Test({}) is not implemented", id));
  }

  void Fail(const Status& reason) override {
    std::lock_guard<std::mutex> lock(group_->mutex);
    if (!group_->failed) {  // the first failure is the one reported
      group_->failed = true;
      group_->failed_rank = rank_;
      group_->failed_reason = reason.message();
    }
    for (Mailbox& box : group_->mailboxes) box.arrived.notify_all();
  }

 private:
  // Expected messages of `id` already in the mailbox. REQUIRES: group_->mutex held.
  size_t CountArrived(const Mailbox& box, int32_t id, const std::vector<RecvBuffer>& recvs) const {
    return static_cast<size_t>(std::count_if(recvs.begin(), recvs.end(), [&](const RecvBuffer& r) {
      return box.messages.contains(MessageKey{id, r.peer.value});
    }));
  }

  template <typename Buffer>
  Status CheckPeers(int32_t id, const char* what, const std::vector<Buffer>& buffers) const {
    return internal::CheckPeers("local", rank_, size_, id, what, buffers);
  }

  std::shared_ptr<GroupState> group_;
  const int32_t rank_;
  const int32_t size_;
  const double timeout_s_;
  // Launched ids not yet waited on, with their receive buffers. Owned by this rank's thread.
  std::map<int32_t, std::vector<RecvBuffer>> pending_;
};

}  // namespace

Result<std::vector<std::unique_ptr<Communicator>>> MakeLocalGroup(
    const LocalGroupOptions& options) {
  if (options.size < 1 || options.size > kMaxLocalGroupSize) {
    return Status::InvalidArgument(fmt::format("LocalGroupOptions.size {} must be in [1, {}]",
                                               options.size, kMaxLocalGroupSize));
  }
  if (!(options.timeout_s > 0.0) || !std::isfinite(options.timeout_s)) {
    return Status::InvalidArgument(fmt::format(
        "LocalGroupOptions.timeout_s {} must be a finite number > 0", options.timeout_s));
  }
  auto group = std::make_shared<GroupState>(options.size);
  std::vector<std::unique_ptr<Communicator>> comms;
  comms.reserve(static_cast<size_t>(options.size));
  for (int32_t rank = 0; rank < options.size; ++rank) {
    comms.push_back(
        std::make_unique<LocalCommunicator>(group, rank, options.size, options.timeout_s));
  }
  return comms;
}

}  // namespace dcp
