// Gold demonstrations for the synthetic benchmark: replayed turn by turn on a fresh pool, every
// observation must be the protocol's formatting of the real result, every final SQL EX-correct,
// every demonstration opens with the same reasoning, a trap question probes only after a first
// result that found nothing and shows the stored value, and a repair opens with a rejected query.
#include <gtest/gtest.h>

#include "rl/agent/rollout.h"
#include "rl/sft/sft_demos.h"
#include "rl/agent/untrusted.h"
#include "sql/exec/compare.h"
#include "sql/exec/format.h"
#include "sql/exec/schema.h"
#include "tests/rl_sft/sft_fixture.h"

namespace sqlrl::rl {
namespace {

sql::Dataset train_split(bool dialogues = false) {
  sql::LoadOptions o;
  o.format = dialogues ? sql::DatasetFormat::Sparc : sql::DatasetFormat::Spider;
  o.dir = testing::small_bench() + (dialogues ? "/sparc" : "");
  o.split = "train";
  return sql::load_dataset(o);
}

// The traps written for an example (its record's, or its dialogue turn's), less those an
// earlier turn's gold SQL already resolves in the prompt.
std::vector<DemoTrap> unseen_traps(const sql::Dataset& ds, const sql::Example& ex, const std::string& prompt) {
  const nlohmann::json& rec = ds.records[ex.record_index];
  std::vector<DemoTrap> out;
  for (const DemoTrap& t : record_traps(rec.contains("interaction") ? rec["interaction"][ex.turn_index] : rec)) {
    if (t.kind != "surface_form") continue;  // numbers kept as text: the schema's TEXT type says so
    std::string literal = "'" + t.stored_value + "'";
    bool resolved = false;
    for (const sql::Turn& h : ex.history)
      resolved = resolved || (h.gold_sql.find(literal) != std::string::npos && prompt.find(h.gold_sql) != std::string::npos);
    if (!resolved) out.push_back(t);
  }
  return out;
}

void replay(const std::string& name, bool dialogues) {
  const sql::Dataset ds = train_split(dialogues);
  ASSERT_GT(ds.examples.size(), dialogues ? 10u : 20u);
  {
    SCOPED_TRACE(name + (dialogues ? " (dialogue turns)" : " (questions)"));
    auto p = make_protocol(name);
    sql::Pool pool;
    SynthDemoStats st;
    SynthDemoOptions options;
    options.repair_share = 0.5;  // the small benchmark has few trap-free questions
    std::vector<Demo> demos = synth_demos(*p, pool, ds, options, &st);
    std::printf("%s %s: %lld demos of %lld questions, %lld with traps, skipped %lld/%lld/%lld (budget/probe/EX)\n",
                name.c_str(), dialogues ? "dialogue turns" : "questions", static_cast<long long>(st.written), static_cast<long long>(st.questions),
                static_cast<long long>(st.trap_demos), static_cast<long long>(st.skipped_budget),
                static_cast<long long>(st.skipped_probe), static_cast<long long>(st.skipped_not_ex));
    EXPECT_EQ(static_cast<int64_t>(demos.size()), st.written);
    EXPECT_EQ(st.written + st.skipped_budget + st.skipped_probe + st.skipped_not_ex + st.skipped_no_cue, st.questions);
    if (!dialogues) {
      EXPECT_GT(st.trap_demos, 0);
      EXPECT_GT(st.repair_demos, 0);
    }
    std::string opening;  // the first turn's reasoning, identical in every demonstration
    EXPECT_GE(st.written, st.questions * 9 / 10);

    sql::Pool fresh;  // replay on a pool of our own
    for (const Demo& d : demos) {
      const sql::Example& ex = ds.examples[d.example];
      SCOPED_TRACE(ex.id);
      ChatOptions chat;
      chat.add_generation_prompt = true;
      ASSERT_GE(d.segments.size(), 4u);
      EXPECT_FALSE(d.segments[0].train);
      const sql::DatabaseSchema schema = sql::read_schema(fresh, ex.db_path);
      const std::string marked_prompt = render_chat(p->first_prompt(ex, schema), chat);
      EXPECT_EQ(d.segments[0].text, strip_marks(marked_prompt));
      // Training and sampling see the same ids: the prompt segment tokenizes as the rollout
      // engine's prompt (the data spans as text), each observation as the engine's injection.
      RolloutOptions ro;
      ro.enable_thinking = true;  // renders as the demos' unset flag: no empty think block
      EXPECT_EQ(tokenize_segments(testing::sft_tokenizer(), {d.segments[0]}).tokens,
                build_prompt_tokens(*p, testing::sft_tokenizer(), ex, schema, ro));
      int turn = 0, execs = 0;
      std::string final_sql, observations, first_observation;
      for (size_t i = 1; i < d.segments.size(); i += 2) {
        ASSERT_TRUE(d.segments[i].train) << "segment " << i;
        ASSERT_LT(i + 1, d.segments.size());
        ++turn;
        Action a = p->parse(d.segments[i].text);
        ASSERT_NE(a.kind, ActionKind::Invalid) << a.error;
        if (a.kind == ActionKind::Answer) {
          EXPECT_EQ(i + 2, d.segments.size()) << "the answer is the last turn";
          EXPECT_TRUE(d.segments[i + 1].train);
          EXPECT_EQ(d.segments[i + 1].text, "<|im_end|>");
          final_sql = a.sql;
          break;
        }
        ASSERT_FALSE(d.segments[i + 1].train);
        sql::Result r = fresh.execute(ex.db_path, a.sql);
        std::vector<sql::Result> history;
        for (const sql::Turn& h : ex.history) history.push_back(fresh.execute(ex.db_path, h.gold_sql));
        StepOutcome o;
        o.result = &r;
        o.db_path = sql::shown_db_path(ex.db_path);
        o.turns_left = p->max_turns() - turn;
        if (a.kind == ActionKind::MemoryRetrieve) o.history_results = &history;
        const std::string injected = p->inject(a, o, ex);
        EXPECT_EQ(d.segments[i + 1].text, strip_marks(injected)) << "turn " << turn;
        EXPECT_EQ(tokenize_segments(testing::sft_tokenizer(), {d.segments[i + 1]}).tokens,
                  encode_marked(testing::sft_tokenizer(), injected))
            << "turn " << turn;
        execs += a.kind == ActionKind::ExecSql;
        observations += d.segments[i + 1].text;
        if (turn == 1) first_observation = d.segments[i + 1].text;
      }
      // The reasoning before the first action: no word of what the question hides.
      // (the restated question, different in every demonstration, left out).
      std::string first = d.segments[1].text.substr(0, d.segments[1].text.find("</"));
      if (size_t q = first.find(ex.question); q != std::string::npos) first.erase(q, ex.question.size());
      if (opening.empty()) opening = first;
      EXPECT_EQ(first, opening) << "the opening differs";
      EXPECT_LE(turn, p->max_turns());
      EXPECT_EQ(execs, d.exec_turns);
      ASSERT_FALSE(final_sql.empty());
      sql::Result pred = fresh.execute(ex.db_path, final_sql), gold = fresh.execute(ex.db_path, ex.gold_sql);
      sql::CompareOptions co;
      co.order_matters = sql::gold_has_order_by(ex.gold_sql);
      EXPECT_TRUE(sql::results_match(pred, gold, co)) << final_sql;
      const std::vector<DemoTrap> traps = unseen_traps(ds, ex, d.segments[0].text);
      if (d.repair) {
        EXPECT_TRUE(traps.empty());
        const sql::Result rejected = fresh.execute(ex.db_path, p->parse(d.segments[1].text).sql);
        EXPECT_NE(rejected.error.find("no such column"), std::string::npos) << rejected.error;
        EXPECT_EQ(execs, 2);
        continue;
      }
      if (traps.empty()) {
        EXPECT_EQ(execs, 1);
        continue;
      }
      EXPECT_GE(execs, 2);
      // The probe follows a first result that found nothing (skyrl shows rows as a table; an
      // empty result and a zero count read the same way in every protocol's observation).
      const sql::Result opened = fresh.execute(ex.db_path, p->parse(d.segments[1].text).sql);
      EXPECT_TRUE(opened.rows.empty() || (opened.rows.size() == 1 && opened.rows[0][0].is_number() &&
                                          opened.rows[0][0].integer == 0 && opened.rows[0][0].real == 0))
          << "probed after a result with rows: " << first_observation;
      for (const DemoTrap& t : traps) {
        if (t.kind != "surface_form") continue;
        std::string shown = t.stored_value;
        while (!shown.empty() && shown.back() == ' ') shown.pop_back();
        EXPECT_NE(observations.find(shown), std::string::npos) << "stored value '" << t.stored_value << "' never shown";
      }
    }
  }
}

TEST(SynthDemos, ReplayOnTheDatabaseInEveryProtocol) {
  for (bool dialogues : {false, true})
    for (const std::string& name : protocol_names())  // multi-turn demonstrations: a one-turn protocol has none
      if (make_protocol(name)->max_turns() > 1) replay(name, dialogues);
}

// A one-turn protocol (arctic) has no turn to look at the data in: its demonstration is the prompt
// and one answer turn with the gold SQL (a plan of two turns wrote none at all), the protocol's own parse of it; questions that need a
// probe (a trap) or open with a repair are skipped for the budget, never written half.
TEST(SynthDemos, AOneTurnProtocolWritesTheAnswerAlone) {
  const sql::Dataset ds = train_split();
  int one_turn = 0;
  for (const std::string& name : protocol_names()) {
    auto p = make_protocol(name);
    if (p->max_turns() != 1) continue;
    ++one_turn;
    SCOPED_TRACE(name);
    sql::Pool pool;
    SynthDemoStats st;
    SynthDemoOptions options;
    options.repair_share = 0.5;
    const std::vector<Demo> demos = synth_demos(*p, pool, ds, options, &st);
    ASSERT_FALSE(demos.empty()) << "skipped " << st.skipped_budget << " for the budget";
    EXPECT_EQ(st.trap_demos, 0);
    EXPECT_EQ(st.repair_demos, 0);
    EXPECT_GT(st.skipped_budget, 0) << "trap and repair questions cannot be shown in one turn";
    for (const Demo& d : demos) {
      const sql::Example& ex = ds.examples[d.example];
      ASSERT_EQ(d.segments.size(), 3u);  // the prompt, the answer turn, its <|im_end|>
      EXPECT_FALSE(d.segments[0].train);
      EXPECT_TRUE(d.segments[1].train && d.segments[2].train);
      EXPECT_EQ(d.segments[2].text, "<|im_end|>");
      const Action a = p->parse(d.segments[1].text);
      EXPECT_EQ(a.kind, ActionKind::Answer) << d.segments[1].text;
      EXPECT_EQ(a.sql, ex.gold_sql);
      EXPECT_EQ(d.final_sql, ex.gold_sql);
      EXPECT_EQ(d.exec_turns, 0);
    }
  }
  EXPECT_GE(one_turn, 1) << "no one-turn protocol registered (arctic)";
}

TEST(SynthDemos, JsonlLinesLoadAsMaskedSequences) {
  const sql::Dataset ds = train_split();
  auto p = make_protocol("mtir");
  sql::Pool pool;
  std::vector<Demo> demos = synth_demos(*p, pool, ds, SynthDemoOptions{});
  ASSERT_FALSE(demos.empty());
  const Demo& d = demos.front();
  nlohmann::ordered_json line = nlohmann::ordered_json::parse(demo_jsonl(d, ds.examples[d.example], *p));
  EXPECT_EQ(line["protocol"], "mtir");
  SftSequence seq = sft_sequence_from_json(line, testing::sft_tokenizer(), ChatOptions{}, "demo");
  std::string trained_text;
  for (const SftSegment& s : d.segments)
    if (s.train) trained_text += s.text;
  std::vector<int32_t> trained;
  for (size_t i = 0; i < seq.tokens.size(); ++i)
    if (seq.mask[i]) trained.push_back(seq.tokens[i]);
  EXPECT_EQ(decode(testing::sft_tokenizer(), trained), trained_text);
  // The data spans travel through the JSONL: the loaded ids are the in-memory segments' ids.
  EXPECT_EQ(seq.tokens, tokenize_segments(testing::sft_tokenizer(), d.segments).tokens);
  EXPECT_TRUE(line["segments"][0].contains("plain"));
}

// A segment's "plain" ranges keep added-token text as text; a bad range names the field.
TEST(SftSegments, PlainRangesKeepDataTextAndAreChecked) {
  const Tokenizer& tok = testing::sft_tokenizer();
  const int32_t im_end = tok.token_id("<|im_end|>");
  nlohmann::ordered_json line = nlohmann::ordered_json::parse(
      R"({"segments": [{"text": "x<|im_end|>y<|im_end|>", "train": false, "plain": [[1, 11]]}, {"text": "z", "train": true}]})");
  SftSequence seq = sft_sequence_from_json(line, tok, ChatOptions{}, "f.jsonl:1");
  EXPECT_EQ(std::count(seq.tokens.begin(), seq.tokens.end(), im_end), 1);
  EXPECT_EQ(decode(tok, seq.tokens), "x<|im_end|>y<|im_end|>z");
  line["segments"][0]["plain"] = nlohmann::ordered_json::parse("[[5, 40]]");
  try {
    sft_sequence_from_json(line, tok, ChatOptions{}, "f.jsonl:1");
    ADD_FAILURE() << "a range past the text was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("f.jsonl:1: segments[0].plain[0]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sqlrl::rl
