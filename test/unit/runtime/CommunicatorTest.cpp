//===- CommunicatorTest.cpp - thread worlds: point to point, timeouts
//-------===//
//
// The MPI world gets the same checks end to end in mpi_tests.sh (liveness).
//
//===----------------------------------------------------------------------===//
#include "TestArtifacts.h"

#include "dtc/runtime/Communicator.h"
#include "dtc/runtime/Executor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

using namespace dtc::rt;

namespace {

/// Runs f(rank, world) on `n` threads; returns each rank's error ("" if none).
template <class F> std::vector<std::string> onThreads(ThreadWorld &tw, F f) {
  const int n = tw.size();
  std::vector<std::string> errs(static_cast<size_t>(n));
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      try {
        f(r, tw.rankView(r));
      } catch (const std::exception &e) {
        errs[size_t(r)] = e.what();
      }
    });
  for (auto &t : ts)
    t.join();
  return errs;
}

TEST(ThreadWorld, SendAndReceiveInOrder) {
  ThreadWorld tw(3, /*timeoutSeconds=*/60);
  std::vector<int> got(4, 0);
  auto errs = onThreads(tw, [&](int r, World &w) {
    if (r == 0) {
      for (int src : {2, 1}) {
        int pair[2];
        w.world().recv(pair, sizeof pair, src);
        got[size_t(pair[0])] = pair[1];
      }
      int last;
      w.world().recv(&last, sizeof last, 1);
      got[0] = last;
    } else {
      int pair[2] = {r, 10 * r};
      w.world().send(pair, sizeof pair, 0);
      if (r == 1) {
        int last = 7;
        w.world().send(&last, sizeof last, 0);
      }
    }
  });
  for (const std::string &e : errs)
    EXPECT_EQ(e, "");
  EXPECT_EQ(got, (std::vector<int>{7, 10, 20, 0}));
}

// A rank that never arrives: the others leave with a CommFailure within the
// timeout, instead of waiting forever.
// Ring attention's shift: member m's block goes to m + offset (mod n), and
// each member counts exactly the one block it sends and receives.
TEST(ThreadWorld, ShiftRotatesBlocksAroundTheRing) {
  constexpr int kRanks = 4;
  ThreadWorld world(kRanks, /*timeoutSeconds=*/30);
  for (int offset : {1, -1, 3, 0}) {
    std::vector<std::vector<int32_t>> got(kRanks);
    std::vector<uint64_t> sent(kRanks), received(kRanks);
    std::vector<std::thread> ranks;
    for (int r = 0; r < kRanks; ++r)
      ranks.emplace_back([&, r] {
        Communicator &c = world.rankView(r).world();
        const uint64_t s0 = c.bytesSent(), r0 = c.bytesReceived();
        std::vector<int32_t> block(5, 100 * r), out(5, -1);
        block[4] = r;
        c.shift(block.data(), out.data(), 5 * sizeof(int32_t), offset);
        got[size_t(r)] = out;
        sent[size_t(r)] = c.bytesSent() - s0;
        received[size_t(r)] = c.bytesReceived() - r0;
      });
    for (std::thread &t : ranks)
      t.join();
    for (int r = 0; r < kRanks; ++r) {
      const int from = ((r - offset) % kRanks + kRanks) % kRanks;
      EXPECT_EQ(got[size_t(r)][0], 100 * from) << "offset " << offset;
      EXPECT_EQ(got[size_t(r)][4], from) << "offset " << offset;
      const uint64_t moved = offset == 0 ? 0 : 5 * sizeof(int32_t);
      EXPECT_EQ(sent[size_t(r)], moved);
      EXPECT_EQ(received[size_t(r)], moved);
    }
  }
}

TEST(ThreadWorld, AbsentRankTimesOut) {
  ThreadWorld tw(3, /*timeoutSeconds=*/0.3);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<bool> commFailure(3, false);
  auto errs = onThreads(tw, [&](int r, World &w) {
    if (r == 2)
      return; // "stopped": never calls the collective
    float x = 1, y = 0;
    try {
      w.world().allReduce(&x, &y, 1, DType::F32, ReduceOp::Sum);
    } catch (const CommFailure &) {
      commFailure[size_t(r)] = true;
      throw;
    }
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_LT(seconds, 30.0);
  EXPECT_TRUE(commFailure[0] && commFailure[1]);
  // One of them times out; the other is woken by it.
  const std::string both = errs[0] + " | " + errs[1];
  EXPECT_NE(both.find("timed out after 0.3 s in an exchange: another rank of "
                      "the group made no "
                      "progress"),
            std::string::npos)
      << both;
  EXPECT_EQ(errs[2], "");
}

// In the executor the failure names the program, the instruction and the
// communicator's group, and stops the instruction list (the ranks can no
// longer stay matched).
TEST(ThreadWorld, TimeoutInAProgramNamesTheCollective) {
  using dtc::test::CollectiveSpec;
  const dtc::test::json body = dtc::test::programsArtifact(
      {{"all_reduce", 8, "sum", "a"}}, {{"all_reduce", 8, "sum", "a"}});
  Artifact a = parseArtifact(body, "two.dtc");
  ThreadWorld tw(2, /*timeoutSeconds=*/0.3);
  std::vector<std::unique_ptr<RankExecutor>> execs(2);
  auto errs = onThreads(tw, [&](int r, World &w) {
    execs[size_t(r)] = std::make_unique<RankExecutor>(a, w);
    if (r == 1)
      return; // rank 1 never runs its step
    execs[size_t(r)]->run();
  });
  EXPECT_NE(
      errs[0].find(
          "program 'p0' instruction 1 (all_reduce on communicator 'a' (ranks "
          "0, 1) of f32[8]): timed out after 0.3 s in an exchange"),
      std::string::npos)
      << errs[0];
  // Both ranks running it: the collective completes.
  ThreadWorld ok(2, 30);
  auto none = onThreads(ok, [&](int r, World &w) {
    RankExecutor e(a, w);
    EXPECT_EQ(e.run(), "");
    LocalTensor t = e.tensor("w");
    (void)t;
    (void)r;
  });
  EXPECT_EQ(none[0] + none[1], "");
}

} // namespace
