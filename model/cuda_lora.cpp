// LoRA adapters on the CUDA model: upload and download, the per-projection forward and backward
// on cuBLASLt (the GEMMs of lora_add_cpu / lora_backward_cpu with bf16 operands and f32
// accumulation), and AdamW over the adapter's buffers through the CudaModel's code.
// Compiled in every build: without CUDA the allocator and the launchers fail with the reason.
#include "model/cuda_lora.h"

#include "model/cuda_layers.h"
#include "model/cuda_ops.h"
#include "runtime/error.h"

namespace sqlrl {

namespace {

// Throws, naming `who`, unless every view of the table has the shape its projection has in
// `model` (the table is what the GEMMs index, so this is the check that matters).
void check_lora_fits(const CudaLora& lora, const QwenConfig& model, const char* who) {
  check(lora.model.num_hidden_layers == model.num_hidden_layers, who, ": the LoRA adapter was made for ",
        lora.model.num_hidden_layers, " layers, the model has ", model.num_hidden_layers);
  for (const LoraView& v : lora.table) {
    const auto [in, out] = lora_module_dims(model, v.module);
    const std::vector<int64_t> want = v.is_b ? std::vector<int64_t>{out, lora.rank} : std::vector<int64_t>{lora.rank, in};
    check(v.shape == want && v.layer < model.num_hidden_layers, who, ": LoRA tensor ", v.hf_name, " has shape ",
          shape_str(v.shape), ", this model needs ", shape_str(want));
  }
}

}  // namespace

CudaLora upload_lora(const LoraAdapter& adapter, const CudaModel& model, bool grads) {
  check_adapter_fits(adapter, model.config(), "upload_lora");
  CudaLora l;
  l.config = adapter.config;
  l.model = adapter.model;
  l.table = adapter.table;
  l.num_params = adapter.num_params;
  l.scale = lora_scale(adapter.config);
  l.rank = adapter.config.rank;
  l.device = model.device;
  l.stream = model.stream;
  check_lora_fits(l, model.config(), "upload_lora");
  check(l.num_params > 0, "upload_lora: the adapter has no parameters");
  Device d = cuda_device(model.device);
  l.master = empty({l.num_params}, DType::F32, d);
  l.weights = empty({l.num_params}, DType::BF16, d);
  model_copy(l.master.data(), adapter.params.data(), l.master.nbytes(), CopyKind::HostToDevice, l.stream);
  f32_to_bf16_cuda(l.weights.data_as<uint16_t>(), l.master.data_as<float>(), l.num_params, l.stream);
  if (grads) {
    l.grads = empty({l.num_params}, DType::F32, d);
    zero_lora_grads_cuda(l);
  }
  return l;
}

void download_lora(const CudaLora& lora, LoraAdapter& out) {
  check(out.num_params == lora.num_params && out.table.size() == lora.table.size(), "download_lora: the host adapter has ",
        out.num_params, " parameters in ", out.table.size(), " tensors, the device adapter ", lora.num_params, " in ",
        lora.table.size());
  check(lora.master.defined(), "download_lora: the device adapter has no master weights");
  out.params.resize(static_cast<size_t>(out.num_params));
  model_copy(out.params.data(), lora.master.data(), lora.master.nbytes(), CopyKind::DeviceToHost, lora.stream);
}

std::vector<float> download_lora_grads(const CudaLora& lora) {
  check(lora.grads.defined(), "download_lora_grads: the adapter was uploaded without gradients");
  std::vector<float> g(static_cast<size_t>(lora.num_params));
  model_copy(g.data(), lora.grads.data(), lora.grads.nbytes(), CopyKind::DeviceToHost, lora.stream);
  return g;
}

void zero_lora_grads_cuda(CudaLora& lora) {
  check(lora.grads.defined(), "zero_lora_grads_cuda: the adapter was uploaded without gradients");
  model_zero(lora.grads.data(), lora.grads.nbytes(), lora.stream);
}

std::vector<CudaLoraLayerWeights> lora_bf16_views(const CudaLora& lora) {
  check(lora.weights.defined(), "LoRA (cuda): no bf16 weights on the device");
  std::vector<CudaLoraLayerWeights> w(static_cast<size_t>(lora.model.num_hidden_layers));
  const uint16_t* base = lora.weights.data_as<uint16_t>();
  for (const LoraView& v : lora.table)
    (v.is_b ? w[v.layer].b : w[v.layer].a)[static_cast<int>(v.module)] = base + v.offset;
  return w;
}

std::vector<CudaLoraLayerGrads> lora_grad_views(CudaLora& lora) {
  check(lora.grads.defined(), "LoRA (cuda): the adapter was uploaded without gradients (upload_lora grads = true)");
  std::vector<CudaLoraLayerGrads> g(static_cast<size_t>(lora.model.num_hidden_layers));
  float* base = lora.grads.data_as<float>();
  for (const LoraView& v : lora.table)
    (v.is_b ? g[v.layer].b : g[v.layer].a)[static_cast<int>(v.module)] = base + v.offset;
  return g;
}

CudaLoraRun lora_run_cuda(const CudaLora& lora, const CudaModel& model, int64_t tokens, bool backward,
                          const char* who) {
  check_lora_fits(lora, model.config(), who);
  check(lora.device == model.device, who, ": the LoRA adapter is on cuda:", lora.device, ", the model on cuda:",
        model.device);
  check(lora.rank > 0 && tokens > 0, who, ": LoRA rank ", lora.rank, " over ", tokens, " tokens");
  CudaLoraRun run;
  run.lora = &lora;
  run.weights = lora_bf16_views(lora);
  run.tokens = tokens;
  if (backward) {
    check(lora.config.dropout == 0, who, ": lora_dropout = ", lora.config.dropout,
          ": training with LoRA dropout is not implemented (PEFT drops the adapter's input in training mode); "
          "set lora_dropout to 0");
    // The views are written through by the backward only; the adapter itself is the caller's.
    run.grads = lora_grad_views(const_cast<CudaLora&>(lora));
  }
  // u (and du) in one bf16 allocation, du 16-byte aligned (cuBLASLt's vector loads): at most
  // 4 T r + 16 bytes, under the 8 T r bytes (lora_backward_scratch_floats) memory_plan prices.
  const int64_t u_elems = (tokens * lora.rank + 7) / 8 * 8;
  run.scratch = empty({backward ? 2 * u_elems : u_elems}, DType::BF16, cuda_device(model.device));
  run.u = run.scratch.data_as<uint16_t>();
  run.du = backward ? run.u + u_elems : nullptr;
  return run;
}

void lora_forward_cuda(const CudaLoraRun* run, int64_t layer, LoraModule m, uint16_t* out, const uint16_t* x,
                       int64_t T, int64_t C, int64_t OC, const CudaModel& model) {
  if (!run) return;
  const int i = static_cast<int>(m);
  const CudaLoraLayerWeights& w = run->weights[layer];
  if (!w.a[i]) return;
  check(T <= run->tokens, "lora_forward_cuda: scratch for ", run->tokens, " tokens, ", T, " given");
  const int64_t r = run->lora->rank;
  // u[T, r] = x[T, C] A[r, C]^T, then out[T, OC] += scale * u B[OC, r]^T.
  gemm_cuda(bf16_row_major(T, r, C, x, false, w.a[i], true, run->u, DType::BF16, 0.0f), model.device, model.stream);
  gemm_cuda(bf16_row_major(T, OC, r, run->u, false, w.b[i], true, out, DType::BF16, 1.0f, run->lora->scale),
            model.device, model.stream);
}

void lora_backward_cuda(const CudaLoraRun* run, int64_t layer, LoraModule m, void* dx, bool dx_f32, const uint16_t* dy,
                        const uint16_t* x, int64_t T, int64_t C, int64_t OC, const CudaModel& model) {
  if (!run) return;
  const int i = static_cast<int>(m);
  const CudaLoraLayerWeights& w = run->weights[layer];
  if (!w.a[i]) return;
  check(run->du && run->grads.size() == run->weights.size(), "lora_backward_cuda: the run was made for a forward");
  check(T <= run->tokens, "lora_backward_cuda: scratch for ", run->tokens, " tokens, ", T, " given");
  const CudaLoraLayerGrads& g = run->grads[layer];
  const int64_t r = run->lora->rank;
  const float scale = run->lora->scale;
  // u[T, r] = x A^T, as the forward made it.
  gemm_cuda(bf16_row_major(T, r, C, x, false, w.a[i], true, run->u, DType::BF16, 0.0f), model.device, model.stream);
  // dB[OC, r] += scale * dy[T, OC]^T u[T, r]
  gemm_cuda(bf16_row_major(OC, r, T, dy, true, run->u, false, g.b[i], DType::F32, 1.0f, scale), model.device,
            model.stream);
  // du[T, r] = scale * dy[T, OC] B[OC, r]
  gemm_cuda(bf16_row_major(T, r, OC, dy, false, w.b[i], false, run->du, DType::BF16, 0.0f, scale), model.device,
            model.stream);
  // dA[r, C] += du[T, r]^T x[T, C]
  gemm_cuda(bf16_row_major(r, C, T, run->du, true, x, false, g.a[i], DType::F32, 1.0f), model.device, model.stream);
  // dx[T, C] += du[T, r] A[r, C]
  if (dx)
    gemm_cuda(bf16_row_major(T, C, r, run->du, false, w.a[i], false, dx, dx_f32 ? DType::F32 : DType::BF16, 1.0f),
              model.device, model.stream);
}

CudaAdamW make_cuda_adamw(const CudaLora& lora, const AdamWConfig& config, bool bf16_moments, bool allocate_moments) {
  return make_cuda_adamw_for(lora.num_params, lora.device, lora.stream, config, bf16_moments, allocate_moments);
}

void adamw_step_cuda(CudaLora& lora, CudaAdamW& opt, float lr, float max_norm, bool sq_sum_ready) {
  adamw_step_buffers(data_or_null<float>(lora.master), data_or_null<uint16_t>(lora.weights),
                     data_or_null<float>(lora.grads), lora.num_params, opt, lr, max_norm, sq_sum_ready, lora.stream);
}

double grad_norm_cuda(CudaLora& lora, CudaAdamW& opt) {
  check(lora.grads.defined(), "grad_norm_cuda: the adapter was uploaded without gradients");
  return grad_norm_buffers(lora.grads.data_as<float>(), lora.num_params, opt, lora.stream);
}

}  // namespace sqlrl
