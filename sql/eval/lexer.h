// The tokeniser of Spider's process_sql.tokenize, reproduced quirk for quirk, because EM and
// hardness depend on how the official script splits text, not on what the SQL means:
//   1. every ' becomes "; an odd number of " is an error ("Unexpected quote");
//   2. each "..." pair (1st+2nd, 3rd+4th, ...) is replaced by a placeholder word;
//   3. NLTK 3.8 word_tokenize (the Treebank-style NLTKWordTokenizer, one sentence);
//   4. tokens lower-cased, placeholders swapped back for the original quoted text (case kept);
//   5. a "=" token preceded by a "!", ">" or "<" token is merged with it.
// So `a >= 1` gives a, >=, 1 while `a>=1` gives a, >, =1 and `a=1` stays one token.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace sqlrl::sql {

// NLTKWordTokenizer.tokenize on text with no quote characters left (step 3 alone); exposed for
// tests. Non-ASCII bytes count as word characters.
std::vector<std::string> nltk_word_tokenize(std::string_view text);

// Steps 1-5. Throws sqlrl::Error on an odd number of quotes.
std::vector<std::string> spider_tokenize(std::string_view query);

// Python's str.lower() on UTF-8 text: ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic.
std::string python_lower(std::string_view text);

}  // namespace sqlrl::sql
