// SPDX-License-Identifier: Apache-2.0
// The MPI entry points of a build without MPI (no MPI was found at configure time): the
// communicator is Unsupported and there is nothing to finalize.
#include "dcp/runtime.h"

namespace dcp {

Result<std::unique_ptr<Communicator>> MakeMpiCommunicator(const MpiOptions& /*options*/) {
  return Status::Unsupported("this dcp was built without MPI (CMake found no MPI)");
}

Status FinalizeMpi() { return Status::Ok(); }

}  // namespace dcp
