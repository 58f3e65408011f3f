// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dcp/runtime.h"
#include "testing/messages.h"

namespace dcp {
namespace {

using Comms = std::vector<std::unique_ptr<Communicator>>;

Comms MakeGroup(int32_t size, double timeout_s) {
  auto group = MakeLocalGroup({.size = size, .timeout_s = timeout_s});
  EXPECT_TRUE(group.ok()) << group.status().ToString();
  return group.ok() ? std::move(group).value() : Comms{};
}

// Runs body(rank) on one thread per rank and joins them all.
void RunRanks(int32_t size, const std::function<void(int32_t)>& body) {
  std::vector<std::thread> threads;
  for (int32_t rank = 0; rank < size; ++rank) threads.emplace_back(body, rank);
  for (std::thread& t : threads) t.join();
}

using testing::ExpectedByte;
using testing::ExpectedMessage;
using testing::SecondsSince;

TEST(LocalCommunicator, GroupHasOneCommunicatorPerRank) {
  Comms comms = MakeGroup(5, 1.0);
  ASSERT_EQ(comms.size(), 5u);
  for (int32_t r = 0; r < 5; ++r) {
    EXPECT_EQ(comms[static_cast<size_t>(r)]->Name(), "local");
    EXPECT_EQ(comms[static_cast<size_t>(r)]->rank(), r);
    EXPECT_EQ(comms[static_cast<size_t>(r)]->size(), 5);
  }
}

TEST(LocalCommunicator, RejectsBadOptions) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (int32_t size : {0, -1, 4097}) {
    auto group = MakeLocalGroup({.size = size, .timeout_s = 1.0});
    ASSERT_FALSE(group.ok()) << size;
    EXPECT_EQ(group.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(group.status().message().find("size " + std::to_string(size)), std::string::npos)
        << group.status().ToString();
  }
  for (double timeout_s : {0.0, -1.0, nan, inf}) {
    auto group = MakeLocalGroup({.size = 2, .timeout_s = timeout_s});
    ASSERT_FALSE(group.ok()) << timeout_s;
    EXPECT_EQ(group.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(group.status().message().find("timeout_s"), std::string::npos)
        << group.status().ToString();
  }
  EXPECT_TRUE(MakeLocalGroup({.size = 1, .timeout_s = 1e300}).ok());
  EXPECT_TRUE(MakeLocalGroup({.size = 4096, .timeout_s = 1.0}).ok());
}

// Random all-to-all-v exchanges: every (id, src, dst) is absent, empty or carries 1..100 bytes,
// src == dst included. Each rank launches all ids, then waits on them, both in its own random
// order, so exchanges overlap and ranks run ahead of each other.
TEST(LocalCommunicator, RandomAllToAllVDeliversEveryMessage) {
  constexpr int32_t kIds = 4;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    for (int32_t n = 1; n <= 16; ++n) {
      SCOPED_TRACE("seed " + std::to_string(seed) + ", ranks " + std::to_string(n));
      std::mt19937_64 rng(seed * 1000 + static_cast<uint64_t>(n));
      std::vector<int32_t> ids(kIds);
      for (int32_t k = 0; k < kIds; ++k) ids[static_cast<size_t>(k)] = 10 * k + 3;
      // sizes[k][src][dst]: -1 = no message, else its bytes.
      std::vector<std::vector<std::vector<int64_t>>> sizes(
          kIds, std::vector<std::vector<int64_t>>(static_cast<size_t>(n),
                                                  std::vector<int64_t>(static_cast<size_t>(n))));
      for (auto& per_id : sizes) {
        for (auto& per_src : per_id) {
          for (int64_t& bytes : per_src) {
            const uint64_t kind = rng() % 4;
            bytes = kind == 0 ? -1 : kind == 1 ? 0 : static_cast<int64_t>(1 + rng() % 100);
          }
        }
      }
      std::vector<uint64_t> rank_seeds(static_cast<size_t>(n));
      for (uint64_t& s : rank_seeds) s = rng();

      Comms comms = MakeGroup(n, 10.0);
      ASSERT_EQ(comms.size(), static_cast<size_t>(n));
      RunRanks(n, [&](int32_t rank) {
        const auto r = static_cast<size_t>(rank);
        Communicator& comm = *comms[r];
        std::mt19937_64 order_rng(rank_seeds[r]);
        std::vector<size_t> launch_order(kIds), wait_order(kIds);
        for (size_t k = 0; k < kIds; ++k) launch_order[k] = wait_order[k] = k;
        std::shuffle(launch_order.begin(), launch_order.end(), order_rng);
        std::shuffle(wait_order.begin(), wait_order.end(), order_rng);

        // send_data[k][dst], recv_data[k][src]
        std::vector<std::vector<std::vector<std::byte>>> send_data(kIds), recv_data(kIds);
        for (size_t k : launch_order) {
          const int32_t id = ids[k];
          send_data[k].resize(static_cast<size_t>(n));
          recv_data[k].resize(static_cast<size_t>(n));
          std::vector<SendBuffer> sends;
          std::vector<RecvBuffer> recvs;
          for (int32_t peer = 0; peer < n; ++peer) {
            const auto p = static_cast<size_t>(peer);
            if (const int64_t out = sizes[k][r][p]; out >= 0) {
              send_data[k][p] = ExpectedMessage(id, rank, peer, static_cast<size_t>(out));
              sends.push_back({DeviceId{peer}, send_data[k][p].data(), send_data[k][p].size()});
            }
            if (const int64_t in = sizes[k][p][r]; in >= 0) {
              recv_data[k][p].assign(static_cast<size_t>(in), std::byte{0xEE});
              recvs.push_back({DeviceId{peer}, recv_data[k][p].data(), recv_data[k][p].size()});
            }
          }
          // Peers in a random order: the lists need not be sorted.
          std::shuffle(sends.begin(), sends.end(), order_rng);
          std::shuffle(recvs.begin(), recvs.end(), order_rng);
          const Status launched = comm.Launch(id, std::move(sends), std::move(recvs));
          EXPECT_TRUE(launched.ok()) << "rank " << rank << ": " << launched.ToString();
        }
        for (size_t k : wait_order) {
          const int32_t id = ids[k];
          const Status waited = comm.Wait(id);
          EXPECT_TRUE(waited.ok()) << "rank " << rank << ": " << waited.ToString();
          for (int32_t peer = 0; peer < n; ++peer) {
            const int64_t in = sizes[k][static_cast<size_t>(peer)][r];
            if (in < 0) continue;
            EXPECT_EQ(recv_data[k][static_cast<size_t>(peer)],
                      ExpectedMessage(id, peer, rank, static_cast<size_t>(in)))
                << "rank " << rank << ", id " << id << ", from peer " << peer;
          }
        }
      });
    }
  }
}

TEST(LocalCommunicator, OverlappingIdsCompleteInAnyOrder) {
  Comms comms = MakeGroup(2, 5.0);
  ASSERT_EQ(comms.size(), 2u);
  RunRanks(2, [&](int32_t rank) {
    Communicator& comm = *comms[static_cast<size_t>(rank)];
    const int32_t peer = 1 - rank;
    std::vector<std::byte> out1 = ExpectedMessage(1, rank, peer, 16);
    std::vector<std::byte> out2 = ExpectedMessage(2, rank, peer, 24);
    std::vector<std::byte> in1(16), in2(24);
    ASSERT_TRUE(comm.Launch(1, {{DeviceId{peer}, out1.data(), out1.size()}},
                            {{DeviceId{peer}, in1.data(), in1.size()}})
                    .ok());
    ASSERT_TRUE(comm.Launch(2, {{DeviceId{peer}, out2.data(), out2.size()}},
                            {{DeviceId{peer}, in2.data(), in2.size()}})
                    .ok());
    EXPECT_TRUE(comm.Wait(2).ok());
    EXPECT_EQ(in2, ExpectedMessage(2, peer, rank, 24));
    EXPECT_TRUE(comm.Wait(1).ok());
    EXPECT_EQ(in1, ExpectedMessage(1, peer, rank, 16));
  });
}

// Rank 0 finishes ids 0..19 before rank 1 launches any: rank 1's mailbox keeps them all.
TEST(LocalCommunicator, KeepsMessagesForAPeerThatRunsAhead) {
  Comms comms = MakeGroup(2, 5.0);
  ASSERT_EQ(comms.size(), 2u);
  constexpr int32_t kIds = 20;
  for (int32_t id = 0; id < kIds; ++id) {
    std::vector<std::byte> out = ExpectedMessage(id, 0, 1, static_cast<size_t>(id));
    ASSERT_TRUE(comms[0]->Launch(id, {{DeviceId{1}, out.data(), out.size()}}, {}).ok());
    ASSERT_TRUE(comms[0]->Wait(id).ok());  // sender may reuse its buffer after Wait
  }
  for (int32_t id = kIds - 1; id >= 0; --id) {
    std::vector<std::byte> in(static_cast<size_t>(id));
    ASSERT_TRUE(comms[1]->Launch(id, {}, {{DeviceId{0}, in.data(), in.size()}}).ok());
    ASSERT_TRUE(comms[1]->Wait(id).ok());
    EXPECT_EQ(in, ExpectedMessage(id, 0, 1, static_cast<size_t>(id))) << "id " << id;
  }
}

TEST(LocalCommunicator, ReusedIdDeliversMessagesInLaunchOrder) {
  Comms comms = MakeGroup(2, 5.0);
  ASSERT_EQ(comms.size(), 2u);
  for (std::byte value : {std::byte{1}, std::byte{2}}) {
    ASSERT_TRUE(comms[0]->Launch(5, {{DeviceId{1}, &value, 1}}, {}).ok());
    ASSERT_TRUE(comms[0]->Wait(5).ok());
  }
  for (std::byte expected : {std::byte{1}, std::byte{2}}) {
    std::byte in{0};
    ASSERT_TRUE(comms[1]->Launch(5, {}, {{DeviceId{0}, &in, 1}}).ok());
    ASSERT_TRUE(comms[1]->Wait(5).ok());
    EXPECT_EQ(in, expected);
  }
}

TEST(LocalCommunicator, SingleRankExchangesWithItself) {
  Comms comms = MakeGroup(1, 5.0);
  ASSERT_EQ(comms.size(), 1u);
  std::vector<std::byte> out = ExpectedMessage(9, 0, 0, 33), in(33);
  ASSERT_TRUE(
      comms[0]->Launch(9, {{DeviceId{0}, out.data(), 33}}, {{DeviceId{0}, in.data(), 33}}).ok());
  ASSERT_TRUE(comms[0]->Wait(9).ok());
  EXPECT_EQ(in, out);
  // No peers at all completes at once.
  ASSERT_TRUE(comms[0]->Launch(10, {}, {}).ok());
  EXPECT_TRUE(comms[0]->Wait(10).ok());
}

TEST(LocalCommunicator, FailOnOneRankFailsPendingAndLaterWaitsOnAllOthers) {
  constexpr int32_t kRanks = 4;
  Comms comms = MakeGroup(kRanks, 30.0);  // far longer than the test may take
  ASSERT_EQ(comms.size(), static_cast<size_t>(kRanks));
  const auto start = std::chrono::steady_clock::now();
  RunRanks(kRanks, [&](int32_t rank) {
    Communicator& comm = *comms[static_cast<size_t>(rank)];
    if (rank == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      comm.Fail(Status::Internal("disk on fire"));
      return;
    }
    // Every other rank expects a message from rank 2, which never comes.
    std::byte in{0};
    ASSERT_TRUE(comm.Launch(1, {}, {{DeviceId{2}, &in, 1}}).ok());
    const Status pending = comm.Wait(1);
    EXPECT_EQ(pending.code(), StatusCode::kCommFailure) << pending.ToString();
    EXPECT_EQ(pending.message(), "rank 2 failed: disk on fire");
    // A later exchange that would otherwise succeed still reports the failure.
    ASSERT_TRUE(comm.Launch(2, {}, {}).ok());
    const Status later = comm.Wait(2);
    EXPECT_EQ(later.code(), StatusCode::kCommFailure) << later.ToString();
    EXPECT_NE(later.message().find("rank 2 failed"), std::string::npos);
  });
  EXPECT_LT(SecondsSince(start), 5.0);  // generous: the waits end when Fail is called
}

TEST(LocalCommunicator, FirstFailureIsTheOneReported) {
  Comms comms = MakeGroup(3, 5.0);
  ASSERT_EQ(comms.size(), 3u);
  comms[1]->Fail(Status::Timeout("first"));
  comms[2]->Fail(Status::Internal("second"));
  ASSERT_TRUE(comms[0]->Launch(0, {}, {}).ok());
  const Status status = comms[0]->Wait(0);
  EXPECT_EQ(status.code(), StatusCode::kCommFailure);
  EXPECT_EQ(status.message(), "rank 1 failed: first");
}

TEST(LocalCommunicator, TimesOutNamingTheIdAndMissingPeers) {
  Comms comms = MakeGroup(3, 0.2);
  ASSERT_EQ(comms.size(), 3u);
  std::byte from1{0}, from2{0}, out{7};
  // Rank 2 sends; rank 1 never launches.
  ASSERT_TRUE(comms[2]->Launch(7, {{DeviceId{0}, &out, 1}}, {}).ok());
  ASSERT_TRUE(comms[0]->Launch(7, {}, {{DeviceId{1}, &from1, 1}, {DeviceId{2}, &from2, 1}}).ok());
  const auto start = std::chrono::steady_clock::now();
  const Status status = comms[0]->Wait(7);
  EXPECT_LT(SecondsSince(start), 5.0);
  EXPECT_EQ(status.code(), StatusCode::kTimeout) << status.ToString();
  EXPECT_NE(status.message().find("id 7"), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find("peers [1]"), std::string::npos) << status.ToString();
  // The exchange is over: waiting again is an argument error.
  EXPECT_EQ(comms[0]->Wait(7).code(), StatusCode::kInvalidArgument);
}

// Each arrival restarts the no-progress deadline: two messages 0.6 s apart complete within a
// 1 s timeout even though the whole Wait takes longer than 1 s.
TEST(LocalCommunicator, ProgressRestartsTheTimeout) {
  Comms comms = MakeGroup(3, 1.0);
  ASSERT_EQ(comms.size(), 3u);
  RunRanks(3, [&](int32_t rank) {
    Communicator& comm = *comms[static_cast<size_t>(rank)];
    if (rank == 0) {
      std::byte from1{0}, from2{0};
      ASSERT_TRUE(comm.Launch(0, {}, {{DeviceId{1}, &from1, 1}, {DeviceId{2}, &from2, 1}}).ok());
      const Status status = comm.Wait(0);
      EXPECT_TRUE(status.ok()) << status.ToString();
      EXPECT_EQ(from1, std::byte{1});
      EXPECT_EQ(from2, std::byte{2});
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(600 * rank));
    std::byte out{static_cast<unsigned char>(rank)};
    ASSERT_TRUE(comm.Launch(0, {{DeviceId{0}, &out, 1}}, {}).ok());
    EXPECT_TRUE(comm.Wait(0).ok());
  });
}

TEST(LocalCommunicator, SizeMismatchIsACommFailureNamingBothSizes) {
  Comms comms = MakeGroup(2, 1.0);
  ASSERT_EQ(comms.size(), 2u);
  std::vector<std::byte> out(8, std::byte{1}), in(16, std::byte{0});
  ASSERT_TRUE(comms[0]->Launch(3, {{DeviceId{1}, out.data(), out.size()}}, {}).ok());
  ASSERT_TRUE(comms[1]->Launch(3, {}, {{DeviceId{0}, in.data(), in.size()}}).ok());
  const Status status = comms[1]->Wait(3);
  EXPECT_EQ(status.code(), StatusCode::kCommFailure) << status.ToString();
  for (const char* part : {"peer 0", "id 3", "8 bytes", "16 bytes"}) {
    EXPECT_NE(status.message().find(part), std::string::npos) << part << ": " << status.ToString();
  }
}

void ExpectInvalid(const Status& status, const std::string& part) {
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find(part), std::string::npos)
      << "want '" << part << "' in " << status.ToString();
}

TEST(LocalCommunicator, RejectsBadLaunchAndWaitArguments) {
  Comms comms = MakeGroup(3, 0.2);
  ASSERT_EQ(comms.size(), 3u);
  Communicator& comm = *comms[0];
  std::byte a{0}, b{0};
  ExpectInvalid(comm.Launch(1, {{DeviceId{3}, &a, 1}}, {}), "send peer 3 is out of range");
  ExpectInvalid(comm.Launch(1, {{DeviceId{-1}, &a, 1}}, {}), "send peer -1 is out of range");
  ExpectInvalid(comm.Launch(1, {}, {{DeviceId{7}, &a, 1}}), "recv peer 7 is out of range");
  ExpectInvalid(comm.Launch(1, {{DeviceId{1}, &a, 1}, {DeviceId{1}, &b, 1}}, {}),
                "send peer 1 is listed twice");
  ExpectInvalid(comm.Launch(1, {}, {{DeviceId{2}, &a, 1}, {DeviceId{2}, &b, 1}}),
                "recv peer 2 is listed twice");
  ExpectInvalid(comm.Launch(1, {{DeviceId{1}, nullptr, 4}}, {}), "4 bytes but no data");
  ExpectInvalid(comm.Wait(42), "id 42");

  // Rejected launches left nothing behind: id 1 can still be launched, once.
  ASSERT_TRUE(comm.Launch(1, {}, {}).ok());
  ExpectInvalid(comm.Launch(1, {}, {}), "id 1 is already launched");
  EXPECT_TRUE(comm.Wait(1).ok());
  ExpectInvalid(comm.Wait(1), "id 1");
  // None of the rejected launches delivered anything to rank 1.
  ASSERT_TRUE(comms[1]->Launch(1, {}, {{DeviceId{0}, &a, 1}}).ok());
  EXPECT_EQ(comms[1]->Wait(1).code(), StatusCode::kTimeout);
}

}  // namespace
}  // namespace dcp
