// Execution-accuracy comparison of a predicted result against a gold result, as the benchmarks'
// official scripts decide it, plus a canonical hash for majority voting by execution result.
// Errors and timeouts on either side are never equal to anything.
//
// Cell equality follows Python's ==, as the official scripts use it: INTEGER 1 equals REAL 1.0
// (exactly, no tolerance unless asked), TEXT equals TEXT byte for byte, NULL equals NULL, BLOB
// equals BLOB; TEXT '1' never equals INTEGER 1.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "sql/exec/pool.h"
#include "sql/exec/result.h"

namespace sqlrl::sql {

enum class CompareMode {
  Spider,  // test-suite-sql-eval result_eq: bag of rows, column permutations allowed,
           // row order checked iff order_matters, both empty = equal (whatever the columns)
  BirdSet, // BIRD / SkyRL / Arctic: set(pred rows) == set(gold rows), columns in order
};

struct CompareOptions {
  CompareMode mode = CompareMode::Spider;
  bool order_matters = false;  // Spider only: set from gold_has_order_by(gold_sql)
  double float_tolerance = 0;  // > 0: numbers equal when |a-b| <= tol*max(1,|a|,|b|) (not official)
};

// test-suite-sql-eval's rule: 'order by' in gold.lower() (a substring test, so a string literal
// holding "order by" counts too, exactly as the official script does).
bool gold_has_order_by(const std::string& gold_sql);

bool cells_equal(const Cell& a, const Cell& b, double float_tolerance = 0);

// The official functions on bare rows (no error handling): result_eq(gold, pred, order_matters)
// of exec_eval.py and BIRD's set equality.
bool spider_rows_equal(const std::vector<Row>& gold, const std::vector<Row>& pred, bool order_matters,
                       double float_tolerance = 0);
bool bird_rows_equal(const std::vector<Row>& gold, const std::vector<Row>& pred);

// Full comparison: false if either side has an error, timed out, or was truncated.
bool results_match(const Result& pred, const Result& gold, const CompareOptions& options);

// Canonical hash of a result's denotation for majority voting: rows as a set (ordered = false:
// duplicates and order ignored, matching BirdSet) or as a sequence (ordered = true). Numbers
// that are equal under Python == hash equally (1 and 1.0). Errors, timeouts and truncated
// results hash to 0, a value no successful result gets: callers skip 0 when voting.
uint64_t result_hash(const Result& result, bool ordered = false);

// Gold results cached per (database path, gold SQL): gold queries are run once per training run.
// Thread-safe; a gold query that two threads ask for at once may run twice (same answer). A
// result that failed for the infrastructure (Result::infra_error) is returned but not kept.
class GoldCache {
 public:
  explicit GoldCache(Pool& pool, Limits limits = {}) : pool_(pool), limits_(limits) {}
  std::shared_ptr<const Result> get(const std::string& db_path, const std::string& gold_sql);
  size_t size() const;
  size_t hits() const;

 private:
  Pool& pool_;
  Limits limits_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const Result>> cache_;
  size_t hits_ = 0;
};

}  // namespace sqlrl::sql
