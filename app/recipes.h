// The paper recipes of configs/*.toml, compiled into the binary (app/CMakeLists.txt generates
// their table), so `--config skyrl` works from any folder and a real checkpoint trains with a
// recipe's values by default, with no file of the source tree at run time.
#pragma once
#include <string>
#include <vector>

namespace sqlrl {

struct Recipe {
  const char* name;  // the file's stem: mtir, mtsql, skyrl, sqltrail, tiny
  const char* text;  // the file's bytes
};
const std::vector<Recipe>& embedded_recipes();
// The recipe named `name`, or nullptr.
const Recipe* find_recipe(const std::string& name);
std::string recipe_names();  // "mtir, mtsql, skyrl, sqltrail, tiny"

}  // namespace sqlrl
