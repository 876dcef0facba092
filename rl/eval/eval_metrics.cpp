// The evaluation's pure parts: pass@k, majority vote, the choice of a question's prediction,
// and the aggregation into totals and breakdowns.
#include <algorithm>
#include <map>
#include <unordered_map>

#include "rl/eval/eval.h"
#include "runtime/error.h"

namespace sqlrl::rl {

EvalMode parse_eval_mode(const std::string& name) {
  if (name == "greedy") return EvalMode::Greedy;
  if (name == "vote") return EvalMode::Vote;
  if (name == "passk") return EvalMode::PassK;
  fail("eval mode '", name, "' does not exist; modes: greedy, vote, passk");
}

const char* eval_mode_name(EvalMode mode) {
  switch (mode) {
    case EvalMode::Greedy:
      return "greedy";
    case EvalMode::Vote:
      return "vote";
    case EvalMode::PassK:
      return "passk";
  }
  return "?";
}

double pass_at_k(int64_t n, int64_t c, int64_t k) {
  check(n >= 1 && k >= 1 && k <= n, "pass@k: need 1 <= k <= n, got n=", n, " k=", k);
  check(c >= 0 && c <= n, "pass@k: need 0 <= c <= n, got n=", n, " c=", c);
  // Fewer wrong samples than k: every draw of k holds a right one.
  if (n - c < k) return 1.0;
  // C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k/i): each factor is in (0, 1], so the
  // product never overflows and loses no more than one rounding per factor.
  double all_wrong = 1.0;
  for (int64_t i = n - c + 1; i <= n; ++i) all_wrong *= 1.0 - static_cast<double>(k) / static_cast<double>(i);
  return 1.0 - all_wrong;
}

Vote majority_vote(const std::vector<uint64_t>& hashes) {
  // Groups in order of their earliest member, so a strict > keeps the earliest of tied groups.
  std::unordered_map<uint64_t, size_t> group_of;
  std::vector<std::pair<int64_t, int64_t>> groups;  // (earliest member, size)
  for (size_t i = 0; i < hashes.size(); ++i) {
    if (hashes[i] == 0) continue;
    auto [it, fresh] = group_of.emplace(hashes[i], groups.size());
    if (fresh) groups.emplace_back(static_cast<int64_t>(i), 0);
    ++groups[it->second].second;
  }
  Vote v;
  v.groups = static_cast<int64_t>(groups.size());
  for (const auto& [first, size] : groups)
    if (size > v.votes) {
      v.winner = first;
      v.votes = size;
    }
  return v;
}

namespace {

std::vector<uint64_t> hashes_of(const ExampleResult& r) {
  std::vector<uint64_t> h;
  for (const SampleOutcome& s : r.samples) h.push_back(s.result_hash);
  return h;
}

// The sample shown when nothing executed: the first that answered at all, else the first.
int64_t fallback_sample(const ExampleResult& r) {
  for (size_t i = 0; i < r.samples.size(); ++i)
    if (r.samples[i].answered) return static_cast<int64_t>(i);
  return 0;
}

}  // namespace

void choose_prediction(ExampleResult& r, EvalMode mode) {
  check(!r.samples.empty(), "eval: example ", r.example_index, " has no samples");
  r.num_correct = 0;
  r.seconds = 0;
  for (const SampleOutcome& s : r.samples) {
    r.num_correct += s.ex ? 1 : 0;
    r.seconds = std::max(r.seconds, s.seconds);
  }
  Vote vote = majority_vote(hashes_of(r));
  r.votes = vote.votes;
  int64_t majority = vote.winner >= 0 ? vote.winner : fallback_sample(r);
  switch (mode) {
    case EvalMode::Greedy:
      r.chosen = 0;
      r.correct = r.samples[0].ex;
      break;
    case EvalMode::Vote:
      r.chosen = majority;
      r.correct = r.samples[static_cast<size_t>(majority)].ex;
      break;
    case EvalMode::PassK: {
      r.chosen = majority;
      for (size_t i = 0; i < r.samples.size(); ++i)
        if (r.samples[i].ex) {
          r.chosen = static_cast<int64_t>(i);
          break;
        }
      r.correct = r.num_correct > 0;
      break;
    }
  }
  r.em = r.samples[static_cast<size_t>(r.chosen)].em;
}

namespace {

// Known difficulty labels in their natural order; anything else sorts after them by name.
int difficulty_rank(const std::string& label) {
  static const char* known[] = {"easy",     "medium",      "hard",    "extra",         "simple",
                                "moderate", "challenging", "complex", "highly complex"};
  for (int i = 0; i < static_cast<int>(std::size(known)); ++i)
    if (label == known[i]) return i;
  return label == "unknown" ? 1000 : 100;
}

void add(Tally& t, const ExampleResult& r) {
  ++t.n;
  t.correct += r.correct ? 1 : 0;
  if (r.gold_parsed) {
    ++t.em_n;
    t.em += r.em ? 1 : 0;
  }
}

std::string turn_bucket(int turn_index) { return turn_index >= 4 ? ">4" : std::to_string(turn_index + 1); }

}  // namespace

EvalSummary summarize(const std::vector<sql::Example>& examples, const std::vector<ExampleResult>& results,
                      int64_t samples, bool dialogue) {
  check(samples >= 1, "eval: samples must be at least 1, got ", samples);
  EvalSummary s;
  s.samples = samples;
  s.dialogue = dialogue;
  std::map<std::string, Tally> by_difficulty, by_turn, by_category;
  std::map<size_t, std::pair<bool, bool>> interactions;  // record -> (all EX, all EM)
  std::vector<int64_t> ks;
  for (int64_t k = 1; k < samples; k *= 2) ks.push_back(k);
  ks.push_back(samples);
  std::vector<double> pass_sum(ks.size(), 0.0);
  int64_t vote_right = 0, answered = 0, executable = 0, format_errors = 0, turns = 0, calls = 0;
  double seconds = 0;
  for (const ExampleResult& r : results) {
    check(r.example_index < examples.size(), "eval: result for example ", r.example_index, " past ", examples.size(),
          " examples");
    check(static_cast<int64_t>(r.samples.size()) == samples, "eval: example ", r.example_index, " has ",
          r.samples.size(), " samples, expected ", samples);
    const sql::Example& ex = examples[r.example_index];
    add(s.total, r);
    add(by_difficulty[ex.difficulty.empty() ? "unknown" : ex.difficulty], r);
    if (!dialogue && !ex.category.empty()) add(by_category[ex.category], r);
    if (dialogue) {
      add(by_turn[turn_bucket(ex.turn_index)], r);
      auto [it, fresh] = interactions.emplace(ex.record_index, std::make_pair(true, true));
      it->second.first = it->second.first && r.correct;
      it->second.second = it->second.second && r.gold_parsed && r.em;
    }
    for (size_t j = 0; j < ks.size(); ++j) pass_sum[j] += pass_at_k(samples, r.num_correct, ks[j]);
    Vote vote = majority_vote(hashes_of(r));
    vote_right += vote.winner >= 0 && r.samples[static_cast<size_t>(vote.winner)].ex ? 1 : 0;
    for (const SampleOutcome& o : r.samples) {
      answered += o.answered;
      executable += o.executable;
      format_errors += !o.format_ok;
      turns += o.turns;
      calls += o.sql_calls;
      s.infra_failures += o.infra_failure ? 1 : 0;
      s.copy_checked += o.copy_checked;
      s.copy_errors += o.copy_error;
      if (o.executed_sql) {
        ++s.with_sql;
        s.first_right_final_wrong += o.first_ex && !o.ex;
        s.first_wrong_final_right += !o.first_ex && o.ex;
        s.last_right_final_wrong += o.last_ex && !o.ex;
      }
    }
    s.gold_errors += r.gold_error ? 1 : 0;
    seconds += r.seconds;
  }
  for (auto& [label, tally] : by_difficulty) s.by_difficulty.emplace_back(label, tally);
  std::stable_sort(s.by_difficulty.begin(), s.by_difficulty.end(),
                   [](const auto& a, const auto& b) { return difficulty_rank(a.first) < difficulty_rank(b.first); });
  for (auto& [category, tally] : by_category) s.by_category.emplace_back(category, tally);  // by name
  for (auto& [bucket, tally] : by_turn) s.by_turn.emplace_back(bucket, tally);  // "1" < ... < "4" < ">4"
  std::stable_sort(s.by_turn.begin(), s.by_turn.end(),
                   [](const auto& a, const auto& b) { return (a.first == ">4") < (b.first == ">4"); });
  for (const auto& [record, all] : interactions) {
    ++s.interactions.n;
    ++s.interactions.em_n;
    s.interactions.correct += all.first ? 1 : 0;
    s.interactions.em += all.second ? 1 : 0;
  }
  const double q = results.empty() ? 1.0 : static_cast<double>(results.size());
  for (size_t j = 0; j < ks.size(); ++j) s.pass_at.emplace_back(ks[j], results.empty() ? 0.0 : pass_sum[j] / q);
  s.vote_ex = results.empty() ? 0.0 : static_cast<double>(vote_right) / q;
  s.trajectories = static_cast<int64_t>(results.size()) * samples;
  const double t = s.trajectories ? static_cast<double>(s.trajectories) : 1.0;
  s.answered_rate = static_cast<double>(answered) / t;
  s.executable_rate = static_cast<double>(executable) / t;
  s.format_error_rate = s.trajectories ? static_cast<double>(format_errors) / t : 0.0;
  s.avg_turns = static_cast<double>(turns) / t;
  s.sql_calls_per_trajectory = static_cast<double>(calls) / t;
  s.sql_calls_per_question = results.empty() ? 0.0 : static_cast<double>(calls) / q;
  s.mean_question_seconds = results.empty() ? 0.0 : seconds / q;
  return s;
}

}  // namespace sqlrl::rl
