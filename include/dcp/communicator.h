// SPDX-License-Identifier: Apache-2.0
// Communicators: move bytes between the ranks (devices) of one group. The executor reaches the
// network only through this interface; the in-process group (threads of one process, the embedded
// default) and MPI implement it, a torch.distributed process group can too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "dcp/partition.h"
#include "dcp/status.h"

namespace dcp {

// The message to one peer, gathered from several buffers: the parts travel back to back, in
// order, as one message. The executor sends its buffer slots where they lie, unpacked.
struct SendBuffer {
  DeviceId peer;
  std::vector<std::span<const std::byte>> parts = {};
  size_t bytes() const;  // sum of the parts
};
// The message from one peer, scattered into several buffers in order.
struct RecvBuffer {
  DeviceId peer;
  std::vector<std::span<std::byte>> parts = {};
  size_t bytes() const;
};

// Moves bytes between the ranks of one group. Thread safety: one thread per Communicator object.
//
// Failure: once any rank of the group has called Fail (or a peer is known to be dead), every later
// Launch, Test and Wait on every rank returns CommFailure naming the failed rank and its reason.
class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual std::string_view Name() const = 0;
  virtual int32_t rank() const = 0;
  virtual int32_t size() const = 0;

  // Starts one exchange: every SendBuffer goes to its peer, every RecvBuffer is filled from its
  // peer. Peers not listed exchange nothing. Does not block. Every part of the sends and receives
  // must stay valid, and the sends unchanged, until Wait(id) returns (or Test(id) returned true):
  // the communicator may read and write them at any time until then. Every peer must launch the
  // same id with the mirror lists; a message whose size differs from the receiver's parts is a
  // CommFailure on the receiver. An id may be launched again once this rank's previous launch of
  // it completed; launches of one id between two ranks match in the order they were made.
  virtual Status Launch(int32_t id, std::vector<SendBuffer> sends,
                        std::vector<RecvBuffer> recvs) = 0;
  // Whether the exchange `id` has completed (all its receives arrived, all its sends delivered),
  // without blocking. True completes it, as Wait would; after that, `id` is no longer pending.
  virtual Result<bool> Test(int32_t id) = 0;
  // Completes the exchange `id`. Returns CommFailure when a peer failed (the message names it)
  // and Timeout when nothing arrives within the group's deadline; never blocks forever.
  virtual Status Wait(int32_t id) = 0;
  // Tells every rank of the group that this rank failed; their pending and later calls return
  // CommFailure naming this rank and the reason.
  virtual void Fail(const Status& reason) = 0;

  // Takes `memory` that held the parts of exchanges given up on (a failure, a timeout) and keeps
  // it alive for as long as the transport may still touch those parts: a caller that stopped on
  // an error hands its buffers over instead of freeing them. The in-process group never touches
  // the parts of an exchange given up on, so the default drops `memory` at once; MPI keeps it
  // until MPI_Finalize (it cannot cancel sends).
  virtual void KeepAliveAfterFailure(std::shared_ptr<void> memory) { (void)memory; }

 protected:
  Communicator() = default;
};

struct LocalGroupOptions {
  int32_t size = 1;         // ranks (devices) in the group, >= 1
  double timeout_s = 30.0;  // a Wait gives up after this long without progress
};

// `size` communicators of one in-process group (one per device thread); the embedded default.
// A message is copied once, from the sender's parts straight into the receiver's parts, by
// whichever of the two launches the exchange last.
Result<std::vector<std::unique_ptr<Communicator>>> MakeLocalGroup(const LocalGroupOptions& options);

struct MpiOptions {
  double timeout_s = 30.0;  // a Wait (and the creation itself) gives up after this long without
                            // progress; raise it when one rank may compute longer than this
                            // between two exchanges
};

// The communicator of this process over MPI_COMM_WORLD: one rank per process (per device), rank
// and size of MPI_COMM_WORLD. Starts MPI (MPI_Init_thread, MPI_THREAD_SERIALIZED) when nobody has;
// works on a private duplicate of MPI_COMM_WORLD, so communicators made one after the other never
// see each other's messages. Collective: every rank of MPI_COMM_WORLD calls it, in the same order;
// returns Timeout when the others do not within options.timeout_s. A message's parts are sent and
// received in place (an MPI datatype over the parts), without copies by dcp. Fail sends the others
// reason.ToString() (code included, cut at 4 KiB). Returns Unsupported in a build without MPI,
// InvalidArgument for bad options and CommFailure when MPI fails or was already finalized.
Result<std::unique_ptr<Communicator>> MakeMpiCommunicator(const MpiOptions& options);

// Shuts MPI down (MPI_Finalize) after the last MPI communicator is gone, so a program run by
// mpirun ends cleanly; a no-op when MPI was never started or is already finalized, and in a build
// without MPI. MPI cannot start again afterwards. Returns InvalidArgument while an MPI
// communicator is still alive and CommFailure when MPI_Finalize fails.
Status FinalizeMpi();

}  // namespace dcp
