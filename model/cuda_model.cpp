// CudaModel buffers (upload, download, gradients, AdamW) and the linear layer on cuBLASLt.
// Compiled in every build: without CUDA the allocator and the launchers fail with the reason.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/adamw.h"
#include "model/cuda_layers.h"
#include "model/cuda_ops.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/gemm.h"
#include "runtime/random.h"

namespace sqlrl {

namespace {

// The device model's shape (the host model's table) with no buffer yet.
CudaModel device_shell(const QwenModel& model, int device, const CudaStream& stream, const char* caller) {
  check(static_cast<int64_t>(model.params.size()) == model.num_params, caller, ": the host model holds ",
        model.params.size(), " floats for ", model.num_params, " parameters");
  CudaModel m;
  m.shape.config = model.config;
  m.shape.table = model.table;
  m.shape.num_params = model.num_params;
  m.device = device;
  m.stream = stream;
  return m;
}

}  // namespace

CudaModel upload_model(const QwenModel& model, int device, const CudaStream& stream, bool grads) {
  CudaModel m = device_shell(model, device, stream, "upload_model");
  Device d = cuda_device(device);
  m.master = empty({model.num_params}, DType::F32, d);
  m.weights = empty({model.num_params}, DType::BF16, d);
  model_copy(m.master.data(), model.params.data(), m.master.nbytes(), CopyKind::HostToDevice, stream);
  f32_to_bf16_cuda(m.weights.data_as<uint16_t>(), m.master.data_as<float>(), model.num_params, stream);
  if (grads) {
    m.grads = empty({model.num_params}, DType::F32, d);
    zero_grads(m);
  }
  return m;
}

namespace {
// The bf16 copy of every parameter, rounded on the host in slices: no fp32 copy on the device, a
// bounded staging buffer here.
Tensor upload_bf16(const QwenModel& model, int device, const CudaStream& stream) {
  Tensor weights = empty({model.num_params}, DType::BF16, cuda_device(device));
  constexpr int64_t kSlice = int64_t(1) << 24;
  std::vector<uint16_t> staging(static_cast<size_t>(std::min(kSlice, model.num_params)));
  for (int64_t at = 0; at < model.num_params; at += kSlice) {
    const int64_t n = std::min(kSlice, model.num_params - at);
    convert_f32_to_bf16(model.params.data() + at, staging.data(), static_cast<size_t>(n));
    model_copy(weights.data_as<uint16_t>() + at, staging.data(), sizeof(uint16_t) * n, CopyKind::HostToDevice, stream);
  }
  return weights;
}
}  // namespace

CudaModel upload_frozen_model(const QwenModel& model, int device, const CudaStream& stream) {
  CudaModel m = device_shell(model, device, stream, "upload_frozen_model");
  m.weights = upload_bf16(model, device, stream);
  return m;
}

CudaModel upload_model_sliced(const QwenModel& model, int64_t lo, int64_t hi, int device, const CudaStream& stream) {
  CudaModel m = device_shell(model, device, stream, "upload_model_sliced");
  check(0 <= lo && lo <= hi && hi <= model.num_params, "upload_model_sliced: master slice [", lo, ", ", hi, ") of ",
        model.num_params, " parameters");
  m.weights = upload_bf16(model, device, stream);
  m.master = empty({hi - lo}, DType::F32, cuda_device(device));
  m.master_first = lo;
  model_copy(m.master.data(), model.params.data() + lo, m.master.nbytes(), CopyKind::HostToDevice, stream);
  return m;
}

CudaModel random_cuda_model(const QwenConfig& config, uint64_t seed, int device, const CudaStream& stream) {
  validate_config(config, "random_cuda_model");
  CudaModel m;
  m.shape.config = config;
  for (const ParamSpec& spec : qwen_parameters(config)) {
    m.shape.table.push_back({spec, m.shape.num_params});
    m.shape.num_params += spec.numel();
  }
  m.device = device;
  m.stream = stream;
  Device d = cuda_device(device);
  m.master = empty({m.shape.num_params}, DType::F32, d);
  m.weights = empty({m.shape.num_params}, DType::BF16, d);
  m.grads = empty({m.shape.num_params}, DType::F32, d);
  fill_normal(m.master, seed, 0, 0.0f, 0.02f);
  for (const ParamView& view : m.shape.table)
    if (view.spec.name.find("norm") != std::string::npos) fill(narrow(m.master, 0, view.offset, view.spec.numel()), 1.0f);
  f32_to_bf16_cuda(m.weights.data_as<uint16_t>(), m.master.data_as<float>(), m.shape.num_params, stream);
  zero_grads(m);
  return m;
}

void download_model(const CudaModel& model, QwenModel& out) {
  check(out.num_params == model.num_params() && out.table.size() == model.shape.table.size(),
        "download_model: the host model has ", out.num_params, " parameters in ", out.table.size(),
        " tensors, the device model ", model.num_params(), " in ", model.shape.table.size());
  check(model.master_first == 0 && model.master.numel() == model.num_params(), "download_model: the device holds the "
        "master of parameters [", model.master_first, ", ", model.master_first + model.master.numel(), ") only (a ZeRO-3 "
        "slice: download_master_slice, then gather)");
  out.params.resize(static_cast<size_t>(out.num_params));
  model_copy(out.params.data(), model.master.data(), model.master.nbytes(), CopyKind::DeviceToHost, model.stream);
}

void download_master_slice(const CudaModel& model, float* out) {
  model_copy(out, model.master.data(), model.master.nbytes(), CopyKind::DeviceToHost, model.stream);
}

std::vector<float> download_grads(const CudaModel& model) {
  std::vector<float> g(static_cast<size_t>(model.num_params()));
  model_copy(g.data(), model.grads.data(), model.grads.nbytes(), CopyKind::DeviceToHost, model.stream);
  return g;
}

void zero_grads(CudaModel& model) { model_zero(model.grads.data(), model.grads.nbytes(), model.stream); }

CudaWeights bf16_weights(const CudaModel& model) {
  check(model.weights.defined(), "cuda model: no bf16 weights on the device");
  return bind_views<CudaWeights>(model.shape, static_cast<const uint16_t*>(model.weights.data_as<uint16_t>()));
}

ModelWeights grad_views(CudaModel& model) { return QwenModel::bind_weights(model.shape, model.grads.data_as<float>()); }

GemmProblem bf16_row_major(int64_t m, int64_t n, int64_t k, const void* a, bool trans_a, const void* b, bool trans_b,
                           void* c, DType c_type, float beta, float alpha) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = a;
  p.b = b;
  p.c = c;
  p.trans_a = trans_a;
  p.trans_b = trans_b;
  p.lda = trans_a ? m : k;
  p.ldb = trans_b ? k : n;
  p.ldc = n;
  p.alpha = alpha;
  p.beta = beta;
  p.ab_type = DType::BF16;
  p.c_type = c_type;
  return p;
}

namespace {
GemmProblem row_major(int64_t m, int64_t n, int64_t k, const void* a, bool trans_a, const void* b, bool trans_b,
                      void* c, DType c_type, float beta) {
  return bf16_row_major(m, n, k, a, trans_a, b, trans_b, c, c_type, beta);
}
}  // namespace

void linear_forward_cuda(uint16_t* out, const uint16_t* inp, const uint16_t* weight, const uint16_t* bias, int64_t T,
                         int64_t C, int64_t OC, bool accumulate, const CudaModel& model) {
  // With both (Qwen3 attention_bias on o_proj) the bias is added to the residual first: one
  // extra bf16 rounding of residual + bias.
  if (bias) broadcast_rows_cuda(out, bias, T, OC, accumulate, model.stream);
  float beta = (accumulate || bias) ? 1.0f : 0.0f;
  gemm_cuda(row_major(T, OC, C, inp, false, weight, true, out, DType::BF16, beta), model.device, model.stream);
}

void linear_backward_cuda(void* dinp, bool dinp_f32, bool dinp_accumulate, float* dweight, float* dbias, const uint16_t* dout,
                          const uint16_t* inp, const uint16_t* weight, int64_t T, int64_t C, int64_t OC,
                          const CudaModel& model) {
  if (dinp)
    gemm_cuda(row_major(T, C, OC, dout, false, weight, false, dinp, dinp_f32 ? DType::F32 : DType::BF16,
                        dinp_accumulate ? 1.0f : 0.0f),
              model.device, model.stream);
  if (dweight)
    gemm_cuda(row_major(OC, C, T, dout, true, inp, false, dweight, DType::F32, 1.0f), model.device, model.stream);
  if (dbias) column_sum_add_cuda(dbias, dout, T, OC, model.stream);
}

void logits_cuda(float* out, const uint16_t* inp, const uint16_t* weight, int64_t R, int64_t C, int64_t OC,
                 const CudaModel& model) {
  gemm_cuda(row_major(R, OC, C, inp, false, weight, true, out, DType::F32, 0.0f), model.device, model.stream);
}

CudaAdamW make_cuda_adamw_for(int64_t n, int device, const CudaStream& stream, const AdamWConfig& config,
                              bool bf16_moments, bool allocate_moments) {
  CudaAdamW opt;
  opt.config = config;
  opt.bf16_moments = bf16_moments;
  Device d = cuda_device(device);
  opt.sq_sum = empty({1}, DType::I64, d);  // 8 bytes for the f64 sum
  opt.workspace = empty({static_cast<int64_t>(grad_sq_sum_workspace_bytes()) + 1}, DType::U8, d);
  if (!allocate_moments) return opt;
  opt.m = empty({n}, opt.moment_dtype(), d);
  opt.v = empty({n}, opt.moment_dtype(), d);
  model_zero(opt.m.data(), opt.m.nbytes(), stream);
  model_zero(opt.v.data(), opt.v.nbytes(), stream);
  return opt;
}

void adamw_step_buffers(float* master, uint16_t* weights, const float* grads, int64_t n, CudaAdamW& opt, float lr,
                        float max_norm, bool sq_sum_ready, const CudaStream& stream, int64_t first_index) {
  check(master && weights && grads, "adamw (cuda): the parameters need master weights, their bf16 copy and gradients "
        "on the device (a frozen upload has only the bf16 copy)");
  check(opt.m.defined() && opt.m.dtype == opt.moment_dtype() && opt.v.dtype == opt.moment_dtype(),
        "adamw (cuda): the moments are not on the device as ", dtype_name(opt.moment_dtype()));
  check(opt.m.numel() == n && opt.v.numel() == n, "adamw (cuda): moments of ", opt.m.numel(), " elements for ", n,
        " parameters (an optimizer made for other buffers)");
  ++opt.step;
  const double* sq = nullptr;
  if (max_norm > 0.0f) {
    if (!sq_sum_ready)
      grad_sq_sum_cuda(static_cast<double*>(opt.sq_sum.data()), grads, n, opt.workspace.data(), stream);
    sq = static_cast<const double*>(opt.sq_sum.data());
  }
  if (opt.bf16_moments)
    adamw_bf16_moments_cuda(master, opt.m.data_as<uint16_t>(), opt.v.data_as<uint16_t>(), grads, weights, n, opt.config,
                            opt.step, lr, sq, max_norm, stream, first_index);
  else
    adamw_cuda(master, opt.m.data_as<float>(), opt.v.data_as<float>(), grads, weights, n, opt.config, opt.step, lr, sq,
               max_norm, stream);
}

double grad_norm_buffers(const float* grads, int64_t n, CudaAdamW& opt, const CudaStream& stream) {
  grad_sq_sum_cuda(static_cast<double*>(opt.sq_sum.data()), grads, n, opt.workspace.data(), stream);
  double sum = 0;
  model_copy(&sum, opt.sq_sum.data(), sizeof(sum), CopyKind::DeviceToHost, stream);
  return std::sqrt(sum);
}

CudaAdamW make_cuda_adamw(const CudaModel& model, const AdamWConfig& config, bool bf16_moments, bool allocate_moments,
                          int64_t moments) {
  return make_cuda_adamw_for(moments < 0 ? model.num_params() : moments, model.device, model.stream, config,
                             bf16_moments, allocate_moments);
}

void adamw_step_cuda(CudaModel& model, CudaAdamW& opt, float lr, float max_norm, bool sq_sum_ready) {
  adamw_step_buffers(data_or_null<float>(model.master), data_or_null<uint16_t>(model.weights),
                     data_or_null<float>(model.grads), model.num_params(), opt, lr, max_norm, sq_sum_ready, model.stream);
}

void adamw_step_slice_cuda(CudaModel& model, CudaAdamW& opt, const float* grads, int64_t lo, int64_t hi, float lr,
                           float max_norm) {
  check(0 <= lo && lo <= hi && hi <= model.num_params(), "adamw (cuda): slice [", lo, ", ", hi, ") of ",
        model.num_params(), " parameters");
  check(model.master.defined() && lo >= model.master_first && hi <= model.master_first + model.master.numel(),
        "adamw (cuda): the device master holds [", model.master_first, ", ",
        model.master_first + model.master.numel(), "), not the slice [", lo, ", ", hi, ")");
  adamw_step_buffers(model.master.data_as<float>() + (lo - model.master_first), model.weights.data_as<uint16_t>() + lo,
                     grads, hi - lo, opt, lr, max_norm, /*sq_sum_ready=*/true, model.stream, lo);
}

double grad_sq_sum_slice_cuda(const float* grads, int64_t n, CudaAdamW& opt, const CudaStream& stream) {
  const double norm = grad_norm_buffers(grads, n, opt, stream);
  return norm * norm;
}

void set_grad_sq_sum_cuda(CudaAdamW& opt, double sq_sum, const CudaStream& stream) {
  model_copy(opt.sq_sum.data(), &sq_sum, sizeof(sq_sum), CopyKind::HostToDevice, stream);
}

double grad_norm_cuda(CudaModel& model, CudaAdamW& opt) {
  check(model.grads.defined(), "grad_norm_cuda: the model has no gradients on the device");
  return grad_norm_buffers(model.grads.data_as<float>(), model.num_params(), opt, model.stream);
}

}  // namespace sqlrl
