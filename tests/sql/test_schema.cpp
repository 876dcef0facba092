#include <gtest/gtest.h>

#include "sql/exec/schema.h"
#include "tests/sql/pool_test_db.h"

namespace sqlrl::sql {
namespace {

TEST(Schema, ReadsTablesColumnsKeysAndSamples) {
  Pool pool;
  DatabaseSchema s = read_schema(pool, testing::shop_db(), 2);
  ASSERT_EQ(s.tables.size(), 2u);
  EXPECT_EQ(s.tables[0].name, "products");
  ASSERT_EQ(s.tables[0].columns.size(), 4u);
  EXPECT_TRUE(s.tables[0].columns[0].primary_key);
  EXPECT_TRUE(s.tables[0].columns[1].not_null);
  EXPECT_EQ(s.tables[0].columns[2].samples.size(), 2u);
  ASSERT_EQ(s.tables[1].foreign_keys.size(), 1u);
  EXPECT_EQ(s.tables[1].foreign_keys[0].column, "product_id");
  EXPECT_EQ(s.tables[1].foreign_keys[0].ref_table, "products");
  EXPECT_EQ(s.tables[1].foreign_keys[0].ref_column, "id");
}

TEST(Schema, SqlTrailListStyle) {
  Pool pool;
  DatabaseSchema s = read_schema(pool, testing::shop_db(), 0);
  EXPECT_EQ(schema_sqltrail(s),
            "Table: products\n- id (INTEGER, PRIMARY KEY)\n- name (TEXT)\n- price (REAL)\n- category (TEXT)\n\n"
            "Table: orders\n- id (INTEGER, PRIMARY KEY)\n- product_id (INTEGER, FOREIGN KEY -> products.id)\n"
            "- qty (INTEGER)\n");
}

TEST(Schema, DdlWithSamplesAndDescriptions) {
  Pool pool;
  DatabaseSchema s = read_schema(pool, testing::shop_db(), 3);
  attach_descriptions(s, {{"Products", {{"PRICE", "unit price in dollars"}}}});
  EXPECT_EQ(schema_ddl(s),
            "CREATE TABLE products (\n"
            "    id integer, -- example: [1, 2, 3]\n"
            "    name text, -- example: ['apple', 'pear', 'kale']\n"
            "    price real, -- unit price in dollars, example: [1.5, 2.25, 3.0]\n"
            "    category text, -- example: ['fruit', 'veg']\n"
            "    PRIMARY KEY (id)\n"
            ");\n\n"
            "CREATE TABLE orders (\n"
            "    id integer, -- example: [1, 2, 3]\n"
            "    product_id integer, -- example: [1, 2, 3]\n"
            "    qty integer, -- example: [3, 2, 1]\n"
            "    PRIMARY KEY (id),\n"
            "    CONSTRAINT fk_orders_product_id FOREIGN KEY (product_id) REFERENCES products (id)\n"
            ");");
  EXPECT_EQ(schema_compact(s),
            "products(id INTEGER PK, name TEXT, price REAL, category TEXT)\n"
            "orders(id INTEGER PK, product_id INTEGER, qty INTEGER)\n"
            "orders.product_id -> products.id\n");
}

TEST(Schema, MissingDatabaseNamesThePath) {
  Pool pool;
  try {
    read_schema(pool, "/nonexistent/db.sqlite");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/db.sqlite"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sqlrl::sql
