#include "sql/exec/schema.h"

#include <algorithm>
#include <cctype>

#include "runtime/error.h"
#include "sql/exec/pyrepr.h"

namespace sqlrl::sql {

namespace {

std::string quote_identifier(const std::string& name) {
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

Result run(Pool& pool, const std::string& db_path, const std::string& sql) {
  Limits limits;
  limits.timeout_ms = 10000;
  Result r = pool.execute(db_path, sql, limits);
  if (!r.ok()) fail("schema of '", db_path, "': ", sql, ": ", r.error);
  return r;
}

std::string text_of(const Cell& c) { return c.type == CellType::Text ? c.text : python_str(c); }

// Identifiers OmniSQL writes in backticks: anything not a plain word.
std::string ddl_identifier(const std::string& name) {
  bool plain = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0]));
  for (unsigned char c : name)
    if (!(std::isalnum(c) || c == '_')) plain = false;
  return plain ? name : "`" + name + "`";
}

std::string samples_repr(const std::vector<Cell>& samples) {
  std::string out = "[";
  for (size_t i = 0; i < samples.size(); ++i) {
    if (i) out += ", ";
    out += python_repr(samples[i]);
  }
  return out + "]";
}

}  // namespace

DatabaseSchema read_schema(Pool& pool, const std::string& db_path, size_t sample_values) {
  DatabaseSchema schema;
  Result tables = run(pool, db_path,
                      "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid");
  for (const Row& t : tables.rows) {
    TableInfo table;
    table.name = text_of(t[0]);
    std::string qt = quote_identifier(table.name);
    // table_info: cid, name, type, notnull, dflt_value, pk
    Result cols = run(pool, db_path, "PRAGMA table_info(" + qt + ")");
    for (const Row& c : cols.rows) {
      ColumnInfo col;
      col.name = text_of(c[1]);
      col.type = text_of(c[2]);
      col.not_null = c[3].integer != 0;
      col.primary_key = c[5].integer != 0;
      if (sample_values > 0) {
        std::string qc = quote_identifier(col.name);
        Result s = run(pool, db_path,
                       str_cat("SELECT DISTINCT ", qc, " FROM ", qt, " WHERE ", qc, " IS NOT NULL LIMIT ", sample_values));
        for (const Row& v : s.rows) col.samples.push_back(v[0]);
      }
      table.columns.push_back(std::move(col));
    }
    // foreign_key_list: id, seq, table, from, to, on_update, on_delete, match
    Result fks = run(pool, db_path, "PRAGMA foreign_key_list(" + qt + ")");
    for (const Row& f : fks.rows)
      table.foreign_keys.push_back({text_of(f[3]), text_of(f[2]), f[4].is_null() ? "" : text_of(f[4])});
    std::reverse(table.foreign_keys.begin(), table.foreign_keys.end());  // PRAGMA lists the last first
    schema.tables.push_back(std::move(table));
  }
  return schema;
}

void attach_descriptions(DatabaseSchema& schema, const std::map<std::string, std::map<std::string, std::string>>& descriptions) {
  for (const auto& [table_name, columns] : descriptions) {
    for (TableInfo& t : schema.tables) {
      if (lower(t.name) != lower(table_name)) continue;
      for (const auto& [column_name, text] : columns)
        for (ColumnInfo& c : t.columns)
          if (lower(c.name) == lower(column_name)) c.description = text;
    }
  }
}

std::string schema_ddl(const DatabaseSchema& schema) {
  std::string out;
  for (size_t ti = 0; ti < schema.tables.size(); ++ti) {
    const TableInfo& t = schema.tables[ti];
    if (ti) out += "\n\n";
    out += "CREATE TABLE " + ddl_identifier(t.name) + " (\n";
    std::vector<std::string> lines;
    std::vector<std::string> pks;
    for (const ColumnInfo& c : t.columns) {
      std::string line = "    " + ddl_identifier(c.name) + (c.type.empty() ? "" : " " + lower(c.type)) + ",";
      std::string comment;
      if (!c.description.empty()) comment = c.description;
      if (!c.samples.empty()) comment += (comment.empty() ? "" : ", ") + std::string("example: ") + samples_repr(c.samples);
      if (!comment.empty()) line += " -- " + comment;
      lines.push_back(line);
      if (c.primary_key) pks.push_back(ddl_identifier(c.name));
    }
    std::vector<std::string> constraints;
    if (!pks.empty()) {
      std::string pk = "    PRIMARY KEY (";
      for (size_t i = 0; i < pks.size(); ++i) pk += (i ? ", " : "") + pks[i];
      constraints.push_back(pk + ")");
    }
    for (const ForeignKey& f : t.foreign_keys)
      constraints.push_back("    CONSTRAINT fk_" + lower(t.name) + "_" + lower(f.column) + " FOREIGN KEY (" +
                            ddl_identifier(f.column) + ") REFERENCES " + ddl_identifier(f.ref_table) +
                            (f.ref_column.empty() ? "" : " (" + ddl_identifier(f.ref_column) + ")"));
    // The last line carries no trailing comma: strip it from the column line when no constraint follows.
    if (constraints.empty() && !lines.empty()) {
      std::string& last = lines.back();
      size_t comma = last.find(',', 4 + ddl_identifier(t.columns.back().name).size());
      last.erase(comma, 1);
    }
    for (const std::string& l : lines) out += l + "\n";
    for (size_t i = 0; i < constraints.size(); ++i) out += constraints[i] + (i + 1 < constraints.size() ? ",\n" : "\n");
    out += ");";
  }
  return out;
}

std::string schema_sqltrail(const DatabaseSchema& schema) {
  std::string out;
  for (size_t ti = 0; ti < schema.tables.size(); ++ti) {
    const TableInfo& t = schema.tables[ti];
    if (ti) out += "\n";
    out += "Table: " + t.name + "\n";
    for (const ColumnInfo& c : t.columns) {
      std::string attrs = c.type.empty() ? "" : c.type;
      if (c.primary_key) attrs += attrs.empty() ? "PRIMARY KEY" : ", PRIMARY KEY";
      for (const ForeignKey& f : t.foreign_keys)
        if (f.column == c.name) {
          std::string ref = "FOREIGN KEY -> " + f.ref_table + (f.ref_column.empty() ? "" : "." + f.ref_column);
          attrs += attrs.empty() ? ref : ", " + ref;
        }
      out += "- " + c.name + (attrs.empty() ? "" : " (" + attrs + ")");
      if (!c.description.empty()) out += ": " + c.description;
      out += "\n";
    }
  }
  return out;
}

std::string schema_compact(const DatabaseSchema& schema) {
  std::string out;
  for (const TableInfo& t : schema.tables) {
    out += t.name + "(";
    for (size_t i = 0; i < t.columns.size(); ++i) {
      const ColumnInfo& c = t.columns[i];
      out += (i ? ", " : "") + c.name + (c.type.empty() ? "" : " " + c.type) + (c.primary_key ? " PK" : "");
    }
    out += ")\n";
  }
  for (const TableInfo& t : schema.tables)
    for (const ForeignKey& f : t.foreign_keys)
      out += t.name + "." + f.column + " -> " + f.ref_table + (f.ref_column.empty() ? "" : "." + f.ref_column) + "\n";
  return out;
}

}  // namespace sqlrl::sql
