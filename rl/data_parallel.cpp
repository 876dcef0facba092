#include "rl/data_parallel.h"

#include "rl/policy_backend.h"
#include "runtime/error.h"

namespace sqlrl::rl {

std::vector<int64_t> zero_bounds(const DataParallel& dp, int64_t n) {
  const int W = dp.distributed() ? dp.comm->world_size : 1;
  const std::vector<int64_t> s = shard_bounds(n, static_cast<int>(dp.shards()));
  std::vector<int64_t> b(static_cast<size_t>(W) + 1);
  for (int r = 0; r <= W; ++r) b[r] = s[static_cast<size_t>(r * dp.grad_accum)];
  return b;
}

std::pair<int64_t, int64_t> optimizer_slice(const DataParallel& dp, int64_t num_params) {
  if (dp.zero_stage == 0 || !dp.distributed()) return {0, num_params};
  const std::vector<int64_t> b = zero_bounds(dp, num_params);
  return {b[dp.comm->rank], b[dp.comm->rank + 1]};
}

std::vector<double> sum_over_shards(const DataParallel& dp, const std::vector<std::vector<double>>& local) {
  const size_t k = local.at(0).size();
  std::vector<double> sum(k, 0.0);
  if (dp.distributed() && local.size() == 1) {
    sum = local[0];
    comm_sum_in_rank_order(*dp.comm, sum);
    return sum;
  }
  std::vector<std::vector<double>> rows = local;
  if (dp.distributed()) {
    // Every shard's row in one table, each rank filling its own (x + 0 is x: the table arrives
    // exact), then summed in shard order as one process sums its rows.
    const size_t A = local.size(), S = static_cast<size_t>(dp.shards());
    std::vector<double> table(S * k, 0.0);
    for (size_t a = 0; a < A; ++a)
      std::copy(local[a].begin(), local[a].end(), table.begin() + static_cast<std::ptrdiff_t>((dp.rank() * A + a) * k));
    comm_sum_in_rank_order(*dp.comm, table);
    rows.assign(S, std::vector<double>(k));
    for (size_t s = 0; s < S; ++s) std::copy(table.begin() + s * k, table.begin() + (s + 1) * k, rows[s].begin());
  }
  for (const auto& row : rows)
    for (size_t j = 0; j < k; ++j) sum[j] += row[j];
  return sum;
}

double reduce_gradients(Policy& policy, const DataParallel& dp, const std::vector<std::vector<float>>& shard_grads,
                        std::vector<float>& slice_buffer, const float** own) {
  *own = nullptr;
  return policy.backend->reduce_gradients(policy, dp, shard_grads, slice_buffer, own);
}

void data_parallel_adamw(Policy& policy, OptimizerState& optimizer, const DataParallel& dp, const float* own,
                         const AdamWConfig& config, float lr, float max_norm, double grad_sq_sum) {
  const int64_t n = policy_num_trainable(policy);
  const auto [lo, hi] = optimizer_slice(dp, n);
  if (hi - lo == n) return policy_adamw_step(policy, optimizer, config, lr, max_norm, grad_sq_sum);
  policy_adamw_step_slice(policy, optimizer, own, lo, hi, config, lr, max_norm, grad_sq_sum);
  policy.backend->gather_update(policy, dp, zero_bounds(dp, n));
}

void data_parallel_download(const Policy& policy, const DataParallel& dp, QwenModel& out) {
  policy.backend->gather_download(policy, dp, out);
}

}  // namespace sqlrl::rl
