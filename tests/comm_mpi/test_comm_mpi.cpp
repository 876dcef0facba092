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
