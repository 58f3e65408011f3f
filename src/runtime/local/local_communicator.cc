// SPDX-License-Identifier: Apache-2.0
// The in-process communicator: the ranks of a group are threads of one process and share one
// GroupState. Copies: dcp copies each message's bytes exactly once, from the sender's parts
// straight into the receiver's parts.
//
// Launch posts one half per message: a send half per SendBuffer, a receive half per RecvBuffer.
// Halves wait in the group's queues, keyed by (exchange id, source rank, destination rank), until
// the other side of the message is launched; the rank that launches a message last finds the
// other half waiting, and copies the message (outside the lock) during its own Launch. So a rank
// may run ahead: its halves wait for the slower rank, in launch order, which is how launches of
// one id between two ranks match in the order they were made (a rank may launch an id again as
// soon as its previous launch of it completed, even when a peer has not yet launched the first).
//
// An exchange completes when every receive was filled and every send was delivered (the sender's
// parts are only valid until its Wait returns, so it must not return before). Wait blocks on the
// rank's condition variable until then, or until a rank failed or nothing moved for timeout_s.
// An exchange given up on (Wait or Test failed, the communicator went away) first waits for the
// copies into or out of it already under way, then stays in the queues as abandoned: a message
// matched with it later is dropped (a send) or fails its receiver (a receive), and its parts are
// never touched again; once a rank sees a failure (Fail, or a failed Launch, Test or Wait), it
// gives up on all its pending exchanges. A message whose size differs from its receive fails the
// receiver's exchange with CommFailure; the sender's send counts as delivered.
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
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "dcp/communicator.h"
#include "runtime/check_peers.h"

namespace dcp {
namespace {

constexpr int32_t kMaxLocalGroupSize = 4096;
// A Wait sleeps at most this long in one go, so that converting a huge timeout_s to clock ticks
// cannot overflow; it then checks the no-progress deadline again.
constexpr double kMaxSleepSeconds = 3600.0;

// One launched exchange of one rank. The buffers are fixed at launch; every other field is
// guarded by the group's mutex.
struct Exchange {
  Exchange(int32_t id_, int32_t rank_, std::vector<SendBuffer> sends_,
           std::vector<RecvBuffer> recvs_)
      : id(id_),
        rank(rank_),
        sends(std::move(sends_)),
        recvs(std::move(recvs_)),
        send_done(sends.size(), false),
        recv_done(recvs.size(), false) {}

  bool done() const { return completed == sends.size() + recvs.size(); }

  const int32_t id;
  const int32_t rank;
  const std::vector<SendBuffer> sends;
  const std::vector<RecvBuffer> recvs;
  std::vector<bool> send_done;  // delivered (or dropped: its receiver gave up)
  std::vector<bool> recv_done;  // filled (or failed: see error)
  size_t completed = 0;         // sends and receives done
  int copies_in_flight = 0;     // copies into or out of its parts under way, outside the lock
  bool abandoned = false;       // its rank gave up on it: its parts must not be touched
  Status error;                 // the first receive that failed
};

// One side of one message, waiting in a queue for the other side.
struct Half {
  std::shared_ptr<Exchange> exchange;
  size_t index = 0;  // in exchange->sends or exchange->recvs
};

// (exchange id, source rank, destination rank)
using MessageKey = std::tuple<int32_t, int32_t, int32_t>;

// A matched message, copied outside the lock.
struct Copy {
  std::shared_ptr<Exchange> sender;
  size_t send = 0;
  std::shared_ptr<Exchange> receiver;
  size_t recv = 0;
};

// What all ranks of one group share.
struct GroupState {
  explicit GroupState(int32_t size) : progress(static_cast<size_t>(size)) {}

  std::mutex mutex;
  // One per rank: notified when one of the rank's exchanges progresses, and on Fail.
  std::vector<std::condition_variable> progress;
  // Halves whose other side is not launched yet, in launch order; for one key, only one of the
  // two maps holds halves. Guarded by mutex.
  std::map<MessageKey, std::deque<Half>> unmatched_sends, unmatched_recvs;
  bool failed = false;        // guarded by mutex
  int32_t failed_rank = -1;   // guarded by mutex
  std::string failed_reason;  // guarded by mutex
};

std::string JoinRanks(const std::vector<int32_t>& ranks) {
  std::string out = "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(ranks[i]);
  }
  return out + "]";
}

// Copies the parts of `from` back to back into the parts of `to`. REQUIRES: equal total sizes.
void CopyParts(const std::vector<std::span<const std::byte>>& from,
               const std::vector<std::span<std::byte>>& to) {
  size_t i = 0, j = 0, from_offset = 0, to_offset = 0;
  while (i < from.size() && j < to.size()) {
    const size_t n = std::min(from[i].size() - from_offset, to[j].size() - to_offset);
    if (n > 0) std::memcpy(to[j].data() + to_offset, from[i].data() + from_offset, n);
    from_offset += n;
    to_offset += n;
    if (from_offset == from[i].size()) {
      ++i;
      from_offset = 0;
    }
    if (to_offset == to[j].size()) {
      ++j;
      to_offset = 0;
    }
  }
}

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<GroupState> group, int32_t rank, int32_t size, double timeout_s)
      : group_(std::move(group)), rank_(rank), size_(size), timeout_s_(timeout_s) {}

  // Exchanges still pending are given up on; none of their parts is touched afterwards.
  ~LocalCommunicator() override {
    std::unique_lock<std::mutex> lock(group_->mutex);
    for (auto& [id, exchange] : pending_) Retire(*exchange, lock);
  }

  std::string_view Name() const override { return "local"; }
  int32_t rank() const override { return rank_; }
  int32_t size() const override { return size_; }

  Status Launch(int32_t id, std::vector<SendBuffer> sends, std::vector<RecvBuffer> recvs) override {
    DCP_RETURN_IF_ERROR(Failure());
    if (pending_.contains(id)) {
      return Status::InvalidArgument(fmt::format(
          "local communicator rank {}: Launch(id {}): id {} is already launched and not yet "
          "completed",
          rank_, id, id));
    }
    DCP_RETURN_IF_ERROR(CheckPeers(id, "send", sends));
    DCP_RETURN_IF_ERROR(CheckPeers(id, "recv", recvs));

    auto x = std::make_shared<Exchange>(id, rank_, std::move(sends), std::move(recvs));
    std::vector<Copy> copies;
    {
      std::lock_guard<std::mutex> lock(group_->mutex);
      if (group_->failed) return FailureLocked();
      for (size_t i = 0; i < x->sends.size(); ++i) {
        const MessageKey key{id, rank_, x->sends[i].peer.value};
        if (std::optional<Half> recv = PopHalf(group_->unmatched_recvs, key)) {
          Match(x, i, recv->exchange, recv->index, copies);
        } else {
          group_->unmatched_sends[key].push_back(Half{x, i});
        }
      }
      for (size_t i = 0; i < x->recvs.size(); ++i) {
        const MessageKey key{id, x->recvs[i].peer.value, rank_};
        if (std::optional<Half> send = PopHalf(group_->unmatched_sends, key)) {
          Match(send->exchange, send->index, x, i, copies);
        } else {
          group_->unmatched_recvs[key].push_back(Half{x, i});
        }
      }
    }
    pending_.emplace(id, x);
    if (copies.empty()) return Status::Ok();

    // The one copy of each message, outside the lock: both exchanges count it in flight, so
    // neither side gives up on its parts before it is done.
    for (const Copy& c : copies) {
      CopyParts(c.sender->sends[c.send].parts, c.receiver->recvs[c.recv].parts);
    }
    std::lock_guard<std::mutex> lock(group_->mutex);
    for (const Copy& c : copies) {
      --c.sender->copies_in_flight;
      --c.receiver->copies_in_flight;
      Complete(*c.sender, c.sender->send_done, c.send);
      Complete(*c.receiver, c.receiver->recv_done, c.recv);
    }
    return Status::Ok();
  }

  Result<bool> Test(int32_t id) override {
    auto it = pending_.find(id);
    if (it == pending_.end()) {
      DCP_RETURN_IF_ERROR(Failure());
      return internal::NotLaunched("local", rank_, "Test", id);
    }
    std::unique_lock<std::mutex> lock(group_->mutex);
    Exchange& x = *it->second;
    Status status;
    if (group_->failed) {
      status = FailureLocked();
    } else if (x.done()) {
      status = x.error;
    } else {
      return false;
    }
    // Over, whatever the outcome.
    const std::shared_ptr<Exchange> over = std::move(it->second);
    pending_.erase(it);
    Retire(*over, lock);
    if (!status.ok()) return status;
    return true;
  }

  Status Wait(int32_t id) override {
    auto it = pending_.find(id);
    if (it == pending_.end()) {
      DCP_RETURN_IF_ERROR(Failure());
      return internal::NotLaunched("local", rank_, "Wait", id);
    }
    // The exchange is over once Wait returns, whatever the outcome.
    const std::shared_ptr<Exchange> x = std::move(it->second);
    pending_.erase(it);

    std::unique_lock<std::mutex> lock(group_->mutex);
    std::condition_variable& progress = group_->progress[static_cast<size_t>(rank_)];
    size_t completed_before = x->completed;
    auto last_progress = std::chrono::steady_clock::now();
    Status status;
    while (true) {
      if (group_->failed) {
        status = FailureLocked();
        break;
      }
      if (x->done()) {
        status = x->error;
        break;
      }
      const auto now = std::chrono::steady_clock::now();
      if (x->completed > completed_before) {  // progress: the no-progress deadline starts over
        completed_before = x->completed;
        last_progress = now;
      }
      const double idle_s = std::chrono::duration<double>(now - last_progress).count();
      if (idle_s >= timeout_s_) {
        status = TimedOut(*x);
        break;
      }
      const double sleep_s = std::min(timeout_s_ - idle_s, kMaxSleepSeconds);
      progress.wait_until(lock,
                          now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(sleep_s)));
    }
    Retire(*x, lock);
    return status;
  }

  void Fail(const Status& reason) override {
    std::unique_lock<std::mutex> lock(group_->mutex);
    if (!group_->failed) {  // the first failure is the one reported
      group_->failed = true;
      group_->failed_rank = rank_;
      group_->failed_reason = reason.message();
    }
    for (std::condition_variable& progress : group_->progress) progress.notify_all();
    // This rank may stop here and free the parts of exchanges it never waited on.
    for (auto& [id, exchange] : pending_) Retire(*exchange, lock);
  }

 private:
  // The first half waiting under `key`, taken out of `queues`, or none.
  // REQUIRES: group_->mutex held.
  static std::optional<Half> PopHalf(std::map<MessageKey, std::deque<Half>>& queues,
                                     const MessageKey& key) {
    auto it = queues.find(key);
    if (it == queues.end()) return std::nullopt;
    Half half = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) queues.erase(it);
    return half;
  }

  // Pairs send `s` of `sender` with receive `r` of `receiver`: a copy to make, or, when either
  // side was abandoned or the sizes differ, an outcome at once. REQUIRES: group_->mutex held.
  void Match(const std::shared_ptr<Exchange>& sender, size_t s,
             const std::shared_ptr<Exchange>& receiver, size_t r, std::vector<Copy>& copies) {
    if (receiver->abandoned) {  // nobody takes the message: it is dropped
      Complete(*sender, sender->send_done, s);
      return;
    }
    if (sender->abandoned) {
      FailReceive(*receiver, r,
                  fmt::format("local communicator rank {}: exchange id {}: peer {} gave up on its "
                              "message to this rank before it was delivered",
                              receiver->rank, receiver->id, sender->rank));
      return;
    }
    const size_t sent = sender->sends[s].bytes(), expected = receiver->recvs[r].bytes();
    if (sent != expected) {
      FailReceive(
          *receiver, r,
          fmt::format("local communicator rank {}: exchange id {}: message from peer {} has {} "
                      "bytes but its receive buffer has {} bytes",
                      receiver->rank, receiver->id, sender->rank, sent, expected));
      Complete(*sender, sender->send_done, s);
      return;
    }
    ++sender->copies_in_flight;
    ++receiver->copies_in_flight;
    copies.push_back(Copy{sender, s, receiver, r});
  }

  // Books receive `r` of `x` as failed for `message`. REQUIRES: group_->mutex held.
  void FailReceive(Exchange& x, size_t r, std::string message) {
    if (x.error.ok()) x.error = Status::CommFailure(std::move(message));
    Complete(x, x.recv_done, r);
  }

  // Books send or receive `i` of `x` (`done` is x.send_done or x.recv_done) as done.
  // REQUIRES: group_->mutex held.
  void Complete(Exchange& x, std::vector<bool>& done, size_t i) {
    done[i] = true;
    ++x.completed;
    group_->progress[static_cast<size_t>(x.rank)].notify_all();
  }

  // Ends this rank's use of `x`: if it did not complete, it is abandoned, once the copies under
  // way into or out of it are done. REQUIRES: `lock` holds group_->mutex.
  void Retire(Exchange& x, std::unique_lock<std::mutex>& lock) {
    if (x.done()) return;
    x.abandoned = true;
    std::condition_variable& progress = group_->progress[static_cast<size_t>(rank_)];
    progress.wait(lock, [&] { return x.copies_in_flight == 0; });
  }

  // CommFailure naming the failed rank, or OK when none failed. On failure, every pending
  // exchange is given up on (they stay pending, to report it): a caller that stops at the failure
  // may free the parts of exchanges it launched and never waited on.
  Status Failure() {
    std::unique_lock<std::mutex> lock(group_->mutex);
    if (!group_->failed) return Status::Ok();
    for (auto& [id, exchange] : pending_) Retire(*exchange, lock);
    return FailureLocked();
  }
  // REQUIRES: group_->mutex held and group_->failed.
  Status FailureLocked() const {
    return internal::PeerFailed(group_->failed_rank, group_->failed_reason);
  }

  Status TimedOut(const Exchange& x) const {
    std::vector<int32_t> missing, undelivered;
    for (size_t i = 0; i < x.recvs.size(); ++i) {
      if (!x.recv_done[i]) missing.push_back(x.recvs[i].peer.value);
    }
    for (size_t i = 0; i < x.sends.size(); ++i) {
      if (!x.send_done[i]) undelivered.push_back(x.sends[i].peer.value);
    }
    std::string what;
    if (!missing.empty()) what = "still missing messages from peers " + JoinRanks(missing);
    if (!undelivered.empty()) {
      if (!what.empty()) what += "; ";
      what += "peers " + JoinRanks(undelivered) + " have not received their messages";
    }
    return Status::Timeout(
        fmt::format("local communicator rank {}: Wait(id {}): no progress for {} s; {}", rank_,
                    x.id, timeout_s_, what));
  }

  template <typename Buffer>
  Status CheckPeers(int32_t id, const char* what, const std::vector<Buffer>& buffers) const {
    return internal::CheckPeers("local", rank_, size_, id, what, buffers);
  }

  std::shared_ptr<GroupState> group_;
  const int32_t rank_;
  const int32_t size_;
  const double timeout_s_;
  // Launched exchanges not yet completed. Owned by this rank's thread.
  std::map<int32_t, std::shared_ptr<Exchange>> pending_;
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
