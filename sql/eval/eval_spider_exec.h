// Execution accuracy as test-suite-sql-eval's eval_exec_match decides it, on top of the SQLite
// pool (sql/exec/pool.h) and its result_eq port (sql/exec/compare.h):
//   "> =" / "< =" / "! =" glued back; unless keep_distinct, every sqlparse token "distinct"
//   removed from both queries (count(DISTINCT x) too) and only the first statement kept;
//   order matters iff the gold text contains "order by"; YEAR(CURDATE()) -> 2020; the pair is
//   run on every file of the database's folder whose name contains ".sqlite" and must agree on
//   all of them. A prediction error is a miss; a gold error is the caller's error. With
//   plug_value the variants of sql/eval/eval_spider_plug.h are tried after the prediction itself.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "sql/exec/pool.h"

namespace sqlrl::sql {

// parse.remove_distinct: sqlparse's first statement with every word token "distinct" (any case)
// dropped; strings, quoted names and comments are left alone.
std::string sqlparse_remove_distinct(std::string_view sql);
// exec_eval.postprocess.
std::string exec_postprocess(std::string_view sql);
// exec_eval.replace_cur_year: YEAR\s*(\s*CURDATE\s*(\s*)\s*)\s* (any case) -> "2020".
std::string replace_cur_year(std::string_view sql);

// The files of `dir` whose name contains ".sqlite", sorted by name; throws if none.
std::vector<std::string> sqlite_files_in(const std::string& dir);

struct SpiderExecOptions {
  bool keep_distinct = false;
  // --plug_value: also try every way of filling the prediction's value slots with the gold
  // query's values (sql/eval/eval_spider_plug.h); 1 if the prediction or any variant passes.
  bool plug_value = false;
  // The official script waits up to 60 s per query and fetches every row.
  Limits limits = official_script_limits(60000);
};

// 1 if the prediction's denotation equals the gold's on every database file, else 0. Throws
// sqlrl::Error naming the file when the gold query fails.
int spider_exec_match(Pool& pool, const std::vector<std::string>& db_files, const std::string& pred,
                      const std::string& gold, const SpiderExecOptions& options);

}  // namespace sqlrl::sql
