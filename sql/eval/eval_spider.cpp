// evaluation.py's Evaluator, rebuild_* and build_foreign_key_map over sql/eval/parse.h structures.
// Python list positions matter: a condition list is read with [::2] (cond units) and [1::2]
// (conjunctions) by position, whatever the items are.
#include "sql/eval/eval_spider.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <unordered_set>

#include <nlohmann/json.hpp>
#include <iterator>

#include "runtime/error.h"
#include "runtime/json_depth.h"
#include "sql/eval/lexer.h"

namespace sqlrl::sql {

// ---------------------------------------------------------------------------------------------
// Foreign keys

ForeignKeyMap build_foreign_key_map(const nlohmann::json& entry) {
  const std::string db = entry.value("db_id", std::string("?"));
  check(entry.contains("column_names_original") && entry.contains("table_names_original") && entry.contains("foreign_keys"),
        "tables.json entry '", db, "': needs column_names_original, table_names_original and foreign_keys");
  const auto& tables = entry["table_names_original"];
  std::vector<std::string> cols;
  for (const auto& c : entry["column_names_original"]) {
    check(c.is_array() && c.size() == 2 && c[0].is_number_integer() && c[1].is_string(), "tables.json entry '", db,
          "': column_names_original item is not [table_index, name]");
    int t = c[0].get<int>();
    if (t >= 0) {
      check(static_cast<size_t>(t) < tables.size(), "tables.json entry '", db, "': column table index ", t,
            " past ", tables.size(), " tables");
      cols.push_back("__" + python_lower(tables[t].get<std::string>()) + "." + python_lower(c[1].get<std::string>()) + "__");
    } else {
      cols.push_back("__all__");
    }
  }
  // keyset_in_list: the first set holding either key, else a new one (sets are never merged).
  std::vector<std::set<int>> key_sets;
  for (const auto& fk : entry["foreign_keys"]) {
    check(fk.is_array() && fk.size() == 2, "tables.json entry '", db, "': foreign_keys item is not a pair");
    int k1 = fk[0].get<int>(), k2 = fk[1].get<int>();
    for (int k : {k1, k2})
      check(k >= 0 && static_cast<size_t>(k) < cols.size(), "tables.json entry '", db, "': foreign key column ", k,
            " past ", cols.size(), " columns");
    std::set<int>* target = nullptr;
    for (auto& s : key_sets)
      if (s.count(k1) || s.count(k2)) {
        target = &s;
        break;
      }
    if (!target) target = &key_sets.emplace_back();
    target->insert(k1);
    target->insert(k2);
  }
  ForeignKeyMap map;
  for (const auto& s : key_sets) {
    int smallest = *s.begin();
    for (int idx : s) map[cols[idx]] = cols[smallest];
  }
  return map;
}

std::unordered_map<std::string, ForeignKeyMap> load_foreign_key_maps(const std::string& path) {
  std::ifstream in(path);
  check(in.good(), path, ": cannot open tables file");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  check_json_depth(text, path);
  nlohmann::json data;
  try {
    data = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": not valid JSON: ", e.what());
  }
  check(data.is_array(), path, ": expected a JSON list of databases");
  std::unordered_map<std::string, ForeignKeyMap> maps;
  for (size_t i = 0; i < data.size(); ++i) {
    check(data[i].is_object() && data[i].contains("db_id"), path, ": entry ", i, " has no db_id");
    try {
      maps[data[i]["db_id"].get<std::string>()] = build_foreign_key_map(data[i]);
    } catch (const nlohmann::json::exception& e) {
      fail(path, ": entry ", i, ": ", e.what());
    }
  }
  return maps;
}

// ---------------------------------------------------------------------------------------------
// Hardness

const char* hardness_name(Hardness h) {
  static const char* names[] = {"easy", "medium", "hard", "extra"};
  return names[static_cast<int>(h)];
}

namespace {

// Items at even positions of a condition list ([::2]) and odd positions ([1::2]).
template <typename Fn>
void for_even(const Condition& c, Fn fn) {
  for (size_t i = 0; i < c.size(); i += 2) fn(c[i]);
}
template <typename Fn>
void for_odd(const Condition& c, Fn fn) {
  for (size_t i = 1; i < c.size(); i += 2) fn(c[i]);
}

// cond_unit[0] / cond_unit[1] of a list item; a stray "and"/"or" string gives its characters,
// which are truthy and never equal to an op index.
bool item_field0_truthy(const CondItem& item) { return item.is_conj ? true : item.unit.not_op; }
int item_op(const CondItem& item) { return item.is_conj ? -1 : item.unit.op; }

void check_unit_at_even(const CondItem& item, const char* where) {
  if (item.is_conj) fail("the official evaluator fails on this query (", where, ": '", item.conj, "' where a condition is expected)");
}

int count_or(const Sql& s) {
  int n = 0;
  for (const Condition* c : {&s.from_conds, &s.where, &s.having})
    for_odd(*c, [&](const CondItem& it) { n += it.is_conj && it.conj == "or"; });
  return n;
}

int count_component1(const Sql& s) {
  int count = 0;
  count += !s.where.empty();
  count += !s.group_by.empty();
  count += s.has_order;
  count += s.has_limit;
  if (!s.from_units.empty()) count += static_cast<int>(s.from_units.size()) - 1;
  count += count_or(s);
  for (const Condition* c : {&s.from_conds, &s.where, &s.having})
    for_even(*c, [&](const CondItem& it) { count += item_op(it) == kOpLike; });
  return count;
}

int count_component2(const Sql& s) {
  int n = 0;
  for (const Condition* c : {&s.from_conds, &s.where, &s.having})
    for_even(*c, [&](const CondItem& it) {
      check_unit_at_even(it, "get_nestedSQL");
      n += it.unit.val1.kind == Value::Kind::Query;
      n += it.unit.val2.kind == Value::Kind::Query;
    });
  n += s.intersect != nullptr;
  n += s.except != nullptr;
  n += s.union_ != nullptr;
  return n;
}

int count_others(const Sql& s) {
  int agg = 0;
  for (const auto& [a, vu] : s.select) agg += a != 0;
  for_even(s.where, [&](const CondItem& it) { agg += item_field0_truthy(it); });  // cond_unit[0] is not_op
  for (const ColUnit& cu : s.group_by) agg += cu.agg != 0;
  if (s.has_order)
    for (const ValUnit& vu : s.order_by) {
      agg += vu.col1.agg != 0;
      if (vu.has_col2) agg += vu.col2.agg != 0;
    }
  for (const CondItem& it : s.having) agg += item_field0_truthy(it);  // the whole list, "and" included
  int count = 0;
  count += agg > 1;
  count += s.select.size() > 1;
  count += s.where.size() > 1;
  count += s.group_by.size() > 1;
  return count;
}

}  // namespace

Hardness spider_hardness(const Sql& sql) {
  int c1 = count_component1(sql);
  int c2 = count_component2(sql);
  int others = count_others(sql);
  if (c1 <= 1 && others == 0 && c2 == 0) return Hardness::Easy;
  if ((others <= 2 && c1 <= 1 && c2 == 0) || (c1 <= 2 && others < 2 && c2 == 0)) return Hardness::Medium;
  if ((others > 2 && c1 <= 2 && c2 == 0) || (2 < c1 && c1 <= 3 && others <= 2 && c2 == 0) ||
      (c1 <= 1 && others == 0 && c2 <= 1))
    return Hardness::Hard;
  return Hardness::Extra;
}

// ---------------------------------------------------------------------------------------------
// Rebuild (DISABLE_VALUE, DISABLE_DISTINCT)

namespace {

void rebuild_sql_val(Sql& sql);

void rebuild_condition_val(Condition& c) {
  for (size_t i = 0; i < c.size(); i += 2) {
    check_unit_at_even(c[i], "rebuild_cond_unit_val");
    for (Value* v : {&c[i].unit.val1, &c[i].unit.val2}) {
      if (v->kind == Value::Kind::Query) {
        rebuild_sql_val(*v->query);
      } else {
        *v = Value{};
      }
    }
  }
}

void rebuild_sql_val(Sql& sql) {
  rebuild_condition_val(sql.from_conds);
  rebuild_condition_val(sql.having);
  rebuild_condition_val(sql.where);
  for (auto* child : {&sql.intersect, &sql.except, &sql.union_})
    if (*child) rebuild_sql_val(**child);
}

struct ColRebuilder {
  const std::unordered_set<std::string>& valid;
  const ForeignKeyMap& kmap;

  void col(ColUnit& cu) const {
    auto it = kmap.find(cu.col);
    if (it != kmap.end() && valid.count(cu.col)) cu.col = it->second;
    cu.distinct = Flag::None;
  }
  void val(ValUnit& vu) const {
    col(vu.col1);
    if (vu.has_col2) col(vu.col2);
  }
  void condition(Condition& c) const {
    for (size_t i = 0; i < c.size(); i += 2) {
      check_unit_at_even(c[i], "rebuild_cond_unit_col");
      val(c[i].unit.val);
    }
  }
  void sql(Sql& s) const {
    for (auto& [agg, vu] : s.select) val(vu);
    s.select_distinct = Flag::None;
    condition(s.from_conds);  // FROM subqueries are left as parsed, as the official code does
    condition(s.where);
    for (ColUnit& cu : s.group_by) col(cu);
    if (s.has_order)
      for (ValUnit& vu : s.order_by) val(vu);
    condition(s.having);
    for (auto* child : {&s.intersect, &s.except, &s.union_})
      if (*child) sql(**child);
  }
};

}  // namespace

Sql rebuild_for_match(const Sql& parsed, const Schema& schema, const ForeignKeyMap& kmap) {
  Sql sql = clone_sql(parsed);
  // build_valid_col_units: every column "__t.c__" of a table "__t__" of this query's FROM.
  std::unordered_set<std::string> prefixes;
  for (const TableUnit& t : sql.from_units)
    if (!t.is_sql) prefixes.insert(t.table.substr(0, t.table.size() >= 2 ? t.table.size() - 2 : 0));
  std::unordered_set<std::string> valid;
  for (const auto& [key, value] : schema.id_map) {
    size_t dot = value.find('.');
    if (dot != std::string::npos && prefixes.count(value.substr(0, dot))) valid.insert(value);
  }
  rebuild_sql_val(sql);
  ColRebuilder{valid, kmap}.sql(sql);
  return sql;
}

// ---------------------------------------------------------------------------------------------
// Evaluator

namespace {

PartialScore get_scores(int count, int pred_total, int label_total) {
  PartialScore s;
  s.label_total = label_total;
  s.pred_total = pred_total;
  if (pred_total != label_total) return s;
  if (count == pred_total) s.acc = s.rec = s.f1 = 1;
  return s;
}

// list.remove(x): drops the first element equal to x; returns whether one was found.
template <typename T>
bool remove_first(std::vector<T>& list, const T& x) {
  auto it = std::find(list.begin(), list.end(), x);
  if (it == list.end()) return false;
  list.erase(it);
  return true;
}

std::string group_name(const std::string& col) {
  size_t dot = col.find('.');
  if (dot == std::string::npos) return col;
  size_t next = col.find('.', dot + 1);
  return col.substr(dot + 1, next == std::string::npos ? std::string::npos : next - dot - 1);
}

std::vector<CondItem> odd_items_set(const Condition& c) {
  std::vector<CondItem> set;
  for_odd(c, [&](const CondItem& it) {
    if (std::find(set.begin(), set.end(), it) == set.end()) set.push_back(it);
  });
  return set;
}

bool same_set(const std::vector<CondItem>& a, const std::vector<CondItem>& b) {
  if (a.size() != b.size()) return false;
  for (const CondItem& x : a)
    if (std::find(b.begin(), b.end(), x) == b.end()) return false;
  return true;
}

std::set<std::string> get_keywords(const Sql& s) {
  std::set<std::string> res;
  if (!s.where.empty()) res.insert("where");
  if (!s.group_by.empty()) res.insert("group");
  if (!s.having.empty()) res.insert("having");
  if (s.has_order) {
    res.insert(s.order_dir);
    res.insert("order");
  }
  if (s.has_limit) res.insert("limit");
  if (s.except) res.insert("except");
  if (s.union_) res.insert("union");
  if (s.intersect) res.insert("intersect");
  if (count_or(s) > 0) res.insert("or");
  bool has_not = false, has_in = false, has_like = false;
  for (const Condition* c : {&s.from_conds, &s.where, &s.having})
    for_even(*c, [&](const CondItem& it) {
      has_not |= item_field0_truthy(it);
      has_in |= item_op(it) == kOpIn;
      has_like |= item_op(it) == kOpLike;
    });
  if (has_not) res.insert("not");
  if (has_in) res.insert("in");
  if (has_like) res.insert("like");
  return res;
}

// sorted(table_units) as Python does it: ("sql", dict) sorts before ("table_unit", str); two
// different dicts cannot be ordered (TypeError), which crashes the official run.
void sorted_table_units(const std::vector<TableUnit>& units, std::vector<const Sql*>& queries, std::vector<std::string>& tables) {
  for (const TableUnit& t : units) {
    if (t.is_sql) {
      if (!queries.empty() && !(*queries.front() == *t.query))
        fail("the official evaluator fails on this query (two different FROM subqueries cannot be sorted)");
      queries.push_back(t.query.get());
    } else {
      tables.push_back(t.table);
    }
  }
  std::sort(tables.begin(), tables.end());
}

int eval_exact(const Sql& pred, const Sql& label, MatchScores* out);

PartialScore nested_score(const std::shared_ptr<Sql>& pred, const std::shared_ptr<Sql>& label, int& cnt) {
  PartialScore totals;
  totals.pred_total = pred != nullptr;
  totals.label_total = label != nullptr;
  if (pred && label) cnt += eval_exact(*pred, *label, nullptr);
  return totals;
}

std::array<PartialScore, kNumPartial> eval_partial(const Sql& pred, const Sql& label) {
  std::array<PartialScore, kNumPartial> res{};
  {  // eval_sel
    auto label_sel = label.select;
    std::vector<ValUnit> label_wo_agg;
    for (const auto& u : label_sel) label_wo_agg.push_back(u.second);
    int cnt = 0, cnt_wo = 0;
    for (const auto& u : pred.select) {
      cnt += remove_first(label_sel, u);
      cnt_wo += remove_first(label_wo_agg, u.second);
    }
    int pt = static_cast<int>(pred.select.size()), lt = static_cast<int>(label.select.size());
    res[0] = get_scores(cnt, pt, lt);
    res[1] = get_scores(cnt_wo, pt, lt);
  }
  {  // eval_where
    std::vector<CondUnit> pred_conds, label_conds;
    for_even(pred.where, [&](const CondItem& it) { pred_conds.push_back(it.unit); });
    for_even(label.where, [&](const CondItem& it) { label_conds.push_back(it.unit); });
    std::vector<ValUnit> label_wo;
    for (const CondUnit& u : label_conds) label_wo.push_back(u.val);
    int pt = static_cast<int>(pred_conds.size()), lt = static_cast<int>(label_conds.size());
    int cnt = 0, cnt_wo = 0;
    for (const CondUnit& u : pred_conds) {
      cnt += remove_first(label_conds, u);
      cnt_wo += remove_first(label_wo, u.val);
    }
    res[2] = get_scores(cnt, pt, lt);
    res[3] = get_scores(cnt_wo, pt, lt);
  }
  {  // eval_group: column names without the table
    std::vector<std::string> pred_cols, label_cols;
    for (const ColUnit& cu : pred.group_by) pred_cols.push_back(group_name(cu.col));
    for (const ColUnit& cu : label.group_by) label_cols.push_back(group_name(cu.col));
    int cnt = 0;
    for (const std::string& c : pred_cols) cnt += remove_first(label_cols, c);
    res[4] = get_scores(cnt, static_cast<int>(pred.group_by.size()), static_cast<int>(label.group_by.size()));
  }
  {  // eval_having
    int pt = !pred.group_by.empty(), lt = !label.group_by.empty();
    bool same_cols = pred.group_by.size() == label.group_by.size();
    for (size_t i = 0; same_cols && i < pred.group_by.size(); ++i) same_cols = pred.group_by[i].col == label.group_by[i].col;
    int cnt = (pt == 1 && lt == 1 && same_cols && pred.having == label.having) ? 1 : 0;
    res[5] = get_scores(cnt, pt, lt);
  }
  {  // eval_order
    int pt = pred.has_order, lt = label.has_order;
    bool same_order = pred.has_order == label.has_order &&
                      (!pred.has_order || (pred.order_dir == label.order_dir && pred.order_by == label.order_by));
    int cnt = (label.has_order && same_order && pred.has_limit == label.has_limit) ? 1 : 0;
    res[6] = get_scores(cnt, pt, lt);
  }
  {  // eval_and_or; on a mismatch the official code returns (len(pred), len(label)) into
     // (label_total, pred_total)
    auto pred_ao = odd_items_set(pred.where), label_ao = odd_items_set(label.where);
    if (same_set(pred_ao, label_ao))
      res[7] = get_scores(1, 1, 1);
    else
      res[7] = get_scores(0, static_cast<int>(label_ao.size()), static_cast<int>(pred_ao.size()));
  }
  {  // eval_IUEN
    int cnt = 0;
    PartialScore a = nested_score(pred.intersect, label.intersect, cnt);
    PartialScore b = nested_score(pred.except, label.except, cnt);
    PartialScore c = nested_score(pred.union_, label.union_, cnt);
    res[8] = get_scores(cnt, a.pred_total + b.pred_total + c.pred_total, a.label_total + b.label_total + c.label_total);
  }
  {  // eval_keywords
    auto pk = get_keywords(pred), lk = get_keywords(label);
    int cnt = 0;
    for (const std::string& k : pk) cnt += lk.count(k) > 0;
    res[9] = get_scores(cnt, static_cast<int>(pk.size()), static_cast<int>(lk.size()));
  }
  return res;
}

int eval_exact(const Sql& pred, const Sql& label, MatchScores* out) {
  auto partial = eval_partial(pred, label);
  if (out) out->partial = partial;
  for (const PartialScore& s : partial)
    if (s.f1 != 1) return 0;
  if (label.from_units.empty()) return 1;
  std::vector<const Sql*> lq, pq;
  std::vector<std::string> lt, pt;
  sorted_table_units(label.from_units, lq, lt);
  sorted_table_units(pred.from_units, pq, pt);
  if (lq.size() != pq.size() || lt != pt) return 0;
  for (size_t i = 0; i < lq.size(); ++i)
    if (!(*lq[i] == *pq[i])) return 0;
  return 1;
}

}  // namespace

MatchScores spider_match(const Sql& pred, const Sql& gold) {
  MatchScores scores;
  scores.exact = eval_exact(pred, gold, &scores) == 1;
  return scores;
}

}  // namespace sqlrl::sql
