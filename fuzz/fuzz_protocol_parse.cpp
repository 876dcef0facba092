// What the model emits, read by every protocol of the registry (rl/agent/protocol.h
// protocol_names(), make_protocol): parse() of one assistant turn, done(), mtsql's verdicts, and
// the observation inject() writes back (an ExecSql result echoing the turn's SQL and text, as a
// database value could), checked to tokenise as the rollout engine does (encode_marked).
//
// Protocol::parse promises never to throw (anything malformed is ActionKind::Invalid), so it is
// called outside any catch: an exception from it reaches libFuzzer as a finding.
#include <memory>
#include <string>
#include <vector>

#include "fuzz/fuzz_tokenizer.h"
#include "fuzz/fuzz_util.h"
#include "rl/agent/protocol.h"
#include "rl/agent/untrusted.h"

namespace {

struct Fixed {
  std::vector<std::unique_ptr<sqlrl::rl::Protocol>> protocols;
  sqlrl::sql::Example example;
};

const Fixed& fixed() {
  static const Fixed f = [] {
    Fixed x;
    for (const std::string& name : sqlrl::rl::protocol_names()) x.protocols.push_back(sqlrl::rl::make_protocol(name));
    x.example.id = "dev_0_t1";
    x.example.db_id = "concert";
    x.example.db_path = "concert/concert.sqlite";
    x.example.question = "How many singers are from France?";
    x.example.gold_sql = "SELECT count(*) FROM singer WHERE country = 'France'";
    x.example.history = {{"Show all singers.", "SELECT name FROM singer"}};
    x.example.turn_index = 1;
    return x;
  }();
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sqlrl;
  const std::string_view turn = fuzz::as_text(data, size);
  const Fixed& f = fixed();
  (void)rl::mtsql_verdicts(turn);
  for (const auto& protocol : f.protocols) {
    rl::Action action = protocol->parse(turn);  // never throws (see above)
    if (protocol->done(action, 0)) continue;
    fuzz::expect_ok_or_error([&] {
      sql::Result result;
      result.columns = {"sql", "text"};
      result.decltypes = {"", "TEXT"};
      result.rows.push_back({sql::Cell::of_text(action.sql), sql::Cell::of_text(std::string(turn.substr(0, 200)))});
      result.rows.push_back({sql::Cell::of_integer(-7), sql::Cell::of_real(2.5)});
      rl::StepOutcome outcome;
      outcome.result = protocol->executes(action) ? &result : nullptr;
      outcome.db_path = f.example.db_path;
      outcome.turns_left = 3;
      std::string injected = protocol->inject(action, outcome, f.example);
      (void)rl::strip_marks(injected);
      (void)rl::encode_marked(fuzz::tiny_tokenizer(), injected);
    });
  }
  return 0;
}
