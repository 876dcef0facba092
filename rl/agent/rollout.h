// The multi-turn rollout engine: for a batch of prompts x G samples, prefill each prompt once
// and share its KV blocks across its G samples, decode all live samples together, pause a
// sample whose turn hit a stop string, run its action (SQL on the pool's worker threads while
// the others keep decoding), prefill the injected observation into its cache and resume it,
// until the answer, the turn budget or the token cap. Deterministic given the seed: sample s of
// prompt p draws with Philox stream (first_sample_id + p * G + s), whatever else is in flight.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kernels/sampling.h"
#include "model/model.h"
#include "rl/policy.h"
#include "rl/agent/protocol.h"
#include "rl/agent/trajectory.h"
#include "runtime/progress.h"
#include "sql/data/datasets.h"
#include "sql/exec/pool.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace sqlrl::rl {

struct RolloutOptions {
  int64_t group_size = 5;              // G samples per prompt
  SamplingParams sampling;             // temperature / top-k / top-p / seed
  uint64_t first_sample_id = 0;        // Philox stream base (the trainer advances it per step)
  int max_turns = 0;                   // 0 = the protocol's budget
  int64_t max_turn_tokens = 1024;      // sampled tokens per assistant turn
  int64_t max_total_tokens = 4096;     // whole trajectory (prompt + turns + observations); over = truncated
  int64_t max_batch_sequences = 64;    // live samples (holding cache blocks) at most, decoded together
  int64_t kv_block_size = 16;
  sql::Limits sql_limits;
  ChatTemplate chat_template = ChatTemplate::qwen3;
  bool enable_thinking = true;         // Qwen3 template flag (false renders the empty think block)
  bool single_turn = false;            // eval: nothing runs on the database; the first SQL written
                                       // (exec or answer) is the answer
  // Reproducible schedule: a sample's SQL result is taken (waiting for it if need be) exactly
  // sql_wait_steps decode steps after it was submitted, so the batches, and with them every
  // rounding in the forward, repeat from run to run. false: results are taken as soon as they
  // are ready (more overlap; tokens still agree up to rounding, floats need not be bitwise).
  bool reproducible = true;
  int64_t sql_wait_steps = 1;
  // KV blocks in the cache; 0 = enough for min(max_batch_sequences, all samples) live samples at
  // the full length (rounded up to whole groups), but at most kv_cache_max_bytes. It must hold
  // one group at the full length. The schedule (rollout.cpp): a group is admitted when the cache
  // could hold every live sample at the full length (they can never run out), or else when the
  // blocks free now cover its prompt and the next step of every live sample (optimistic, as
  // vLLM's scheduler); before each decode step the youngest samples are preempted until the
  // step's blocks fit, their blocks freed and their whole history prefilled again when they are
  // readmitted, before any new group. What a sample draws does not change (its Philox stream and
  // position); the bits of its log-probs do not either with batch_invariant.
  int64_t kv_cache_blocks = 0;
  int64_t kv_cache_max_bytes = int64_t(4) << 30;
  // CPU: every forward sums a token's row as any other call would (model/infer.h forward_cached:
  // the few-token kernel for every linear layer), so each sample's tokens and log-probs are bit
  // for bit those of any other schedule: another batch cap or cache size, preemption and
  // recompute, other samples beside it. Slower prefills. Off: a sample's bits depend on what
  // shares its steps (its tokens only where a draw falls within that rounding of a boundary).
  // CUDA: no effect (rl/policy.h policy_forward_cached).
  bool batch_invariant = false;
  // Prompts admitted together prefill each stretch they share once and fork it, as a group's
  // samples fork their prompt: every prompt of a protocol begins with its system text, and the
  // questions on one database with its schema (the demo's evaluation: 535 + 255 of ~820 tokens).
  // A token's K/V depend on the tokens up to it only, so what is sampled changes at most by the
  // rounding of GEMMs of other shapes and row places (runtime/gemm.h): none with batch_invariant
  // (tests/rl_rollout SharedPromptPrefixesChangeNoBit), and none measured on the demo (the same
  // weights after GRPO). false: each prompt prefilled whole.
  bool share_prompt_prefixes = true;
  // Partial rollout (rl/grpo/rollout_ranks.h): before the decode step numbered switch_step (the
  // engine's count, the same every run of a reproducible schedule) switch_weights() is called once;
  // it puts the next weights into the policy this rollout reads, or returns false when there are
  // none to come (the trainers stopped), and the rollout then throws RolloutStopped. Every sample
  // not done goes on under them and Trajectory::switch_at records from which token. Their cached
  // tokens: partial_kv_keep keeps them as the old weights computed them (nothing recomputed; the
  // new weights attend over old keys and values), false recomputes them (each live sample's
  // history prefilled again under the new weights, as a preempted sample's is). Nothing happens
  // when the rollout ends before that step; null: never.
  int64_t switch_step = 0;
  std::function<bool()> switch_weights;
  bool partial_kv_keep = false;
  // Finished samples reported after each decode step that finished some (runtime/progress.h;
  // sft self-taught). Null: nothing. It does not change what is sampled.
  Progress* progress = nullptr;
};

struct RolloutRequest {
  const sql::Example* example = nullptr;
  std::vector<int32_t> prompt_tokens;  // from build_prompt_tokens
};

struct RolloutStats {
  int64_t sampled_tokens = 0, injected_tokens = 0, prompt_tokens = 0;  // prompts counted once per request
  int64_t prefill_tokens = 0;  // prompt tokens the prefills ran (share_prompt_prefixes: shared stretches once)
  int64_t sql_calls = 0, sql_errors = 0;  // turns whose SQL ran (a retrieval's history queries not counted)
  // Of sql_calls, the turns whose SQL (or history SQL) failed for the infrastructure's reason
  // (sql::Result::infra_error): the trajectory is marked infra_failure. The rollout goes on: the
  // protocol shows the error as it would any other, and the other samples are not touched.
  int64_t sql_infra_errors = 0;
  double decode_seconds = 0, prefill_seconds = 0, sql_seconds = 0, wall_seconds = 0;
  int64_t decode_steps = 0;                // forward_cached calls after the prompt prefills
  int64_t kv_blocks = 0, kv_blocks_peak = 0;  // cache size and most blocks in use at once
  // The cache ran out before a step: samples preempted, and the cached tokens they dropped (to be
  // prefilled again when readmitted).
  int64_t preemptions = 0, preempted_tokens = 0;
  // Live samples (holding KV blocks: decoding, or waiting on SQL) at each step that decodes: their
  // sum over live_steps such steps (summed over data-parallel ranks), and the most at once. A step
  // runs them in decode_steps calls of at most max_batch_sequences.
  int64_t live_sum = 0, live_steps = 0, live_max = 0;
  // Partial rollout: the weights switched mid-rollout (0 or 1 per rollout; summed over rollouts),
  // and the cached tokens recomputed under the new ones (0 with partial_kv_keep).
  int64_t weight_switches = 0, switch_recomputed_tokens = 0;
};

// Thrown by rollout() when RolloutOptions::switch_weights says no weights will come.
struct RolloutStopped {};
// Several rollouts' figures as one: counts and times add, cache sizes and maxima take the largest.
void add_rollout_stats(RolloutStats& into, const RolloutStats& s);

// How prompts admitted together are prefilled (share_prompt_prefixes; exposed for tests). Node n
// runs tokens [begin, end) of prompt `prompt` (every prompt under the node has the same tokens
// there) on a fork of node `parent`'s sequence (-1: a new sequence); prompt i then runs its tokens
// [from[i], size) on a fork of node fork_of[i] (-1: a new sequence, from[i] = 0). Nodes come
// parents first; a node's level is its depth (0: no parent). A stretch two or more prompts share
// becomes a node when it is at least min_shared tokens long, and every prompt keeps at least its
// last token for its own run (its logits row).
struct PrefillPlan {
  struct Node {
    int64_t parent = -1, level = 0;
    size_t prompt = 0;
    int64_t begin = 0, end = 0;
  };
  std::vector<Node> nodes;
  std::vector<int64_t> fork_of, from;  // per prompt
};
PrefillPlan plan_shared_prefills(const std::vector<std::span<const int32_t>>& prompts, int64_t min_shared);

// Reads (and caches) each database's schema through the pool. The reference get() returns stays
// valid until a later get() reads a database not seen before (the vector may grow).
struct SchemaCache {
  std::vector<std::pair<std::string, sql::DatabaseSchema>> entries;  // db_path -> schema
  const sql::DatabaseSchema& get(sql::Pool& pool, const std::string& db_path);
};

// encode_marked(render_chat(protocol.first_prompt(example, schema), add_generation_prompt)).
std::vector<int32_t> build_prompt_tokens(const Protocol& protocol, const Tokenizer& tokenizer,
                                         const sql::Example& example, const sql::DatabaseSchema& schema,
                                         const RolloutOptions& options);

// Trajectories in (request, sample) order: requests.size() * group_size of them.
// A turn ends at a stop string, the tokenizer's <|im_end|> / <|endoftext|> token or
// max_turn_tokens; the whole trajectory is capped at min(max_total_tokens, the model's context).
// An observation that would leave no room for one more sampled token is not injected (the
// trajectory is truncated). Sampled ids are limited to the tokenizer's ids when the model's
// vocabulary is padded beyond them. Per-trajectory decode_seconds is the wall time of the
// batched steps the sample took part in.
std::vector<Trajectory> rollout(const QwenModel& model, const Tokenizer& tokenizer, const Protocol& protocol,
                                sql::Pool& pool, const std::vector<RolloutRequest>& requests,
                                const RolloutOptions& options, RolloutStats* stats = nullptr);
// The same on either device (rl/policy.h): on CUDA the cache is bf16 on the device and the
// tokens are drawn by the device sampler (the same Philox draws as the CPU's). kv (nullable): a
// cache the caller keeps across calls (the trainer's, allocated once from its memory plan; every
// block free on entry, and again on return); null: one sized by options for this call.
std::vector<Trajectory> rollout(const Policy& policy, const Tokenizer& tokenizer, const Protocol& protocol,
                                sql::Pool& pool, const std::vector<RolloutRequest>& requests,
                                const RolloutOptions& options, RolloutStats* stats = nullptr,
                                PolicyKV* kv = nullptr);

}  // namespace sqlrl::rl
