// The rollout engine's scheduler. Each sample is a small state machine:
//   Decode   - its next tokens to forward sit in `feed` (the last sampled token, plus injected
//              observation tokens after a turn); every step forwards all Decode samples in one
//              batched call and samples one token for each from its logits row;
//   WaitSql  - its turn asked for SQL; the query runs on the pool while the others decode;
//   Done     - answered, out of turns or truncated; its cache sequence is freed.
// Invariant: a sample's last sampled token is not in the cache yet (it heads the next feed);
// the cache holds its tokens but the feed (feed = the tail of Trajectory::tokens).
//
// The cache (vLLM's policy, recompute preemption): a sample is live while it holds a cache
// sequence (handle >= 0), in Decode or WaitSql. Groups are admitted in request order (admit_groups)
// while the cache could hold every live sample at the full length, or else while the blocks free
// now cover the group's prompt and one more step of every live sample. Before each decode step
// (make_room) the step's feeds must fit the free blocks; if not, the youngest live sample is
// preempted, again until they do: its blocks are freed (prompt blocks its group shares stay with
// the others, by their counts) and its whole history becomes its feed. Youngest = the largest
// sample index (request * G + sample): groups come in request order, so that is the latest
// admitted, and a readmitted sample keeps its place, so the oldest samples run to the end and no
// sample is preempted over and over while younger ones run (first come, first served, as
// vLLM's priority order). A sample waiting on SQL can be preempted too: its query runs on (the
// future stays), and its observation joins its feed when the result is taken. Preempted samples
// whose feed is ready are readmitted oldest first (readmit), each into a fresh sequence whose
// next decode step prefills the whole history, while the blocks free cover it and the next step
// of every live sample; no new group comes in while any preempted sample waits.
#include "rl/agent/rollout.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <optional>

#include "model/infer.h"
#include "rl/agent/untrusted.h"
#include "runtime/clock.h"
#include "runtime/error.h"
#include "sql/exec/format.h"
#include "tokenizer/stream.h"

namespace sqlrl::rl {

namespace {

using Clock = std::chrono::steady_clock;

enum class Phase : uint8_t { Waiting, Decode, WaitSql, Done };  // Waiting = not admitted yet

struct Sample {
  int64_t request = 0;
  uint64_t stream_id = 0;  // Philox sequence id
  int64_t handle = -1;     // cache sequence
  Phase phase = Phase::Waiting;
  std::vector<int32_t> feed;
  std::optional<TokenStream> turn;  // the current assistant turn's decoded text and stop matcher
  std::string turn_prefix;          // the environment's head of this turn (a forced last turn)
  int64_t turn_begin = 0;           // index in tokens of the turn's first sampled token
  bool eos_ended = false;           // the last turn ended on <|im_end|> / <|endoftext|>
  std::future<sql::Result> sql;
  std::vector<std::future<sql::Result>> history;  // memory_retrieve: the dialogue's gold SQL
  int64_t sql_due = 0;                            // step at which a reproducible schedule takes the result
};

struct Engine {
  const Policy& policy;
  const Tokenizer& tok;
  const Protocol& protocol;
  sql::Pool& pool;
  const std::vector<RolloutRequest>& requests;
  const RolloutOptions& opt;
  RolloutStats& stats;
  PolicyKV& cache;
  std::vector<Trajectory> out{};
  std::vector<Sample> samples{};
  std::vector<std::string> stops{};
  std::string final_prefix{};              // Protocol::final_turn_prefix: "" = no forced last turn
  std::vector<std::string> final_stops{};  // Protocol::final_turn_stops
  std::vector<int32_t> eos{};
  int64_t cap = 0;  // tokens per trajectory
  int max_turns = 0;
  int64_t live = 0;  // holding a cache sequence (admitted, not done, not preempted)
  int64_t finished = 0;
  int64_t step = 0;
  PolicyLogits logits{};
};

const sql::Example& example_of(const Engine& e, const Sample& s) { return *e.requests[s.request].example; }

// Preempted: admitted and not done, but holding no cache sequence.
bool preempted(const Sample& s) { return s.handle < 0 && (s.phase == Phase::Decode || s.phase == Phase::WaitSql); }

void release(Engine& e, Sample& s) {
  kv_free(e.cache.book(), s.handle);
  s.handle = -1;
  --e.live;
}

void finish(Engine& e, Sample& s) {
  if (s.handle >= 0) release(e, s);
  s.phase = Phase::Done;
  s.feed.clear();
  ++e.finished;
}

// Frees the sample's blocks and makes its whole history its feed, so that its readmission
// prefills the cache it held and the feed after it: the invariant holds.
void preempt(Engine& e, Sample& s, Trajectory& t) {
  e.stats.preempted_tokens += static_cast<int64_t>(t.tokens.size() - s.feed.size());
  ++e.stats.preemptions;
  ++t.preemptions;
  release(e, s);
  s.feed = t.tokens;
}

int turns_left(const Engine& e, const Trajectory& t) { return e.max_turns - static_cast<int>(t.turns.size()); }

// A turn the protocol forces: the last the budget allows, after an injection (a first turn
// follows the prompt, which is built before the rollout).
bool forced_turn(const Engine& e, const Trajectory& t) { return !e.final_prefix.empty() && turns_left(e, t) == 1; }

void start_turn(Engine& e, Sample& s, Trajectory& t, bool forced = false) {
  s.turn.emplace(e.tok, forced ? e.final_stops : e.stops);
  s.turn_prefix = forced ? e.final_prefix : std::string();
  s.turn_begin = static_cast<int64_t>(t.tokens.size());
}

// Appends the injected text (policy_mask 0), and the forced last turn's head when the next turn
// is that one, and resumes decoding; or ends the trajectory as truncated when they would leave
// no room for another sampled token.
void inject(Engine& e, Sample& s, Trajectory& t, const std::string& text) {
  std::vector<int32_t> ids = encode_marked(e.tok, text);  // data spans cannot inject control tokens
  const size_t observed = ids.size();
  const bool forced = forced_turn(e, t);
  if (forced) {
    std::vector<int32_t> head = encode_marked(e.tok, e.final_prefix);
    ids.insert(ids.end(), head.begin(), head.end());
  }
  if (static_cast<int64_t>(t.tokens.size() + ids.size()) >= e.cap) {
    t.truncated = true;
    finish(e, s);
    return;
  }
  t.turns.back().observation = decode(e.tok, std::span<const int32_t>(ids).first(observed));
  t.tokens.insert(t.tokens.end(), ids.begin(), ids.end());
  t.policy_mask.insert(t.policy_mask.end(), ids.size(), 0);
  t.sampler_logprobs.insert(t.sampler_logprobs.end(), ids.size(), 0.0f);
  s.feed.insert(s.feed.end(), ids.begin(), ids.end());
  e.stats.injected_tokens += static_cast<int64_t>(ids.size());
  start_turn(e, s, t, forced);
  s.phase = Phase::Decode;
}

StepOutcome outcome_of(const Engine& e, const Sample& s, const Trajectory& t) {
  StepOutcome outcome;
  outcome.db_path = sql::shown_db_path(example_of(e, s).db_path);
  outcome.turns_left = turns_left(e, t);
  outcome.turn_ended_with_eos = s.eos_ended;
  outcome.empty_think_block = e.opt.chat_template == ChatTemplate::qwen3 && !e.opt.enable_thinking;
  return outcome;
}

// The turn just ended with `action`: end the episode, run its SQL, or inject the protocol's text.
void act(Engine& e, Sample& s, Trajectory& t) {
  const Action& a = t.turns.back().action;
  const int turn_index = static_cast<int>(t.turns.size()) - 1;
  if (a.kind == ActionKind::Invalid) ++t.invalid_actions;
  bool gives_sql = a.kind == ActionKind::Answer || (e.opt.single_turn && a.kind == ActionKind::ExecSql);
  if (gives_sql) {
    t.answered = true;
    t.final_sql = a.sql;
    return finish(e, s);
  }
  if (e.protocol.done(a, turn_index)) return finish(e, s);
  if (turns_left(e, t) <= 0) {
    t.out_of_turns = true;
    return finish(e, s);
  }
  if (static_cast<int64_t>(t.tokens.size()) >= e.cap) {
    t.truncated = true;
    return finish(e, s);
  }
  const sql::Example& ex = example_of(e, s);
  if (e.protocol.executes(a) && !e.opt.single_turn) {
    s.sql = e.pool.submit(ex.db_path, a.sql, e.opt.sql_limits);
    // The memory a retrieval shows carries the results of the dialogue's earlier gold queries.
    if (a.kind == ActionKind::MemoryRetrieve)
      for (const sql::Turn& h : ex.history)
        s.history.push_back(e.pool.submit(ex.db_path, h.gold_sql, e.opt.sql_limits));
    s.sql_due = e.step + std::max<int64_t>(e.opt.sql_wait_steps, 0);
    s.phase = Phase::WaitSql;
    ++e.stats.sql_calls;
    return;
  }
  inject(e, s, t, e.protocol.inject(a, outcome_of(e, s, t), ex));
}

void take_sql_result(Engine& e, Sample& s, Trajectory& t) {
  sql::Result result = s.sql.get();
  TurnRecord& turn = t.turns.back();
  turn.executed = true;
  turn.sql_error = !result.ok();
  turn.infra_error = result.infra_error;
  turn.rows = static_cast<int64_t>(result.rows.size());
  turn.sql_seconds = result.elapsed_ms / 1000.0;
  const std::string where = str_cat("turn ", t.turns.size());
  t.note_infra_failure(result.infra_error, where, result.error);
  std::vector<sql::Result> history;
  for (auto& f : s.history) {
    history.push_back(f.get());
    turn.sql_seconds += history.back().elapsed_ms / 1000.0;
    // The memory shown is built from these results: a machine's failure here is one too.
    turn.infra_error = turn.infra_error || history.back().infra_error;
    t.note_infra_failure(history.back().infra_error, where + " (dialogue history)", history.back().error);
  }
  s.history.clear();
  t.sql_seconds += turn.sql_seconds;
  e.stats.sql_seconds += turn.sql_seconds;
  e.stats.sql_errors += turn.sql_error ? 1 : 0;
  e.stats.sql_infra_errors += turn.infra_error ? 1 : 0;
  StepOutcome outcome = outcome_of(e, s, t);
  outcome.result = &result;
  if (turn.action.kind == ActionKind::MemoryRetrieve) outcome.history_results = &history;
  inject(e, s, t, e.protocol.inject(turn.action, outcome, example_of(e, s)));
}

// The request for the next token of `s` (its Philox stream, at its next position).
SamplingRequest draw_request(const Engine& e, const Sample& s, const Trajectory& t) {
  return {e.opt.sampling, s.stream_id, static_cast<uint64_t>(t.tokens.size())};
}

// Appends the token drawn for `s` and advances its turn.
void sample_next(Engine& e, Sample& s, Trajectory& t, const SampledToken& st) {
  t.tokens.push_back(st.token);
  t.policy_mask.push_back(1);
  t.sampler_logprobs.push_back(st.logprob);
  ++e.stats.sampled_tokens;
  s.feed.assign(1, st.token);
  s.turn->push(st.token);
  const int64_t turn_tokens = static_cast<int64_t>(t.tokens.size()) - s.turn_begin;
  bool is_eos = std::find(e.eos.begin(), e.eos.end(), st.token) != e.eos.end();
  bool turn_over = s.turn->stopped || is_eos || turn_tokens >= e.opt.max_turn_tokens;
  bool full = static_cast<int64_t>(t.tokens.size()) >= e.cap;
  if (!turn_over && !full) return;
  TurnRecord turn;
  turn.assistant_text =
      s.turn_prefix + decode(e.tok, std::span<const int32_t>(t.tokens).subspan(static_cast<size_t>(s.turn_begin)));
  if (!turn_over) {  // cut mid-turn: kept for the logs, not parsed
    turn.action.error = str_cat("truncated at ", t.tokens.size(), " tokens");
    t.turns.push_back(std::move(turn));
    t.truncated = true;
    return finish(e, s);
  }
  if (!s.turn->stopped) s.turn->finish();
  s.eos_ended = is_eos;
  turn.action = e.protocol.parse(s.turn_prefix + s.turn->text);
  t.turns.push_back(std::move(turn));
  act(e, s, t);
}

// Shared stretches shorter than this are left in each prompt's own prefill: not worth a forward.
constexpr int64_t kMinSharedPrefill = 32;

// Prefills the admitted groups' prompts (inputs[i]: group i's new sequence and prompt), the
// stretches they share once (share_prompt_prefixes, PrefillPlan); the logits rows are the
// prompts' last tokens, in group order, as a plain prefill gives them.
void prefill_prompts(Engine& e, const std::vector<size_t>& groups, std::vector<CachedInput>& inputs) {
  PagedKVCache& book = e.cache.book();
  std::vector<std::span<const int32_t>> prompts;
  for (size_t r : groups) prompts.emplace_back(e.requests[r].prompt_tokens);
  PrefillPlan plan;
  if (e.opt.share_prompt_prefixes && groups.size() > 1) plan = plan_shared_prefills(prompts, kMinSharedPrefill);
  // The blocks the plan takes: each run fills [begin, end), the block holding `begin` being a copy
  // when a fork writes into its parent's partly filled last block. The admission rule leaves room
  // for a plain prefill, so a plan needing more than the free blocks is dropped.
  const int64_t bs = book.block_size;
  auto blocks = [&](int64_t begin, int64_t end) { return (end + bs - 1) / bs - begin / bs; };
  int64_t need = 0;
  for (const PrefillPlan::Node& node : plan.nodes) need += blocks(node.begin, node.end);
  if (!plan.nodes.empty())
    for (size_t i = 0; i < prompts.size(); ++i) need += blocks(plan.from[i], static_cast<int64_t>(prompts[i].size()));
  if (need > kv_free_block_count(book)) plan.nodes.clear();
  if (plan.nodes.empty()) {
    for (const auto& p : prompts) e.stats.prefill_tokens += static_cast<int64_t>(p.size());
    policy_forward_cached(e.policy, e.cache, inputs, e.logits, e.opt.batch_invariant);
    return;
  }
  std::vector<int64_t> handle(plan.nodes.size(), -1);
  for (int64_t level = 0;; ++level) {
    std::vector<CachedInput> run;
    for (size_t n = 0; n < plan.nodes.size(); ++n) {
      const PrefillPlan::Node& node = plan.nodes[n];
      if (node.level != level) continue;
      handle[n] = node.parent < 0 ? kv_new_sequence(book) : kv_fork(book, handle[node.parent]);
      const std::span<const int32_t> tokens = prompts[node.prompt].subspan(node.begin, node.end - node.begin);
      run.push_back({handle[n], std::vector<int32_t>(tokens.begin(), tokens.end())});
      e.stats.prefill_tokens += node.end - node.begin;
    }
    if (run.empty()) break;
    policy_forward_cached(e.policy, e.cache, run, e.logits, e.opt.batch_invariant);  // the nodes' logits are not used
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (plan.fork_of[i] >= 0) {
      kv_free(book, inputs[i].sequence);
      inputs[i].sequence = kv_fork(book, handle[plan.fork_of[i]]);
      inputs[i].tokens.erase(inputs[i].tokens.begin(), inputs[i].tokens.begin() + plan.from[i]);
    }
    e.stats.prefill_tokens += static_cast<int64_t>(inputs[i].tokens.size());
  }
  policy_forward_cached(e.policy, e.cache, inputs, e.logits, e.opt.batch_invariant);
  for (int64_t h : handle) kv_free(book, h);
}

// Partial rollout: the next weights from here on (RolloutOptions::switch_weights). Recomputed, a
// live sample gives its blocks back as a preempted one does (not a preemption of the schedule:
// the cache did not run out), but its group's prompt is prefilled once more and forked, as at
// admission (prefill_prompts: stretches shared across prompts once too), and its feed is its
// history past the prompt; what the plain readmission of a preempted sample would prefill alone,
// each sample its whole history, costs up to G times more. The same bits either way under
// batch_invariant (a token's K/V depend on the tokens up to it only).
void switch_weights(Engine& e) {
  if (!e.opt.switch_weights()) throw RolloutStopped{};
  ++e.stats.weight_switches;
  std::vector<std::vector<size_t>> by_request(e.requests.size());
  for (size_t k = 0; k < e.samples.size(); ++k) {
    Sample& s = e.samples[k];
    Trajectory& t = e.out[k];
    if (s.phase == Phase::Done) continue;
    t.switch_at = static_cast<int64_t>(t.tokens.size());  // the feed's head was drawn by the old weights
    if (e.opt.partial_kv_keep || s.handle < 0) continue;
    e.stats.switch_recomputed_tokens += static_cast<int64_t>(t.tokens.size() - s.feed.size());
    release(e, s);
    s.feed = t.tokens;
    by_request[static_cast<size_t>(s.request)].push_back(k);
  }
  std::vector<size_t> groups;
  std::vector<CachedInput> inputs;
  for (size_t r = 0; r < by_request.size(); ++r)
    if (!by_request[r].empty()) groups.push_back(r), inputs.push_back({kv_new_sequence(e.cache.book()), e.requests[r].prompt_tokens});
  if (groups.empty()) return;
  // Their prompts' blocks were all theirs (every live sample of those requests let go of them), so
  // the prefill fits; the feeds past them are make_room's to fit, as any step's.
  const auto t0 = Clock::now();
  prefill_prompts(e, groups, inputs);
  e.stats.prefill_seconds += seconds_since(t0);
  for (size_t i = 0; i < groups.size(); ++i) {
    const int64_t prompt = static_cast<int64_t>(e.requests[groups[i]].prompt_tokens.size());
    for (size_t k : by_request[groups[i]]) {
      Sample& s = e.samples[k];
      s.handle = kv_fork(e.cache.book(), inputs[i].sequence);
      ++e.live;
      s.feed.erase(s.feed.begin(), s.feed.begin() + prompt);
    }
    kv_free(e.cache.book(), inputs[i].sequence);
  }
}

// Live samples at most: the batch cap, but always one whole group.
int64_t live_cap(const Engine& e) { return std::max(e.opt.max_batch_sequences, e.opt.group_size); }

// The blocks the feeds of `batch` take in their next forward: what kv_reserve takes for a live
// sample, the whole feed in fresh blocks for a preempted one (it gets a new sequence).
int64_t blocks_needed(const Engine& e, const std::vector<size_t>& batch) {
  const PagedKVCache& book = e.cache.book();
  std::vector<std::pair<int64_t, int64_t>> appends;
  int64_t fresh = 0;
  for (size_t k : batch) {
    const Sample& s = e.samples[k];
    const int64_t n = static_cast<int64_t>(s.feed.size());
    if (s.handle >= 0) appends.emplace_back(s.handle, n);
    else fresh += (n + book.block_size - 1) / book.block_size;
  }
  return fresh + kv_blocks_needed(book, appends);
}

// The live samples that decode next (in sample order).
std::vector<size_t> live_decoding(const Engine& e) {
  std::vector<size_t> out;
  for (size_t k = 0; k < e.samples.size(); ++k)
    if (e.samples[k].phase == Phase::Decode && e.samples[k].handle >= 0) out.push_back(k);
  return out;
}

// Until the step's feeds fit the free blocks, preempts the youngest live sample (the largest
// index; see the top of this file). Returns the batch without the samples preempted. Ends: a
// sample alone always fits (at most max_total_tokens, and the cache holds a group of those).
std::vector<size_t> make_room(Engine& e, std::vector<size_t> batch) {
  while (blocks_needed(e, batch) > kv_free_block_count(e.cache.book())) {
    size_t victim = e.samples.size();
    while (e.samples[--victim].handle < 0) {
    }
    preempt(e, e.samples[victim], e.out[victim]);
    batch.erase(std::remove(batch.begin(), batch.end(), victim), batch.end());
  }
  return batch;
}

// Readmits the preempted samples whose feed is ready (not waiting on SQL), oldest first, each into
// a fresh sequence (its next decode step prefills its history), while the batch cap allows and the
// blocks free cover it and the next step of every live sample; stops at the first that does not
// fit, so they come back in order. Returns whether no preempted sample is left (then new groups may
// come in).
bool readmit(Engine& e) {
  std::vector<size_t> step = live_decoding(e);
  bool left = false;
  for (size_t k = 0; k < e.samples.size(); ++k) {
    Sample& s = e.samples[k];
    if (!preempted(s)) continue;
    if (s.phase == Phase::WaitSql) {
      left = true;
      continue;
    }
    step.push_back(k);
    if (e.live + 1 > live_cap(e) || blocks_needed(e, step) > kv_free_block_count(e.cache.book())) return false;
    s.handle = kv_new_sequence(e.cache.book());
    ++e.live;
  }
  return !left;
}

// Admits whole groups in request order while the batch cap and the cache allow (the top of this
// file), prefills their prompts (prefill_prompts) and draws each sample's first token from its
// group's prompt logits.
void admit_groups(Engine& e, size_t& next_request, int64_t per_sample_blocks) {
  const int64_t G = e.opt.group_size, bs = e.cache.book().block_size, free = kv_free_block_count(e.cache.book());
  if (next_request >= e.requests.size() || e.live + G > live_cap(e)) return;
  // The blocks taken once the admitted groups are prefilled and everything live steps once: the
  // live samples' next feeds, and per group its prompt and a block for each sample's first token.
  int64_t need = blocks_needed(e, live_decoding(e));
  std::vector<size_t> groups;
  std::vector<CachedInput> inputs;
  while (next_request < e.requests.size() && e.live + G <= live_cap(e)) {
    const size_t r = next_request;
    const std::vector<int32_t>& prompt = e.requests[r].prompt_tokens;
    if (static_cast<int64_t>(prompt.size()) >= e.cap) {  // no room for a single token
      for (int64_t g = 0; g < G; ++g) {
        e.out[r * G + g].truncated = true;
        e.samples[r * G + g].phase = Phase::Done;
      }
      ++next_request;
      continue;
    }
    const int64_t group_need = (static_cast<int64_t>(prompt.size()) + bs - 1) / bs + G;
    const bool worst_case_fits = (e.live + G) * per_sample_blocks <= e.cache.book().num_blocks;
    if (!worst_case_fits && need + group_need > free) break;
    ++next_request;
    need += group_need;
    e.live += G;
    e.stats.prompt_tokens += static_cast<int64_t>(prompt.size());
    groups.push_back(r);
    inputs.push_back({kv_new_sequence(e.cache.book()), prompt});
  }
  if (groups.empty()) return;
  auto t0 = Clock::now();
  prefill_prompts(e, groups, inputs);
  e.stats.prefill_seconds += seconds_since(t0);
  // Every sample of a group draws its first token from the group's prompt row.
  std::vector<int64_t> rows;
  std::vector<SamplingRequest> requests;
  for (size_t i = 0; i < groups.size(); ++i)
    for (int64_t g = 0; g < G; ++g) {
      size_t k = groups[i] * G + g;
      Sample& s = e.samples[k];
      s.handle = g == 0 ? inputs[i].sequence : kv_fork(e.cache.book(), inputs[i].sequence);
      s.phase = Phase::Decode;
      rows.push_back(static_cast<int64_t>(i));
      requests.push_back(draw_request(e, s, e.out[k]));
    }
  std::vector<SampledToken> drawn =
      policy_sample(e.policy, e.logits, rows, requests, static_cast<int64_t>(e.tok.size()));
  for (size_t i = 0; i < groups.size(); ++i)
    for (int64_t g = 0; g < G; ++g) {
      size_t k = groups[i] * G + g;
      start_turn(e, e.samples[k], e.out[k]);
      sample_next(e, e.samples[k], e.out[k], drawn[i * G + g]);
    }
}

// Preempted samples first; new groups only when none is left.
void admit(Engine& e, size_t& next_request, int64_t per_sample_blocks) {
  if (readmit(e)) admit_groups(e, next_request, per_sample_blocks);
}

void collect_sql(Engine& e) {
  for (size_t k = 0; k < e.samples.size(); ++k) {
    Sample& s = e.samples[k];
    if (s.phase != Phase::WaitSql) continue;
    bool take =
        e.opt.reproducible ? s.sql_due <= e.step : s.sql.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    if (take) take_sql_result(e, s, e.out[k]);
  }
}

// Nothing can decode: a reproducible schedule jumps to the earliest due step; otherwise wait
// until some query has finished.
void wait_for_sql(Engine& e) {
  if (e.opt.reproducible) {
    int64_t due = INT64_MAX;
    for (const Sample& s : e.samples)
      if (s.phase == Phase::WaitSql) due = std::min(due, s.sql_due);
    e.step = std::max(e.step, due);
    return;
  }
  for (;;)
    for (Sample& s : e.samples)
      if (s.phase == Phase::WaitSql && s.sql.wait_for(std::chrono::milliseconds(1)) == std::future_status::ready)
        return;
}

void decode_step(Engine& e, const std::vector<size_t>& batch) {
  auto t0 = Clock::now();
  std::vector<CachedInput> inputs;
  for (size_t k : batch) inputs.push_back({e.samples[k].handle, e.samples[k].feed});
  policy_forward_cached(e.policy, e.cache, inputs, e.logits, e.opt.batch_invariant);
  const PagedKVCache& book = e.cache.book();
  e.stats.kv_blocks_peak = std::max(e.stats.kv_blocks_peak, book.num_blocks - kv_free_block_count(book));
  std::vector<int64_t> rows;
  std::vector<SamplingRequest> requests;
  for (size_t i = 0; i < batch.size(); ++i) {
    rows.push_back(static_cast<int64_t>(i));
    requests.push_back(draw_request(e, e.samples[batch[i]], e.out[batch[i]]));
  }
  std::vector<SampledToken> drawn =
      policy_sample(e.policy, e.logits, rows, requests, static_cast<int64_t>(e.tok.size()));
  for (size_t i = 0; i < batch.size(); ++i) sample_next(e, e.samples[batch[i]], e.out[batch[i]], drawn[i]);
  double dt = seconds_since(t0);
  e.stats.decode_seconds += dt;
  ++e.stats.decode_steps;
  for (size_t k : batch) e.out[k].decode_seconds += dt;
}

}  // namespace

void add_rollout_stats(RolloutStats& into, const RolloutStats& s) {
  into.sampled_tokens += s.sampled_tokens;
  into.injected_tokens += s.injected_tokens;
  into.prompt_tokens += s.prompt_tokens;
  into.prefill_tokens += s.prefill_tokens;
  into.sql_calls += s.sql_calls;
  into.sql_errors += s.sql_errors;
  into.sql_infra_errors += s.sql_infra_errors;
  into.decode_seconds += s.decode_seconds;
  into.prefill_seconds += s.prefill_seconds;
  into.sql_seconds += s.sql_seconds;
  into.wall_seconds += s.wall_seconds;
  into.decode_steps += s.decode_steps;
  into.kv_blocks = std::max(into.kv_blocks, s.kv_blocks);
  into.kv_blocks_peak = std::max(into.kv_blocks_peak, s.kv_blocks_peak);
  into.preemptions += s.preemptions;
  into.preempted_tokens += s.preempted_tokens;
  into.weight_switches += s.weight_switches;
  into.switch_recomputed_tokens += s.switch_recomputed_tokens;
  into.live_sum += s.live_sum;
  into.live_steps += s.live_steps;
  into.live_max = std::max(into.live_max, s.live_max);
}

std::vector<Trajectory> rollout(const QwenModel& model, const Tokenizer& tokenizer, const Protocol& protocol,
                                sql::Pool& pool, const std::vector<RolloutRequest>& requests,
                                const RolloutOptions& options, RolloutStats* stats_out) {
  return rollout(cpu_policy(model), tokenizer, protocol, pool, requests, options, stats_out);
}

std::vector<Trajectory> rollout(const Policy& policy, const Tokenizer& tokenizer, const Protocol& protocol,
                                sql::Pool& pool, const std::vector<RolloutRequest>& requests,
                                const RolloutOptions& options, RolloutStats* stats_out, PolicyKV* kv) {
  const QwenModel& model = *policy.host;
  auto wall0 = Clock::now();
  const int64_t G = options.group_size, V = model.config.vocab_size;
  check(G > 0, "rollout: group_size must be positive, got ", G);
  check(options.max_batch_sequences > 0, "rollout: max_batch_sequences must be positive, got ",
        options.max_batch_sequences);
  check(options.max_turn_tokens > 0, "rollout: max_turn_tokens must be positive, got ", options.max_turn_tokens);
  check(options.kv_block_size > 0, "rollout: kv_block_size must be positive, got ", options.kv_block_size);
  check(static_cast<int64_t>(tokenizer.size()) <= V, "rollout: the tokenizer has ", tokenizer.size(),
        " ids but the model's vocabulary only ", V);
  for (size_t r = 0; r < requests.size(); ++r) {
    check(requests[r].example != nullptr, "rollout: request ", r, " has no example");
    check(!requests[r].prompt_tokens.empty(), "rollout: request ", r, " has an empty prompt");
    for (int32_t id : requests[r].prompt_tokens)
      check(id >= 0 && id < V, "rollout: request ", r, " has token id ", id, " outside the model's vocabulary of ", V);
  }
  RolloutStats local;
  RolloutStats& stats = stats_out ? *stats_out : local;
  stats = RolloutStats{};
  if (requests.empty()) return {};

  const int64_t total = static_cast<int64_t>(requests.size()) * G;
  const int64_t cap = std::min(options.max_total_tokens, model.config.max_position_embeddings);
  check(cap > 0, "rollout: max_total_tokens must be positive, got ", options.max_total_tokens);
  const int64_t per_sample = (cap + options.kv_block_size - 1) / options.kv_block_size;
  int64_t live_samples = std::min(options.max_batch_sequences, std::max<int64_t>(total, 1));
  live_samples = (live_samples + G - 1) / G * G;
  int64_t blocks = kv ? kv->book().num_blocks : options.kv_cache_blocks;
  if (kv) {
    check(kv->backend == policy.backend, "rollout: the KV cache given is on another device than the policy");
    check(kv->book().block_size == options.kv_block_size, "rollout: the KV cache given has blocks of ",
          kv->book().block_size, " tokens, the options say ", options.kv_block_size);
    check(kv_free_block_count(kv->book()) == blocks, "rollout: the KV cache given holds ",
          blocks - kv_free_block_count(kv->book()), " blocks of an earlier rollout");
  } else if (blocks <= 0) {
    int64_t block_bytes = policy_kv_block_bytes(policy, options.kv_block_size);
    blocks = std::min(live_samples * per_sample,
                      std::max<int64_t>(options.kv_cache_max_bytes / block_bytes, G * per_sample));
  }
  check(blocks >= G * per_sample, "rollout: kv_cache_blocks = ", blocks, " cannot hold one group of ", G,
        " samples of up to ", cap, " tokens (", G * per_sample, " blocks of ", options.kv_block_size, ")");

  PolicyKV own;
  if (!kv) own = make_policy_kv(policy, blocks, options.kv_block_size);
  Engine e{.policy = policy,
           .tok = tokenizer,
           .protocol = protocol,
           .pool = pool,
           .requests = requests,
           .opt = options,
           .stats = stats,
           .cache = kv ? *kv : own,
           .stops = protocol.stop_strings(),
           .final_prefix = protocol.final_turn_prefix(),
           .final_stops = protocol.final_turn_stops(),
           .cap = cap,
           .max_turns = options.max_turns > 0 ? options.max_turns : protocol.max_turns()};
  check(e.max_turns > 0, "rollout: protocol ", protocol.name(), " allows no turns");
  stats.kv_blocks = blocks;
  for (const char* name : {"<|im_end|>", "<|endoftext|>"})
    if (int32_t id = tokenizer.token_id(name); id >= 0) e.eos.push_back(id);
  e.out.resize(static_cast<size_t>(total));
  e.samples.resize(static_cast<size_t>(total));
  for (int64_t k = 0; k < total; ++k) {
    Trajectory& t = e.out[k];
    const auto& prompt = requests[k / G].prompt_tokens;
    t.example_index = k / G;
    t.sample_index = k % G;
    t.tokens = prompt;
    t.prompt_length = static_cast<int64_t>(prompt.size());
    t.policy_mask.assign(prompt.size(), 0);
    t.sampler_logprobs.assign(prompt.size(), 0.0f);
    e.samples[k].request = k / G;
    e.samples[k].stream_id = options.first_sample_id + static_cast<uint64_t>(k);
  }

  size_t next_request = 0;
  int64_t reported = 0;  // finished samples last passed to options.progress
  bool switched = !options.switch_weights;
  for (;;) {
    if (!switched && e.step >= options.switch_step) switched = true, switch_weights(e);
    admit(e, next_request, per_sample);
    collect_sql(e);
    const bool waiting =
        std::any_of(e.samples.begin(), e.samples.end(), [](const Sample& s) { return s.phase == Phase::WaitSql; });
    const std::vector<size_t> batch = make_room(e, live_decoding(e));
    if (batch.empty()) {
      if (waiting) {
        wait_for_sql(e);
        continue;
      }
      // Preempted samples come back next time round: nothing holds blocks now.
      if (next_request < requests.size() || std::any_of(e.samples.begin(), e.samples.end(), preempted)) continue;
      break;
    }
    stats.live_sum += e.live;
    ++stats.live_steps;
    stats.live_max = std::max(stats.live_max, e.live);
    for (size_t from = 0; from < batch.size(); from += static_cast<size_t>(options.max_batch_sequences)) {
      size_t to = std::min(batch.size(), from + static_cast<size_t>(options.max_batch_sequences));
      decode_step(e, std::vector<size_t>(batch.begin() + from, batch.begin() + to));
    }
    ++e.step;
    if (options.progress && e.finished > reported) progress_update(*options.progress, reported = e.finished);
  }
  // The last samples may finish on their SQL result, after the last decode step.
  if (options.progress && e.finished > reported) progress_update(*options.progress, e.finished);
  check(kv_free_block_count(e.cache.book()) == blocks, "rollout: ", blocks - kv_free_block_count(e.cache.book()),
        " KV blocks still held after every sample finished");
  for (Trajectory& t : e.out) {
    if (t.answered || options.single_turn) continue;
    t.final_sql = protocol.fallback_answer(t);
    t.answer_fallback = !t.final_sql.empty();
  }
  stats.wall_seconds = seconds_since(wall0);
  return std::move(e.out);
}

}  // namespace sqlrl::rl
