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

#include "dcp/communicator.h"
#include "testing/faulty_communicator.h"
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

using testing::ExpectedMessage;
using testing::FaultOptions;
using testing::FaultyCommunicator;
using testing::RecvFrom;
using testing::ScatteredMessage;
using testing::SecondsSince;
using testing::SendTo;

bool Contains(const Status& status, const std::string& part) {
  return status.message().find(part) != std::string::npos;
}

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
// src == dst included, each message split into random parts (empty ones included) on both sides,
// differently. Each rank launches all ids, then waits on them, both in its own random order, so
// exchanges overlap and ranks run ahead of each other.
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

        // send_data[k][dst], recv_data[k][src]; kept until the exchange completed.
        std::vector<std::vector<ScatteredMessage>> send_data(kIds), recv_data(kIds);
        for (size_t k : launch_order) {
          const int32_t id = ids[k];
          std::vector<SendBuffer> sends;
          std::vector<RecvBuffer> recvs;
          for (int32_t peer = 0; peer < n; ++peer) {
            const auto p = static_cast<size_t>(peer);
            const int64_t out = sizes[k][r][p], in = sizes[k][p][r];
            send_data[k].emplace_back(static_cast<size_t>(std::max<int64_t>(out, 0)), order_rng);
            recv_data[k].emplace_back(static_cast<size_t>(std::max<int64_t>(in, 0)), order_rng);
            if (out >= 0) {
              send_data[k][p].Fill(ExpectedMessage(id, rank, peer, static_cast<size_t>(out)));
              sends.push_back(send_data[k][p].Send(peer));
            }
            if (in >= 0) recvs.push_back(recv_data[k][p].Recv(peer));
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
            const ScatteredMessage& got = recv_data[k][static_cast<size_t>(peer)];
            EXPECT_EQ(got.Gather(), ExpectedMessage(id, peer, rank, static_cast<size_t>(in)))
                << "rank " << rank << ", id " << id << ", from peer " << peer << " in "
                << got.parts() << " parts";
            EXPECT_TRUE(got.GapsIntact()) << "rank " << rank << ", id " << id << ", peer " << peer;
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
    ASSERT_TRUE(comm.Launch(1, {SendTo(peer, out1)}, {RecvFrom(peer, in1)}).ok());
    ASSERT_TRUE(comm.Launch(2, {SendTo(peer, out2)}, {RecvFrom(peer, in2)}).ok());
    EXPECT_TRUE(comm.Wait(2).ok());
    EXPECT_EQ(in2, ExpectedMessage(2, peer, rank, 24));
    EXPECT_TRUE(comm.Wait(1).ok());
    EXPECT_EQ(in1, ExpectedMessage(1, peer, rank, 16));
  });
}

// Rank 0 launches ids 0..19 before rank 1 launches any: its sends wait for rank 1, which takes
// them in the opposite order.
TEST(LocalCommunicator, KeepsLaunchesForAPeerThatRunsBehind) {
  Comms comms = MakeGroup(2, 5.0);
  ASSERT_EQ(comms.size(), 2u);
  constexpr int32_t kIds = 20;
  std::vector<std::vector<std::byte>> out(kIds);
  for (int32_t id = 0; id < kIds; ++id) {
    out[static_cast<size_t>(id)] = ExpectedMessage(id, 0, 1, static_cast<size_t>(id));
    ASSERT_TRUE(comms[0]->Launch(id, {SendTo(1, out[static_cast<size_t>(id)])}, {}).ok());
  }
  for (int32_t id = kIds - 1; id >= 0; --id) {
    std::vector<std::byte> in(static_cast<size_t>(id));
    ASSERT_TRUE(comms[1]->Launch(id, {}, {RecvFrom(0, in)}).ok());
    ASSERT_TRUE(comms[1]->Wait(id).ok());
    EXPECT_EQ(in, ExpectedMessage(id, 0, 1, static_cast<size_t>(id))) << "id " << id;
  }
  for (int32_t id = 0; id < kIds; ++id) EXPECT_TRUE(comms[0]->Wait(id).ok()) << "id " << id;
}

// Rank 0 completes its first id 5 (with rank 1) and launches id 5 again while rank 1's first id 5
// is still pending (it also sends to rank 2, which has not launched): the second launch waits in
// line and meets rank 1's second launch, not its first.
TEST(LocalCommunicator, ReusedIdDeliversMessagesInLaunchOrder) {
  Comms comms = MakeGroup(3, 5.0);
  ASSERT_EQ(comms.size(), 3u);
  std::byte first{1}, second{2}, relay{0}, in1{0}, in2{0}, at2{0};
  ASSERT_TRUE(comms[1]->Launch(5, {SendTo(2, &relay, 1)}, {RecvFrom(0, &in1, 1)}).ok());
  ASSERT_TRUE(comms[0]->Launch(5, {SendTo(1, &first, 1)}, {}).ok());
  ASSERT_TRUE(comms[0]->Wait(5).ok());
  ASSERT_TRUE(comms[0]->Launch(5, {SendTo(1, &second, 1)}, {}).ok());
  Result<bool> done = comms[0]->Test(5);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_FALSE(*done);  // rank 1 has not launched its second id 5
  ASSERT_TRUE(comms[2]->Launch(5, {}, {RecvFrom(1, &at2, 1)}).ok());
  ASSERT_TRUE(comms[2]->Wait(5).ok());
  ASSERT_TRUE(comms[1]->Wait(5).ok());
  EXPECT_EQ(in1, std::byte{1});
  ASSERT_TRUE(comms[1]->Launch(5, {}, {RecvFrom(0, &in2, 1)}).ok());
  ASSERT_TRUE(comms[1]->Wait(5).ok());
  EXPECT_EQ(in2, std::byte{2});
  EXPECT_TRUE(comms[0]->Wait(5).ok());
}

// Two ranks reuse a handful of ids over many rounds with random pauses, so either may be the one
// that launches an exchange last; every message arrives in the round it belongs to.
TEST(LocalCommunicator, ReusedIdsMatchInLaunchOrderUnderRandomTiming) {
  constexpr int kRounds = 200;
  Comms comms = MakeGroup(2, 10.0);
  ASSERT_EQ(comms.size(), 2u);
  RunRanks(2, [&](int32_t rank) {
    Communicator& comm = *comms[static_cast<size_t>(rank)];
    const int32_t peer = 1 - rank;
    std::mt19937_64 rng(77 + static_cast<uint64_t>(rank));
    for (int round = 0; round < kRounds; ++round) {
      const int32_t id = round % 3;
      std::vector<std::byte> out = ExpectedMessage(round, rank, peer, 8), in(8);
      if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
      ASSERT_TRUE(comm.Launch(id, {SendTo(peer, out)}, {RecvFrom(peer, in)}).ok());
      ASSERT_TRUE(comm.Wait(id).ok());
      ASSERT_EQ(in, ExpectedMessage(round, peer, rank, 8)) << "round " << round;
    }
  });
}

TEST(LocalCommunicator, SingleRankExchangesWithItself) {
  Comms comms = MakeGroup(1, 5.0);
  ASSERT_EQ(comms.size(), 1u);
  std::vector<std::byte> out = ExpectedMessage(9, 0, 0, 33), in(33);
  ASSERT_TRUE(comms[0]->Launch(9, {SendTo(0, out)}, {RecvFrom(0, in)}).ok());
  ASSERT_TRUE(comms[0]->Wait(9).ok());
  EXPECT_EQ(in, out);
  // No peers at all completes at once.
  ASSERT_TRUE(comms[0]->Launch(10, {}, {}).ok());
  EXPECT_TRUE(comms[0]->Wait(10).ok());
}

// Empty messages in no part, in empty parts, and sent from no part into empty parts.
TEST(LocalCommunicator, ZeroByteMessagesCompleteWithOrWithoutParts) {
  Comms comms = MakeGroup(2, 2.0);
  ASSERT_EQ(comms.size(), 2u);
  std::byte unused{0};
  const std::vector<std::span<const std::byte>> empty_sends{{}, {&unused, 0}};
  const std::vector<std::span<std::byte>> empty_recvs{{&unused, 0}, {}, {}};
  ASSERT_TRUE(comms[0]->Launch(1, {{DeviceId{1}, {}}}, {{DeviceId{1}, empty_recvs}}).ok());
  ASSERT_TRUE(comms[1]->Launch(1, {{DeviceId{0}, empty_sends}}, {{DeviceId{0}, {}}}).ok());
  EXPECT_TRUE(comms[0]->Wait(1).ok());
  EXPECT_TRUE(comms[1]->Wait(1).ok());
}

// Parts of one message land in order across parts of a different split.
TEST(LocalCommunicator, MessagesGoFromSendPartsIntoDifferentRecvParts) {
  Comms comms = MakeGroup(2, 2.0);
  ASSERT_EQ(comms.size(), 2u);
  const std::vector<std::byte> message = ExpectedMessage(4, 0, 1, 10);
  std::vector<std::byte> a(message.begin(), message.begin() + 3),
      b(message.begin() + 3, message.end()), x(5), y(0), z(5);
  ASSERT_TRUE(
      comms[0]->Launch(4, {{DeviceId{1}, {std::span<const std::byte>(a), {}, b}}}, {}).ok());
  ASSERT_TRUE(comms[1]->Launch(4, {}, {{DeviceId{0}, {x, y, z}}}).ok());
  EXPECT_TRUE(comms[1]->Wait(4).ok());
  EXPECT_TRUE(comms[0]->Wait(4).ok());
  std::vector<std::byte> got = x;
  got.insert(got.end(), z.begin(), z.end());
  EXPECT_EQ(got, message);
}

TEST(LocalCommunicator, TestIsFalseUntilThePeerLaunchesAndTrueAfter) {
  Comms comms = MakeGroup(2, 2.0);
  ASSERT_EQ(comms.size(), 2u);
  std::vector<std::byte> out = ExpectedMessage(3, 1, 0, 40), in(40);
  ASSERT_TRUE(comms[0]->Launch(3, {}, {RecvFrom(1, in)}).ok());
  Result<bool> before = comms[0]->Test(3);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  EXPECT_FALSE(*before);
  ASSERT_TRUE(comms[1]->Launch(3, {SendTo(0, out)}, {}).ok());
  Result<bool> after = comms[0]->Test(3);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_TRUE(*after);
  EXPECT_EQ(in, out);
  // Test completed it: it is no longer pending.
  EXPECT_EQ(comms[0]->Test(3).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(comms[0]->Wait(3).code(), StatusCode::kInvalidArgument);
  Result<bool> sent = comms[1]->Test(3);
  ASSERT_TRUE(sent.ok()) << sent.status().ToString();
  EXPECT_TRUE(*sent);
}

// A send completes only once delivered: before its receiver launches, Test says no.
TEST(LocalCommunicator, SendIsPendingUntilItsReceiverLaunches) {
  Comms comms = MakeGroup(2, 2.0);
  ASSERT_EQ(comms.size(), 2u);
  std::byte out{7}, in{0};
  ASSERT_TRUE(comms[0]->Launch(2, {SendTo(1, &out, 1)}, {}).ok());
  Result<bool> before = comms[0]->Test(2);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  EXPECT_FALSE(*before);
  ASSERT_TRUE(comms[1]->Launch(2, {}, {RecvFrom(0, &in, 1)}).ok());
  EXPECT_TRUE(comms[1]->Wait(2).ok());
  EXPECT_EQ(in, std::byte{7});
  EXPECT_TRUE(comms[0]->Wait(2).ok());
}

// Rank 2 fails while the others have exchanges pending with it: their pending Wait and Test, and
// every later Launch, Test and Wait, return CommFailure naming it; so do its own later calls.
TEST(LocalCommunicator, FailureSurfacesOnLaunchTestAndWaitOfEveryRank) {
  constexpr int32_t kRanks = 4;
  Comms comms = MakeGroup(kRanks, 30.0);  // far longer than the test may take
  ASSERT_EQ(comms.size(), static_cast<size_t>(kRanks));
  const auto start = std::chrono::steady_clock::now();
  const auto expect_failure = [](const Status& status, const char* call) {
    EXPECT_EQ(status.code(), StatusCode::kCommFailure) << call << ": " << status.ToString();
    EXPECT_EQ(status.message(), "rank 2 failed: disk on fire") << call;
  };
  RunRanks(kRanks, [&](int32_t rank) {
    Communicator& comm = *comms[static_cast<size_t>(rank)];
    std::byte in{0}, other{0};
    if (rank == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      comm.Fail(Status::Internal("disk on fire"));
    } else {
      // Every other rank expects messages from rank 2, which never come.
      ASSERT_TRUE(comm.Launch(1, {}, {RecvFrom(2, &in, 1)}).ok());
      ASSERT_TRUE(comm.Launch(3, {}, {RecvFrom(2, &other, 1)}).ok());
      expect_failure(comm.Wait(1), "pending Wait");
      expect_failure(comm.Test(3).status(), "pending Test");
      EXPECT_EQ(comm.Wait(3).code(), StatusCode::kCommFailure);  // Test ended it; still failed
    }
    // Later calls, which would otherwise succeed or be argument errors.
    expect_failure(comm.Launch(2, {}, {}), "later Launch");
    expect_failure(comm.Test(2).status(), "later Test");
    expect_failure(comm.Wait(2), "later Wait");
  });
  EXPECT_LT(SecondsSince(start), 5.0);  // generous: the waits end when Fail is called
}

TEST(LocalCommunicator, FirstFailureIsTheOneReported) {
  Comms comms = MakeGroup(3, 5.0);
  ASSERT_EQ(comms.size(), 3u);
  comms[1]->Fail(Status::Timeout("first"));
  comms[2]->Fail(Status::Internal("second"));
  const Status status = comms[0]->Launch(0, {}, {});
  EXPECT_EQ(status.code(), StatusCode::kCommFailure);
  EXPECT_EQ(status.message(), "rank 1 failed: first");
}

TEST(LocalCommunicator, TimesOutNamingTheIdAndMissingPeers) {
  Comms comms = MakeGroup(3, 0.2);
  ASSERT_EQ(comms.size(), 3u);
  std::byte from1{0}, from2{0}, out{7};
  // Rank 2 sends; rank 1 never launches.
  ASSERT_TRUE(comms[2]->Launch(7, {SendTo(0, &out, 1)}, {}).ok());
  ASSERT_TRUE(comms[0]->Launch(7, {}, {RecvFrom(1, &from1, 1), RecvFrom(2, &from2, 1)}).ok());
  const auto start = std::chrono::steady_clock::now();
  const Status status = comms[0]->Wait(7);
  EXPECT_LT(SecondsSince(start), 5.0);
  EXPECT_EQ(status.code(), StatusCode::kTimeout) << status.ToString();
  EXPECT_TRUE(Contains(status, "id 7")) << status.ToString();
  EXPECT_TRUE(Contains(status, "peers [1]")) << status.ToString();
  // The exchange is over: waiting again is an argument error.
  EXPECT_EQ(comms[0]->Wait(7).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(comms[2]->Wait(7).ok());  // its message was delivered
}

TEST(LocalCommunicator, SendNobodyReceivesTimesOutNamingThePeer) {
  Comms comms = MakeGroup(3, 0.2);
  ASSERT_EQ(comms.size(), 3u);
  std::byte out{7};
  ASSERT_TRUE(comms[0]->Launch(4, {SendTo(2, &out, 1)}, {}).ok());
  const Status status = comms[0]->Wait(4);
  EXPECT_EQ(status.code(), StatusCode::kTimeout) << status.ToString();
  EXPECT_TRUE(Contains(status, "peers [2] have not received")) << status.ToString();
}

// An exchange given up on is never touched again: a message sent to it later is dropped (its
// sender completes), and a receive launched later for a message given up on fails.
TEST(LocalCommunicator, AMessageGivenUpOnIsNeverDelivered) {
  Comms comms = MakeGroup(2, 0.1);
  ASSERT_EQ(comms.size(), 2u);
  {
    auto in = std::make_unique<std::byte>(std::byte{0});
    ASSERT_TRUE(comms[0]->Launch(1, {}, {RecvFrom(1, in.get(), 1)}).ok());
    EXPECT_EQ(comms[0]->Wait(1).code(), StatusCode::kTimeout);
  }  // the receive buffer is gone
  std::byte out{1};
  ASSERT_TRUE(comms[1]->Launch(1, {SendTo(0, &out, 1)}, {}).ok());
  EXPECT_TRUE(comms[1]->Wait(1).ok());

  {
    auto gone = std::make_unique<std::byte>(std::byte{2});
    ASSERT_TRUE(comms[1]->Launch(2, {SendTo(0, gone.get(), 1)}, {}).ok());
    EXPECT_EQ(comms[1]->Wait(2).code(), StatusCode::kTimeout);
  }
  std::byte in{0};
  ASSERT_TRUE(comms[0]->Launch(2, {}, {RecvFrom(1, &in, 1)}).ok());
  const Status status = comms[0]->Wait(2);
  EXPECT_EQ(status.code(), StatusCode::kCommFailure) << status.ToString();
  EXPECT_TRUE(Contains(status, "peer 1 gave up")) << status.ToString();
  EXPECT_EQ(in, std::byte{0});
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
      ASSERT_TRUE(comm.Launch(0, {}, {RecvFrom(1, &from1, 1), RecvFrom(2, &from2, 1)}).ok());
      const Status status = comm.Wait(0);
      EXPECT_TRUE(status.ok()) << status.ToString();
      EXPECT_EQ(from1, std::byte{1});
      EXPECT_EQ(from2, std::byte{2});
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(600 * rank));
    std::byte out{static_cast<unsigned char>(rank)};
    ASSERT_TRUE(comm.Launch(0, {SendTo(0, &out, 1)}, {}).ok());
    EXPECT_TRUE(comm.Wait(0).ok());
  });
}

// Whichever side launches last, the receiver fails naming both sizes; the sender completes.
TEST(LocalCommunicator, SizeMismatchIsACommFailureNamingBothSizes) {
  for (bool receiver_last : {false, true}) {
    SCOPED_TRACE(receiver_last ? "receiver launches last" : "sender launches last");
    Comms comms = MakeGroup(2, 1.0);
    ASSERT_EQ(comms.size(), 2u);
    std::vector<std::byte> out(8, std::byte{1}), in(16, std::byte{0});
    std::vector<std::span<std::byte>> in_parts{std::span(in).first(5), std::span(in).subspan(5)};
    const auto send = [&] { return comms[0]->Launch(3, {SendTo(1, out)}, {}); };
    const auto recv = [&] { return comms[1]->Launch(3, {}, {{DeviceId{0}, in_parts}}); };
    ASSERT_TRUE((receiver_last ? send() : recv()).ok());
    ASSERT_TRUE((receiver_last ? recv() : send()).ok());
    const Status status = comms[1]->Wait(3);
    EXPECT_EQ(status.code(), StatusCode::kCommFailure) << status.ToString();
    for (const char* part : {"peer 0", "id 3", "8 bytes", "16 bytes"}) {
      EXPECT_TRUE(Contains(status, part)) << part << ": " << status.ToString();
    }
    EXPECT_EQ(in, std::vector<std::byte>(16, std::byte{0}));  // nothing written
    EXPECT_TRUE(comms[0]->Wait(3).ok());
  }
}

void ExpectInvalid(const Status& status, const std::string& part) {
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_TRUE(Contains(status, part)) << "want '" << part << "' in " << status.ToString();
}

TEST(LocalCommunicator, RejectsBadLaunchAndWaitArguments) {
  Comms comms = MakeGroup(3, 0.2);
  ASSERT_EQ(comms.size(), 3u);
  Communicator& comm = *comms[0];
  std::byte a{0}, b{0};
  ExpectInvalid(comm.Launch(1, {SendTo(3, &a, 1)}, {}), "send peer 3 is out of range");
  ExpectInvalid(comm.Launch(1, {SendTo(-1, &a, 1)}, {}), "send peer -1 is out of range");
  ExpectInvalid(comm.Launch(1, {}, {RecvFrom(7, &a, 1)}), "recv peer 7 is out of range");
  ExpectInvalid(comm.Launch(1, {SendTo(1, &a, 1), SendTo(1, &b, 1)}, {}),
                "send peer 1 is listed twice");
  ExpectInvalid(comm.Launch(1, {}, {RecvFrom(2, &a, 1), RecvFrom(2, &b, 1)}),
                "recv peer 2 is listed twice");
  ExpectInvalid(comm.Launch(1, {SendTo(1, nullptr, 4)}, {}),
                "part 0 for peer 1 has 4 bytes but no data");
  ExpectInvalid(
      comm.Launch(
          1, {},
          {{DeviceId{2},
            {std::span(&a, 1), std::span<std::byte>(static_cast<std::byte*>(nullptr), 2)}}}),
      "recv part 1 for peer 2 has 2 bytes but no data");
  ExpectInvalid(comm.Wait(42), "Wait(id 42)");
  ExpectInvalid(comm.Test(42).status(), "Test(id 42)");

  // Rejected launches left nothing behind: id 1 can still be launched, once.
  ASSERT_TRUE(comm.Launch(1, {}, {}).ok());
  ExpectInvalid(comm.Launch(1, {}, {}), "id 1 is already launched");
  EXPECT_TRUE(comm.Wait(1).ok());
  ExpectInvalid(comm.Wait(1), "id 1");
  // None of the rejected launches delivered anything to rank 1.
  ASSERT_TRUE(comms[1]->Launch(1, {}, {RecvFrom(0, &a, 1)}).ok());
  EXPECT_EQ(comms[1]->Wait(1).code(), StatusCode::kTimeout);
}

// ---------------------------------------------------------------------------------------------
// The fault-injecting wrapper over the local group

// Ranks exchange with both ring neighbours, round after round; rank `faulty` runs wrapped.
std::vector<Status> RunRing(Comms& comms, int32_t faulty, const FaultOptions& faults, int rounds) {
  const auto n = static_cast<int32_t>(comms.size());
  std::vector<Status> result(comms.size());
  RunRanks(n, [&](int32_t rank) {
    FaultyCommunicator wrapped(*comms[static_cast<size_t>(rank)],
                               rank == faulty ? faults : FaultOptions{});
    const int32_t next = (rank + 1) % n, previous = (rank + n - 1) % n;
    Status& status = result[static_cast<size_t>(rank)];
    for (int round = 0; round < rounds && status.ok(); ++round) {
      const int32_t id = round % 2;
      std::vector<std::byte> to_next = ExpectedMessage(round, rank, next, 16),
                             to_previous = ExpectedMessage(round, rank, previous, 3);
      std::vector<std::byte> from_previous(16), from_next(3);
      status = wrapped.Launch(id, {SendTo(next, to_next), SendTo(previous, to_previous)},
                              {RecvFrom(previous, from_previous), RecvFrom(next, from_next)});
      if (status.ok()) status = wrapped.Wait(id);
      if (status.ok()) {
        EXPECT_EQ(from_previous, ExpectedMessage(round, previous, rank, 16));
        EXPECT_EQ(from_next, ExpectedMessage(round, next, rank, 3));
      } else {
        wrapped.Fail(status);  // as the executor does
      }
    }
  });
  return result;
}

TEST(LocalCommunicator, InjectedLaunchFailureEndsEveryRankNamingTheFailedRank) {
  Comms comms = MakeGroup(4, 2.0);
  ASSERT_EQ(comms.size(), 4u);
  const std::vector<Status> result = RunRing(comms, 2, {.fail_at_launch = 3}, 10);
  for (size_t rank = 0; rank < result.size(); ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const Status& status = result[rank];
    if (rank == 2) {
      EXPECT_EQ(status.code(), StatusCode::kInternal) << status.ToString();
      EXPECT_TRUE(Contains(status, "injected failure at launch 3 of rank 2")) << status.ToString();
    } else {
      EXPECT_EQ(status.code(), StatusCode::kCommFailure) << status.ToString();  // not Timeout
      EXPECT_TRUE(Contains(status, "rank 2 failed: injected")) << status.ToString();
    }
  }
}

TEST(LocalCommunicator, InjectedWaitFailureEndsEveryRankNamingTheFailedRank) {
  Comms comms = MakeGroup(3, 2.0);
  ASSERT_EQ(comms.size(), 3u);
  const std::vector<Status> result = RunRing(comms, 0, {.fail_at_wait = 2}, 10);
  EXPECT_TRUE(Contains(result[0], "injected failure at wait 2 of rank 0")) << result[0].ToString();
  for (size_t rank = 1; rank < result.size(); ++rank) {
    EXPECT_EQ(result[rank].code(), StatusCode::kCommFailure) << result[rank].ToString();
    EXPECT_TRUE(Contains(result[rank], "rank 0 failed: injected")) << result[rank].ToString();
  }
}

TEST(LocalCommunicator, DroppedLaunchTimesOutItsPeers) {
  Comms comms = MakeGroup(2, 0.3);
  ASSERT_EQ(comms.size(), 2u);
  std::vector<Status> result(2);
  RunRanks(2, [&](int32_t rank) {
    FaultyCommunicator wrapped(*comms[static_cast<size_t>(rank)],
                               rank == 1 ? FaultOptions{.drop_launch = 2} : FaultOptions{});
    for (int32_t id = 0; id < 3 && result[static_cast<size_t>(rank)].ok(); ++id) {
      std::byte out{static_cast<unsigned char>(id)}, in{0};
      Status status = wrapped.Launch(id, {SendTo(1 - rank, &out, 1)}, {RecvFrom(1 - rank, &in, 1)});
      if (status.ok()) status = wrapped.Wait(id);
      result[static_cast<size_t>(rank)] = status;
    }
  });
  EXPECT_EQ(result[0].code(), StatusCode::kTimeout) << result[0].ToString();
  EXPECT_TRUE(Contains(result[0], "Wait(id 1)")) << result[0].ToString();
  EXPECT_EQ(result[1].code(), StatusCode::kTimeout) << result[1].ToString();
  EXPECT_TRUE(Contains(result[1], "dropped")) << result[1].ToString();
}

TEST(LocalCommunicator, DelayedLaunchesStillDeliverEveryMessage) {
  Comms comms = MakeGroup(3, 2.0);
  ASSERT_EQ(comms.size(), 3u);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<Status> result = RunRing(comms, 1, {.launch_delay_s = 0.05}, 4);
  for (const Status& status : result) EXPECT_TRUE(status.ok()) << status.ToString();
  EXPECT_GE(SecondsSince(start), 4 * 0.05);
}

}  // namespace
}  // namespace dcp
