// Synthetic benchmark, part 2: question templates. Each template picks tables, columns and
// values of one generated database and returns an English question with its gold SQL and the
// traps it contains. Whether the gold runs, returns rows and has the intended Spider hardness
// is decided by the caller (synth_writer.cpp), which executes and classifies every candidate.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sql/data/synth_domains.h"
#include "sql/exec/result.h"

namespace sqlrl::sql::synth {

struct Trap {
  std::string kind;            // "surface_form" or "number_as_text"
  std::string table, column;
  std::string question_value;  // surface_form: the wording in the question
  std::string stored_value;    // surface_form: the literal as stored (what the gold uses)
  std::string style;           // surface_form: mess_style_name()
  // surface_form: the stored form is not among the column's sample values that a prompt's schema
  // shows (sql::read_schema), so only executing a query reveals it (set by the writer).
  bool hidden = false;
};

struct Candidate {
  std::string template_name;
  int nominal_level = 0;  // the Spider level the template usually lands on (0 easy .. 3 extra)
  std::string question;
  std::string sql;
  std::vector<Trap> traps;
};

int template_count();
int template_nominal_level(int index);
const char* template_name(int index);

// nullopt when the database has nothing the template can use (e.g. no child table).
std::optional<Candidate> make_question(const Database& db, int template_index, Rng& rng, bool want_trap);

// Spider's parser knows no CAST: the gold with CAST(x AS INTEGER) replaced by x, the same
// clause structure, for computing the hardness label.
std::string strip_casts(const std::string& sql);

// 'text' as an SQL string literal.
std::string sql_quote(const std::string& text);

// The query a model writes from the question alone: each surface-form trap's stored literal
// replaced by the question's wording (CASTs stay: the schema's TEXT type shows that need).
std::string naive_sql(const std::string& gold, const std::vector<Trap>& traps);

// What a careful reader of a query's result takes as a sign that a filter matched nothing: no
// rows, or one row of nothing but zeros and NULLs (a count or sum over no rows). A trap question
// is written only when its naive query gives this sign, so that executing it tells the model to
// look at the stored values (the gold demonstrations probe on exactly this sign).
bool result_looks_empty(const Result& result);

}  // namespace sqlrl::sql::synth

namespace sqlrl::sql::synth {

// SParC-style dialogues: turn 0 lists rows of one table; each later turn edits the previous
// query: "add_filter" (one more WHERE condition), "add_column" (one more selected column),
// "order_by" (ORDER BY added), "count" (SELECT count(*) with the same FROM/WHERE; ends the
// dialogue).
struct DialogueTurn {
  std::string question;
  std::string sql;
  std::string edit;  // "" for turn 0
  std::vector<Trap> traps;
};

// `turns` turns (2..4) or nullopt when no edit sequence keeps every result non-empty;
// `nonempty(sql)` runs a query and says whether it returned rows.
std::optional<std::vector<DialogueTurn>> make_dialogue(const Database& db, Rng& rng, bool want_trap, int turns,
                                                       const std::function<bool(const std::string&)>& nonempty);

}  // namespace sqlrl::sql::synth
