// SParC-style dialogues for the synthetic benchmark: a small query state (selected columns,
// conditions, ordering, count) edited one step per turn, every turn's SQL rendered from the
// state and executed before it is kept.
#include <algorithm>

#include "runtime/error.h"
#include "sql/data/synth_questions.h"

namespace sqlrl::sql::synth {
namespace {

struct State {
  const TableSpec* table = nullptr;
  std::vector<std::string> columns;  // selected
  std::vector<std::string> conditions;
  bool has_category_filter = false;
  std::string order;  // "" or the ORDER BY expression
  bool count = false;

  std::string render() const {
    std::string sql = "SELECT ";
    if (count) {
      sql += "count(*)";
    } else {
      for (size_t i = 0; i < columns.size(); ++i) sql += (i ? ", " : "") + columns[i];
    }
    sql += " FROM " + table->name;
    for (size_t i = 0; i < conditions.size(); ++i) sql += (i ? " AND " : " WHERE ") + conditions[i];
    if (!order.empty() && !count) sql += " ORDER BY " + order + " DESC";
    return sql;
  }
};

std::string filter_words(const ColumnSpec& col, const std::string& value) {
  std::string f = col.filter.empty() ? "with " + col.phrase + " {v}" : col.filter;
  size_t at = f.find("{v}");
  return f.substr(0, at) + value + f.substr(at + 3);
}

std::string num_expr(const ColumnSpec& col, const TableSpec& t, std::vector<Trap>& traps) {
  if (col.kind != ColKind::NumberText) return col.name;
  traps.push_back({"number_as_text", t.name, col.name, "", "", ""});
  return "CAST(" + col.name + " AS INTEGER)";
}

// A category value of column c; messy preferred when a trap is wanted. Adds the trap.
bool pick_value(const TableData& t, size_t c, Rng& rng, bool want_trap, std::string& question_form, std::string& stored,
                std::vector<Trap>& traps) {
  std::vector<const Cell*> messy, clean;
  for (const auto& row : t.rows) {
    const Cell& cell = row[c];
    if (cell.null) continue;
    auto& list = cell.style == MessStyle::None ? clean : messy;
    if (std::none_of(list.begin(), list.end(), [&](const Cell* x) { return x->text == cell.text; })) list.push_back(&cell);
  }
  auto& first = want_trap ? messy : clean;
  auto& second = want_trap ? clean : messy;
  const Cell* cell = !first.empty() ? first[rng.below(first.size())] : !second.empty() ? second[rng.below(second.size())] : nullptr;
  if (!cell) return false;
  question_form = cell->canonical;
  stored = cell->text;
  if (cell->style != MessStyle::None)
    traps.push_back({"surface_form", t.spec->name, t.spec->columns[c].name, cell->canonical, cell->text, mess_style_name(cell->style)});
  return true;
}

std::optional<std::string> middle_value(const TableData& t, size_t c) {
  std::vector<double> v;
  for (const auto& row : t.rows)
    if (!row[c].null) v.push_back(t.spec->columns[c].kind == ColKind::Real ? row[c].real : static_cast<double>(row[c].integer));
  if (v.size() < 4) return std::nullopt;
  std::sort(v.begin(), v.end());
  return std::to_string(static_cast<int64_t>(v[v.size() / 3]));
}

}  // namespace

std::optional<std::vector<DialogueTurn>> make_dialogue(const Database& db, Rng& rng, bool want_trap, int turns,
                                                       const std::function<bool(const std::string&)>& nonempty) {
  check(turns >= 2 && turns <= 4, "dialogue turns must be 2..4, got ", turns);
  // A table with a Name column, a category and a numeric column.
  std::vector<const TableData*> candidates;
  for (const TableData& t : db.tables) {
    bool name = false, cat = false, num = false;
    for (const ColumnSpec& c : t.spec->columns) {
      name |= c.kind == ColKind::Name;
      cat |= c.kind == ColKind::Category;
      num |= c.kind == ColKind::Integer || c.kind == ColKind::Real || c.kind == ColKind::NumberText;
    }
    if (name && cat && num) candidates.push_back(&t);
  }
  if (candidates.empty()) return std::nullopt;
  const TableData& tab = *candidates[rng.below(candidates.size())];
  const TableSpec& s = *tab.spec;
  std::vector<size_t> cats, nums;
  size_t label = 0;
  bool have_label = false;
  for (size_t c = 0; c < s.columns.size(); ++c) {
    ColKind k = s.columns[c].kind;
    if (k == ColKind::Name && !have_label) label = c, have_label = true;
    if (k == ColKind::Category) cats.push_back(c);
    if (k == ColKind::Integer || k == ColKind::Real || k == ColKind::NumberText) nums.push_back(c);
  }

  std::vector<DialogueTurn> out;
  State st;
  st.table = &s;
  st.columns = {s.columns[label].name};
  DialogueTurn first;
  if (rng.chance(0.5)) {
    size_t c = cats[rng.below(cats.size())];
    std::string q, stored;
    if (!pick_value(tab, c, rng, want_trap, q, stored, first.traps)) return std::nullopt;
    st.conditions.push_back(s.columns[c].name + " = " + sql_quote(stored));
    st.has_category_filter = true;
    first.question = "Show the " + s.columns[label].phrase + " of " + s.plural + " " + filter_words(s.columns[c], q) + ".";
  } else {
    first.question = "Show the " + s.columns[label].phrase + " of all " + s.plural + ".";
  }
  first.sql = st.render();
  if (!nonempty(first.sql)) return std::nullopt;
  out.push_back(std::move(first));

  while (static_cast<int>(out.size()) < turns) {
    bool last = static_cast<int>(out.size()) == turns - 1;
    // Candidate edits in a seed-dependent order; the first whose result is non-empty wins.
    std::vector<std::string> edits = {"add_filter", "add_column", "order_by"};
    if (last) edits.push_back("count");
    for (size_t i = edits.size(); i > 1; --i) std::swap(edits[i - 1], edits[rng.below(i)]);
    bool done = false;
    for (const std::string& edit : edits) {
      State next = st;
      DialogueTurn turn;
      turn.edit = edit;
      size_t x = nums[rng.below(nums.size())];
      const ColumnSpec& xc = s.columns[x];
      if (edit == "add_filter") {
        if (!st.has_category_filter && rng.chance(0.5)) {
          size_t c = cats[rng.below(cats.size())];
          std::string q, stored;
          if (!pick_value(tab, c, rng, want_trap, q, stored, turn.traps)) continue;
          next.conditions.push_back(s.columns[c].name + " = " + sql_quote(stored));
          next.has_category_filter = true;
          turn.question = "Only those " + filter_words(s.columns[c], q) + ".";
        } else {
          auto k = middle_value(tab, x);
          if (!k) continue;
          next.conditions.push_back(num_expr(xc, s, turn.traps) + " > " + *k);
          turn.question = "Which of them have a " + xc.phrase + " above " + *k + "?";
        }
      } else if (edit == "add_column") {
        if (std::find(st.columns.begin(), st.columns.end(), xc.name) != st.columns.end()) continue;
        next.columns.push_back(xc.name);
        turn.question = "Also show their " + xc.phrase + ".";
      } else if (edit == "order_by") {
        if (!st.order.empty()) continue;
        next.order = num_expr(xc, s, turn.traps);
        turn.question = "Sort them by " + xc.phrase + ", highest first.";
      } else {
        next.count = true;
        turn.question = "How many of them are there?";
      }
      turn.sql = next.render();
      if (turn.sql == out.back().sql || !nonempty(turn.sql)) continue;
      st = next;
      out.push_back(std::move(turn));
      done = true;
      break;
    }
    if (!done) return std::nullopt;
  }
  return out;
}

}  // namespace sqlrl::sql::synth
