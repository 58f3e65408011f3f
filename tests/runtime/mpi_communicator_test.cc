// SPDX-License-Identifier: Apache-2.0
// The MPI communicator. These tests run in every rank of an MPI job: ctest runs them under
// `mpirun -n 3` and also one by one as 1-rank jobs (MPI singletons, no mpirun). Every rank runs
// the same tests in the same order, each test makes its own communicator, and whatever a test
// expects of the other ranks it derives from the same seed, so the tests hold for any number of
// ranks. MPI is finalized once, after the last test.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dcp/runtime.h"
#include "testing/messages.h"

namespace dcp {
namespace {

class MpiEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    const Status finalized = FinalizeMpi();
    EXPECT_TRUE(finalized.ok()) << finalized.ToString();
  }
};
::testing::Environment* const kMpiEnvironment =
    ::testing::AddGlobalTestEnvironment(new MpiEnvironment);

std::unique_ptr<Communicator> MakeComm(double timeout_s) {
  auto comm = MakeMpiCommunicator({.timeout_s = timeout_s});
  EXPECT_TRUE(comm.ok()) << comm.status().ToString();
  return comm.ok() ? std::move(comm).value() : nullptr;
}

using testing::ExpectedByte;
using testing::ExpectedMessage;
using testing::SecondsSince;

bool Contains(const Status& status, const std::string& part) {
  return status.message().find(part) != std::string::npos;
}

TEST(MpiCommunicator, IsOneRankOfTheWholeJob) {
  std::unique_ptr<Communicator> comm = MakeComm(10.0);
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->Name(), "mpi");
  int expected_size = 1;  // a singleton, unless mpirun (Open MPI) started this process
  if (const char* size = std::getenv("OMPI_COMM_WORLD_SIZE")) expected_size = std::atoi(size);
  EXPECT_EQ(comm->size(), expected_size);
  EXPECT_GE(comm->rank(), 0);
  EXPECT_LT(comm->rank(), comm->size());
}

TEST(MpiCommunicator, RejectsBadOptions) {
  for (double timeout : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    auto comm = MakeMpiCommunicator({.timeout_s = timeout});
    ASSERT_FALSE(comm.ok());
    EXPECT_EQ(comm.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(comm.status(), "timeout_s")) << comm.status().ToString();
  }
}

// Several exchanges in flight, launched and waited on in random orders, with messages of every
// size from nothing to a few MiB (MPI's eager and rendezvous protocols) and to the rank itself.
TEST(MpiCommunicator, RandomAllToAllVDeliversEveryMessage) {
  constexpr size_t kIds = 4;
  std::unique_ptr<Communicator> comm = MakeComm(30.0);
  ASSERT_NE(comm, nullptr);
  const int32_t n = comm->size(), rank = comm->rank();
  const auto r = static_cast<size_t>(rank);
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed) + ", rank " + std::to_string(rank));
    // The same on every rank: sizes[k][src][dst], -1 = no message, else its bytes.
    std::mt19937_64 rng(seed);
    std::vector<int32_t> ids(kIds);
    for (size_t k = 0; k < kIds; ++k) ids[k] = static_cast<int32_t>(10 * k + seed);
    std::vector<std::vector<std::vector<int64_t>>> sizes(
        kIds, std::vector<std::vector<int64_t>>(static_cast<size_t>(n),
                                                std::vector<int64_t>(static_cast<size_t>(n))));
    for (auto& per_id : sizes) {
      for (auto& per_src : per_id) {
        for (int64_t& bytes : per_src) {
          const uint64_t kind = rng() % 6;
          bytes = kind == 0   ? -1
                  : kind == 1 ? 0
                  : kind == 2 ? static_cast<int64_t>(1 + rng() % (3 << 20))
                              : static_cast<int64_t>(1 + rng() % 5000);
        }
      }
    }
    // Each rank's own orders.
    std::mt19937_64 order_rng(seed * 1000 + r);
    std::vector<size_t> launch_order(kIds), wait_order(kIds);
    for (size_t k = 0; k < kIds; ++k) launch_order[k] = wait_order[k] = k;
    std::shuffle(launch_order.begin(), launch_order.end(), order_rng);
    std::shuffle(wait_order.begin(), wait_order.end(), order_rng);

    std::vector<std::vector<std::vector<std::byte>>> recv_data(kIds);
    for (size_t k : launch_order) {
      const int32_t id = ids[k];
      recv_data[k].resize(static_cast<size_t>(n));
      std::vector<std::vector<std::byte>> send_data(static_cast<size_t>(n));
      std::vector<SendBuffer> sends;
      std::vector<RecvBuffer> recvs;
      for (int32_t peer = 0; peer < n; ++peer) {
        const auto p = static_cast<size_t>(peer);
        if (const int64_t out = sizes[k][r][p]; out >= 0) {
          send_data[p] = ExpectedMessage(id, rank, peer, static_cast<size_t>(out));
          sends.push_back({DeviceId{peer}, send_data[p].data(), send_data[p].size()});
        }
        if (const int64_t in = sizes[k][p][r]; in >= 0) {
          recv_data[k][p].assign(static_cast<size_t>(in), std::byte{0xEE});
          recvs.push_back({DeviceId{peer}, recv_data[k][p].data(), recv_data[k][p].size()});
        }
      }
      std::shuffle(sends.begin(), sends.end(), order_rng);
      std::shuffle(recvs.begin(), recvs.end(), order_rng);
      const Status launched = comm->Launch(id, std::move(sends), std::move(recvs));
      EXPECT_TRUE(launched.ok()) << launched.ToString();
      // The sends were copied: their buffers may go now (send_data ends here).
    }
    for (size_t k : wait_order) {
      const int32_t id = ids[k];
      const Status waited = comm->Wait(id);
      ASSERT_TRUE(waited.ok()) << waited.ToString();
      for (int32_t peer = 0; peer < n; ++peer) {
        const int64_t in = sizes[k][static_cast<size_t>(peer)][r];
        if (in < 0) continue;
        EXPECT_TRUE(recv_data[k][static_cast<size_t>(peer)] ==
                    ExpectedMessage(id, peer, rank, static_cast<size_t>(in)))
            << "id " << id << ", from peer " << peer << ", " << in << " bytes";
      }
    }
  }
}

TEST(MpiCommunicator, ReusedIdDeliversMessagesInLaunchOrder) {
  std::unique_ptr<Communicator> comm = MakeComm(30.0);
  ASSERT_NE(comm, nullptr);
  const int32_t n = comm->size(), rank = comm->rank();
  const int32_t next = (rank + 1) % n, previous = (rank + n - 1) % n;
  for (int round = 0; round < 3; ++round) {
    std::byte out{static_cast<unsigned char>(10 * rank + round)}, in{0};
    ASSERT_TRUE(comm->Launch(5, {{DeviceId{next}, &out, 1}}, {{DeviceId{previous}, &in, 1}}).ok());
    ASSERT_TRUE(comm->Wait(5).ok());
    EXPECT_EQ(in, std::byte(static_cast<unsigned char>(10 * previous + round)));
  }
  // No peers at all completes at once.
  ASSERT_TRUE(comm->Launch(6, {}, {}).ok());
  EXPECT_TRUE(comm->Wait(6).ok());
}

// The last rank fails; every rank, itself included, gets CommFailure naming it and the reason
// from its pending and later Waits, long before the deadline.
TEST(MpiCommunicator, FailOnOneRankFailsPendingAndLaterWaitsOnAllRanks) {
  std::unique_ptr<Communicator> comm = MakeComm(60.0);
  ASSERT_NE(comm, nullptr);
  const int32_t n = comm->size(), rank = comm->rank(), failing = n - 1;
  const auto start = std::chrono::steady_clock::now();
  const std::string expected =
      "rank " + std::to_string(failing) + " failed: Internal: disk on fire";
  if (rank == failing) {
    comm->Fail(Status::Internal("disk on fire"));
  } else {
    // A message from the failing rank, which never comes.
    std::byte in{0};
    ASSERT_TRUE(comm->Launch(1, {}, {{DeviceId{failing}, &in, 1}}).ok());
    const Status pending = comm->Wait(1);
    EXPECT_EQ(pending.code(), StatusCode::kCommFailure) << pending.ToString();
    EXPECT_EQ(pending.message(), expected);
    // Telling the others again changes nothing: the first failure is the one reported.
    comm->Fail(Status::Internal("second"));
  }
  // An exchange with itself, which would otherwise succeed.
  std::byte out{1}, in{0};
  ASSERT_TRUE(comm->Launch(2, {{DeviceId{rank}, &out, 1}}, {{DeviceId{rank}, &in, 1}}).ok());
  const Status later = comm->Wait(2);
  EXPECT_EQ(later.code(), StatusCode::kCommFailure) << later.ToString();
  EXPECT_EQ(later.message(), expected);
  EXPECT_LT(SecondsSince(start), 30.0);  // generous: the waits end as the notice arrives
}

TEST(MpiCommunicator, TimesOutNamingTheIdAndMissingPeers) {
  // Making a communicator waits for every rank, so the short deadline of the second one does not
  // depend on how far apart the ranks finished the previous test.
  std::unique_ptr<Communicator> together = MakeComm(60.0);
  std::unique_ptr<Communicator> comm = MakeComm(0.3);
  ASSERT_NE(comm, nullptr);
  const int32_t n = comm->size(), rank = comm->rank(), next = (rank + 1) % n;
  // Nobody sends.
  std::byte in{0};
  ASSERT_TRUE(comm->Launch(7, {}, {{DeviceId{next}, &in, 1}}).ok());
  const Status status = comm->Wait(7);
  EXPECT_EQ(status.code(), StatusCode::kTimeout) << status.ToString();
  EXPECT_TRUE(Contains(status, "id 7")) << status.ToString();
  EXPECT_TRUE(Contains(status, "peers [" + std::to_string(next) + "]")) << status.ToString();
  // The exchange is over: waiting again is an argument error.
  EXPECT_EQ(comm->Wait(7).code(), StatusCode::kInvalidArgument);
}

TEST(MpiCommunicator, SizeMismatchIsACommFailureNamingTheSizes) {
  std::unique_ptr<Communicator> comm = MakeComm(10.0);
  ASSERT_NE(comm, nullptr);
  const int32_t rank = comm->rank();
  std::vector<std::byte> out(8, std::byte{1}), in(16, std::byte{0});
  ASSERT_TRUE(
      comm->Launch(3, {{DeviceId{rank}, out.data(), 8}}, {{DeviceId{rank}, in.data(), 16}}).ok());
  const Status shorter = comm->Wait(3);
  EXPECT_EQ(shorter.code(), StatusCode::kCommFailure) << shorter.ToString();
  for (const std::string& part : {"peer " + std::to_string(rank), std::string("id 3"),
                                  std::string("8 bytes"), std::string("16 bytes")}) {
    EXPECT_TRUE(Contains(shorter, part)) << part << ": " << shorter.ToString();
  }
  ASSERT_TRUE(
      comm->Launch(4, {{DeviceId{rank}, in.data(), 16}}, {{DeviceId{rank}, out.data(), 8}}).ok());
  const Status longer = comm->Wait(4);
  EXPECT_EQ(longer.code(), StatusCode::kCommFailure) << longer.ToString();
  EXPECT_TRUE(Contains(longer, "longer than its receive buffer of 8 bytes")) << longer.ToString();
}

void ExpectInvalid(const Status& status, const std::string& part) {
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_TRUE(Contains(status, part)) << "want '" << part << "' in " << status.ToString();
}

TEST(MpiCommunicator, RejectsBadLaunchAndWaitArguments) {
  std::unique_ptr<Communicator> comm = MakeComm(10.0);
  ASSERT_NE(comm, nullptr);
  const int32_t n = comm->size(), rank = comm->rank();
  std::byte a{0}, b{0};
  const std::string n_text = std::to_string(n);
  ExpectInvalid(comm->Launch(1, {{DeviceId{n}, &a, 1}}, {}), "send peer " + n_text + " is out");
  ExpectInvalid(comm->Launch(1, {{DeviceId{-1}, &a, 1}}, {}), "send peer -1 is out of range");
  ExpectInvalid(comm->Launch(1, {}, {{DeviceId{n + 6}, &a, 1}}), "is out of range");
  ExpectInvalid(comm->Launch(1, {{DeviceId{rank}, &a, 1}, {DeviceId{rank}, &b, 1}}, {}),
                "is listed twice");
  ExpectInvalid(comm->Launch(1, {}, {{DeviceId{rank}, &a, 1}, {DeviceId{rank}, &b, 1}}),
                "is listed twice");
  ExpectInvalid(comm->Launch(1, {{DeviceId{rank}, nullptr, 4}}, {}), "4 bytes but no data");
  ExpectInvalid(comm->Launch(-3, {}, {}), "ids must be in [0, ");
  ExpectInvalid(comm->Wait(42), "id 42");

  // Rejected launches left nothing behind: id 1 can still be launched, once.
  ASSERT_TRUE(comm->Launch(1, {}, {}).ok());
  ExpectInvalid(comm->Launch(1, {}, {}), "id 1 is already launched");
  EXPECT_TRUE(comm->Wait(1).ok());
  ExpectInvalid(comm->Wait(1), "id 1");
}

// Exchanges launched and never waited on, with messages nobody receives: destroying the
// communicator neither hangs nor disturbs the next one, and MPI still finalizes at the end.
TEST(MpiCommunicator, DestroyingItWithExchangesInFlightIsClean) {
  {
    std::unique_ptr<Communicator> comm = MakeComm(10.0);
    ASSERT_NE(comm, nullptr);
    const int32_t n = comm->size(), rank = comm->rank(), next = (rank + 1) % n;
    std::vector<std::byte> big(2 << 20, std::byte{3}), small(10, std::byte{4});
    std::vector<std::byte> in(64);
    ASSERT_TRUE(comm->Launch(3, {{DeviceId{next}, big.data(), big.size()}}, {}).ok());
    ASSERT_TRUE(comm->Launch(4, {{DeviceId{next}, small.data(), small.size()}},
                             {{DeviceId{next}, in.data(), in.size()}})
                    .ok());
  }
  // A fresh communicator does not see the old one's messages.
  std::unique_ptr<Communicator> comm = MakeComm(10.0);
  ASSERT_NE(comm, nullptr);
  const int32_t rank = comm->rank();
  std::vector<std::byte> out = ExpectedMessage(3, rank, rank, 100), in(100);
  ASSERT_TRUE(comm->Launch(3, {{DeviceId{rank}, out.data(), out.size()}},
                           {{DeviceId{rank}, in.data(), in.size()}})
                  .ok());
  ASSERT_TRUE(comm->Wait(3).ok());
  EXPECT_EQ(in, out);
}

TEST(MpiCommunicator, FinalizeWaitsForEveryCommunicatorToGo) {
  std::unique_ptr<Communicator> comm = MakeComm(10.0);
  ASSERT_NE(comm, nullptr);
  const Status early = FinalizeMpi();
  EXPECT_EQ(early.code(), StatusCode::kInvalidArgument) << early.ToString();
  EXPECT_TRUE(Contains(early, "still alive")) << early.ToString();
}

}  // namespace
}  // namespace dcp
