// SPDX-License-Identifier: Apache-2.0
// The MPI communicator: one rank per process (one process per device), over a private duplicate
// of MPI_COMM_WORLD. Copies: dcp copies no message byte; MPI reads the sender's parts and writes
// the receiver's parts in place (its transport may copy internally: eager buffers, shared memory).
//  - Launch posts the messages at once: one MPI_Isend per send and one MPI_Irecv per receive, on
//    the caller's memory, under tag kFirstExchangeTag + id. A message (or chunk) in one part goes
//    as MPI_BYTE from that part; one over several parts goes as an MPI datatype over their
//    absolute addresses (MPI_Type_create_hindexed from MPI_BOTTOM), committed per message and
//    freed once its request is over. MPI counts are int, so a message goes as chunks: B bytes
//    make B / max_chunk_bytes_ chunks of max_chunk_bytes_ (1 GiB) and a last chunk of the rest,
//    zero bytes included, each over its own stretch of the parts. As the last chunk is always
//    shorter than the others, a sender and a receiver that disagree on the size disagree on the
//    size of a chunk the receiver gets, whatever their chunk counts. MPI keeps the messages of
//    one (source, tag) in order, so chunks pair up in order and launches of an id between two
//    ranks match in launch order.
//  - Wait polls its requests (MPI_Testsome) and the failure channel, sleeping a little between
//    polls, until every receive arrived and every send completed (the sender's parts are only
//    valid until Wait returns, so MPI must be done reading them). It returns Timeout after
//    MpiOptions::timeout_s without any request completing. Test polls once. Deadlocks: every
//    request is posted at Launch, and polling any request drives MPI's progress for all of them,
//    so ranks that launch ids in the same order and wait in the same order cannot wait on each
//    other in a cycle (a large send completes once its receive is posted, at the peer's Launch).
//  - A size mismatch is a CommFailure on the receiver, reported once its other requests
//    completed (the mismatched message's remaining chunks are cancelled). The sender completes,
//    unless its message had more chunks than the receiver took: those are never received, and
//    the sender times out unless the receiver reports its failure (Fail) first.
//    Beware: MPI reports a message longer than its receive as truncated, but Open MPI 4.1.4
//    writes past the receive in some paths (btl self with a rendezvous message of about 1 KiB
//    and more, seen under valgrind), so a longer message may corrupt the receiver's memory next
//    to its parts. Checking the size first (MPI_Improbe, then MPI_Imrecv of a message whose size
//    matches) would avoid it, at the price of matching receives while polling rather than at
//    Launch; receives are matched at Launch today, and dcp's own plans never send a message of
//    another size than its receive (ValidatePlan checks both sides' sizes).
//  - An exchange given up on (a rank failed, the deadline passed, MPI failed, the communicator
//    was destroyed with it pending) is cancelled before Wait or Test returns: every outstanding
//    request gets MPI_Cancel, and the receives are polled until MPI confirms them cancelled or
//    complete, for at most min(timeout_s, kAbandonGraceSeconds) without progress. What remains
//    after that, and what the caller must know about its memory:
//      * sends: MPI may not cancel a send (Open MPI never does; MPI 4 deprecates it). A send
//        whose receiver has not taken it stays posted: MPI may still read its parts if and when
//        the receiver posts the matching receive, until the communicator is freed and MPI
//        finalized. Small sends (MPI's eager protocol) are complete already and read nothing.
//      * receives: a receive MPI had already matched to an incoming message and that does not
//        finish within the grace (its sender stopped in the middle of a large message) may still
//        be written by MPI until MPI_Finalize.
//    The requests left over are tested on every later call and freed (MPI_Request_free) when the
//    communicator goes. Once this rank knows of a failure (its own Fail, or a notice), every
//    pending exchange is given up on at once, so a caller that stops there may free the parts of
//    exchanges it launched and never waited on.
//  - Failures travel on their own tag (kFailureTag): every rank keeps one MPI_Irecv from any
//    source posted on it, and Fail sends the reason to every other rank. Only the rank that fails
//    first tells the others; a rank that already heard of a failure reports that one. Launch,
//    Test and Wait read the channel first and return CommFailure once a failure is known.
// MPI is process-wide, so two things here are too: the count of live communicators (FinalizeMpi
// refuses to run while one is alive) and the buffers of failure notices still in MPI's hands.
//
// Thread safety: one thread per MpiCommunicator (as for every Communicator); MPI is started with
// MPI_THREAD_SERIALIZED, so different communicators may live on different threads as long as
// their calls do not overlap.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
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

#include "dcp/communicator.h"
#include "runtime/check_peers.h"
#include "runtime/mpi/mpi_testing.h"

namespace dcp {
namespace {

constexpr int kFailureTag = 0;
constexpr int kFirstExchangeTag = 1;  // exchange `id` travels under tag kFirstExchangeTag + id
// One MPI message carries at most this many bytes (MPI counts are int); longer messages go as
// several chunks under the same tag, which MPI delivers in order.
constexpr size_t kMaxChunkBytes = size_t{1} << 30;
// A failure notice carries at most this much of the reason.
constexpr size_t kMaxReasonBytes = 4096;
// An exchange given up on waits at most this long (and at most timeout_s) without progress for
// MPI to confirm its receives cancelled.
constexpr double kAbandonGraceSeconds = 1.0;
// Wait polls this many times in a row, then sleeps between polls, the sleep doubling from
// kMinSleep to kMaxSleep: quick exchanges stay quick, and a rank that waits long leaves the CPU to
// ranks that compute (mpirun --oversubscribe puts several ranks on one core).
constexpr int kSpinPolls = 64;
constexpr std::chrono::microseconds kMinSleep{20};
constexpr std::chrono::microseconds kMaxSleep{1000};

// The chunk size of communicators made from now on; 0: kMaxChunkBytes.
std::atomic<size_t> test_only_max_chunk_bytes{0};

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

// Requests MPI still owns, with the buffers of dcp's own they use (failure notices; the caller's
// memory of an exchange given up on is kept only when the caller hands it over:
// KeepAliveAfterFailure).
struct Leftover {
  std::vector<MPI_Request> requests;  // MPI_REQUEST_NULL once complete
  std::vector<Bytes> buffers;
};

struct ProcessState {
  std::mutex mutex;
  int live_communicators = 0;      // guarded by mutex
  std::vector<Leftover> leftover;  // requests freed unfinished; guarded by mutex; kept until
                                   // MPI_Finalize
  std::vector<std::shared_ptr<void>> kept;  // callers' memory MPI may still touch; guarded by
                                            // mutex; freed after MPI_Finalize
};
ProcessState& Process() {
  static ProcessState state;
  return state;
}

// One stretch of a message's parts.
struct Piece {
  const std::byte* data = nullptr;
  size_t bytes = 0;
};

// One launched exchange.
struct Exchange {
  // One send or receive.
  struct Message {
    int32_t peer = 0;
    bool receive = false;
    size_t bytes = 0;                // the sum of its parts
    size_t chunks = 0;               // MPI messages it travels as
    Status mismatch = Status::Ok();  // a receive: CommFailure when its size differs from `bytes`
  };
  // One MPI request: one chunk of one message.
  struct Chunk {
    size_t message = 0;                     // index in `messages`
    size_t index = 0;                       // chunk index in its message
    size_t bytes = 0;                       // its size
    MPI_Datatype type = MPI_DATATYPE_NULL;  // a datatype of dcp's over several parts, or NULL
  };
  std::vector<Message> messages;
  std::vector<MPI_Request> requests;  // per chunk; MPI_REQUEST_NULL once complete
  std::vector<Chunk> chunks;          // per request
  size_t outstanding = 0;             // requests not complete

  // The first size mismatch, or OK.
  Status Mismatch() const {
    for (const Message& m : messages) {
      if (!m.mismatch.ok()) return m.mismatch;
    }
    return Status::Ok();
  }
};

// Frees the datatype of a chunk whose request is over (or handed to MPI for good: MPI_Type_free
// lets pending operations on it finish).
void FreeType(Exchange::Chunk& chunk) {
  if (chunk.type != MPI_DATATYPE_NULL) MPI_Type_free(&chunk.type);
  chunk.type = MPI_DATATYPE_NULL;
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, int32_t rank, int32_t size, double timeout_s, int32_t max_id,
                  size_t max_chunk_bytes)
      : comm_(comm),
        rank_(rank),
        size_(size),
        timeout_s_(timeout_s),
        max_id_(max_id),
        max_chunk_bytes_(max_chunk_bytes) {
    std::lock_guard<std::mutex> lock(Process().mutex);
    ++Process().live_communicators;
  }

  ~MpiCommunicator() override {
    for (auto& [id, exchange] : pending_) Abandon(exchange);
    pending_.clear();
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
      if (!left.buffers.empty()) Process().leftover.push_back(std::move(left));
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

  Status Launch(int32_t id, std::vector<SendBuffer> sends, std::vector<RecvBuffer> recvs) override {
    DCP_RETURN_IF_ERROR(Failure());
    if (pending_.contains(id)) {
      return Status::InvalidArgument(fmt::format(
          "mpi communicator rank {}: Launch(id {}): id {} is already launched and not yet "
          "completed",
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
    DCP_RETURN_IF_ERROR(CheckPartCounts(id, "send", sends));
    DCP_RETURN_IF_ERROR(CheckPartCounts(id, "recv", recvs));

    Exchange x;
    Status status;
    for (const SendBuffer& send : sends) {
      if (!status.ok()) break;
      status = PostMessage(x, id, send.peer.value, /*receive=*/false, send.parts);
    }
    for (const RecvBuffer& recv : recvs) {
      if (!status.ok()) break;
      status = PostMessage(x, id, recv.peer.value, /*receive=*/true, recv.parts);
    }
    if (!status.ok()) {
      Abandon(x);
      return status;
    }
    pending_.emplace(id, std::move(x));
    return Status::Ok();
  }

  Result<bool> Test(int32_t id) override {
    auto it = pending_.find(id);
    if (it == pending_.end()) {
      DCP_RETURN_IF_ERROR(Failure());
      return internal::NotLaunched("mpi", rank_, "Test", id);
    }
    Exchange& x = it->second;
    Status status = Failure();
    if (status.ok() && x.outstanding > 0) status = Poll(id, "Test", x).status();
    if (status.ok() && x.outstanding > 0) return false;
    // Over, whatever the outcome.
    Exchange over = std::move(x);
    pending_.erase(it);
    if (!status.ok()) {
      Abandon(over);
      return status;
    }
    DCP_RETURN_IF_ERROR(over.Mismatch());
    return true;
  }

  Status Wait(int32_t id) override {
    auto it = pending_.find(id);
    if (it == pending_.end()) {
      DCP_RETURN_IF_ERROR(Failure());
      return internal::NotLaunched("mpi", rank_, "Wait", id);
    }
    // The exchange is over once Wait returns, whatever the outcome.
    Exchange x = std::move(it->second);
    pending_.erase(it);
    const Status status = Complete(id, x);
    if (!status.ok()) {
      Abandon(x);
      return status;
    }
    return x.Mismatch();
  }

  // Sends MPI could not cancel may read the memory until MPI_Finalize: it is kept until then.
  void KeepAliveAfterFailure(std::shared_ptr<void> memory) override {
    ProcessState& process = Process();
    std::lock_guard<std::mutex> lock(process.mutex);
    process.kept.push_back(std::move(memory));
  }

  void Fail(const Status& reason) override {
    PollFailure();
    if (failed_rank_ >= 0) return;  // the first failure this rank knows of is the one reported
    failed_rank_ = rank_;
    failure_reason_ = reason.ToString();  // with the code: the other ranks print it as it is
    AbandonPending();
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
  // Posts one message, chunk by chunk, on the caller's parts: MPI_Isend to `peer`, or MPI_Irecv
  // from it.
  template <typename Byte>
  Status PostMessage(Exchange& x, int32_t id, int32_t peer, bool receive,
                     const std::vector<std::span<Byte>>& parts) {
    size_t bytes = 0;
    for (const std::span<Byte>& part : parts) bytes += part.size();
    const size_t chunks = bytes / max_chunk_bytes_ + 1;  // the last one shorter than the others
    const size_t m = x.messages.size();
    x.messages.push_back(
        Exchange::Message{.peer = peer, .receive = receive, .bytes = bytes, .chunks = chunks});

    size_t part = 0, offset = 0;  // where the next chunk starts
    std::vector<Piece> pieces;
    for (size_t c = 0; c < chunks; ++c) {
      const size_t chunk_bytes = std::min(max_chunk_bytes_, bytes - c * max_chunk_bytes_);
      pieces.clear();
      for (size_t need = chunk_bytes; need > 0;) {
        const size_t available = parts[part].size() - offset;
        if (available == 0) {  // an empty part, or the end of one
          ++part;
          offset = 0;
          continue;
        }
        const size_t n = std::min(available, need);
        pieces.push_back(Piece{reinterpret_cast<const std::byte*>(parts[part].data()) + offset, n});
        offset += n;
        need -= n;
      }
      Exchange::Chunk chunk{.message = m, .index = c, .bytes = chunk_bytes};
      MPI_Request request = MPI_REQUEST_NULL;
      const Status posted = PostChunk(id, peer, receive, pieces, chunk, request);
      if (!posted.ok()) {
        FreeType(chunk);
        return posted;
      }
      x.requests.push_back(request);
      x.chunks.push_back(chunk);
      ++x.outstanding;
    }
    return Status::Ok();
  }

  // Posts one chunk over `pieces`: MPI_BYTE from the one piece, or a datatype of absolute
  // addresses over several (set in chunk.type, to be freed once the request is over).
  Status PostChunk(int32_t id, int32_t peer, bool receive, const std::vector<Piece>& pieces,
                   Exchange::Chunk& chunk, MPI_Request& request) {
    const auto failed = [&](const char* what, int rc) {
      return Status::CommFailure(
          fmt::format("mpi communicator rank {}: Launch(id {}): {} ({} "
                      "rank {}): {}",
                      rank_, id, what, receive ? "from" : "to", peer, MpiErrorText(rc)));
    };
    void* buffer = &empty_;  // a zero-byte chunk points at something all the same
    int count = 0;
    MPI_Datatype type = MPI_BYTE;
    if (pieces.size() == 1) {
      buffer = const_cast<std::byte*>(pieces[0].data);  // MPI_Irecv writes, MPI_Isend only reads
      count = static_cast<int>(pieces[0].bytes);        // <= max_chunk_bytes_ <= INT_MAX
    } else if (pieces.size() > 1) {
      std::vector<int> lengths(pieces.size());
      std::vector<MPI_Aint> addresses(pieces.size());
      for (size_t k = 0; k < pieces.size(); ++k) {
        lengths[k] = static_cast<int>(pieces[k].bytes);
        if (const int rc = MPI_Get_address(pieces[k].data, &addresses[k]); rc != MPI_SUCCESS) {
          return failed("MPI_Get_address", rc);
        }
      }
      // pieces.size() <= parts of the message, checked to fit an int at Launch.
      int rc = MPI_Type_create_hindexed(static_cast<int>(pieces.size()), lengths.data(),
                                        addresses.data(), MPI_BYTE, &chunk.type);
      if (rc != MPI_SUCCESS) {
        chunk.type = MPI_DATATYPE_NULL;
        return failed("MPI_Type_create_hindexed", rc);
      }
      if (rc = MPI_Type_commit(&chunk.type); rc != MPI_SUCCESS)
        return failed("MPI_Type_commit", rc);
      buffer = MPI_BOTTOM;
      count = 1;
      type = chunk.type;
    }
    const int tag = kFirstExchangeTag + id;
    const int rc = receive ? MPI_Irecv(buffer, count, type, peer, tag, comm_, &request)
                           : MPI_Isend(buffer, count, type, peer, tag, comm_, &request);
    if (rc != MPI_SUCCESS) {
      request = MPI_REQUEST_NULL;
      return failed(receive ? "MPI_Irecv" : "MPI_Isend", rc);
    }
    return Status::Ok();
  }

  // Polls the exchange until every request completed, a failure is known or the deadline passed.
  // A size mismatch is not an error here (see Exchange::Mismatch), except at the deadline.
  Status Complete(int32_t id, Exchange& x) {
    Backoff backoff;
    auto last_progress = Clock::now();
    while (true) {
      DCP_RETURN_IF_ERROR(Failure());
      if (x.outstanding == 0) return Status::Ok();
      DCP_ASSIGN_OR_RETURN(const int done, Poll(id, "Wait", x));
      if (done > 0) {  // progress: the no-progress deadline starts over
        last_progress = Clock::now();
        backoff.Reset();
        continue;
      }
      if (SecondsSince(last_progress) >= timeout_s_) {
        DCP_RETURN_IF_ERROR(x.Mismatch());  // the cause of what is missing, if it is known
        return TimedOut(id, x);
      }
      ReapLeftover();
      backoff.Pause();
    }
  }

  // Tests the exchange's requests once and books those complete; returns how many completed.
  Result<int> Poll(int32_t id, const char* call, Exchange& x) {
    const size_t n = x.requests.size();
    indices_.resize(n);
    statuses_.resize(n);
    int done = 0;
    const int rc = MPI_Testsome(static_cast<int>(n), x.requests.data(), &done, indices_.data(),
                                statuses_.data());
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
      return Status::CommFailure(fmt::format("mpi communicator rank {}: {}(id {}): {}", rank_, call,
                                             id, MpiErrorText(rc)));
    }
    if (done == MPI_UNDEFINED) done = 0;
    Status status;
    for (int k = 0; k < done; ++k) {
      const auto i = static_cast<size_t>(indices_[static_cast<size_t>(k)]);
      --x.outstanding;
      const Status booked =
          Completed(id, call, x, i, statuses_[static_cast<size_t>(k)], rc == MPI_ERR_IN_STATUS);
      if (status.ok()) status = booked;
    }
    if (!status.ok()) return status;
    return done;
  }

  // Books request `i` of the exchange as complete: a receive checks the size of what arrived.
  Status Completed(int32_t id, const char* call, Exchange& x, size_t i, const MPI_Status& status,
                   bool check_error) {
    Exchange::Chunk& chunk = x.chunks[i];
    Exchange::Message& message = x.messages[chunk.message];
    int cancelled = 0;
    MPI_Test_cancelled(&status, &cancelled);
    if (cancelled) {
      FreeType(chunk);
      return Status::Ok();
    }
    bool truncated = false;
    if (check_error && status.MPI_ERROR != MPI_SUCCESS) {
      int error_class = 0;
      MPI_Error_class(status.MPI_ERROR, &error_class);
      if (!message.receive || error_class != MPI_ERR_TRUNCATE) {
        FreeType(chunk);
        return Status::CommFailure(
            fmt::format("mpi communicator rank {}: {}(id {}): {} rank {}: {}", rank_, call, id,
                        message.receive ? "receiving from" : "sending to", message.peer,
                        MpiErrorText(status.MPI_ERROR)));
      }
      truncated = true;
    }
    if (message.receive && message.mismatch.ok()) {
      MPI_Count arrived = 0;
      if (!truncated) {
        MPI_Get_elements_x(&status, chunk.type != MPI_DATATYPE_NULL ? chunk.type : MPI_BYTE,
                           &arrived);
      }
      if (truncated || arrived != static_cast<MPI_Count>(chunk.bytes)) {
        message.mismatch = SizeMismatch(id, message, chunk, truncated, arrived);
        CancelMessage(x, chunk.message);
      }
    }
    FreeType(chunk);
    return Status::Ok();
  }

  Status SizeMismatch(int32_t id, const Exchange::Message& message, const Exchange::Chunk& chunk,
                      bool truncated, MPI_Count arrived) const {
    const std::string where = fmt::format(
        "mpi communicator rank {}: exchange id {}: message from peer {}", rank_, id, message.peer);
    if (message.chunks == 1) {
      if (truncated) {
        return Status::CommFailure(
            fmt::format("{} is longer than its receive buffer of {} bytes", where, message.bytes));
      }
      return Status::CommFailure(fmt::format("{} has {} bytes but its receive buffer has {} bytes",
                                             where, arrived, message.bytes));
    }
    return Status::CommFailure(fmt::format(
        "{} does not match its receive buffer of {} bytes: chunk {} of {} expected {} bytes and "
        "{}",
        where, message.bytes, chunk.index, message.chunks, chunk.bytes,
        truncated ? std::string("got more") : fmt::format("got {}", arrived)));
  }

  // Cancels the outstanding requests of one message (a receive whose size is known wrong).
  void CancelMessage(Exchange& x, size_t message) {
    for (size_t i = 0; i < x.requests.size(); ++i) {
      if (x.chunks[i].message == message && x.requests[i] != MPI_REQUEST_NULL) {
        MPI_Cancel(&x.requests[i]);
      }
    }
  }

  Status TimedOut(int32_t id, const Exchange& x) const {
    std::vector<int32_t> missing, undelivered;
    for (size_t i = 0; i < x.requests.size(); ++i) {
      if (x.requests[i] == MPI_REQUEST_NULL) continue;
      const Exchange::Message& message = x.messages[x.chunks[i].message];
      std::vector<int32_t>& peers = message.receive ? missing : undelivered;
      if (std::find(peers.begin(), peers.end(), message.peer) == peers.end()) {
        peers.push_back(message.peer);
      }
    }
    std::string what;
    if (!missing.empty()) what = "still missing messages from peers " + JoinRanks(missing);
    if (!undelivered.empty()) {
      if (!what.empty()) what += "; ";
      what += "peers " + JoinRanks(undelivered) + " have not received their messages";
    }
    return Status::Timeout(
        fmt::format("mpi communicator rank {}: Wait(id {}): no progress for {} s; {}", rank_, id,
                    timeout_s_, what));
  }

  // CommFailure naming the failed rank once one is known (the channel is read first), or OK.
  Status Failure() {
    PollFailure();
    if (failed_rank_ < 0) return Status::Ok();
    return internal::PeerFailed(failed_rank_, failure_reason_);
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
    AbandonPending();
  }

  // Once a failure is known, every pending exchange is given up on at once (they stay pending,
  // to report the failure): a caller that stops at the failure may free their parts without
  // waiting on them.
  void AbandonPending() {
    for (auto& [id, exchange] : pending_) Abandon(exchange);
  }

  // Gives up on an exchange: every outstanding request is cancelled, and the receives are polled
  // until MPI confirms them over or nothing moved for the grace period (see the file comment for
  // what may remain). What is still outstanding then stays with MPI, in leftover_.
  void Abandon(Exchange& x) {
    for (MPI_Request& request : x.requests) {
      if (request != MPI_REQUEST_NULL) MPI_Cancel(&request);
    }
    const auto receives_outstanding = [&] {
      for (size_t i = 0; i < x.requests.size(); ++i) {
        if (x.requests[i] != MPI_REQUEST_NULL && x.messages[x.chunks[i].message].receive) {
          return true;
        }
      }
      return false;
    };
    const double grace_s = std::min(timeout_s_, kAbandonGraceSeconds);
    Backoff backoff;
    auto last_progress = Clock::now();
    do {
      const size_t n = x.requests.size();
      indices_.resize(n);
      int done = 0;
      if (n == 0 || MPI_Testsome(static_cast<int>(n), x.requests.data(), &done, indices_.data(),
                                 MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
        break;
      }
      if (done == MPI_UNDEFINED) break;  // nothing outstanding
      for (int k = 0; k < done; ++k) FreeType(x.chunks[static_cast<size_t>(indices_[k])]);
      if (done > 0) {
        last_progress = Clock::now();
        backoff.Reset();
      } else {
        backoff.Pause();
      }
    } while (receives_outstanding() && SecondsSince(last_progress) < grace_s);

    Leftover left;
    for (size_t i = 0; i < x.requests.size(); ++i) {
      FreeType(x.chunks[i]);  // pending operations on a freed datatype still finish
      if (x.requests[i] == MPI_REQUEST_NULL) continue;
      left.requests.push_back(x.requests[i]);
      x.requests[i] = MPI_REQUEST_NULL;
    }
    x.outstanding = 0;
    if (!left.requests.empty()) leftover_.push_back(std::move(left));
    ReapLeftover();
  }

  // Drops the leftovers MPI has finished with.
  void ReapLeftover() {
    std::erase_if(leftover_, [](Leftover& left) {
      int done = 0;
      if (MPI_Testall(static_cast<int>(left.requests.size()), left.requests.data(), &done,
                      MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
        return false;
      }
      return done != 0;
    });
  }

  template <typename Buffer>
  Status CheckPeers(int32_t id, const char* what, const std::vector<Buffer>& buffers) const {
    return internal::CheckPeers("mpi", rank_, size_, id, what, buffers);
  }

  // A chunk's datatype counts its blocks in an int.
  template <typename Buffer>
  Status CheckPartCounts(int32_t id, const char* what, const std::vector<Buffer>& buffers) const {
    for (const Buffer& buffer : buffers) {
      if (buffer.parts.size() > static_cast<size_t>(INT_MAX)) {
        return Status::InvalidArgument(fmt::format(
            "mpi communicator rank {}: Launch(id {}): {} buffer for peer {} has {} parts; at most "
            "{} are supported",
            rank_, id, what, buffer.peer.value, buffer.parts.size(), INT_MAX));
      }
    }
    return Status::Ok();
  }

  MPI_Comm comm_;
  const int32_t rank_;
  const int32_t size_;
  const double timeout_s_;
  const int32_t max_id_;
  const size_t max_chunk_bytes_;
  std::map<int32_t, Exchange> pending_;  // launched, not yet completed
  MPI_Request failure_request_ = MPI_REQUEST_NULL;
  Bytes failure_buffer_;
  int32_t failed_rank_ = -1;  // the first failure this rank knows of; -1: none
  std::string failure_reason_;
  std::vector<Leftover> leftover_;  // given up on, still in MPI's hands
  std::byte empty_{};               // where zero-byte chunks point
  std::vector<int> indices_;        // scratch of MPI_Testsome
  std::vector<MPI_Status> statuses_;
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
  const size_t test_only_chunk = test_only_max_chunk_bytes.load();
  auto communicator =
      std::make_unique<MpiCommunicator>(comm, rank, size, options.timeout_s, max_id,
                                        test_only_chunk > 0 ? test_only_chunk : kMaxChunkBytes);
  DCP_RETURN_IF_ERROR(communicator->Start());
  return std::unique_ptr<Communicator>(std::move(communicator));
}

namespace internal {

void TestOnlySetMpiMaxChunkBytes(size_t bytes) {
  test_only_max_chunk_bytes.store(std::min<size_t>(bytes, INT_MAX));
}

}  // namespace internal

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
  process.kept.clear();
  if (rc != MPI_SUCCESS) {
    return Status::CommFailure(fmt::format("MPI_Finalize failed (MPI error {})", rc));
  }
  return Status::Ok();
}

}  // namespace dcp
