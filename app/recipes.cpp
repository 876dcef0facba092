#include "app/recipes.h"

namespace sqlrl {

const Recipe* find_recipe(const std::string& name) {
  for (const Recipe& r : embedded_recipes())
    if (name == r.name) return &r;
  return nullptr;
}

std::string recipe_names() {
  std::string out;
  for (const Recipe& r : embedded_recipes()) out += (out.empty() ? "" : ", ") + std::string(r.name);
  return out;
}

}  // namespace sqlrl
