// Spider hardness for loaded examples and synthetic questions: the evaluation's own parser and
// eval_hardness (sql/eval/parse.h, sql/eval/eval_spider.h), so labels follow Spider's rules exactly.
// Kept in its own file: parse.h and schema.h both define sqlrl::sql::Schema.
#include <filesystem>
#include <map>
#include <mutex>

#include "runtime/error.h"
#include "sql/data/datasets.h"
#include "sql/eval/eval_spider.h"
#include "sql/eval/parse.h"

namespace sqlrl::sql {

std::string spider_hardness_of(const std::string& db_path, const std::string& sql, std::string* parse_error) {
  // Schemas are read once per database file (process_sql's get_schema reads sqlite_master).
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const Schema>> schemas;
  // Keyed by path, size and modification time: a database regenerated in place is read again.
  std::error_code ec;
  auto size = std::filesystem::file_size(db_path, ec);
  auto stamp = std::filesystem::last_write_time(db_path, ec).time_since_epoch().count();
  const std::string key = str_cat(db_path, "|", size, "|", stamp);
  std::shared_ptr<const Schema> schema;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = schemas.find(key);
    if (it == schemas.end()) it = schemas.emplace(key, std::make_shared<const Schema>(load_schema_sqlite(db_path))).first;
    schema = it->second;
  }
  try {
    return hardness_name(spider_hardness(parse_spider_sql(*schema, sql)));
  } catch (const Error& e) {
    if (parse_error) *parse_error = e.what();
    return "";
  }
}

}  // namespace sqlrl::sql
