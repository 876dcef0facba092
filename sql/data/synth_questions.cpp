// Question templates of the synthetic benchmark. Tables and columns are chosen by role: a
// label column (a name, else a category), category columns for equality filters, numeric
// columns for comparisons, ordering and aggregates, and parent/child pairs for joins.
// Numbers stored as text are compared through CAST(... AS INTEGER), recorded as a trap.
#include "sql/data/synth_questions.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <set>

#include "runtime/error.h"

namespace sqlrl::sql::synth {
namespace {

bool is_numeric(ColKind k) { return k == ColKind::Integer || k == ColKind::Real || k == ColKind::NumberText; }

struct TableRef {
  const TableData* data = nullptr;
  const TableSpec& spec() const { return *data->spec; }
};

std::vector<size_t> columns_of(const TableSpec& t, const std::function<bool(const ColumnSpec&)>& pred) {
  std::vector<size_t> out;
  for (size_t c = 0; c < t.columns.size(); ++c)
    if (pred(t.columns[c])) out.push_back(c);
  return out;
}

// The column naming a row: the first Name column, else the first category column.
std::optional<size_t> label_column(const TableSpec& t) {
  for (size_t c = 0; c < t.columns.size(); ++c)
    if (t.columns[c].kind == ColKind::Name) return c;
  for (size_t c = 0; c < t.columns.size(); ++c)
    if (t.columns[c].kind == ColKind::Category) return c;
  return std::nullopt;
}

template <typename T>
const T& pick(Rng& rng, const std::vector<T>& v) {
  return v[rng.below(v.size())];
}

struct Builder {
  const Database& db;
  Rng& rng;
  bool want_trap;
  Candidate out;

  // Column expression; numbers stored as text go through CAST (and leave a trap note).
  std::string num(const TableSpec& t, size_t c, const std::string& alias = "") {
    const ColumnSpec& col = t.columns[c];
    std::string ref = alias.empty() ? col.name : alias + "." + col.name;
    if (col.kind != ColKind::NumberText) return ref;
    bool noted = false;
    for (const Trap& tr : out.traps) noted = noted || (tr.kind == "number_as_text" && tr.table == t.name && tr.column == col.name);
    if (!noted) out.traps.push_back({"number_as_text", t.name, col.name, "", "", ""});
    return "CAST(" + ref + " AS INTEGER)";
  }

  struct PickedValue {
    std::string question_form, stored;
  };
  // A category value present in the table; messy ones preferred when a trap is wanted.
  std::optional<PickedValue> value(const TableData& t, size_t c, const std::string& avoid = "") {
    std::vector<const Cell*> messy, clean;
    std::set<std::string> seen;
    for (const auto& row : t.rows) {
      const Cell& cell = row[c];
      if (cell.null || cell.text == avoid || !seen.insert(cell.text).second) continue;
      (cell.style == MessStyle::None ? clean : messy).push_back(&cell);
    }
    const std::vector<const Cell*>& first = want_trap ? messy : clean;
    const std::vector<const Cell*>& second = want_trap ? clean : messy;
    const Cell* cell = !first.empty() ? pick(rng, first) : !second.empty() ? pick(rng, second) : nullptr;
    if (!cell) return std::nullopt;
    if (cell->style != MessStyle::None)
      out.traps.push_back({"surface_form", t.spec->name, t.spec->columns[c].name, cell->canonical, cell->text,
                           mess_style_name(cell->style)});
    return PickedValue{cell->canonical, cell->text};
  }

  // A threshold inside the column's observed values (between the 25th and 75th percentile), so
  // that both "above" and "below" select some rows.
  std::optional<std::string> threshold(const TableData& t, size_t c) {
    std::vector<double> v;
    for (const auto& row : t.rows) {
      const Cell& cell = row[c];
      if (cell.null) continue;
      v.push_back(t.spec->columns[c].kind == ColKind::Real ? cell.real : static_cast<double>(cell.integer));
    }
    if (v.size() < 4) return std::nullopt;
    std::sort(v.begin(), v.end());
    size_t lo = v.size() / 4, hi = (3 * v.size()) / 4;
    double x = v[lo + rng.below(hi - lo + 1)];
    if (t.spec->columns[c].kind == ColKind::Real) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.0f", std::floor(x));
      return std::string(buf);
    }
    return std::to_string(static_cast<int64_t>(x));
  }
};

std::string filter_text(const ColumnSpec& col, const std::string& value) {
  std::string f = col.filter.empty() ? "with " + col.phrase + " {v}" : col.filter;
  size_t at = f.find("{v}");
  return f.substr(0, at) + value + f.substr(at + 3);
}

// Tables with the columns a template needs.
std::vector<const TableData*> tables_with(const Database& db, bool need_category, bool need_numeric) {
  std::vector<const TableData*> out;
  for (const TableData& t : db.tables) {
    const TableSpec& s = *t.spec;
    if (!label_column(s)) continue;
    if (need_category && columns_of(s, [](const ColumnSpec& c) { return c.kind == ColKind::Category; }).empty()) continue;
    if (need_numeric && columns_of(s, [](const ColumnSpec& c) { return is_numeric(c.kind); }).empty()) continue;
    out.push_back(&t);
  }
  return out;
}

struct Link {
  const TableData* parent;
  const TableData* child;
  size_t fk;  // column index in the child
};
std::vector<Link> links(const Database& db) {
  std::vector<Link> out;
  for (const TableData& child : db.tables)
    for (size_t c = 0; c < child.spec->columns.size(); ++c)
      if (child.spec->columns[c].kind == ColKind::ForeignKey)
        out.push_back({&db.table(child.spec->columns[c].ref_table), &child, c});
  return out;
}

std::vector<size_t> cats(const TableSpec& t, bool non_null = false) {
  return columns_of(t, [&](const ColumnSpec& c) { return c.kind == ColKind::Category && (!non_null || c.null_share == 0); });
}
std::vector<size_t> nums(const TableSpec& t) {
  return columns_of(t, [](const ColumnSpec& c) { return is_numeric(c.kind); });
}

using Fn = std::function<bool(Builder&)>;
struct Template {
  const char* name;
  int level;
  Fn fn;
};

// Each template fills b.out.question / b.out.sql; false when it does not apply.
std::vector<Template> build_templates() {
  std::vector<Template> t;
  // ---- easy ----
  t.push_back({"count_where", 0, [](Builder& b) {
                 auto ts = tables_with(b.db, true, false);
                 if (ts.empty()) return false;
                 const TableData& tab = *pick(b.rng, ts);
                 const TableSpec& s = *tab.spec;
                 size_t c = pick(b.rng, cats(s));
                 auto v = b.value(tab, c);
                 if (!v) return false;
                 b.out.question = "How many " + s.plural + " are " + filter_text(s.columns[c], v->question_form) + "?";
                 b.out.sql = "SELECT count(*) FROM " + s.name + " WHERE " + s.columns[c].name + " = " + sql_quote(v->stored);
                 return true;
               }});
  t.push_back({"list_where", 0, [](Builder& b) {
                 auto ts = tables_with(b.db, true, false);
                 if (ts.empty()) return false;
                 const TableData& tab = *pick(b.rng, ts);
                 const TableSpec& s = *tab.spec;
                 size_t l = *label_column(s);
                 std::vector<size_t> cs = cats(s);
                 cs.erase(std::remove(cs.begin(), cs.end(), l), cs.end());
                 if (cs.empty()) return false;
                 size_t c = pick(b.rng, cs);
                 auto v = b.value(tab, c);
                 if (!v) return false;
                 b.out.question = "List the " + s.columns[l].phrase + " of " + s.plural + " " + filter_text(s.columns[c], v->question_form) + ".";
                 b.out.sql = "SELECT " + s.columns[l].name + " FROM " + s.name + " WHERE " + s.columns[c].name + " = " + sql_quote(v->stored);
                 return true;
               }});
  t.push_back({"aggregate_all", 0, [](Builder& b) {
                 auto ts = tables_with(b.db, false, true);
                 if (ts.empty()) return false;
                 const TableData& tab = *pick(b.rng, ts);
                 const TableSpec& s = *tab.spec;
                 size_t x = pick(b.rng, nums(s));
                 static const char* aggs[] = {"max", "min", "avg"};
                 static const char* words[] = {"highest", "lowest", "average"};
                 size_t a = b.rng.below(3);
                 b.out.question = std::string("What is the ") + words[a] + " " + s.columns[x].phrase + " of all " + s.plural + "?";
                 b.out.sql = std::string("SELECT ") + aggs[a] + "(" + b.num(s, x) + ") FROM " + s.name;
                 return true;
               }});
  t.push_back({"list_above", 0, [](Builder& b) {
                 auto ts = tables_with(b.db, false, true);
                 if (ts.empty()) return false;
                 const TableData& tab = *pick(b.rng, ts);
                 const TableSpec& s = *tab.spec;
                 size_t l = *label_column(s), x = pick(b.rng, nums(s));
                 auto k = b.threshold(tab, x);
                 if (!k) return false;
                 b.out.question = "Which " + s.plural + " have a " + s.columns[x].phrase + " above " + *k + "? Give their " + s.columns[l].phrase + ".";
                 b.out.sql = "SELECT " + s.columns[l].name + " FROM " + s.name + " WHERE " + b.num(s, x) + " > " + *k;
                 return true;
               }});
  // ---- medium ----
  t.push_back({"group_count", 1, [](Builder& b) {
                 auto ts = tables_with(b.db, true, false);
                 if (ts.empty()) return false;
                 const TableData& tab = *pick(b.rng, ts);
                 const TableSpec& s = *tab.spec;
                 size_t c = pick(b.rng, cats(s));
                 b.out.question = "For each " + s.columns[c].phrase + ", how many " + s.plural + " are there?";
                 b.out.sql = "SELECT " + s.columns[c].name + ", count(*) FROM " + s.name + " GROUP BY " + s.columns[c].name;
                 return true;
               }});
  t.push_back({"top_one", 1, [](Builder& b) {
                 auto ts = tables_with(b.db, false, true);
                 if (ts.empty()) return false;
                 const TableData& tab = *pick(b.rng, ts);
                 const TableSpec& s = *tab.spec;
                 size_t l = *label_column(s), x = pick(b.rng, nums(s));
                 // "lowest" only where the column has no NULLs (ascending order puts NULL first).
                 bool low = s.columns[x].null_share == 0 && b.rng.chance(0.3);
                 b.out.question = "Which " + s.singular + " has the " + (low ? "lowest " : "highest ") + s.columns[x].phrase + "? Give its " + s.columns[l].phrase + ".";
                 b.out.sql = "SELECT " + s.columns[l].name + " FROM " + s.name + " ORDER BY " + b.num(s, x) + (low ? " ASC" : " DESC") + " LIMIT 1";
                 return true;
               }});
  t.push_back({"two_columns_where", 1, [](Builder& b) {
                 auto ts = tables_with(b.db, true, true);
                 if (ts.empty()) return false;
                 const TableData& tab = *pick(b.rng, ts);
                 const TableSpec& s = *tab.spec;
                 size_t l = *label_column(s), x = pick(b.rng, nums(s));
                 std::vector<size_t> cs = cats(s);
                 cs.erase(std::remove(cs.begin(), cs.end(), l), cs.end());
                 if (cs.empty()) return false;
                 size_t c = pick(b.rng, cs);
                 auto v = b.value(tab, c);
                 if (!v) return false;
                 b.out.question = "Show the " + s.columns[l].phrase + " and " + s.columns[x].phrase + " of " + s.plural + " " + filter_text(s.columns[c], v->question_form) + ".";
                 b.out.sql = "SELECT " + s.columns[l].name + ", " + s.columns[x].name + " FROM " + s.name + " WHERE " + s.columns[c].name + " = " + sql_quote(v->stored);
                 return true;
               }});
  t.push_back({"join_where", 1, [](Builder& b) {
                 auto ls = links(b.db);
                 std::vector<Link> ok;
                 for (const Link& k : ls)
                   if (label_column(*k.parent->spec) && !cats(*k.child->spec).empty()) ok.push_back(k);
                 if (ok.empty()) return false;
                 const Link& k = pick(b.rng, ok);
                 const TableSpec &p = *k.parent->spec, &c = *k.child->spec;
                 size_t l = *label_column(p), cc = pick(b.rng, cats(c));
                 auto v = b.value(*k.child, cc);
                 if (!v) return false;
                 b.out.question = "List the distinct " + p.columns[l].phrase + " of " + p.plural + " that have " + c.plural + " " + filter_text(c.columns[cc], v->question_form) + ".";
                 b.out.sql = "SELECT DISTINCT T1." + p.columns[l].name + " FROM " + p.name + " AS T1 JOIN " + c.name + " AS T2 ON T1.id = T2." +
                             c.columns[k.fk].name + " WHERE T2." + c.columns[cc].name + " = " + sql_quote(v->stored);
                 return true;
               }});
  t.push_back({"group_average", 1, [](Builder& b) {
                 auto ts = tables_with(b.db, true, true);
                 if (ts.empty()) return false;
                 const TableData& tab = *pick(b.rng, ts);
                 const TableSpec& s = *tab.spec;
                 size_t c = pick(b.rng, cats(s)), x = pick(b.rng, nums(s));
                 b.out.question = "What is the average " + s.columns[x].phrase + " of " + s.plural + " for each " + s.columns[c].phrase + "?";
                 b.out.sql = "SELECT " + s.columns[c].name + ", avg(" + b.num(s, x) + ") FROM " + s.name + " GROUP BY " + s.columns[c].name;
                 return true;
               }});
  // ---- hard ----
  t.push_back({"above_average", 2, [](Builder& b) {
                 auto ts = tables_with(b.db, false, true);
                 if (ts.empty()) return false;
                 const TableData& tab = *pick(b.rng, ts);
                 const TableSpec& s = *tab.spec;
                 size_t l = *label_column(s), x = pick(b.rng, nums(s));
                 std::string e = b.num(s, x);
                 b.out.question = "Which " + s.plural + " have a " + s.columns[x].phrase + " above the average of all " + s.plural + "? Give their " + s.columns[l].phrase + ".";
                 b.out.sql = "SELECT " + s.columns[l].name + " FROM " + s.name + " WHERE " + e + " > (SELECT avg(" + e + ") FROM " + s.name + ")";
                 return true;
               }});
  t.push_back({"without_children", 2, [](Builder& b) {
                 auto ls = links(b.db);
                 std::vector<Link> ok;
                 for (const Link& k : ls)
                   if (label_column(*k.parent->spec)) ok.push_back(k);
                 if (ok.empty()) return false;
                 const Link& k = pick(b.rng, ok);
                 const TableSpec &p = *k.parent->spec, &c = *k.child->spec;
                 size_t l = *label_column(p);
                 b.out.question = "Which " + p.plural + " have no " + c.plural + "? Give their " + p.columns[l].phrase + ".";
                 b.out.sql = "SELECT " + p.columns[l].name + " FROM " + p.name + " WHERE id NOT IN (SELECT " + c.columns[k.fk].name + " FROM " + c.name + ")";
                 return true;
               }});
  t.push_back({"except_filter", 2, [](Builder& b) {
                 auto ts = tables_with(b.db, true, true);
                 if (ts.empty()) return false;
                 const TableData& tab = *pick(b.rng, ts);
                 const TableSpec& s = *tab.spec;
                 size_t l = *label_column(s), c = pick(b.rng, cats(s)), x = pick(b.rng, nums(s));
                 auto v = b.value(tab, c);
                 auto k = b.threshold(tab, x);
                 if (!v || !k || c == l) return false;
                 b.out.question = "Which " + s.plural + " " + filter_text(s.columns[c], v->question_form) + " do not have a " + s.columns[x].phrase + " above " + *k + "? Give their " + s.columns[l].phrase + ".";
                 b.out.sql = "SELECT " + s.columns[l].name + " FROM " + s.name + " WHERE " + s.columns[c].name + " = " + sql_quote(v->stored) + " EXCEPT SELECT " +
                             s.columns[l].name + " FROM " + s.name + " WHERE " + b.num(s, x) + " > " + *k;
                 return true;
               }});
  t.push_back({"filter_top_three", 2, [](Builder& b) {
                 auto ts = tables_with(b.db, true, true);
                 if (ts.empty()) return false;
                 const TableData& tab = *pick(b.rng, ts);
                 const TableSpec& s = *tab.spec;
                 size_t l = *label_column(s), c = pick(b.rng, cats(s)), x = pick(b.rng, nums(s));
                 if (c == l) return false;
                 auto v = b.value(tab, c);
                 if (!v) return false;
                 b.out.question = "Among " + s.plural + " " + filter_text(s.columns[c], v->question_form) + ", give the " + s.columns[l].phrase + " of the three with the highest " + s.columns[x].phrase + ".";
                 b.out.sql = "SELECT " + s.columns[l].name + " FROM " + s.name + " WHERE " + s.columns[c].name + " = " + sql_quote(v->stored) + " ORDER BY " + b.num(s, x) + " DESC LIMIT 3";
                 return true;
               }});
  t.push_back({"top_group_average", 2, [](Builder& b) {
                 std::vector<const TableData*> ts;
                 for (const TableData* tab : tables_with(b.db, true, true))
                   if (!cats(*tab->spec, true).empty()) ts.push_back(tab);
                 if (ts.empty()) return false;
                 const TableData& tab = *pick(b.rng, ts);
                 const TableSpec& s = *tab.spec;
                 size_t c = pick(b.rng, cats(s, true)), x = pick(b.rng, nums(s));
                 b.out.question = "Which " + s.columns[c].phrase + " has the highest average " + s.columns[x].phrase + " among " + s.plural + "?";
                 b.out.sql = "SELECT " + s.columns[c].name + " FROM " + s.name + " GROUP BY " + s.columns[c].name + " ORDER BY avg(" + b.num(s, x) + ") DESC LIMIT 1";
                 return true;
               }});
  t.push_back({"union_two_values", 2, [](Builder& b) {
                 auto ts = tables_with(b.db, true, false);
                 if (ts.empty()) return false;
                 const TableData& tab = *pick(b.rng, ts);
                 const TableSpec& s = *tab.spec;
                 size_t l = *label_column(s), c = pick(b.rng, cats(s));
                 if (c == l) return false;
                 auto v1 = b.value(tab, c);
                 if (!v1) return false;
                 auto v2 = b.value(tab, c, v1->stored);
                 if (!v2) return false;
                 b.out.question = "List the " + s.columns[l].phrase + " of " + s.plural + " that are either " + filter_text(s.columns[c], v1->question_form) + " or " + filter_text(s.columns[c], v2->question_form) + ".";
                 b.out.sql = "SELECT " + s.columns[l].name + " FROM " + s.name + " WHERE " + s.columns[c].name + " = " + sql_quote(v1->stored) + " UNION SELECT " +
                             s.columns[l].name + " FROM " + s.name + " WHERE " + s.columns[c].name + " = " + sql_quote(v2->stored);
                 return true;
               }});
  // ---- extra ----
  t.push_back({"most_children", 3, [](Builder& b) {
                 auto ls = links(b.db);
                 std::vector<Link> ok;
                 for (const Link& k : ls)
                   if (label_column(*k.parent->spec)) ok.push_back(k);
                 if (ok.empty()) return false;
                 const Link& k = pick(b.rng, ok);
                 const TableSpec &p = *k.parent->spec, &c = *k.child->spec;
                 size_t l = *label_column(p);
                 b.out.question = "Which " + p.singular + " has the most " + c.plural + "? Give its " + p.columns[l].phrase + ".";
                 b.out.sql = "SELECT T1." + p.columns[l].name + " FROM " + p.name + " AS T1 JOIN " + c.name + " AS T2 ON T1.id = T2." + c.columns[k.fk].name +
                             " GROUP BY T1.id ORDER BY count(*) DESC LIMIT 1";
                 return true;
               }});
  t.push_back({"children_having", 3, [](Builder& b) {
                 auto ls = links(b.db);
                 std::vector<Link> ok;
                 for (const Link& k : ls)
                   if (label_column(*k.parent->spec)) ok.push_back(k);
                 if (ok.empty()) return false;
                 const Link& k = pick(b.rng, ok);
                 const TableSpec &p = *k.parent->spec, &c = *k.child->spec;
                 size_t l = *label_column(p);
                 std::string n = std::to_string(2 + b.rng.below(3));
                 b.out.question = "Which " + p.plural + " have at least " + n + " " + c.plural + "? Give their " + p.columns[l].phrase + " and the number of " + c.plural + ".";
                 b.out.sql = "SELECT T1." + p.columns[l].name + ", count(*) FROM " + p.name + " AS T1 JOIN " + c.name + " AS T2 ON T1.id = T2." + c.columns[k.fk].name +
                             " GROUP BY T1.id HAVING count(*) >= " + n;
                 return true;
               }});
  t.push_back({"join_filter_top_three", 3, [](Builder& b) {
                 auto ls = links(b.db);
                 std::vector<Link> ok;
                 for (const Link& k : ls)
                   if (label_column(*k.parent->spec) && !cats(*k.parent->spec).empty() && !nums(*k.child->spec).empty()) ok.push_back(k);
                 if (ok.empty()) return false;
                 const Link& k = pick(b.rng, ok);
                 const TableSpec &p = *k.parent->spec, &c = *k.child->spec;
                 size_t l = *label_column(p), pc = pick(b.rng, cats(p)), x = pick(b.rng, nums(c));
                 if (pc == l) return false;
                 auto v = b.value(*k.parent, pc);
                 if (!v) return false;
                 b.out.question = "For " + p.plural + " " + filter_text(p.columns[pc], v->question_form) + ", list the " + p.columns[l].phrase + " and the " + c.columns[x].phrase +
                                  " of the three " + c.plural + " with the highest " + c.columns[x].phrase + ".";
                 b.out.sql = "SELECT T1." + p.columns[l].name + ", T2." + c.columns[x].name + " FROM " + p.name + " AS T1 JOIN " + c.name + " AS T2 ON T1.id = T2." +
                             c.columns[k.fk].name + " WHERE T1." + p.columns[pc].name + " = " + sql_quote(v->stored) + " ORDER BY " + b.num(c, x, "T2") + " DESC LIMIT 3";
                 return true;
               }});
  t.push_back({"filter_and_nested", 3, [](Builder& b) {
                 auto ls = links(b.db);
                 std::vector<Link> ok;
                 for (const Link& k : ls)
                   if (label_column(*k.parent->spec) && !cats(*k.parent->spec).empty() && !nums(*k.child->spec).empty()) ok.push_back(k);
                 if (ok.empty()) return false;
                 const Link& k = pick(b.rng, ok);
                 const TableSpec &p = *k.parent->spec, &c = *k.child->spec;
                 size_t l = *label_column(p), pc = pick(b.rng, cats(p)), x = pick(b.rng, nums(c));
                 if (pc == l) return false;
                 auto v = b.value(*k.parent, pc);
                 auto n = b.threshold(*k.child, x);
                 if (!v || !n) return false;
                 b.out.question = "Which " + p.plural + " " + filter_text(p.columns[pc], v->question_form) + " have at least one " + c.singular + " with " + c.columns[x].phrase +
                                  " above " + *n + "? Give their " + p.columns[l].phrase + ".";
                 b.out.sql = "SELECT " + p.columns[l].name + " FROM " + p.name + " WHERE " + p.columns[pc].name + " = " + sql_quote(v->stored) + " AND id IN (SELECT " +
                             c.columns[k.fk].name + " FROM " + c.name + " WHERE " + b.num(c, x) + " > " + *n + ")";
                 return true;
               }});
  return t;
}

const std::vector<Template>& templates() {
  static const std::vector<Template> all = build_templates();
  return all;
}

}  // namespace

int template_count() { return static_cast<int>(templates().size()); }
int template_nominal_level(int index) { return templates().at(static_cast<size_t>(index)).level; }
const char* template_name(int index) { return templates().at(static_cast<size_t>(index)).name; }

std::optional<Candidate> make_question(const Database& db, int template_index, Rng& rng, bool want_trap) {
  const Template& t = templates().at(static_cast<size_t>(template_index));
  Builder b{db, rng, want_trap, {}};
  b.out.template_name = t.name;
  b.out.nominal_level = t.level;
  if (!t.fn(b)) return std::nullopt;
  return std::move(b.out);
}

std::string strip_casts(const std::string& sql) {
  std::string out;
  size_t i = 0;
  while (i < sql.size()) {
    size_t at = sql.find("CAST(", i);
    if (at == std::string::npos) break;
    size_t as = sql.find(" AS INTEGER)", at);
    check(as != std::string::npos, "strip_casts: unterminated CAST in ", sql);
    out += sql.substr(i, at - i) + sql.substr(at + 5, as - at - 5);
    i = as + 12;
  }
  return out + sql.substr(i);
}

std::string naive_sql(const std::string& gold, const std::vector<Trap>& traps) {
  std::string sql = gold;
  for (const Trap& t : traps) {
    if (t.kind != "surface_form" || t.stored_value.empty()) continue;
    const std::string from = sql_quote(t.stored_value), to = sql_quote(t.question_value);
    for (size_t at = sql.find(from); at != std::string::npos; at = sql.find(from, at + to.size())) sql.replace(at, from.size(), to);
  }
  return sql;
}

bool result_looks_empty(const Result& r) {
  if (!r.ok()) return false;
  if (r.rows.empty()) return true;
  if (r.rows.size() > 1) return false;
  for (const sql::Cell& c : r.rows[0])
    if (!(c.is_null() || (c.type == CellType::Integer && c.integer == 0) || (c.type == CellType::Real && c.real == 0)))
      return false;
  return true;
}

std::string sql_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') out += '\'';
    out += c;
  }
  return out + "'";
}

}  // namespace sqlrl::sql::synth
