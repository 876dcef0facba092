// Database schema read through the pool (PRAGMAs, so the same read-only path as model queries)
// and serialised in the prompt styles of the papers.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "sql/exec/pool.h"
#include "sql/exec/result.h"

namespace sqlrl::sql {

struct ColumnInfo {
  std::string name;
  std::string type;         // declared type as written, "" when none
  bool primary_key = false;
  bool not_null = false;
  std::vector<Cell> samples;  // up to k distinct non-NULL values, in table order
  std::string description;    // BIRD column description when given
};

struct ForeignKey {
  std::string column;
  std::string ref_table;
  std::string ref_column;  // "" when the reference names the parent's primary key implicitly
};

struct TableInfo {
  std::string name;
  std::vector<ColumnInfo> columns;
  std::vector<ForeignKey> foreign_keys;
};

struct DatabaseSchema {
  std::vector<TableInfo> tables;  // in creation order (sqlite_master rowid), sqlite_* excluded
};

// Throws sqlrl::Error naming the database and the failing PRAGMA when the schema cannot be read.
DatabaseSchema read_schema(Pool& pool, const std::string& db_path, size_t sample_values = 3);

// descriptions[table][column] = text (BIRD database_description); matched case-insensitively.
void attach_descriptions(DatabaseSchema& schema, const std::map<std::string, std::map<std::string, std::string>>& descriptions);

// (a) OmniSQL / SkyRL-SQL: CREATE TABLE with one column per line, "-- description, example: [...]"
//     comments, PRIMARY KEY and CONSTRAINT ... FOREIGN KEY lines.
std::string schema_ddl(const DatabaseSchema& schema);
// (b) SQL-Trail: "Table: t" then "- col (TYPE, PRIMARY KEY)" lines.
std::string schema_sqltrail(const DatabaseSchema& schema);
// (c) compact: "t(col TYPE PK, ...)" one line per table, then "t.col -> u.col" foreign keys.
std::string schema_compact(const DatabaseSchema& schema);

}  // namespace sqlrl::sql
