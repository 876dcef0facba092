// The benchmark loaders (sql/data/datasets.h load_dataset) read folders, so the input is written
// as the questions file of a scratch dataset folder (LoadOptions::file) and loaded in each of the
// six record formats: Spider, BIRD, SParC, CoSQL, SynSQL and Spider-Syn records. Database "concert" exists in every
// layout, so records naming it go on to Spider's hardness of their gold SQL
// (compute_difficulty, the schema read from the database); others are skipped as missing. The
// same bytes are also read as a BIRD database_description CSV (load_bird_descriptions).
#include <string>

#include "fuzz/fuzz_sqlite.h"
#include "fuzz/fuzz_util.h"
#include "sql/data/datasets.h"

namespace {

const std::string& dataset_folder() {
  static const std::string dir = [] {
    std::string d = sqlrl::fuzz::scratch_dir() + "/dataset";
    // Spider / SParC / CoSQL: database/, BIRD dev split: dev_databases/, SynSQL: databases/.
    for (const char* root : {"database", "dev_databases", "databases"})
      sqlrl::fuzz::make_sqlite_db(d + "/" + root + "/concert/concert.sqlite");
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sqlrl;
  const std::string& dir = dataset_folder();
  const std::string questions = dir + "/questions.json";
  fuzz::write_file(questions, fuzz::as_text(data, size));
  // Spider-DK and Spider-Realistic read Spider's records; Spider-Syn has its own question field.
  for (sql::DatasetFormat format : {sql::DatasetFormat::Spider, sql::DatasetFormat::Bird, sql::DatasetFormat::Sparc,
                                    sql::DatasetFormat::Cosql, sql::DatasetFormat::Synsql, sql::DatasetFormat::SpiderSyn}) {
    for (bool skip_missing : {true, false}) {
      fuzz::expect_ok_or_error([&] {
        sql::LoadOptions options;
        options.format = format;
        options.dir = dir;
        options.split = "dev";
        options.file = questions;
        options.skip_missing = skip_missing;
        options.compute_difficulty = skip_missing;  // once per format is enough
        sql::Dataset dataset = sql::load_dataset(options);
        (void)sql::dataset_summary(dataset);
      });
    }
  }
  const std::string desc = dir + "/described";
  fuzz::write_file(desc + "/database_description/singer.csv", fuzz::as_text(data, size));
  fuzz::expect_ok_or_error([&] { (void)sql::load_bird_descriptions(desc); });
  return 0;
}
