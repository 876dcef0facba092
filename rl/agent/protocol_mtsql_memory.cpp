// MTSQL-R1's memory shows each earlier turn's gold SQL as Spider's parse ("Parsed Elements for
// each term", appendix D.1/D.2; the released verl/tools/memory_retriever.py prints the dict it
// is given). The dict is Spider's process_sql.get_sql in Python's repr, keys in get_sql's
// order, with one change the paper's prints show: 'select' is the list of selected column ids
// (D.1: "'select': ['__continents.continent__', '__all__']" for "SELECT T1.Continent, count(*)").
#include <map>
#include <sstream>

#include "rl/agent/protocol_impl.h"
#include "runtime/error.h"
#include "sql/eval/lexer.h"
#include "sql/eval/parse.h"
#include "sql/exec/pyrepr.h"

namespace sqlrl::rl::detail {
namespace {

using sql::CondUnit;
using sql::Condition;
using sql::Sql;

struct Printer {
  std::ostringstream o;
  std::map<const Sql*, std::string> limits;  // each LIMIT's number, by query

  void str(const std::string& s) { o << sql::python_str_repr(s); }
  void flag(sql::Flag f) { o << (f == sql::Flag::None ? "None" : f == sql::Flag::True ? "True" : "False"); }
  void col(const sql::ColUnit& c) {
    o << "(" << c.agg << ", ";
    str(c.col);
    o << ", ";
    flag(c.distinct);
    o << ")";
  }
  void val(const sql::ValUnit& v) {
    o << "(" << v.op << ", ";
    col(v.col1);
    o << ", ";
    if (v.has_col2) col(v.col2); else o << "None";
    o << ")";
  }
  void value(const sql::Value& v) {
    switch (v.kind) {
      case sql::Value::Kind::None: o << "None"; break;
      case sql::Value::Kind::Number: o << sql::python_float_repr(v.number); break;  // get_sql: float(tok)
      case sql::Value::Kind::String: str(v.text); break;  // the token with its quotes: '"usa"'
      case sql::Value::Kind::Column: col(v.column); break;
      case sql::Value::Kind::Query: query(*v.query); break;
    }
  }
  void cond(const Condition& c) {
    o << "[";
    for (size_t i = 0; i < c.size(); ++i) {
      if (i) o << ", ";
      if (c[i].is_conj) {
        str(c[i].conj);
        continue;
      }
      const CondUnit& u = c[i].unit;
      o << "(" << (u.not_op ? "True" : "False") << ", " << u.op << ", ";
      val(u.val);
      o << ", ";
      value(u.val1);
      o << ", ";
      value(u.val2);
      o << ")";
    }
    o << "]";
  }
  void query(const Sql& s) {
    o << "{'from': {'table_units': [";
    for (size_t i = 0; i < s.from_units.size(); ++i) {
      o << (i ? ", (" : "(");
      if (s.from_units[i].is_sql) {
        o << "'sql', ";
        query(*s.from_units[i].query);
      } else {
        o << "'table_unit', ";
        str(s.from_units[i].table);
      }
      o << ")";
    }
    o << "], 'conds': ";
    cond(s.from_conds);
    o << "}, 'select': [";
    bool first = true;
    for (const auto& [agg, v] : s.select) {
      for (const sql::ColUnit* c : {&v.col1, v.has_col2 ? &v.col2 : nullptr}) {
        if (!c) continue;
        o << (first ? "" : ", ");
        str(c->col);
        first = false;
      }
    }
    o << "], 'where': ";
    cond(s.where);
    o << ", 'groupBy': [";
    for (size_t i = 0; i < s.group_by.size(); ++i) {
      if (i) o << ", ";
      col(s.group_by[i]);
    }
    o << "], 'having': ";
    cond(s.having);
    o << ", 'orderBy': ";
    if (s.has_order) {
      o << "(";
      str(s.order_dir);
      o << ", [";
      for (size_t i = 0; i < s.order_by.size(); ++i) {
        if (i) o << ", ";
        val(s.order_by[i]);
      }
      o << "])";
    } else {
      o << "[]";
    }
    // get_sql keeps LIMIT's number (int); sql::Sql keeps only its presence, so the number is
    // read back from the tokens.
    auto limit = limits.find(&s);
    o << ", 'limit': " << (limit != limits.end() ? limit->second : "None");
    for (const auto& [name, child] : {std::pair{"intersect", &s.intersect}, {"union", &s.union_}, {"except", &s.except}}) {
      o << ", '" << name << "': ";
      if (*child) query(**child); else o << "None";
    }
    o << "}";
  }
};

// The queries holding a LIMIT, in the order their LIMIT tokens appear in the text: a query's
// own LIMIT follows its FROM / WHERE / HAVING subqueries and precedes its INTERSECT / UNION /
// EXCEPT part.
void limit_order(const Sql& s, std::vector<const Sql*>& out) {
  for (const sql::TableUnit& t : s.from_units)
    if (t.is_sql) limit_order(*t.query, out);
  for (const Condition* c : {&s.from_conds, &s.where, &s.having})
    for (const sql::CondItem& item : *c)
      if (!item.is_conj)
        for (const sql::Value* v : {&item.unit.val1, &item.unit.val2})
          if (v->kind == sql::Value::Kind::Query) limit_order(*v->query, out);
  if (s.has_limit) out.push_back(&s);
  for (const std::shared_ptr<Sql>* child : {&s.intersect, &s.union_, &s.except})
    if (*child) limit_order(**child, out);
}

}  // namespace

std::string mtsql_parsed_elements(const sql::Schema& schema, std::string_view query) {
  Sql parsed;
  std::vector<std::string> tokens;
  try {
    parsed = sql::parse_spider_sql(schema, query);
    tokens = sql::spider_tokenize(query);
  } catch (const Error&) {
    return "{}";  // get_sql failed: the memory entry holds no parse (the released code's dict is empty)
  }
  Printer p;
  std::vector<const Sql*> order;
  limit_order(parsed, order);
  std::vector<std::string> numbers;
  for (size_t i = 0; i + 1 < tokens.size(); ++i)
    if (tokens[i] == "limit") numbers.push_back(tokens[i + 1]);
  if (numbers.size() == order.size())  // always, as each LIMIT the parser read is one "limit" token
    for (size_t i = 0; i < order.size(); ++i) p.limits[order[i]] = numbers[i];
  p.query(parsed);
  return p.o.str();
}

}  // namespace sqlrl::rl::detail
