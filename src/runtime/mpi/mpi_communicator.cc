// SPDX-License-Identifier: Apache-2.0
// The MPI communicator: one rank per process (one process per device), over a private duplicate
// of MPI_COMM_WORLD. It mirrors the in-process LocalCommunicator:
//  - Launch posts one non-blocking MPI_Isend per send and one MPI_Irecv per receive under the tag
//    kFirstExchangeTag + id, so several exchanges may be in flight and complete in any order.
//    MPI keeps messages of one (source, tag) in order, so an id may be reused once both sides
//    have waited on it. Like the local communicator it copies: sends are copied at Launch and
//    receives land in buffers of its own, copied out when Wait succeeds. An exchange given up on
//    (a peer failed, the deadline passed) therefore never leaves MPI pointing at the caller's
//    memory.
//  - Wait polls its requests (MPI_Testsome) and the failure channel, sleeping a little between
//    polls, and returns Timeout after MpiOptions::timeout_s without any request completing. It
//    returns once the receives are complete: its sends, already copied, finish in the
//    background, as the local communicator's mailboxes hold a message until its receiver takes
//    it. So a program that runs in process never deadlocks here on the order in which two ranks
//    wait (MPI's rendezvous protocol holds a large send until its receive is posted). Destroying
//    the communicator gives sends still in flight until the deadline to arrive, unless a rank
//    failed.
//  - Failures travel on their own tag (kFailureTag): every rank keeps one MPI_Irecv from any
//    source posted on it, and Fail sends the reason to every other rank. Only the rank that fails
//    first tells the others; a rank that already heard of a failure reports that one.
// MPI is process-wide, so two things here are too: the count of live communicators (FinalizeMpi
// refuses to run while one is alive) and the buffers of requests given up on, which MPI may still
// touch until MPI_Finalize (a send whose receiver never took it).
//
// Thread safety: one thread per MpiCommunicator (as for every Communicator); MPI is started with
// MPI_THREAD_SERIALIZED, so different communicators may live on different threads as long as
// their calls do not overlap.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dcp/runtime.h"
#include "runtime/check_peers.h"

namespace dcp {
namespace {

constexpr int kFailureTag = 0;
constexpr int kFirstExchangeTag = 1;  // exchange `id` travels under tag kFirstExchangeTag + id
// One MPI message carries at most this many bytes (MPI counts are int); longer buffers go as
// several messages under the same tag, which MPI delivers in order.
constexpr size_t kMaxChunkBytes = size_t{1} << 30;
// A failure notice carries at most this much of the reason.
constexpr size_t kMaxReasonBytes = 4096;
// Wait polls this many times in a row, then sleeps between polls, the sleep doubling from
// kMinSleep to kMaxSleep: quick exchanges stay quick, and a rank that waits long leaves the CPU to
// ranks that compute (mpirun --oversubscribe puts several ranks on one core).
constexpr int kSpinPolls = 64;
constexpr std::chrono::microseconds kMinSleep{20};
constexpr std::chrono::microseconds kMaxSleep{1000};

using Bytes = std::vector<std::byte>;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string JoinRanks(const std::vector<int32_t>& ranks) {
  std::string out = "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(ranks[i]);
  }
  return out + "]";
}

std::string MpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return fmt::format("MPI error {}", code);
  return std::string(text, static_cast<size_t>(length));
}

size_t ChunkCount(size_t bytes) {
  return std::max<size_t>(1, (bytes + kMaxChunkBytes - 1) / kMaxChunkBytes);
}
int ChunkBytes(size_t bytes, size_t chunk) {
  return static_cast<int>(std::min(kMaxChunkBytes, bytes - chunk * kMaxChunkBytes));
}

// Polls, then sleeps between polls with a growing sleep; Reset after progress.
class Backoff {
 public:
  void Pause() {
    if (++polls_ <= kSpinPolls) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(2 * sleep_, kMaxSleep);
  }
  void Reset() {
    polls_ = 0;
    sleep_ = kMinSleep;
  }

 private:
  int polls_ = 0;
  std::chrono::microseconds sleep_ = kMinSleep;
};

// What MPI needs kept alive while it may still use it.
struct Leftover {
  std::vector<MPI_Request> requests;  // MPI_REQUEST_NULL once complete
  std::vector<Bytes> buffers;         // the memory those requests read or write
};

struct ProcessState {
  std::mutex mutex;
  int live_communicators = 0;      // guarded by mutex
  std::vector<Leftover> leftover;  // requests freed unfinished; guarded by mutex; kept until
                                   // MPI_Finalize
};
ProcessState& Process() {
  static ProcessState state;
  return state;
}

// One launched exchange.
struct Exchange {
  struct Receive {
    int32_t peer = 0;
    std::vector<std::span<std::byte>> destination;  // the caller's buffers
    size_t bytes = 0;                  // its size
    size_t buffer = 0;                 // index in `buffers`
    size_t received = 0;               // bytes arrived so far
    bool truncated = false;            // a message was longer than expected
  };
  std::vector<MPI_Request> requests;     // sends, then receives; MPI_REQUEST_NULL once complete
  std::vector<int32_t> request_peer;     // per request
  std::vector<int32_t> request_receive;  // per request: index in `receives`, -1 for a send
  std::vector<size_t> request_buffer;    // per request: index in `buffers`
  std::vector<Bytes> buffers;            // send copies and receive buffers
  std::vector<Receive> receives;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, int32_t rank, int32_t size, double timeout_s, int32_t max_id)
      : comm_(comm), rank_(rank), size_(size), timeout_s_(timeout_s), max_id_(max_id) {
    std::lock_guard<std::mutex> lock(Process().mutex);
    ++Process().live_communicators;
  }

  ~MpiCommunicator() override {
    for (auto& [id, exchange] : pending_) Abandon(exchange);
    pending_.clear();
    FlushSendsInFlight();
    for (Leftover& left : in_flight_) leftover_.push_back(std::move(left));
    in_flight_.clear();
    if (failure_request_ != MPI_REQUEST_NULL) {
      MPI_Cancel(&failure_request_);
      Leftover notice;
      notice.requests.push_back(failure_request_);
      notice.buffers.push_back(std::move(failure_buffer_));
      leftover_.push_back(std::move(notice));
    }
    ReapLeftover();
    std::lock_guard<std::mutex> lock(Process().mutex);
    for (Leftover& left : leftover_) {
      for (MPI_Request& request : left.requests) {
        if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
      }
      Process().leftover.push_back(std::move(left));
    }
    MPI_Comm_free(&comm_);
    --Process().live_communicators;
  }

  // Posts the receive of the failure channel. Called once, right after construction.
  Status Start() {
    failure_buffer_.resize(kMaxReasonBytes);
    const int rc = MPI_Irecv(failure_buffer_.data(), static_cast<int>(kMaxReasonBytes), MPI_BYTE,
                             MPI_ANY_SOURCE, kFailureTag, comm_, &failure_request_);
    if (rc != MPI_SUCCESS) {
      failure_request_ = MPI_REQUEST_NULL;
      return Status::CommFailure(fmt::format(
          "mpi communicator rank {}: posting the failure channel: {}", rank_, MpiErrorText(rc)));
    }
    return Status::Ok();
  }

  std::string_view Name() const override { return "mpi"; }
  int32_t rank() const override { return rank_; }
  int32_t size() const override { return size_; }

  // Posts the last buffer of `x` in chunks under the exchange's tag: MPI_Isend to `peer`, or, for
  // the receive of index `receive` (>= 0), MPI_Irecv from it.
  Status PostChunks(Exchange& x, int32_t id, int32_t peer, int32_t receive) {
    const size_t index = x.buffers.size() - 1;
    Bytes& buffer = x.buffers[index];
    for (size_t c = 0; c < ChunkCount(buffer.size()); ++c) {
      MPI_Request& request = x.requests.emplace_back(MPI_REQUEST_NULL);
      x.request_peer.push_back(peer);
      x.request_receive.push_back(receive);
      x.request_buffer.push_back(index);
      std::byte* chunk = buffer.data() + c * kMaxChunkBytes;
      const int bytes = ChunkBytes(buffer.size(), c);
      const int tag = kFirstExchangeTag + id;
      const int rc = receive < 0 ? MPI_Isend(chunk, bytes, MPI_BYTE, peer, tag, comm_, &request)
                                 : MPI_Irecv(chunk, bytes, MPI_BYTE, peer, tag, comm_, &request);
      if (rc != MPI_SUCCESS) {
        return Status::CommFailure(
            fmt::format("mpi communicator rank {}: Launch(id {}): {} rank {}: {}", rank_, id,
                        receive < 0 ? "MPI_Isend to" : "MPI_Irecv from", peer, MpiErrorText(rc)));
      }
    }
    return Status::Ok();
  }

  Status Launch(int32_t id, std::vector<SendBuffer> sends, std::vector<RecvBuffer> recvs) override {
    if (pending_.contains(id)) {
      return Status::InvalidArgument(fmt::format(
          "mpi communicator rank {}: Launch(id {}): id {} is already launched and not yet waited "
          "on",
          rank_, id, id));
    }
    if (id < 0 || id > max_id_) {
      return Status::InvalidArgument(
          fmt::format("mpi communicator rank {}: Launch(id {}): ids must be in [0, {}], the tags "
                      "this MPI offers",
                      rank_, id, max_id_));
    }
    DCP_RETURN_IF_ERROR(CheckPeers(id, "send", sends));
    DCP_RETURN_IF_ERROR(CheckPeers(id, "recv", recvs));

    Exchange x;
    Status status;
    for (const SendBuffer& send : sends) {
      if (!status.ok()) break;
      x.buffers.push_back(internal::Gathered(send.parts));
      status = PostChunks(x, id, send.peer.value, /*receive=*/-1);
    }
    for (const RecvBuffer& recv : recvs) {
      if (!status.ok()) break;
      x.receives.push_back(Exchange::Receive{.peer = recv.peer.value,
                                             .destination = recv.parts,
                                             .bytes = recv.bytes(),
                                             .buffer = x.buffers.size()});
      x.buffers.emplace_back(recv.bytes());
      status = PostChunks(x, id, recv.peer.value, static_cast<int32_t>(x.receives.size() - 1));
    }
    if (!status.ok()) {
      Abandon(x);
      return status;
    }
    pending_.emplace(id, std::move(x));
    return Status::Ok();
  }

  Status Wait(int32_t id) override {
    auto it = pending_.find(id);
    if (it == pending_.end()) return internal::NotLaunched("mpi", rank_, id);
    // The exchange is over once Wait returns, whatever the outcome.
    Exchange x = std::move(it->second);
    pending_.erase(it);
    Status status = Complete(id, x);
    if (!status.ok()) {
      Abandon(x);
      return status;
    }
    for (const Exchange::Receive& r : x.receives) {
      internal::Scatter(x.buffers[r.buffer].data(), r.destination);
    }
    KeepSendsInFlight(x);
    return Status::Ok();
  }

  Result<bool> Test(int32_t id) override {
    return Status::Unsupported(fmt::format("mpi communicator: Test({}) is not implemented", id));
  }

  void Fail(const Status& reason) override {
    PollFailure();
    if (failed_rank_ >= 0) return;  // the first failure this rank knows of is the one reported
    failed_rank_ = rank_;
    failure_reason_ = reason.ToString();  // with the code: the other ranks print it as it is
    const size_t bytes = std::min(failure_reason_.size(), kMaxReasonBytes);
    Leftover notices;
    for (int32_t peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      Bytes& text = notices.buffers.emplace_back(bytes);
      std::memcpy(text.data(), failure_reason_.data(), bytes);
      MPI_Request& request = notices.requests.emplace_back(MPI_REQUEST_NULL);
      // Best effort: a rank that cannot be told still stops at its deadline.
      if (MPI_Isend(text.data(), static_cast<int>(bytes), MPI_BYTE, peer, kFailureTag, comm_,
                    &request) != MPI_SUCCESS) {
        request = MPI_REQUEST_NULL;
      }
    }
    leftover_.push_back(std::move(notices));
    ReapLeftover();
  }

 private:
  // Polls the exchange until every request completed, a failure is known or the deadline passed.
  Status Complete(int32_t id, Exchange& x) {
    const size_t n = x.requests.size();
    std::vector<int> indices(n);
    std::vector<MPI_Status> statuses(n);
    size_t remaining =
        static_cast<size_t>(std::count_if(x.request_receive.begin(), x.request_receive.end(),
                                          [](int32_t receive) { return receive >= 0; }));
    Backoff backoff;
    auto last_progress = Clock::now();
    while (true) {
      PollFailure();
      if (failed_rank_ >= 0) {
        return Status::CommFailure(
            fmt::format("rank {} failed: {}", failed_rank_, failure_reason_));
      }
      if (remaining == 0) break;
      int done = 0;
      const int rc = MPI_Testsome(static_cast<int>(n), x.requests.data(), &done, indices.data(),
                                  statuses.data());
      if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
        return Status::CommFailure(
            fmt::format("mpi communicator rank {}: Wait(id {}): {}", rank_, id, MpiErrorText(rc)));
      }
      if (done == MPI_UNDEFINED) done = 0;
      for (int k = 0; k < done; ++k) {
        const auto i = static_cast<size_t>(indices[k]);
        DCP_RETURN_IF_ERROR(Completed(id, x, i, statuses[k], rc == MPI_ERR_IN_STATUS));
        if (x.request_receive[i] >= 0) --remaining;
      }
      if (done > 0) {  // progress: the no-progress deadline starts over
        last_progress = Clock::now();
        backoff.Reset();
        continue;
      }
      if (SecondsSince(last_progress) >= timeout_s_) return TimedOut(id, x);
      ReapLeftover();
      backoff.Pause();
    }
    for (const Exchange::Receive& r : x.receives) {
      if (r.truncated) {
        return Status::CommFailure(fmt::format(
            "mpi communicator rank {}: Wait(id {}): message from peer {} is longer than its "
            "receive buffer of {} bytes",
            rank_, id, r.peer, r.bytes));
      }
      if (r.received != r.bytes) {
        return Status::CommFailure(fmt::format(
            "mpi communicator rank {}: Wait(id {}): message from peer {} has {} bytes but its "
            "receive buffer has {} bytes",
            rank_, id, r.peer, r.received, r.bytes));
      }
    }
    return Status::Ok();
  }

  // Books request `i` of the exchange as complete.
  Status Completed(int32_t id, Exchange& x, size_t i, const MPI_Status& status, bool check_error) {
    const int32_t receive = x.request_receive[i];
    if (check_error && status.MPI_ERROR != MPI_SUCCESS) {
      int error_class = 0;
      MPI_Error_class(status.MPI_ERROR, &error_class);
      if (receive >= 0 && error_class == MPI_ERR_TRUNCATE) {
        x.receives[static_cast<size_t>(receive)].truncated = true;
        return Status::Ok();
      }
      return Status::CommFailure(
          fmt::format("mpi communicator rank {}: Wait(id {}): {} rank {}: {}", rank_, id,
                      receive >= 0 ? "receiving from" : "sending to", x.request_peer[i],
                      MpiErrorText(status.MPI_ERROR)));
    }
    if (receive >= 0) {
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      x.receives[static_cast<size_t>(receive)].received += static_cast<size_t>(std::max(count, 0));
    }
    return Status::Ok();
  }

  Status TimedOut(int32_t id, const Exchange& x) const {
    std::vector<int32_t> missing;
    for (size_t i = 0; i < x.requests.size(); ++i) {
      if (x.requests[i] == MPI_REQUEST_NULL || x.request_receive[i] < 0) continue;
      if (missing.empty() || missing.back() != x.request_peer[i]) {
        missing.push_back(x.request_peer[i]);
      }
    }
    return Status::Timeout(fmt::format(
        "mpi communicator rank {}: Wait(id {}): no progress for {} s; still missing messages "
        "from peers {}",
        rank_, id, timeout_s_, JoinRanks(missing)));
  }

  // After a successful Wait: the sends not finished yet go on in the background, with their
  // copies.
  void KeepSendsInFlight(Exchange& x) {
    Leftover left;
    std::vector<bool> kept(x.buffers.size(), false);
    for (size_t i = 0; i < x.requests.size(); ++i) {
      if (x.requests[i] == MPI_REQUEST_NULL) continue;
      left.requests.push_back(x.requests[i]);
      x.requests[i] = MPI_REQUEST_NULL;
      const size_t buffer = x.request_buffer[i];
      if (!kept[buffer]) left.buffers.push_back(std::move(x.buffers[buffer]));
      kept[buffer] = true;
    }
    if (!left.requests.empty()) in_flight_.push_back(std::move(left));
    ReapLeftover();
  }

  // Gives the sends in flight until the no-progress deadline to arrive, unless a rank failed
  // (then nobody waits for them).
  void FlushSendsInFlight() {
    Backoff backoff;
    auto last_progress = Clock::now();
    size_t left = in_flight_.size();
    while (!in_flight_.empty()) {
      PollFailure();
      if (failed_rank_ >= 0) return;
      ReapLeftover();
      if (in_flight_.size() < left) {
        left = in_flight_.size();
        last_progress = Clock::now();
        backoff.Reset();
        continue;
      }
      if (SecondsSince(last_progress) >= timeout_s_) return;
      backoff.Pause();
    }
  }

  // Reads the failure channel; records the first notice.
  void PollFailure() {
    if (failure_request_ == MPI_REQUEST_NULL) return;
    int arrived = 0;
    MPI_Status status;
    if (MPI_Test(&failure_request_, &arrived, &status) != MPI_SUCCESS || !arrived) return;
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    if (failed_rank_ >= 0) return;  // this rank failed first and already told the others
    failed_rank_ = status.MPI_SOURCE;
    failure_reason_.assign(
        reinterpret_cast<const char*>(failure_buffer_.data()),
        static_cast<size_t>(std::clamp(count, 0, static_cast<int>(kMaxReasonBytes))));
  }

  // Gives up on an exchange: its receives are cancelled, and whatever MPI has not finished is
  // kept, with its buffers, until it does.
  void Abandon(Exchange& x) {
    Leftover left;
    for (size_t i = 0; i < x.requests.size(); ++i) {
      if (x.requests[i] == MPI_REQUEST_NULL) continue;
      if (x.request_receive[i] >= 0) MPI_Cancel(&x.requests[i]);
      left.requests.push_back(x.requests[i]);
      x.requests[i] = MPI_REQUEST_NULL;
    }
    if (left.requests.empty()) return;
    left.buffers = std::move(x.buffers);
    leftover_.push_back(std::move(left));
    ReapLeftover();
  }

  // Drops the leftovers and sends in flight that MPI has finished with.
  void ReapLeftover() {
    const auto finished = [](Leftover& left) {
      int done = 0;
      if (MPI_Testall(static_cast<int>(left.requests.size()), left.requests.data(), &done,
                      MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
        return false;
      }
      return done != 0;
    };
    std::erase_if(leftover_, finished);
    std::erase_if(in_flight_, finished);
  }

  template <typename Buffer>
  Status CheckPeers(int32_t id, const char* what, const std::vector<Buffer>& buffers) const {
    return internal::CheckPeers("mpi", rank_, size_, id, what, buffers);
  }

  MPI_Comm comm_;
  const int32_t rank_;
  const int32_t size_;
  const double timeout_s_;
  const int32_t max_id_;
  std::map<int32_t, Exchange> pending_;  // launched, not yet waited on
  MPI_Request failure_request_ = MPI_REQUEST_NULL;
  Bytes failure_buffer_;
  int32_t failed_rank_ = -1;  // the first failure this rank knows of; -1: none
  std::string failure_reason_;
  std::vector<Leftover> leftover_;   // given up on, still in MPI's hands
  std::vector<Leftover> in_flight_;  // sends of completed Waits, still on their way
};

}  // namespace

Result<std::unique_ptr<Communicator>> MakeMpiCommunicator(const MpiOptions& options) {
  if (!(options.timeout_s > 0.0) || !std::isfinite(options.timeout_s)) {
    return Status::InvalidArgument(
        fmt::format("MpiOptions.timeout_s {} must be a finite number > 0", options.timeout_s));
  }
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) {
    return Status::CommFailure("MPI was already finalized in this process; it cannot start again");
  }
  if (!initialized) {
    int provided = 0;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) {
      return Status::CommFailure(fmt::format("MPI_Init_thread failed: {}", MpiErrorText(rc)));
    }
  }
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  // MPI_Comm_idup rather than MPI_Comm_dup: a rank that never joins is a Timeout, not a hang.
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  int rc = MPI_Comm_idup(MPI_COMM_WORLD, &comm, &request);
  if (rc != MPI_SUCCESS) {
    return Status::CommFailure(
        fmt::format("mpi communicator rank {}: MPI_Comm_idup: {}", rank, MpiErrorText(rc)));
  }
  const auto start = Clock::now();
  Backoff backoff;
  for (int done = 0; !done;) {
    rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      return Status::CommFailure(
          fmt::format("mpi communicator rank {}: MPI_Comm_idup: {}", rank, MpiErrorText(rc)));
    }
    if (done) break;
    if (SecondsSince(start) >= options.timeout_s) {
      // The request stays with MPI: an unfinished collective cannot be cancelled.
      return Status::Timeout(fmt::format(
          "mpi communicator rank {}: the other ranks of MPI_COMM_WORLD (size {}) did not create "
          "their communicators within {} s",
          rank, size, options.timeout_s));
    }
    backoff.Pause();
  }
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);

  int32_t max_id = 32767 - kFirstExchangeTag;  // the least MPI_TAG_UB the standard allows
  void* tag_ub = nullptr;
  int has_tag_ub = 0;
  if (MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &has_tag_ub) == MPI_SUCCESS &&
      has_tag_ub) {
    max_id = *static_cast<int*>(tag_ub) - kFirstExchangeTag;
  }
  auto communicator =
      std::make_unique<MpiCommunicator>(comm, rank, size, options.timeout_s, max_id);
  DCP_RETURN_IF_ERROR(communicator->Start());
  return std::unique_ptr<Communicator>(std::move(communicator));
}

Status FinalizeMpi() {
  ProcessState& process = Process();
  std::lock_guard<std::mutex> lock(process.mutex);
  if (process.live_communicators > 0) {
    return Status::InvalidArgument(
        fmt::format("FinalizeMpi: {} MPI communicator(s) still alive; destroy them first",
                    process.live_communicators));
  }
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return Status::Ok();
  const int rc = MPI_Finalize();
  process.leftover.clear();
  if (rc != MPI_SUCCESS) {
    return Status::CommFailure(fmt::format("MPI_Finalize failed (MPI error {})", rc));
  }
  return Status::Ok();
}

}  // namespace dcp
