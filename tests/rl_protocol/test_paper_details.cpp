// The paper details each protocol reproduces by default and the options that switch them off
// (rl/agent/protocol.h ProtocolSettings, docs/protocols.md): SQL-Trail's Algorithm 1 (A.8)
// reasoning segments and forced final <solution>, MTSQL-R1's parsed memory (appendix D.1) and
// answer fallback (released verl/utils/reward_score/text2sql.py). MTIR-SQL's rethink line is in
// test_inject.cpp (InjectMtir).
#include <gtest/gtest.h>

#include "rl/agent/protocol.h"
#include "rl/options.h"
#include "tests/rl_protocol/protocol_test_util.h"

namespace sqlrl::rl {
namespace {

StepOutcome outcome(int turns_left, bool eos = false) {
  StepOutcome o;
  o.db_path = "/db/farm/farm.sqlite";
  o.turns_left = turns_left;
  o.turn_ended_with_eos = eos;
  return o;
}

// Algorithm 1 lines 10-29: a segment that stopped at </reasoning> holds neither <sql> nor
// <solution>; it uses a turn and appends nothing, so the model goes on in its own message.
TEST(SqlTrailAlgorithm1, ReasoningSegmentAppendsNothing) {
  auto p = make_protocol("sqltrail");
  Action a = p->parse("<reasoning>The price column is in products.</reasoning>");
  EXPECT_EQ(a.kind, ActionKind::Reasoning);
  EXPECT_FALSE(p->done(a, 0));
  EXPECT_FALSE(p->executes(a));
  EXPECT_EQ(testing::inject_text(*p, a, outcome(9), testing::farm_example()), "");
  // A segment the model closed with <|im_end|>: the next one opens a new assistant message.
  EXPECT_EQ(testing::inject_text(*p, a, outcome(9, true), testing::farm_example()), "\n<|im_start|>assistant\n");
  // The next segment's action reads as before.
  EXPECT_EQ(p->parse("\n<sql>SELECT 1</sql>").kind, ActionKind::ExecSql);
  // A malformed action is still invalid (line 18 runs it, it fails, line 22's text follows).
  Action bad = p->parse("<reasoning>r</reasoning><sql>SELECT 1");
  EXPECT_EQ(bad.kind, ActionKind::Invalid);
  EXPECT_NE(testing::inject_text(*p, bad, outcome(8), testing::farm_example()).find("Your previous action is invalid"),
            std::string::npos);

  // sqltrail-reasoning-stop = false: a turn with no action is invalid and gets line 22's text.
  ProtocolSettings legacy;
  legacy.sqltrail_reasoning_stop = false;
  auto old = make_protocol("sqltrail", legacy);
  Action r = old->parse("<reasoning>The price column is in products.</reasoning>");
  EXPECT_EQ(r.kind, ActionKind::Invalid);
  EXPECT_NE(testing::inject_text(*old, r, outcome(9), testing::farm_example()).find("Your previous action is invalid"),
            std::string::npos);
}

// Algorithm 1 line 31: after T turns the environment has the model write the <solution> block:
// the last turn starts with "<solution>" and ends at </solution> only (a </sql> or </reasoning>
// inside it does not end it); parse() reads the head with the sampled text.
TEST(SqlTrailAlgorithm1, FinalTurnIsASolutionBlock) {
  auto p = make_protocol("sqltrail");
  EXPECT_EQ(p->final_turn_prefix(), "<solution>");
  EXPECT_EQ(p->final_turn_stops(), (std::vector<std::string>{"</solution>"}));
  Action a = p->parse(p->final_turn_prefix() + "SELECT AVG(price) FROM products;</solution>");
  EXPECT_EQ(a.kind, ActionKind::Answer);
  EXPECT_EQ(a.sql, "SELECT AVG(price) FROM products;");
  ProtocolSettings legacy;
  legacy.sqltrail_final_solution = false;
  auto old = make_protocol("sqltrail", legacy);
  EXPECT_EQ(old->final_turn_prefix(), "");
  EXPECT_EQ(old->final_turn_stops(), old->stop_strings());
  // The other protocols have no forced last turn.
  for (const char* name : {"skyrl", "mtir", "mtsql"}) EXPECT_EQ(make_protocol(name)->final_turn_prefix(), "") << name;
}

TurnRecord turn_of(ActionKind kind, std::string sql) {
  TurnRecord r;
  r.action.kind = kind;
  r.action.sql = std::move(sql);
  return r;
}

// The released reward's extract_code: no <answer_sql> -> the last tool call's code (either tool).
TEST(MtsqlReleasedCode, FallbackIsTheLastToolCallsSql) {
  auto p = make_protocol("mtsql");
  Trajectory t;
  t.turns = {turn_of(ActionKind::ExecSql, "SELECT 1"), turn_of(ActionKind::MemoryRetrieve, "SELECT 2"),
             turn_of(ActionKind::Invalid, "")};
  EXPECT_EQ(p->fallback_answer(t), "SELECT 2");
  t.turns.pop_back();
  t.turns.pop_back();
  EXPECT_EQ(p->fallback_answer(t), "SELECT 1");
  t.turns = {turn_of(ActionKind::Invalid, "")};
  EXPECT_EQ(p->fallback_answer(t), "");  // no tool call: nothing to score
  ProtocolSettings off;
  off.mtsql_answer_fallback = false;
  t.turns = {turn_of(ActionKind::ExecSql, "SELECT 1")};
  EXPECT_EQ(make_protocol("mtsql", off)->fallback_answer(t), "");
  for (const char* name : {"skyrl", "sqltrail", "mtir"}) EXPECT_EQ(make_protocol(name)->fallback_answer(t), "") << name;
}

std::string memory_of(const Protocol& p, const sql::Example& e) {
  Action a;
  a.kind = ActionKind::MemoryRetrieve;
  a.sql = "SELECT 1";
  sql::Result r = testing::result_of({"1"}, {{sql::Cell::of_integer(1)}});
  StepOutcome o = outcome(1);
  o.result = &r;
  return testing::inject_text(p, a, o, e);
}

sql::Example world_example(std::vector<sql::Turn> history) {
  sql::Example e;
  e.db_id = "world_1";
  e.db_path = testing::car_db();
  e.question = "What is the population of each of those government forms?";
  e.history = std::move(history);
  return e;
}

// Appendix D.2's memory prints Spider's parse with a HAVING on avg (agg 5) and the number as
// get_sql's float: "72.0".
TEST(MtsqlMemory, ParsedElementsAsTheCaseStudyPrintsThem) {
  auto p = make_protocol("mtsql");
  std::string text = memory_of(*p, world_example({{"How many of those have an average life expectancy that is longer than 72?",
                                                   "SELECT GovernmentForm FROM country GROUP BY GovernmentForm HAVING avg "
                                                   "( LifeExpectancy ) > 72"}}));
  EXPECT_NE(text.find("Parsed Elements for each term: {'from': {'table_units': [('table_unit', '__country__')], 'conds': "
                      "[]}, 'select': ['__country.governmentform__'], 'where': [], 'groupBy': [(0, "
                      "'__country.governmentform__', False)], 'having': [(False, 3, (0, (5, '__country.lifeexpectancy__', "
                      "False), None), 72.0, None)], 'orderBy': [], 'limit': None, 'intersect': None, 'union': None, "
                      "'except': None}\n"),
            std::string::npos)
      << text;
}

// get_sql's values not in the case study, written out from Spider's process_sql: a string keeps
// its quotes (the token '"Republic"'), ORDER BY is (dir, [val_unit]), LIMIT its int, a nested
// query the same dict.
TEST(MtsqlMemory, ParsedStringsOrderLimitAndNesting) {
  auto p = make_protocol("mtsql");
  std::string text = memory_of(
      *p, world_example({{"q", "SELECT Name FROM country WHERE GovernmentForm = 'Republic' ORDER BY Population DESC LIMIT 3"},
                         {"q", "SELECT Name FROM country WHERE Population > (SELECT avg(Population) FROM country)"}}));
  EXPECT_NE(text.find("Parsed Elements for each term: {'from': {'table_units': [('table_unit', '__country__')], 'conds': "
                      "[]}, 'select': ['__country.name__'], 'where': [(False, 2, (0, (0, '__country.governmentform__', "
                      "False), None), '\"Republic\"', None)], 'groupBy': [], 'having': [], 'orderBy': ('desc', [(0, (0, "
                      "'__country.population__', False), None)]), 'limit': 3, 'intersect': None, 'union': None, "
                      "'except': None}\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("'where': [(False, 3, (0, (0, '__country.population__', False), None), {'from': {'table_units': "
                      "[('table_unit', '__country__')], 'conds': []}, 'select': ['__country.population__'], 'where': [], "
                      "'groupBy': [], 'having': [], 'orderBy': [], 'limit': None, 'intersect': None, 'union': None, "
                      "'except': None}, None)]"),
            std::string::npos)
      << text;
}

TEST(MtsqlMemory, UnparsableGoldAndTheOption) {
  auto p = make_protocol("mtsql");
  std::string text = memory_of(*p, world_example({{"q", "SELECT nope FROM nowhere"}}));
  EXPECT_NE(text.find("Parsed Elements for each term: {}\n"), std::string::npos) << text;
  ProtocolSettings off;
  off.mtsql_memory_parse = false;
  text = memory_of(*make_protocol("mtsql", off), world_example({{"q", "SELECT Name FROM country"}}));
  EXPECT_EQ(text.find("Parsed Elements"), std::string::npos) << text;
}

// A paper detail switched off for another protocol would do nothing: refused, naming the key.
TEST(ProtocolOptionsGroup, DetailsBelongToTheirProtocol) {
  ProtocolOptions o;
  o.protocol = "skyrl";
  EXPECT_NO_THROW(validate(o));
  o.mtir_rethink = "user";
  try {
    validate(o);
    FAIL() << "mtir-rethink with skyrl accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mtir-rethink applies to --protocol mtir only"), std::string::npos) << e.what();
  }
  o.protocol = "mtir";
  EXPECT_NO_THROW(validate(o));
  o.mtir_rethink = "system";
  EXPECT_THROW(validate(o), Error);
}

}  // namespace
}  // namespace sqlrl::rl
