// Every (op, backend) pair of the kernel harness (cases.h) as its own test,
// Ops/Kernel.MatchesFloat64/<op>_<backend>: the CPU always; CUDA wherever the op has a CUDA
// kernel, skipped with the reason when the build has no CUDA or there is no device (a failure
// under SQLRL_REQUIRE_GPU=1, as scripts/gpu_check.sh sets), so the pair is visible either way.
#include <cstdio>
#include <ostream>

#include "tests/kernels/cases.h"

namespace sqlrl::testing {
namespace {

std::vector<OpCase> all_op_cases() {
  return {matmul_case(),          rmsnorm_case(),  rope_case(),      swiglu_case(),
          embedding_case(),       logprob_case(),  attention_case(), attention_prefix_case(),
          paged_attention_case(), sampling_case(),
          adamw_case(),           adamw_bf16_moments_case(),         grad_norm_case(),
          decode_qkv_case()};
}

struct OpBackend {
  std::string op;
  Backend backend;
  std::function<void()> run;
};

void PrintTo(const OpBackend& p, std::ostream* os) { *os << p.op << "/" << backend_name(p.backend); }

std::vector<OpBackend> op_backend_pairs() {
  std::vector<OpBackend> pairs;
  for (const OpCase& op : all_op_cases()) {
    if (op.cpu) pairs.push_back({op.name, Backend::Cpu, op.cpu});
    if (op.cuda) pairs.push_back({op.name, Backend::Cuda, op.cuda});
  }
  return pairs;
}

class Kernel : public ::testing::TestWithParam<OpBackend> {};

TEST_P(Kernel, MatchesFloat64) {
  const OpBackend& p = GetParam();
  if (p.backend == Backend::Cuda) SQLRL_REQUIRE_CUDA();
  worst_budget_ratio() = 0;
  p.run();
  std::printf("%s/%s: worst error %.3f of its budget\n", backend_name(p.backend), p.op.c_str(), worst_budget_ratio());
}

INSTANTIATE_TEST_SUITE_P(Ops, Kernel, ::testing::ValuesIn(op_backend_pairs()),
                         [](const ::testing::TestParamInfo<OpBackend>& info) {
                           return info.param.op + "_" + backend_name(info.param.backend);
                         });

}  // namespace
}  // namespace sqlrl::testing
