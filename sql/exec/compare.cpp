// Ports of the official comparison rules. The Spider rule is test-suite-sql-eval's result_eq
// (exec_eval.py) step for step, including its quick rejection that sorts each row by
// str(x) + str(type(x)) — which makes gold (1, 1.5) differ from pred (1.0, 1.5) — because a
// faithful EX must disagree exactly where the official script disagrees.
#include "sql/exec/compare.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>

#include "sql/exec/pyrepr.h"

namespace sqlrl::sql {

namespace {

// A byte string equal for two cells iff they are == in Python (no tolerance): numbers that are
// integral and fit in int64 are written as integers so 1 and 1.0 (and 0.0 and -0.0) coincide.
void append_key(std::string& out, const Cell& c) {
  auto put_u64 = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  switch (c.type) {
    case CellType::Null: out += 'Z'; return;
    case CellType::Integer: out += 'I'; put_u64(static_cast<uint64_t>(c.integer)); return;
    case CellType::Real: {
      double d = c.real;
      if (std::floor(d) == d && d >= -9223372036854775808.0 && d < 9223372036854775808.0) {
        out += 'I';
        put_u64(static_cast<uint64_t>(static_cast<int64_t>(d)));
      } else {
        uint64_t bits;
        std::memcpy(&bits, &d, 8);
        out += 'R';
        put_u64(bits);
      }
      return;
    }
    case CellType::Text:
    case CellType::Blob:
      out += c.type == CellType::Text ? 'T' : 'B';
      put_u64(c.text.size());
      out += c.text;
      return;
  }
}

std::string row_key(const Row& row) {
  std::string key;
  for (const Cell& c : row) append_key(key, c);
  return key;
}

std::string row_key_permuted(const Row& row, const std::vector<size_t>& perm) {
  std::string key;
  for (size_t i : perm) append_key(key, row[i]);
  return key;
}

std::vector<std::string> sorted_keys(std::vector<std::string> keys, bool unique) {
  std::sort(keys.begin(), keys.end());
  if (unique) keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

// unorder_row: the row's cells sorted by str(x) + str(type(x)) (Python's sort is stable).
Row unorder_row(const Row& row) {
  std::vector<std::pair<std::string, size_t>> keyed;
  for (size_t i = 0; i < row.size(); ++i) keyed.emplace_back(python_str(row[i]) + python_type_name(row[i]), i);
  std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  Row out;
  for (auto& [k, i] : keyed) out.push_back(row[i]);
  return out;
}

bool rows_equal(const Row& a, const Row& b, double tol) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!cells_equal(a[i], b[i], tol)) return false;
  return true;
}

// Bag equality with a tolerance: == is no longer transitive, so canonical keys cannot be used;
// greedy matching (each gold row takes the first unmatched equal pred row). Not an official rule.
bool bag_equal_tolerant(const std::vector<Row>& gold, const std::vector<Row>& pred, const std::vector<size_t>& perm,
                        double tol) {
  std::vector<bool> used(pred.size(), false);
  for (const Row& g : gold) {
    bool found = false;
    for (size_t j = 0; j < pred.size() && !found; ++j) {
      if (used[j]) continue;
      bool eq = true;
      for (size_t c = 0; c < perm.size() && eq; ++c) eq = cells_equal(g[c], pred[j][perm[c]], tol);
      if (eq) used[j] = found = true;
    }
    if (!found) return false;
  }
  return true;
}

}  // namespace

bool gold_has_order_by(const std::string& gold_sql) {
  std::string lower = gold_sql;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower.find("order by") != std::string::npos;
}

bool cells_equal(const Cell& a, const Cell& b, double tol) {
  if (a.is_number() && b.is_number()) {
    if (a.type == CellType::Integer && b.type == CellType::Integer) {
      if (a.integer == b.integer) return true;
      if (tol <= 0) return false;
    }
    if (tol > 0) {
      double x = a.type == CellType::Integer ? static_cast<double>(a.integer) : a.real;
      double y = b.type == CellType::Integer ? static_cast<double>(b.integer) : b.real;
      return std::fabs(x - y) <= tol * std::max({1.0, std::fabs(x), std::fabs(y)});
    }
    std::string ka, kb;
    append_key(ka, a);
    append_key(kb, b);
    return ka == kb;
  }
  if (a.type != b.type) return false;
  if (a.type == CellType::Null) return true;
  return a.text == b.text;
}

bool spider_rows_equal(const std::vector<Row>& gold, const std::vector<Row>& pred, bool order_matters, double tol) {
  if (gold.empty() && pred.empty()) return true;
  if (gold.size() != pred.size()) return false;
  const size_t ncols = gold[0].size();
  if (pred[0].size() != ncols) return false;
  for (const Row& r : gold)
    if (r.size() != ncols) return false;
  for (const Row& r : pred)
    if (r.size() != ncols) return false;

  // quick_rej: rows with their cells sorted must agree as a list (ordered) or as a set.
  std::vector<Row> s1, s2;
  for (const Row& r : gold) s1.push_back(unorder_row(r));
  for (const Row& r : pred) s2.push_back(unorder_row(r));
  if (order_matters || tol > 0) {
    if (order_matters)
      for (size_t i = 0; i < s1.size(); ++i)
        if (!rows_equal(s1[i], s2[i], tol)) return false;
  } else {
    std::vector<std::string> k1, k2;
    for (const Row& r : s1) k1.push_back(row_key(r));
    for (const Row& r : s2) k2.push_back(row_key(r));
    if (sorted_keys(k1, true) != sorted_keys(k2, true)) return false;
  }

  // Column permutations perm (gold column c <- pred column perm[c]), pruned by requiring every
  // pred value in column perm[c] to occur in gold column c. The official code prunes with 20
  // sampled rows when there are more than 3 columns; pruning never removes a permutation that
  // makes the results equal, so pruning with every row gives the same answer deterministically.
  std::vector<std::vector<bool>> allowed(ncols, std::vector<bool>(ncols, true));
  if (tol <= 0) {
    for (size_t c1 = 0; c1 < ncols; ++c1) {
      std::vector<std::string> gold_values;
      for (const Row& r : gold) {
        std::string k;
        append_key(k, r[c1]);
        gold_values.push_back(std::move(k));
      }
      gold_values = sorted_keys(std::move(gold_values), true);
      for (size_t c2 = 0; c2 < ncols; ++c2) {
        for (const Row& r : pred) {
          std::string k;
          append_key(k, r[c2]);
          if (!std::binary_search(gold_values.begin(), gold_values.end(), k)) {
            allowed[c1][c2] = false;
            break;
          }
        }
      }
    }
  }
  std::vector<std::string> gold_bag;
  if (!order_matters && tol <= 0) {
    for (const Row& r : gold) gold_bag.push_back(row_key(r));
    gold_bag = sorted_keys(std::move(gold_bag), false);
  }
  std::vector<size_t> perm(ncols);
  std::vector<bool> taken(ncols, false);
  std::function<bool(size_t)> search = [&](size_t c) -> bool {
    if (c == ncols) {
      if (order_matters) {
        for (size_t i = 0; i < gold.size(); ++i)
          for (size_t k = 0; k < ncols; ++k)
            if (!cells_equal(gold[i][k], pred[i][perm[k]], tol)) return false;
        return true;
      }
      if (tol > 0) return bag_equal_tolerant(gold, pred, perm, tol);
      std::vector<std::string> pred_bag;
      for (const Row& r : pred) pred_bag.push_back(row_key_permuted(r, perm));
      return sorted_keys(std::move(pred_bag), false) == gold_bag;
    }
    for (size_t c2 = 0; c2 < ncols; ++c2) {
      if (taken[c2] || !allowed[c][c2]) continue;
      taken[c2] = true;
      perm[c] = c2;
      if (search(c + 1)) return true;
      taken[c2] = false;
    }
    return false;
  };
  return search(0);
}

bool bird_rows_equal(const std::vector<Row>& gold, const std::vector<Row>& pred) {
  std::vector<std::string> k1, k2;
  for (const Row& r : gold) k1.push_back(row_key(r));
  for (const Row& r : pred) k2.push_back(row_key(r));
  return sorted_keys(std::move(k1), true) == sorted_keys(std::move(k2), true);
}

bool results_match(const Result& pred, const Result& gold, const CompareOptions& options) {
  if (!pred.ok() || !gold.ok() || pred.timed_out || gold.timed_out || pred.truncated || gold.truncated) return false;
  if (options.mode == CompareMode::BirdSet) {
    if (options.float_tolerance > 0) {
      // Set semantics with a tolerance: every row of each side has an equal row on the other.
      auto covered = [&](const std::vector<Row>& a, const std::vector<Row>& b) {
        for (const Row& x : a) {
          bool found = false;
          for (const Row& y : b)
            if (rows_equal(x, y, options.float_tolerance)) {
              found = true;
              break;
            }
          if (!found) return false;
        }
        return true;
      };
      return covered(gold.rows, pred.rows) && covered(pred.rows, gold.rows);
    }
    return bird_rows_equal(gold.rows, pred.rows);
  }
  return spider_rows_equal(gold.rows, pred.rows, options.order_matters, options.float_tolerance);
}

uint64_t result_hash(const Result& result, bool ordered) {
  if (!result.ok() || result.timed_out || result.truncated) return 0;
  std::vector<std::string> keys;
  for (const Row& r : result.rows) keys.push_back(row_key(r));
  if (!ordered) keys = sorted_keys(std::move(keys), true);
  // FNV-1a over length-prefixed row keys, then a final avalanche (splitmix64).
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](unsigned char byte) {
    h ^= byte;
    h *= 1099511628211ull;
  };
  mix(ordered ? 'O' : 'S');
  for (const std::string& k : keys) {
    for (int i = 0; i < 8; ++i) mix(static_cast<unsigned char>((k.size() >> (8 * i)) & 0xff));
    for (char c : k) mix(static_cast<unsigned char>(c));
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h == 0 ? 1 : h;
}

std::shared_ptr<const Result> GoldCache::get(const std::string& db_path, const std::string& gold_sql) {
  std::string key = db_path;
  key += '\0';
  key += gold_sql;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      ++hits_;
      return it->second;
    }
  }
  auto result = std::make_shared<const Result>(pool_.execute(db_path, gold_sql, limits_));
  // A failure of the machine's (Result::infra_error) says nothing about the gold: the next
  // caller runs it again instead of being given it for the rest of the run.
  if (result->infra_error) return result;
  std::lock_guard<std::mutex> lock(mutex_);
  auto [it, inserted] = cache_.emplace(std::move(key), result);
  return it->second;
}

size_t GoldCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cache_.size();
}

size_t GoldCache::hits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hits_;
}

}  // namespace sqlrl::sql
