// SPDX-License-Identifier: Apache-2.0
// For test binaries that run under mpirun: finalizes MPI after the last test, so that every rank
// ends as mpirun expects. Include it in exactly one file of the binary.
#pragma once

#include <gtest/gtest.h>

#include "dcp/communicator.h"

namespace dcp::testing {

class MpiEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    const Status finalized = FinalizeMpi();
    EXPECT_TRUE(finalized.ok()) << finalized.ToString();
  }
};
inline ::testing::Environment* const kMpiEnvironment =
    ::testing::AddGlobalTestEnvironment(new MpiEnvironment);

}  // namespace dcp::testing
