// SPDX-License-Identifier: Apache-2.0
// Test-only knobs of the MPI communicator (src/runtime/mpi/mpi_communicator.cc). Internal.
#pragma once

#include <cstddef>

namespace dcp::internal {

// The most bytes one MPI message carries in communicators made from now on (0: the default,
// 1 GiB; at most INT_MAX), so tests can chunk messages without allocating gigabytes. Every rank
// must set the same value before making its communicator. Process-wide.
void TestOnlySetMpiMaxChunkBytes(size_t bytes);

}  // namespace dcp::internal
