// The tokenizer benchmark corpus (~10 MB of documents: SQL, schema DDL, English prose, CJK,
// ChatML turns), generated deterministically (splitmix64, fixed seed) instead of committed.
// bench_tokenizer --write_corpus=FILE writes it as JSON lines for bench/tokenizer_peer.py.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sqlrl::bench {

struct CorpusRng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }
  template <typename T>
  const T& pick(const std::vector<T>& v) { return v[below(v.size())]; }
};

inline std::vector<std::string> tokenizer_corpus(size_t target_bytes = 10u << 20) {
  static const std::vector<std::string> tables = {"singer", "concert", "stadium", "department", "head", "employee",
                                                  "orders", "customers", "products", "flight", "airport", "student",
                                                  "course", "enrollment", "dog_breeds", "treatment", "cartoon"};
  static const std::vector<std::string> columns = {"name", "age", "country", "song_name", "capacity", "budget_in_billions",
                                                   "dept_id", "salary", "order_date", "price", "quantity", "city",
                                                   "first_name", "last_name", "gpa", "credits", "release_year", "id"};
  static const std::vector<std::string> types = {"INTEGER", "TEXT", "REAL", "VARCHAR(255)", "DATE", "NUMERIC(10,2)"};
  static const std::vector<std::string> words = {
      "the", "database", "query", "returns", "all", "students", "who", "are", "older", "than", "average", "we",
      "can't", "join", "tables", "because", "it's", "missing", "a", "foreign", "key", "they've", "counted", "rows",
      "Find", "names", "of", "singers", "whose", "concerts", "took", "place", "in", "2014", "and", "I'll", "check",
      "results", "again", "Let's", "think", "step", "by", "carefully", "aggregation", "grouped", "department",
      "highest", "salary", "list", "each", "country", "with", "more", "3", "employees", "value", "NULL", "ordered"};
  static const std::vector<std::string> cjk = {"查询", "数据库", "学生", "的", "名字", "和", "年龄", "请", "列出", "所有",
                                               "歌手", "演唱会", "部门", "工资", "最高", "平均", "国家", "表格", "结果",
                                               "データベース", "検索", "学生の", "名前", "を", "表示", "してください",
                                               "학생", "이름", "데이터"};
  static const std::vector<std::string> cjk_punct = {"，", "。", "、", "？", "：", " "};
  CorpusRng rng{20261123};
  std::vector<std::string> docs;
  size_t total = 0;
  while (total < target_bytes) {
    std::string d;
    switch (rng.below(5)) {
      case 0:  // SQL queries
        for (int q = 0; q < 12; ++q) {
          const std::string& t1 = rng.pick(tables);
          d += "SELECT T1." + rng.pick(columns) + ", count(*) FROM " + t1 + " AS T1 JOIN " + rng.pick(tables) +
               " AS T2 ON T1." + rng.pick(columns) + " = T2." + rng.pick(columns) + " WHERE T1." + rng.pick(columns) +
               " > " + std::to_string(rng.below(100000)) + " AND T2." + rng.pick(columns) + " LIKE '%" +
               rng.pick(words) + "%' GROUP BY T1." + rng.pick(columns) + " ORDER BY count(*) DESC LIMIT " +
               std::to_string(1 + rng.below(20)) + ";\n";
        }
        break;
      case 1:  // schema DDL
        for (int t = 0; t < 4; ++t) {
          d += "CREATE TABLE \"" + rng.pick(tables) + "\" (\n";
          size_t n = 3 + rng.below(6);
          for (size_t c = 0; c < n; ++c) d += "    \"" + rng.pick(columns) + "\" " + rng.pick(types) + (c + 1 < n ? ",\n" : "\n");
          d += ");\n\n";
        }
        break;
      case 2:  // English prose
        for (int s = 0; s < 40; ++s) {
          size_t n = 6 + rng.below(12);
          for (size_t w = 0; w < n; ++w) d += (w ? " " : "") + rng.pick(words);
          d += rng.below(4) ? ". " : ".\n\n";
        }
        break;
      case 3:  // CJK
        for (int s = 0; s < 60; ++s) {
          size_t n = 3 + rng.below(8);
          for (size_t w = 0; w < n; ++w) d += rng.pick(cjk);
          d += rng.pick(cjk_punct);
        }
        break;
      default:  // a ChatML turn with SQL inside
        d += "<|im_start|>user\nHow many " + rng.pick(tables) + " have " + rng.pick(columns) + " above " +
             std::to_string(rng.below(1000)) + "?<|im_end|>\n<|im_start|>assistant\n<think>\nI need the " +
             rng.pick(tables) + " table.\n</think>\n\n<sql>SELECT count(*) FROM " + rng.pick(tables) + " WHERE " +
             rng.pick(columns) + " > " + std::to_string(rng.below(1000)) + "</sql><|im_end|>\n";
        break;
    }
    total += d.size();
    docs.push_back(std::move(d));
  }
  return docs;
}

}  // namespace sqlrl::bench
