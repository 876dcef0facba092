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
  const int64_t target = int64_t{kMatmulRowsBlocksPerSm} * std::max(multiprocessors, 1);
  // Each split keeps at least two unrolled steps of K, so the ticket and the partials stay cheap.
  const int64_t max_splits = std::max<int64_t>(1, in_features / (2 * kMatmulRowsBlockK));
  int64_t splits = std::clamp<int64_t>((target + grid.tiles - 1) / std::max<int64_t>(grid.tiles, 1), 1, max_splits);
  grid.split_k = (in_features + splits - 1) / splits;
  grid.split_k = (grid.split_k + kMatmulRowsBlockK - 1) / kMatmulRowsBlockK * kMatmulRowsBlockK;
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
