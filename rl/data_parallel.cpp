#include "rl/data_parallel.h"

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

namespace {

// CUDA: one gradient buffer per rank, into which the backward of every local shard adds
// (--grad-accum: grpo_step and sft skip the CPU's per-shard copies there), so N ranks compute what
// one rank with --grad-accum N computes up to the order of fp32 additions, not bit for bit.
// ZeRO 0, 1: the whole sum on every rank (ZeRO 1 then updates its slice); 2, 3: only this rank's
// slice of the sum, in place at its own offset of the buffer, and the norm summed over the
// slices in rank order.
double reduce_gradients_cuda(Policy& policy, const DataParallel& dp, const float** own) {
  if (!dp.comm || !comm_has_device_transport(*dp.comm)) {
    check(!dp.distributed(), "data parallel: several ranks on cuda need the job's NCCL communicator or host staging "
          "(app/launch.h join_job_gpu)");
    return policy_grad_sq_sum(policy);
  }
  const Comm& c = *dp.comm;
  // The trainable buffer's gradient: the adapter's in a LoRA run (the frozen base has none).
  Tensor& g = policy.lora ? policy.cuda_lora.grads : policy.cuda.grads;
  float* grads = static_cast<float*>(g.data());
  const int64_t n = policy_num_trainable(policy);
  const CudaStream& stream = policy.cuda.stream;
  if (dp.zero_stage >= 2 && dp.distributed()) {
    const std::vector<int64_t> b = zero_bounds(dp, n);
    const int64_t lo = b[c.rank], hi = b[c.rank + 1];
    comm_reduce_scatter_sum_device(c, grads, grads + lo, b, dp.ordered, stream);
    *own = grads + lo;
    std::vector<double> sq{grad_sq_sum_slice_cuda(grads + lo, hi - lo, policy.cuda_adamw, stream)};
    comm_sum_in_rank_order(c, sq);
    return sq[0];
  }
  // A communicator of one rank runs the same code (the sum is the gradient itself).
  if (dp.ordered) comm_all_reduce_sum_ordered_device(c, grads, n, stream);
  else comm_all_reduce_sum_device(c, grads, n, stream);
  if (dp.zero_stage == 1 && dp.distributed()) *own = grads + zero_bounds(dp, n)[c.rank];
  return policy_grad_sq_sum(policy);  // every rank holds the same sum: the same norm
}

}  // namespace

double reduce_gradients(Policy& policy, const DataParallel& dp, const std::vector<std::vector<float>>& shard_grads,
                        std::vector<float>& slice_buffer, const float** own) {
  *own = nullptr;
  if (policy.on_cuda) return reduce_gradients_cuda(policy, dp, own);
  const TrainableBuffers trainable = policy_trainable(policy);
  const int64_t n = trainable.n, R = dp.shards(), A = dp.grad_accum;
  float* grads = trainable.grads;
  if (R == 1) return grad_sq_sum_cpu(grads, n);
  // The norm's slices: one per shard, so that each lies within one rank's ZeRO slice.
  const std::vector<int64_t> bounds = shard_bounds(n, static_cast<int>(R));
  check(A == 1 || static_cast<int64_t>(shard_grads.size()) == A, "data parallel: ", shard_grads.size(),
        " shard gradients for ", A, " shards");
  std::vector<const float*> parts;
  if (A == 1) parts.push_back(grads);
  for (const auto& g : shard_grads) parts.push_back(g.data());
  std::vector<std::vector<double>> rows;
  auto norm_rows = [&](const float* reduced, int64_t first) {  // reduced: the buffer's element `first`
    for (int64_t a = 0; a < A; ++a) {
      const int64_t s = dp.rank() * A + a;
      rows.push_back({grad_sq_sum_cpu(reduced + bounds[s] - first, bounds[s + 1] - bounds[s])});
    }
  };
  if (!dp.distributed()) {
    add_in_rank_order(grads, parts, n);
    norm_rows(grads, 0);
    return sum_over_shards(dp, rows)[0];
  }
  const std::vector<int64_t> zero = zero_bounds(dp, n);
  const int64_t lo = zero[dp.rank()], count = zero[dp.rank() + 1] - lo;
  if (dp.zero_stage >= 2) {
    slice_buffer.resize(static_cast<size_t>(count));
    comm_reduce_scatter_sum(*dp.comm, parts, slice_buffer.data(), zero, dp.ordered);
    *own = slice_buffer.data();
  } else if (A == 1 && !dp.ordered) {
    comm_all_reduce_sum(*dp.comm, grads, n);
    *own = grads + lo;
  } else {  // the sum in shard order, every rank's slice into everyone's buffer
    comm_all_reduce_sum(*dp.comm, parts, grads, zero, dp.ordered);
    *own = grads + lo;
  }
  norm_rows(*own, lo);
  return sum_over_shards(dp, rows)[0];
}

void data_parallel_adamw(Policy& policy, OptimizerState& optimizer, const DataParallel& dp, const float* own,
                         const AdamWConfig& config, float lr, float max_norm, double grad_sq_sum) {
  const int64_t n = policy_num_trainable(policy);
  const auto [lo, hi] = optimizer_slice(dp, n);
  if (hi - lo == n) return policy_adamw_step(policy, optimizer, config, lr, max_norm, grad_sq_sum);
  policy_adamw_step_slice(policy, optimizer, own, lo, hi, config, lr, max_norm, grad_sq_sum);
  const std::vector<int64_t> bounds = zero_bounds(dp, n);
  if (!policy.on_cuda) return comm_all_gather(*dp.comm, policy_trainable(policy).params, bounds);
  // Every rank's updated slice of the bf16 copy every forward reads and, where each rank keeps a
  // whole master (ZeRO 1, 2), of the master too.
  comm_all_gather_device(*dp.comm, policy.cuda.weights.data(), 2, bounds, policy.cuda.stream);
  if (policy.cuda.master.numel() == n)
    comm_all_gather_device(*dp.comm, policy.cuda.master.data(), 4, bounds, policy.cuda.stream);
}

void data_parallel_download(const Policy& policy, const DataParallel& dp, QwenModel& out) {
  const CudaModel& m = policy.cuda;
  if (!policy.on_cuda || policy.lora || !m.master.defined() || m.master.numel() == m.num_params())
    return policy_download(policy, out);
  // ZeRO 3 on CUDA: each rank's slice of the master, gathered over the host.
  const int64_t n = m.num_params();
  const std::vector<int64_t> bounds = zero_bounds(dp, n);
  check(dp.distributed() && m.master_first == bounds[dp.rank()] && m.master.numel() == bounds[dp.rank() + 1] - m.master_first,
        "data parallel: the device master holds [", m.master_first, ", ", m.master_first + m.master.numel(),
        "), not this rank's ZeRO slice");
  out.params.resize(static_cast<size_t>(n));
  download_master_slice(m, out.params.data() + m.master_first);
  comm_all_gather(*dp.comm, out.params.data(), bounds);
}

}  // namespace sqlrl::rl
