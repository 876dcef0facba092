#include "sql/eval/sql_features.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "sql/eval/lexer.h"

namespace sqlrl::sql {
namespace {

// "__t.c__" -> "t.c", "__t__" -> "t"; "__all__" -> "".
std::string strip_id(const std::string& id) {
  if (id == "__all__" || id.size() < 4) return "";
  return id.substr(2, id.size() - 4);
}

void collect(const Sql& s, std::set<std::string>& out);

void add_col(const ColUnit& c, std::set<std::string>& out) {
  std::string name = strip_id(c.col);
  if (name.empty()) return;
  out.insert(name);
  size_t dot = name.find('.');
  if (dot != std::string::npos) out.insert(name.substr(0, dot));
}
void add_val(const ValUnit& v, std::set<std::string>& out) {
  add_col(v.col1, out);
  if (v.has_col2) add_col(v.col2, out);
}
void add_cond(const Condition& c, std::set<std::string>& out) {
  for (const CondItem& it : c) {
    if (it.is_conj) continue;
    add_val(it.unit.val, out);
    for (const Value* v : {&it.unit.val1, &it.unit.val2}) {
      if (v->kind == Value::Kind::Column) add_col(v->column, out);
      if (v->kind == Value::Kind::Query) collect(*v->query, out);
    }
  }
}
void collect(const Sql& s, std::set<std::string>& out) {
  for (const auto& [agg, vu] : s.select) add_val(vu, out);
  for (const TableUnit& t : s.from_units) {
    if (t.is_sql)
      collect(*t.query, out);
    else if (std::string name = strip_id(t.table); !name.empty())
      out.insert(name);
  }
  add_cond(s.from_conds, out);
  add_cond(s.where, out);
  for (const ColUnit& c : s.group_by) add_col(c, out);
  add_cond(s.having, out);
  for (const ValUnit& v : s.order_by) add_val(v, out);
  for (const auto* child : {&s.intersect, &s.except, &s.union_})
    if (*child) collect(**child, out);
}

// F1 of two multisets given as vectors of comparable items; -1 when both are empty.
template <typename T>
double multiset_f1(const std::vector<T>& pred, std::vector<T> gold) {
  if (pred.empty() && gold.empty()) return -1;
  if (pred.empty() || gold.empty()) return 0;
  size_t matched = 0, gold_total = gold.size();
  for (const T& x : pred) {
    auto it = std::find(gold.begin(), gold.end(), x);
    if (it != gold.end()) {
      ++matched;
      gold.erase(it);
    }
  }
  if (matched == 0) return 0;
  double p = static_cast<double>(matched) / pred.size(), r = static_cast<double>(matched) / gold_total;
  return 2 * p * r / (p + r);
}

std::vector<CondUnit> cond_units(const Sql& s) {
  std::vector<CondUnit> out;
  for (const Condition* c : {&s.where, &s.having})
    for (const CondItem& it : *c)
      if (!it.is_conj) out.push_back(it.unit);
  return out;
}

struct OrderUnit {
  std::string dir;
  ValUnit val;
  bool limit = false;
  bool operator==(const OrderUnit&) const = default;
};
std::vector<OrderUnit> order_units(const Sql& s) {
  std::vector<OrderUnit> out;
  if (s.has_order)
    for (const ValUnit& v : s.order_by) out.push_back({s.order_dir, v, false});
  if (s.has_limit) out.push_back({"", ValUnit{}, true});
  return out;
}

}  // namespace

std::set<std::string> schema_items(const Sql& sql) {
  std::set<std::string> out;
  collect(sql, out);
  return out;
}

std::set<std::pair<std::string, std::string>> token_bigrams(std::string_view sql) {
  std::vector<std::string> toks = spider_tokenize(sql);
  std::set<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i + 1 < toks.size(); ++i) out.emplace(toks[i], toks[i + 1]);
  return out;
}

ClauseF1 clause_f1(const Sql& pred, const Sql& gold) {
  ClauseF1 r;
  r.select = multiset_f1(pred.select, gold.select);
  r.where = multiset_f1(cond_units(pred), cond_units(gold));
  r.join = multiset_f1(pred.from_units, gold.from_units);
  r.group = multiset_f1(pred.group_by, gold.group_by);
  r.order = multiset_f1(order_units(pred), order_units(gold));
  double sum = 0;
  int n = 0;
  for (double v : {r.select, r.where, r.join, r.group, r.order})
    if (v >= 0) {
      sum += v;
      ++n;
    }
  r.mean = n ? sum / n : 1.0;
  return r;
}

static std::string normalise_sql(std::string_view s) {
  std::string out;
  char quote = 0;
  bool pending_space = false;
  for (char c : s) {
    if (quote) {
      out += c;
      if (c == quote) quote = 0;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    if (c == '\'' || c == '"' || c == '`') quote = c;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  while (!out.empty() && (out.back() == ';' || out.back() == ' ')) out.pop_back();
  return out;
}

bool string_em(std::string_view pred, std::string_view gold) { return normalise_sql(pred) == normalise_sql(gold); }

}  // namespace sqlrl::sql
