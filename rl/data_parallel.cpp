#include "rl/data_parallel.h"

#include "runtime/error.h"

namespace sqlrl::rl {

std::pair<int64_t, int64_t> optimizer_slice(const DataParallel& dp, int64_t num_params) {
  if (dp.zero_stage == 0 || !dp.distributed()) return {0, num_params};
  const std::vector<int64_t> b = shard_bounds(num_params, dp.comm->world_size);
  return {b[dp.comm->rank], b[dp.comm->rank + 1]};
}

std::vector<double> sum_over_shards(const DataParallel& dp, const std::vector<std::vector<double>>& local) {
  std::vector<double> sum(local.at(0).size(), 0.0);
  if (dp.distributed()) {
    sum = local[0];
    comm_sum_in_rank_order(*dp.comm, sum);
    return sum;
  }
  for (const auto& row : local)
    for (size_t k = 0; k < row.size(); ++k) sum[k] += row[k];
  return sum;
}

double reduce_gradients(Policy& policy, const DataParallel& dp, const std::vector<std::vector<float>>& shard_grads,
                        std::vector<float>& slice_buffer, const float** own) {
  *own = nullptr;
  if (policy.on_cuda) {
    // One shard per GPU; the gradient is summed in place by NCCL (a communicator of one rank too,
    // when the caller made one: the same code path). Every rank then holds the whole sum, takes
    // the same norm and makes the same AdamW update (ZeRO 0).
    check(dp.grad_accum == 1, "data parallel: --grad-accum ", dp.grad_accum,
          " shards a step in the CPU trainer only; on cuda, N ranks on N GPUs compute what it would");
    if (dp.comm && dp.comm->nccl) {
      check(dp.zero_stage == 0, "data parallel: --zero-stage ", dp.zero_stage,
            " shards the AdamW moments in the CPU trainer only; cuda runs ZeRO 0 (every GPU keeps every moment)");
      // The trainable buffer's gradient: the adapter's in a LoRA run (the frozen base has none).
      Tensor& g = policy.lora ? policy.cuda_lora.grads : policy.cuda.grads;
      float* grads = static_cast<float*>(g.data());
      const int64_t n = policy_num_trainable(policy);
      if (dp.ordered) comm_all_reduce_sum_ordered_device(*dp.comm, grads, n, policy.cuda.stream);
      else comm_all_reduce_sum_device(*dp.comm, grads, n, policy.cuda.stream);
    } else {
      check(!dp.distributed(), "data parallel: several ranks on cuda need the job's NCCL communicator (comm_init_nccl)");
    }
    return policy_grad_sq_sum(policy);
  }
  const TrainableBuffers trainable = policy_trainable(policy);
  const int64_t n = trainable.n, R = dp.shards();
  float* grads = trainable.grads;
  if (R == 1) return grad_sq_sum_cpu(grads, n);
  const std::vector<int64_t> bounds = shard_bounds(n, static_cast<int>(R));
  std::vector<std::vector<double>> rows;
  if (!dp.distributed()) {
    check(static_cast<int64_t>(shard_grads.size()) == R, "data parallel: ", shard_grads.size(),
          " shard gradients for ", R, " shards");
    std::vector<const float*> parts;
    for (const auto& g : shard_grads) parts.push_back(g.data());
    add_in_rank_order(grads, parts, n);
    for (int64_t r = 0; r < R; ++r) rows.push_back({grad_sq_sum_cpu(grads + bounds[r], bounds[r + 1] - bounds[r])});
    return sum_over_shards(dp, rows)[0];
  }
  const int64_t lo = bounds[dp.rank()], count = bounds[dp.rank() + 1] - lo;
  if (dp.zero_stage >= 2) {
    slice_buffer.resize(static_cast<size_t>(count));
    comm_reduce_scatter_sum(*dp.comm, grads, slice_buffer.data(), n, dp.ordered);
    *own = slice_buffer.data();
  } else {
    if (dp.ordered) comm_all_reduce_sum_ordered(*dp.comm, grads, n);
    else comm_all_reduce_sum(*dp.comm, grads, n);
    *own = grads + lo;
  }
  rows.push_back({grad_sq_sum_cpu(*own, count)});
  return sum_over_shards(dp, rows)[0];
}

void data_parallel_adamw(Policy& policy, OptimizerState& optimizer, const DataParallel& dp, const float* own,
                         const AdamWConfig& config, float lr, float max_norm, double grad_sq_sum) {
  const int64_t n = policy_num_trainable(policy);
  const auto [lo, hi] = optimizer_slice(dp, n);
  if (hi - lo == n) return policy_adamw_step(policy, optimizer, config, lr, max_norm, grad_sq_sum);
  policy_adamw_step_slice(policy, optimizer, own, lo, hi, config, lr, max_norm, grad_sq_sum);
  comm_all_gather(*dp.comm, policy_trainable(policy).params, n);
}

}  // namespace sqlrl::rl
