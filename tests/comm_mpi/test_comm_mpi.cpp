// runtime/comm.h across processes: run under `mpirun -np N` (ctest registers N = 2 and 4). Every
// rank can rebuild every other rank's buffer from a seed, so each checks the collective's result
// against a value it computes alone: the exact sum in rank order for the ordered reductions,
// integer-exact sums, bytes as sent.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/comm.h"
#include "runtime/error.h"
#include "runtime/philox.h"

namespace sqlrl {
namespace {

Comm g_comm;

// Rank r's buffer: values spread over many magnitudes, so that the summation order shows in the bits.
std::vector<float> rank_buffer(int rank, int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = philox_draw(1234, static_cast<uint64_t>(rank), static_cast<uint64_t>(i)).v[0];
    const float u = static_cast<float>(bits >> 8) / 16777216.0f;  // [0, 1)
    x[static_cast<size_t>(i)] = (u - 0.5f) * std::exp2(static_cast<float>(static_cast<int>(bits & 31) - 10));
  }
  return x;
}

std::vector<float> expected_sum(int world, int64_t n) {
  std::vector<std::vector<float>> all;
  std::vector<const float*> parts;
  for (int r = 0; r < world; ++r) all.push_back(rank_buffer(r, n));
  for (auto& a : all) parts.push_back(a.data());
  std::vector<float> out(static_cast<size_t>(n));
  add_in_rank_order(out.data(), parts, n);
  return out;
}

TEST(CommMpi, LaunchedByMpi) {
  ASSERT_TRUE(g_comm.mpi) << "not started by mpirun (" << g_comm.source << ")";
  ASSERT_GE(g_comm.world_size, 2);
}

TEST(CommMpi, AllReduceIntegersAndFloatsExact) {
  const int W = g_comm.world_size, r = g_comm.rank;
  std::vector<int64_t> i{r + 1, int64_t{1} << 40, -r};
  comm_all_reduce_sum(g_comm, i.data(), 3);
  EXPECT_EQ(i[0], int64_t{W} * (W + 1) / 2);
  EXPECT_EQ(i[1], int64_t{W} << 40);
  EXPECT_EQ(i[2], -int64_t{W} * (W - 1) / 2);
  std::vector<double> d{0.5 * r, 1.0};
  comm_all_reduce_sum(g_comm, d.data(), 2);
  EXPECT_EQ(d[0], 0.25 * W * (W - 1));  // small integers / 2: exact in any order
  EXPECT_EQ(d[1], W);
  std::vector<double> m{static_cast<double>(r), -static_cast<double>(r)};
  comm_all_reduce_max(g_comm, m.data(), 2);
  EXPECT_EQ(m[0], W - 1);
  EXPECT_EQ(m[1], 0);
  float f = 0.25f * static_cast<float>(r);
  comm_all_reduce_sum(g_comm, &f, 1);
  EXPECT_EQ(f, 0.125f * static_cast<float>(W * (W - 1)));
}

TEST(CommMpi, BroadcastFromEveryRoot) {
  for (int root = 0; root < g_comm.world_size; ++root) {
    std::vector<uint8_t> bytes(1000, static_cast<uint8_t>(g_comm.rank));
    comm_broadcast(g_comm, bytes.data(), static_cast<int64_t>(bytes.size()), root);
    EXPECT_EQ(bytes, std::vector<uint8_t>(1000, static_cast<uint8_t>(root))) << "root " << root;
  }
}

// The ranks split by parity: each group numbers its ranks in job order, and its collectives see
// its own ranks only (a sum over the job would count the other group's too).
TEST(CommMpi, SplitGroupsRankInJobOrderAndReduceAmongThemselves) {
  const int W = g_comm.world_size, r = g_comm.rank;
  const Comm g = comm_split(g_comm, r % 2);
  EXPECT_EQ(g.rank, r / 2);
  EXPECT_EQ(g.world_size, (W - r % 2 + 1) / 2);
  int64_t sum = r;
  comm_all_reduce_sum(g, &sum, 1);
  int64_t expected = 0;
  for (int q = r % 2; q < W; q += 2) expected += q;
  EXPECT_EQ(sum, expected);
  // A broadcast of any size from the group's last rank; the job's collectives still span the job.
  std::string bytes = g.rank == g.world_size - 1 ? std::string(3 * r + 1, static_cast<char>('a' + r)) : "";
  comm_broadcast_bytes(g, bytes, g.world_size - 1);
  const int last = r % 2 + 2 * (g.world_size - 1);
  EXPECT_EQ(bytes, std::string(3 * last + 1, static_cast<char>('a' + last)));
  int64_t all = 1;
  comm_all_reduce_sum(g_comm, &all, 1);
  EXPECT_EQ(all, W);
}

// Around a ring, two messages to the next rank (the first empty on rank 0; NULs inside), received
// whole and in the order sent; then raw floats from rank 0 to the last rank.
TEST(CommMpi, PointToPointMessagesArriveWholeAndInOrder) {
  const int W = g_comm.world_size, r = g_comm.rank;
  const int next = (r + 1) % W, prev = (r + W - 1) % W;
  auto message = [](int from, int k) {
    std::string m;
    for (int i = 0; i < from * 7 * k + k * 1000; ++i) m.push_back(static_cast<char>(i % 5 == 0 ? 0 : 'a' + from));
    return m;
  };
  // Even ranks send first, odd ranks receive first: no two ranks wait on each other's send.
  auto sends = [&] { comm_send_bytes(g_comm, message(r, 0), next), comm_send_bytes(g_comm, message(r, 1), next); };
  std::string first, second;
  auto receives = [&] { first = comm_recv_bytes(g_comm, prev), second = comm_recv_bytes(g_comm, prev); };
  if (r % 2 == 0) sends(), receives();
  else receives(), sends();
  EXPECT_EQ(first, message(prev, 0));
  EXPECT_EQ(second, message(prev, 1));
  std::vector<float> x = rank_buffer(r, 333), got(333);
  if (r == 0) comm_send(g_comm, x.data(), 333 * 4, W - 1);
  if (r == W - 1) {
    comm_recv(g_comm, got.data(), 333 * 4, 0);
    EXPECT_EQ(got, rank_buffer(0, 333));
  }
  EXPECT_THROW(comm_send(g_comm, x.data(), 4, r), Error) << "a rank sending to itself would wait forever";
}

TEST(CommMpi, AllGatherBytesKeepsRankOrderAndSizes) {
  // Rank r sends r * 5 bytes (rank 0 nothing), with a NUL inside.
  std::string mine;
  for (int k = 0; k < g_comm.rank * 5; ++k) mine.push_back(static_cast<char>(k % 3 == 1 ? 0 : 'a' + g_comm.rank));
  std::vector<std::string> all = comm_all_gather_bytes(g_comm, mine);
  ASSERT_EQ(all.size(), static_cast<size_t>(g_comm.world_size));
  for (int r = 0; r < g_comm.world_size; ++r) {
    ASSERT_EQ(all[r].size(), static_cast<size_t>(r * 5)) << r;
    for (int k = 0; k < r * 5; ++k) EXPECT_EQ(all[r][k], k % 3 == 1 ? 0 : 'a' + r);
  }
}

// Sizes around the 64-element shard alignment, smaller than the world, and one that MPI's int
// counts would need pieces for when the piece size is small (mpi::kPiece is 2^27; the shapes
// here exercise uneven and empty shards).
class ReduceScatter : public ::testing::TestWithParam<int64_t> {};

TEST_P(ReduceScatter, OrderedIsBitIdenticalToRankOrderSum) {
  const int64_t n = GetParam();
  std::vector<float> mine = rank_buffer(g_comm.rank, n);
  const std::vector<int64_t> b = shard_bounds(n, g_comm.world_size);
  const int64_t lo = b[g_comm.rank], count = b[g_comm.rank + 1] - lo;
  std::vector<float> shard(static_cast<size_t>(count) + 1, -7.0f);  // one guard element
  comm_reduce_scatter_sum(g_comm, mine.data(), shard.data(), n, true);
  const std::vector<float> want = expected_sum(g_comm.world_size, n);
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(shard[i], want[lo + i]) << "element " << lo + i;
  EXPECT_EQ(shard[count], -7.0f) << "wrote past the shard";

  // The all-reduce built on it: every element everywhere.
  std::vector<float> all = mine;
  comm_all_reduce_sum_ordered(g_comm, all.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(all[i], want[i]) << "element " << i;
}

TEST_P(ReduceScatter, UnorderedAgreesWithinRounding) {
  const int64_t n = GetParam();
  std::vector<float> mine = rank_buffer(g_comm.rank, n);
  const std::vector<int64_t> b = shard_bounds(n, g_comm.world_size);
  const int64_t lo = b[g_comm.rank], count = b[g_comm.rank + 1] - lo;
  std::vector<float> shard(static_cast<size_t>(count));
  comm_reduce_scatter_sum(g_comm, mine.data(), shard.data(), n, false);
  const std::vector<float> want = expected_sum(g_comm.world_size, n);
  // Another order of W - 1 fp32 additions: each within (W - 1) ulps of the sum of magnitudes.
  std::vector<std::vector<float>> all;
  for (int r = 0; r < g_comm.world_size; ++r) all.push_back(rank_buffer(r, n));
  for (int64_t i = 0; i < count; ++i) {
    double mag = 0;
    for (auto& a : all) mag += std::fabs(a[lo + i]);
    ASSERT_NEAR(shard[i], want[lo + i], (g_comm.world_size - 1) * mag * 0x1p-23 + 1e-30) << lo + i;
  }
}

TEST_P(ReduceScatter, AllGatherPutsEveryShardEverywhere) {
  const int64_t n = GetParam();
  const std::vector<int64_t> b = shard_bounds(n, g_comm.world_size);
  std::vector<float> full(static_cast<size_t>(n), -1.0f);
  // Each rank fills only its own shard with its rank_buffer values there.
  std::vector<float> mine = rank_buffer(g_comm.rank, n);
  for (int64_t i = b[g_comm.rank]; i < b[g_comm.rank + 1]; ++i) full[i] = mine[i];
  comm_all_gather(g_comm, full.data(), n);
  for (int r = 0; r < g_comm.world_size; ++r) {
    std::vector<float> theirs = rank_buffer(r, n);
    for (int64_t i = b[r]; i < b[r + 1]; ++i) ASSERT_EQ(full[i], theirs[i]) << "rank " << r << " element " << i;
  }
}

// Ranks x --grad-accum: each rank holds 3 parts (shard r*3 + a's buffer) and owns the grouped
// bounds of shard_bounds(n, 3W); the ordered reduce-scatter of the parts gives, on its range,
// add_in_rank_order over all 3W buffers in shard order, and the all-gather by those bounds puts
// every range everywhere. Catches a part packed out of order or a block at a wrong offset.
TEST_P(ReduceScatter, PartsPerRankAreSummedInShardOrder) {
  const int64_t n = GetParam();
  const int W = g_comm.world_size, A = 3;
  const std::vector<int64_t> s = shard_bounds(n, W * A);
  std::vector<int64_t> b(static_cast<size_t>(W) + 1);
  for (int r = 0; r <= W; ++r) b[r] = s[static_cast<size_t>(r * A)];
  std::vector<std::vector<float>> every;  // shard k's buffer, the same on every rank
  for (int k = 0; k < W * A; ++k) every.push_back(rank_buffer(k, n));
  std::vector<const float*> mine, all;
  for (int a = 0; a < A; ++a) mine.push_back(every[g_comm.rank * A + a].data());
  for (const auto& e : every) all.push_back(e.data());
  std::vector<float> want(static_cast<size_t>(n));
  add_in_rank_order(want.data(), all, n);
  const int64_t lo = b[g_comm.rank], count = b[g_comm.rank + 1] - lo;
  std::vector<float> shard(static_cast<size_t>(count) + 1, -7.0f);
  comm_reduce_scatter_sum(g_comm, mine, shard.data(), b, true);
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(shard[i], want[lo + i]) << "element " << lo + i;
  EXPECT_EQ(shard[count], -7.0f) << "wrote past the shard";
  std::vector<float> full(static_cast<size_t>(n), -1.0f);
  std::copy(shard.begin(), shard.begin() + count, full.begin() + lo);
  comm_all_gather(g_comm, full.data(), b);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(full[i], want[i]) << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(Sizes, ReduceScatter, ::testing::Values(1, 3, 64, 65, 200, 1000, 100003));

}  // namespace
}  // namespace sqlrl

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  sqlrl::g_comm = sqlrl::comm_init();
  // Rank 0 prints every test; the others print only their failures.
  if (!sqlrl::g_comm.is_root()) GTEST_FLAG_SET(brief, true);
  int failed = RUN_ALL_TESTS();
  if (failed) std::fprintf(stderr, "rank %d of %d: tests failed\n", sqlrl::g_comm.rank, sqlrl::g_comm.world_size);
  // A rank whose tests failed must fail the job: sum the failures.
  int64_t failures = failed ? 1 : 0;
  sqlrl::comm_all_reduce_sum(sqlrl::g_comm, &failures, 1);
  sqlrl::comm_finalize(sqlrl::g_comm);
  return failures ? 1 : 0;
}
