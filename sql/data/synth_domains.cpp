// Synthetic benchmark domains: twelve small schemas with value vocabularies, and the row
// generator. Category values follow a Zipf-like distribution (a few common, a tail of rare
// ones), numbers a triangular one around the middle of their range, some columns hold NULLs,
// and per database a share of category values is stored messily (abbreviated, re-cased,
// with a trailing space) so that the stored form differs from the way a question says it.
#include "sql/data/synth_domains.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "runtime/error.h"

namespace sqlrl::sql::synth {
namespace {

ColumnSpec id() { return {"id", ColKind::Id, "id", "", "", {}, {}, {}, 0, 0, 0}; }
ColumnSpec fk(const std::string& name, const std::string& table) {
  return {name, ColKind::ForeignKey, name, "", table, {}, {}, {}, 0, 0, 0};
}
ColumnSpec name_col(const std::string& name, const std::string& phrase, std::vector<std::string> first,
                    std::vector<std::string> second) {
  return {name, ColKind::Name, phrase, "", "", {}, std::move(first), std::move(second), 0, 0, 0};
}
ColumnSpec category(const std::string& name, const std::string& phrase, const std::string& filter,
                    std::vector<CategoryValue> values, double null_share = 0) {
  return {name, ColKind::Category, phrase, filter, "", std::move(values), {}, {}, 0, 0, null_share};
}
ColumnSpec integer(const std::string& name, const std::string& phrase, int64_t lo, int64_t hi, double null_share = 0) {
  return {name, ColKind::Integer, phrase, "", "", {}, {}, {}, lo, hi, null_share};
}
ColumnSpec real(const std::string& name, const std::string& phrase, int64_t lo, int64_t hi, double null_share = 0) {
  return {name, ColKind::Real, phrase, "", "", {}, {}, {}, lo, hi, null_share};
}
ColumnSpec number_text(const std::string& name, const std::string& phrase, int64_t lo, int64_t hi) {
  return {name, ColKind::NumberText, phrase, "", "", {}, {}, {}, lo, hi, 0};
}

const std::vector<std::string> kFirst = {"Alice", "Bruno", "Chen", "Diana", "Emeka", "Farah", "Goran", "Hana",
                                         "Ivan", "Julia", "Kenji", "Lena", "Mateo", "Nadia", "Omar", "Priya",
                                         "Quinn", "Rosa", "Sven", "Tara", "Umar", "Vera", "Wei", "Yusuf"};
const std::vector<std::string> kLast = {"Adams", "Baker", "Costa", "Dubois", "Evans", "Fischer", "Garcia", "Hughes",
                                        "Ito", "Jensen", "Kim", "Lopez", "Moreau", "Novak", "Okafor", "Patel",
                                        "Rossi", "Silva", "Tanaka", "Weber"};
const std::vector<std::string> kAdj = {"Silent", "Golden", "Broken", "Hidden", "Electric", "Crimson", "Endless",
                                       "Velvet", "Distant", "Frozen", "Wild", "Quiet", "Bright", "Lonely"};
const std::vector<std::string> kNoun = {"River", "Garden", "Empire", "Signal", "Harbor", "Mirror", "Storm",
                                        "Voyage", "Lantern", "Horizon", "Forest", "Echo", "Summit", "Orchard"};
const std::vector<std::string> kBrand = {"Maple", "Cedar", "Summit", "Harbor", "Union", "Pioneer", "Beacon",
                                         "Liberty", "Riverside", "Northgate", "Oakwood", "Silverline"};

const std::vector<CategoryValue> kCities = {{"New York City", "NYC"}, {"Los Angeles", "LA"},
                                            {"San Francisco", "SF"}, {"Chicago", ""},
                                            {"Boston", ""},          {"Philadelphia", "Philly"},
                                            {"Seattle", ""},         {"Washington", "DC"}};
const std::vector<CategoryValue> kCountries = {{"United States", "USA"}, {"United Kingdom", "UK"},
                                               {"Germany", ""},          {"France", ""},
                                               {"Japan", ""},            {"Canada", ""},
                                               {"South Korea", "S. Korea"}, {"Australia", "AUS"}};

std::vector<DomainSpec> build_domains() {
  std::vector<DomainSpec> d;
  auto people = [](const std::string& n) { return name_col(n, "name", kFirst, kLast); };
  auto titles = [](const std::string& n, const std::string& phrase) { return name_col(n, phrase, kAdj, kNoun); };
  auto brands = [](const std::string& n, const std::vector<std::string>& kind) { return name_col(n, "name", kBrand, kind); };

  d.push_back({"school",
               {{"department", "department", "departments",
                 {id(), category("dept_name", "name", "named {v}",
                                 {{"Computer Science", "CS"}, {"Mathematics", "Math"}, {"Physics", ""},
                                  {"History", ""}, {"Biology", "Bio"}, {"Economics", "Econ"}}),
                  category("building", "building", "in the {v} building", {{"North Hall", ""}, {"Science Center", ""}, {"Main Building", ""}}),
                  integer("budget", "budget", 50000, 900000)},
                 6, 6},
                {"student", "student", "students",
                 {id(), people("name"), category("city", "home city", "from {v}", kCities, 0.1),
                  integer("age", "age", 17, 30), real("gpa", "GPA", 2, 4, 0.1), fk("department_id", "department")},
                 18, 30}}});
  d.push_back({"music",
               {{"artist", "artist", "artists",
                 {id(), people("name"), category("country", "country", "from {v}", kCountries),
                  integer("debut_year", "debut year", 1965, 2020)},
                 8, 14},
                {"album", "album", "albums",
                 {id(), titles("title", "title"),
                  category("genre", "genre", "in the {v} genre",
                           {{"Rock", ""}, {"Jazz", ""}, {"Hip Hop", ""}, {"Classical", ""}, {"Pop", ""}, {"Electronic", ""}}),
                  integer("release_year", "release year", 1970, 2024), real("price", "price", 5, 30),
                  fk("artist_id", "artist")},
                 16, 28}}});
  d.push_back({"retail",
               {{"store", "store", "stores",
                 {id(), brands("name", {"Market", "Outlet", "Depot", "Mart"}), category("city", "city", "located in {v}", kCities),
                  number_text("size_sqft", "size in square feet", 800, 12000)},
                 6, 10},
                {"product", "product", "products",
                 {id(), brands("name", {"Lamp", "Kettle", "Jacket", "Puzzle", "Blender", "Backpack"}),
                  category("category", "category", "in the {v} category",
                           {{"Electronics", ""}, {"Grocery", ""}, {"Clothing", ""}, {"Toys", ""}, {"Home and Garden", "Home & Garden"}}),
                  real("price", "price", 2, 400), integer("stock", "stock", 0, 300, 0.1)},
                 12, 20},
                {"sale", "sale", "sales",
                 {id(), fk("store_id", "store"), fk("product_id", "product"), integer("quantity", "quantity", 1, 12),
                  category("channel", "channel", "made through the {v} channel", {{"Online", ""}, {"In Store", ""}, {"Phone", ""}})},
                 25, 40}}});
  d.push_back({"flights",
               {{"airline", "airline", "airlines",
                 {id(), brands("name", {"Air", "Airways", "Wings", "Jet"}), category("country", "country", "based in {v}", kCountries),
                  integer("fleet_size", "fleet size", 10, 400)},
                 6, 9},
                {"flight", "flight", "flights",
                 {id(), name_col("flight_number", "flight number", {"FL", "AX", "QZ", "MR"}, {"101", "202", "303", "404", "505", "606", "707", "808"}),
                  category("origin", "origin city", "departing from {v}", kCities),
                  category("status", "status", "with status {v}", {{"On Time", ""}, {"Delayed", ""}, {"Cancelled", ""}}),
                  integer("distance", "distance", 150, 5000), real("fare", "fare", 49, 900, 0.05), fk("airline_id", "airline")},
                 18, 30}}});
  d.push_back({"hospital",
               {{"doctor", "doctor", "doctors",
                 {id(), people("name"),
                  category("specialty", "specialty", "specializing in {v}",
                           {{"Cardiology", ""}, {"Neurology", ""}, {"Pediatrics", "Peds"}, {"Orthopedics", "Ortho"}, {"Dermatology", "Derm"}}),
                  integer("years_experience", "years of experience", 1, 35)},
                 7, 12},
                {"patient", "patient", "patients",
                 {id(), people("name"), category("city", "city", "living in {v}", kCities), integer("age", "age", 1, 95),
                  real("bill", "bill amount", 80, 9000, 0.1), fk("doctor_id", "doctor")},
                 20, 32}}});
  d.push_back({"library",
               {{"author", "author", "authors",
                 {id(), people("name"),
                  category("nationality", "nationality", "with {v} nationality",
                           {{"American", ""}, {"British", ""}, {"French", ""}, {"German", ""}, {"Japanese", ""}, {"Canadian", ""}}),
                  integer("birth_year", "birth year", 1900, 1995)},
                 8, 12},
                {"book", "book", "books",
                 {id(), titles("title", "title"),
                  category("genre", "genre", "in the {v} genre",
                           {{"Science Fiction", "Sci-Fi"}, {"Mystery", ""}, {"Romance", ""}, {"History", ""}, {"Poetry", ""}}),
                  number_text("pages", "number of pages", 90, 1200), integer("published_year", "publication year", 1950, 2024),
                  fk("author_id", "author")},
                 16, 26},
                {"loan", "loan", "loans",
                 {id(), fk("book_id", "book"), people("member_name"), integer("days", "loan length in days", 1, 60)}, 20, 35}}});
  d.push_back({"restaurant",
               {{"restaurant", "restaurant", "restaurants",
                 {id(), brands("name", {"Bistro", "Kitchen", "Grill", "Table"}), category("city", "city", "in {v}", kCities),
                  category("cuisine", "cuisine", "serving {v} food", {{"Italian", ""}, {"Mexican", ""}, {"Chinese", ""}, {"Japanese", ""}, {"Indian", ""}}),
                  real("rating", "rating", 2, 5)},
                 8, 12},
                {"dish", "dish", "dishes",
                 {id(), titles("name", "name"), real("price", "price", 4, 60), integer("calories", "calories", 150, 1400, 0.15),
                  fk("restaurant_id", "restaurant")},
                 20, 32}}});
  d.push_back({"sports",
               {{"team", "team", "teams",
                 {id(), brands("name", {"United", "Rovers", "Athletic", "City"}), category("city", "home city", "from {v}", kCities),
                  integer("founded", "founding year", 1880, 2010)},
                 6, 9},
                {"player", "player", "players",
                 {id(), people("name"),
                  category("position", "position", "playing as {v}",
                           {{"Goalkeeper", "GK"}, {"Defender", "DF"}, {"Midfielder", "MF"}, {"Forward", "FW"}}),
                  integer("age", "age", 17, 38), real("salary", "salary", 40000, 900000, 0.1), fk("team_id", "team")},
                 20, 34}}});
  d.push_back({"movies",
               {{"studio", "studio", "studios",
                 {id(), brands("name", {"Pictures", "Films", "Studios", "Entertainment"}), category("country", "country", "based in {v}", kCountries)},
                 5, 8},
                {"movie", "movie", "movies",
                 {id(), titles("title", "title"),
                  category("genre", "genre", "in the {v} genre",
                           {{"Drama", ""}, {"Comedy", ""}, {"Science Fiction", "Sci-Fi"}, {"Documentary", "Doc"}, {"Horror", ""}}),
                  integer("year", "release year", 1960, 2024), real("budget", "budget in millions", 1, 250, 0.1),
                  number_text("runtime", "runtime in minutes", 75, 200), fk("studio_id", "studio")},
                 18, 30}}});
  d.push_back({"real_estate",
               {{"agent", "agent", "agents",
                 {id(), people("name"), category("city", "city", "working in {v}", kCities), integer("years_active", "years active", 1, 30)},
                 6, 9},
                {"property", "property", "properties",
                 {id(), brands("address", {"Street", "Avenue", "Lane", "Road"}),
                  category("property_type", "type", "of type {v}",
                           {{"Apartment", "Apt"}, {"House", ""}, {"Condominium", "Condo"}, {"Townhouse", ""}}),
                  real("price", "price", 90000, 2500000), integer("bedrooms", "number of bedrooms", 1, 6),
                  fk("agent_id", "agent")},
                 18, 30}}});
  d.push_back({"company",
               {{"office", "office", "offices",
                 {id(), category("city", "city", "located in {v}", kCities), category("country", "country", "in {v}", kCountries),
                  number_text("floor_area", "floor area", 300, 9000)},
                 5, 8},
                {"employee", "employee", "employees",
                 {id(), people("name"),
                  category("role", "role", "working as {v}",
                           {{"Software Engineer", "SWE"}, {"Product Manager", "PM"}, {"Sales", ""}, {"Human Resources", "HR"}, {"Accountant", ""}}),
                  real("salary", "salary", 35000, 250000), integer("hire_year", "hire year", 1995, 2024),
                  fk("office_id", "office")},
                 20, 34}}});
  d.push_back({"hotels",
               {{"hotel", "hotel", "hotels",
                 {id(), brands("name", {"Inn", "Suites", "Lodge", "Resort"}), category("city", "city", "in {v}", kCities),
                  integer("stars", "star rating", 1, 5), real("nightly_rate", "nightly rate", 60, 600)},
                 7, 11},
                {"booking", "booking", "bookings",
                 {id(), fk("hotel_id", "hotel"), people("guest_name"), integer("nights", "number of nights", 1, 14),
                  category("channel", "booking channel", "made through {v}", {{"Online", ""}, {"Phone", ""}, {"Travel Agent", "Agent"}, {"Walk-in", ""}})},
                 24, 36}}});
  return d;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// Triangular distribution on [lo, hi]: the mean of two uniform draws.
double triangular(Rng& rng, double lo, double hi) { return lo + (hi - lo) * 0.5 * (rng.unit() + rng.unit()); }

}  // namespace

const std::vector<DomainSpec>& domains() {
  static const std::vector<DomainSpec> all = build_domains();
  return all;
}

const char* mess_style_name(MessStyle style) {
  switch (style) {
    case MessStyle::None: return "none";
    case MessStyle::Lower: return "lower_case";
    case MessStyle::Upper: return "upper_case";
    case MessStyle::Abbreviation: return "abbreviation";
    case MessStyle::TrailingSpace: return "trailing_space";
  }
  return "?";
}

const char* declared_type(ColKind kind) {
  switch (kind) {
    case ColKind::Id:
    case ColKind::ForeignKey:
    case ColKind::Integer: return "INTEGER";
    case ColKind::Real: return "REAL";
    default: return "TEXT";
  }
}

const TableData& Database::table(const std::string& name) const {
  for (const TableData& t : tables)
    if (t.spec->name == name) return t;
  fail("synthetic database ", db_id, " has no table '", name, "'");
}

Database generate_database(const DomainSpec& domain, const std::string& db_id, Rng& rng, double mess_share) {
  Database db;
  db.db_id = db_id;
  db.domain = &domain;
  for (const TableSpec& spec : domain.tables) {
    TableData data;
    data.spec = &spec;
    const int rows = static_cast<int>(rng.range(spec.rows_lo, spec.rows_hi));
    // Per column: the stored form of each category value in this database (consistent within
    // the database, so probing one row tells how the others are written).
    std::vector<std::vector<std::pair<std::string, MessStyle>>> stored(spec.columns.size());
    for (size_t c = 0; c < spec.columns.size(); ++c) {
      const ColumnSpec& col = spec.columns[c];
      for (const CategoryValue& v : col.categories) {
        MessStyle style = MessStyle::None;
        if (rng.chance(mess_share)) {
          size_t pick = rng.below(v.abbreviation.empty() ? 3 : 5);
          style = pick == 0 ? MessStyle::Lower : pick == 1 ? MessStyle::Upper : pick == 2 ? MessStyle::TrailingSpace : MessStyle::Abbreviation;
        }
        std::string text = v.canonical;
        if (style == MessStyle::Lower) text = lower(text);
        if (style == MessStyle::Upper) text = upper(text);
        if (style == MessStyle::TrailingSpace) text += " ";
        if (style == MessStyle::Abbreviation) text = v.abbreviation;
        if (text == v.canonical) style = MessStyle::None;  // e.g. upper-casing "USA"
        stored[c].push_back({text, style});
      }
    }
    std::vector<std::string> used_names;
    for (int r = 0; r < rows; ++r) {
      std::vector<Cell> row(spec.columns.size());
      for (size_t c = 0; c < spec.columns.size(); ++c) {
        const ColumnSpec& col = spec.columns[c];
        Cell& cell = row[c];
        if (col.null_share > 0 && rng.chance(col.null_share)) {
          cell.null = true;
          continue;
        }
        switch (col.kind) {
          case ColKind::Id: cell.integer = r + 1; break;
          case ColKind::ForeignKey: {
            size_t parent = 0;
            for (size_t t = 0; t < db.tables.size(); ++t)
              if (db.tables[t].spec->name == col.ref_table) parent = db.tables[t].rows.size();
            check(parent > 0, "synthetic domain ", domain.name, ": ", spec.name, ".", col.name, " references '",
                  col.ref_table, "' which is not generated before it");
            // Skewed toward low ids: some parents get many children, some none.
            size_t a = rng.below(parent), b = rng.below(parent);
            cell.integer = static_cast<int64_t>(std::min(a, b)) + 1;
            break;
          }
          case ColKind::Name: {
            // Distinct names (a few tries, then a numbered suffix keeps them distinct).
            std::string name;
            for (int attempt = 0; attempt < 20; ++attempt) {
              name = col.names[rng.below(col.names.size())] + " " + col.names2[rng.below(col.names2.size())];
              if (std::find(used_names.begin(), used_names.end(), name) == used_names.end()) break;
            }
            if (std::find(used_names.begin(), used_names.end(), name) != used_names.end()) name += str_cat(" ", r + 1);
            used_names.push_back(name);
            cell.text = name;
            break;
          }
          case ColKind::Category: {
            // Zipf-like: weight 1/(k+1).
            double total = 0;
            for (size_t k = 0; k < col.categories.size(); ++k) total += 1.0 / static_cast<double>(k + 1);
            double u = rng.unit() * total;
            size_t k = 0;
            for (; k + 1 < col.categories.size(); ++k) {
              u -= 1.0 / static_cast<double>(k + 1);
              if (u < 0) break;
            }
            cell.text = stored[c][k].first;
            cell.style = stored[c][k].second;
            cell.canonical = col.categories[k].canonical;
            break;
          }
          case ColKind::Integer:
            cell.integer = static_cast<int64_t>(std::llround(triangular(rng, static_cast<double>(col.lo), static_cast<double>(col.hi))));
            break;
          case ColKind::Real:
            cell.real = std::round(triangular(rng, static_cast<double>(col.lo), static_cast<double>(col.hi)) * 100.0) / 100.0;
            break;
          case ColKind::NumberText:
            cell.integer = static_cast<int64_t>(std::llround(triangular(rng, static_cast<double>(col.lo), static_cast<double>(col.hi))));
            cell.text = std::to_string(cell.integer);
            break;
        }
      }
      data.rows.push_back(std::move(row));
    }
    db.tables.push_back(std::move(data));
  }
  return db;
}

}  // namespace sqlrl::sql::synth
