// cuBLASLt GEMM for row-major tensors. Row-major C[M,N] is column-major C^T[N,M], so we ask
// cuBLASLt for C^T = op(B)^T * op(A)^T: B's memory plays cuBLAS's "A", A's memory its "B".
// Descriptors, layouts and the heuristic's algorithm are cached per problem shape: building them
// costs tens of microseconds, more than a small matmul itself.
#include <cuda_bf16.h>

#include <map>
#include <mutex>
#include <tuple>

#include "runtime/cuda/check.h"
#include "runtime/gemm.h"

namespace sqlrl {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr int kMaxDevices = 64;

struct DeviceContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
};

DeviceContext& device_context(int device) {
  static DeviceContext contexts[kMaxDevices];
  static std::mutex mutex;
  check(device >= 0 && device < kMaxDevices, "gemm: cuda:", device, " out of range");
  std::lock_guard<std::mutex> lock(mutex);
  DeviceContext& ctx = contexts[device];
  if (!ctx.handle) {
    CUDA_CHECK(cudaSetDevice(device));
    CUBLAS_CHECK(cublasLtCreate(&ctx.handle));
    CUDA_CHECK(cudaMalloc(&ctx.workspace, kWorkspaceBytes));
  }
  return ctx;
}

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    default: fail("gemm: unsupported dtype ", dtype_name(dtype));
  }
}

// Largest power of two (<= 256) dividing the address: cuBLASLt picks kernels by alignment.
int alignment_of(const void* p) {
  auto address = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

struct PlanKey {
  int device;
  int64_t m, n, k, batch, lda, ldb, ldc, stride_a, stride_b, stride_c;
  bool trans_a, trans_b;
  DType ab_type, c_type;
  int align_a, align_b, align_c;
  auto operator<=>(const PlanKey&) const = default;
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layout_x = nullptr, layout_y = nullptr, layout_c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

cublasLtMatrixLayout_t make_layout(DType dtype, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, cuda_type(dtype), static_cast<uint64_t>(rows),
                                          static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    int32_t count = static_cast<int32_t>(batch);
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                  sizeof(stride)));
  }
  return layout;
}

Plan make_plan(const GemmProblem& p, const PlanKey& key, cublasLtHandle_t handle) {
  Plan plan;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t op_x = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t op_y = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_x, sizeof(op_x)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_y, sizeof(op_y)));
  // Stored shapes, column-major: B's memory is [cols_b x rows_b], A's is [cols_a x rows_a].
  int64_t rows_b = p.trans_b ? p.n : p.k, cols_b = p.trans_b ? p.k : p.n;
  int64_t rows_a = p.trans_a ? p.k : p.m, cols_a = p.trans_a ? p.m : p.k;
  plan.layout_x = make_layout(p.ab_type, cols_b, rows_b, p.ldb, p.batch, p.stride_b);
  plan.layout_y = make_layout(p.ab_type, cols_a, rows_a, p.lda, p.batch, p.stride_a);
  plan.layout_c = make_layout(p.c_type, p.n, p.m, p.ldc, p.batch, p.stride_c);

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t workspace = kWorkspaceBytes;
  uint32_t align_x = static_cast<uint32_t>(key.align_b), align_y = static_cast<uint32_t>(key.align_a),
           align_c = static_cast<uint32_t>(key.align_c);
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                    sizeof(workspace)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_x, 4));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_y, 4));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, 4));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, 4));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, plan.desc, plan.layout_x, plan.layout_y, plan.layout_c,
                                              plan.layout_c, pref, 1, &result, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  check(found > 0, "gemm: cuBLASLt has no algorithm for M=", p.m, " N=", p.n, " K=", p.k, " batch=", p.batch,
        " A/B ", dtype_name(p.ab_type), " C ", dtype_name(p.c_type));
  plan.algo = result.algo;
  return plan;
}

}  // namespace

void gemm_cuda(const GemmProblem& p, int device, const CudaStream& stream) {
  check(p.k > 0, "gemm: K=0 on CUDA (M=", p.m, " N=", p.n, "): nothing to multiply; scale C instead");
  for (int64_t v : {p.m, p.n, p.k, p.lda, p.ldb, p.ldc})
    check(v <= INT32_MAX, "gemm: dimension ", v, " exceeds cuBLASLt's 32-bit limit");
  DeviceContext& ctx = device_context(device);
  PlanKey key{device,    p.m,       p.n,       p.k,       p.batch,   p.lda,     p.ldb,
              p.ldc,     p.stride_a, p.stride_b, p.stride_c, p.trans_a, p.trans_b, p.ab_type,
              p.c_type,  alignment_of(p.a), alignment_of(p.b), alignment_of(p.c)};
  static std::map<PlanKey, Plan> plans;
  static std::mutex plans_mutex;
  Plan plan;
  {
    std::lock_guard<std::mutex> lock(plans_mutex);
    auto it = plans.find(key);
    if (it == plans.end()) it = plans.emplace(key, make_plan(p, key, ctx.handle)).first;
    plan = it->second;
  }
  CUDA_CHECK(cudaSetDevice(device));
  CUBLAS_CHECK(cublasLtMatmul(ctx.handle, plan.desc, &p.alpha, p.b, plan.layout_x, p.a, plan.layout_y, &p.beta, p.c,
                              plan.layout_c, p.c, plan.layout_c, &plan.algo, ctx.workspace, kWorkspaceBytes,
                              static_cast<cudaStream_t>(stream.handle)));
}

}  // namespace sqlrl
