// Host-side planning of the few-row product (kernels/matmul.h): how a problem is cut into blocks
// and how much workspace it takes. Plain C++ so that builds without CUDA and the tests of the
// plan (run in CI, where no GPU is) share it with kernels/cuda/matmul.cu.
#include <algorithm>
#include <cstdint>

#include "kernels/matmul.h"

namespace sqlrl {

namespace {
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
}  // namespace

size_t matmul_rows_ticket_bytes(const MatmulRowsGrid& grid) {
  constexpr size_t kPad = 256;  // the partials that follow stay 256-byte aligned
  return (static_cast<size_t>(grid.tiles) * sizeof(unsigned) + kPad - 1) / kPad * kPad;
}

MatmulRowsGrid matmul_rows_grid(int64_t total_rows, int64_t in_features, bool swiglu, int multiprocessors) {
  MatmulRowsGrid grid;
  // swiglu: a block covers 32 outputs = 32 gate rows + 32 up rows.
  grid.tiles = swiglu ? (total_rows / 2 + kMatmulRowsBlockRows / 2 - 1) / (kMatmulRowsBlockRows / 2)
                      : (total_rows + kMatmulRowsBlockRows - 1) / kMatmulRowsBlockRows;
  const int64_t slots = kMatmulRowsBlocksPerSm * std::max(multiprocessors, 1);
  const int64_t chunks = std::max<int64_t>(1, (in_features + kMatmulRowsBlockK - 1) / kMatmulRowsBlockK);
  // The time of S splits ~ waves x chunks per split: a wave of blocks shares the bandwidth, and a
  // last, partial wave costs nearly a full one. Each split keeps >= 2 chunks (the pipeline's
  // depth) and costs its partial sums, so among equal estimates the fewest splits win.
  int64_t best = 1, best_cost = INT64_MAX;
  for (int64_t s = 1; s <= std::max<int64_t>(1, chunks / 2); ++s) {
    const int64_t per_split = (chunks + s - 1) / s;
    if (s > 1 && (s - 1) * per_split >= chunks) continue;  // the same cut as fewer splits
    const int64_t waves = (grid.tiles * s + slots - 1) / slots;
    const int64_t cost = waves * per_split;
    if (cost < best_cost) best = s, best_cost = cost;
  }
  grid.split_k = (chunks + best - 1) / best * kMatmulRowsBlockK;
  grid.splits = (in_features + grid.split_k - 1) / grid.split_k;
  return grid;
}

bool matmul_rows_supported(const MatmulRowsProblem& p, const char** why) {
  auto no = [&](const char* reason) {
    if (why) *why = reason;
    return false;
  };
  if (p.rows < 1 || p.rows > kMatmulRowsMaxRows) return no("rows outside 1..128");
  if (p.in_features <= 0 || p.in_features % 8 != 0) return no("in_features not a positive multiple of 8");
  if (p.num_parts < 1 || p.num_parts > 3) return no("1 to 3 weight parts");
  if (p.ld_x % 8 != 0 || !aligned16(p.x)) return no("x not 16-byte aligned");
  for (int i = 0; i < p.num_parts; ++i)
    if (!p.parts[i].weight || p.parts[i].rows <= 0 || !aligned16(p.parts[i].weight))
      return no("a weight part is missing, empty or not 16-byte aligned");
  if (p.epilogue == MatmulRowsEpilogue::swiglu &&
      (p.num_parts != 2 || p.parts[0].rows != p.parts[1].rows || p.parts[0].bias || p.parts[1].bias))
    return no("swiglu takes two bias-free parts of equal rows (gate, up)");
  const int64_t cols = p.epilogue == MatmulRowsEpilogue::swiglu ? p.parts[0].rows : matmul_rows_total(p);
  if (p.ld_out < cols) return no("ld_out smaller than the output's columns");
  if (p.ld_x < p.in_features) return no("ld_x smaller than in_features");
  return true;
}

size_t matmul_rows_workspace_bytes(int64_t total_rows, int64_t in_features, bool swiglu, int64_t max_rows,
                                   int multiprocessors) {
  MatmulRowsGrid grid = matmul_rows_grid(total_rows, in_features, swiglu, multiprocessors);
  size_t tickets = matmul_rows_ticket_bytes(grid);
  size_t partial = grid.splits > 1 ? static_cast<size_t>(grid.splits * max_rows * total_rows) * sizeof(float) : 0;
  return tickets + partial;
}

}  // namespace sqlrl
