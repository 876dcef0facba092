#include "rl/agent/rollout.h"

#include <algorithm>

#include "rl/agent/untrusted.h"
#include "runtime/error.h"
#include "tokenizer/tokenizer.h"

namespace sqlrl::rl {

const sql::DatabaseSchema& SchemaCache::get(sql::Pool& pool, const std::string& db_path) {
  for (const auto& [path, schema] : entries)
    if (path == db_path) return schema;
  entries.emplace_back(db_path, sql::read_schema(pool, db_path));
  return entries.back().second;
}

std::vector<int32_t> build_prompt_tokens(const Protocol& protocol, const Tokenizer& tokenizer,
                                         const sql::Example& example, const sql::DatabaseSchema& schema,
                                         const RolloutOptions& options) {
  ChatOptions chat;
  chat.chat_template = options.chat_template;
  chat.add_generation_prompt = true;
  // Only the Qwen3 template reads the flag; Qwen2.5 has no thinking rules.
  if (options.chat_template == ChatTemplate::qwen3) chat.enable_thinking = options.enable_thinking;
  // The template's markup and the protocol's text are parsed for added tokens; the schema, sample
  // values, evidence and question are not (see rl/agent/untrusted.h).
  return encode_marked(tokenizer, render_chat(protocol.first_prompt(example, schema), chat));
}

namespace {

// Plans `members` (prompts equal on [0, depth), under node `parent`, which ends at depth; depth 0
// when there is none): the longest stretch they all share from `depth` becomes a node when long
// enough, then they split by their next token and each part is planned on its own. Every member keeps its last token, so the common stretch
// stops one short of the shortest; members that end right after it are planned there.
void plan_members(const std::vector<std::span<const int32_t>>& prompts, std::vector<size_t> members, int64_t depth,
                  int64_t parent, int64_t min_shared, PrefillPlan& plan) {
  while (!members.empty()) {
    if (members.size() == 1) {
      plan.fork_of[members[0]] = parent;
      plan.from[members[0]] = depth;
      return;
    }
    int64_t shortest = INT64_MAX;
    for (size_t m : members) shortest = std::min<int64_t>(shortest, static_cast<int64_t>(prompts[m].size()));
    const std::span<const int32_t> first = prompts[members[0]];
    int64_t end = depth;
    while (end < shortest - 1 &&
           std::all_of(members.begin(), members.end(), [&](size_t m) { return prompts[m][end] == first[end]; }))
      ++end;
    if (end - depth >= min_shared) {
      const int64_t level = parent < 0 ? 0 : plan.nodes[parent].level + 1;
      plan.nodes.push_back({parent, level, members[0], depth, end});
      parent = static_cast<int64_t>(plan.nodes.size()) - 1;
      depth = end;
    }
    // Split by the token at `end` (every member has one), in order of first appearance.
    std::vector<std::vector<size_t>> parts;
    for (size_t m : members) {
      auto part = std::find_if(parts.begin(), parts.end(), [&](const auto& p) { return prompts[p[0]][end] == prompts[m][end]; });
      if (part == parts.end()) {
        parts.push_back({m});
      } else {
        part->push_back(m);
      }
    }
    if (parts.size() > 1) {
      for (std::vector<size_t>& part : parts) plan_members(prompts, std::move(part), depth, parent, min_shared, plan);
      return;
    }
    // One part: the stretch stopped one short of the shortest members, which end here.
    std::vector<size_t> longer;
    for (size_t m : members) {
      if (static_cast<int64_t>(prompts[m].size()) == end + 1) {
        plan.fork_of[m] = parent;
        plan.from[m] = depth;
      } else {
        longer.push_back(m);
      }
    }
    members = std::move(longer);
  }
}

}  // namespace

PrefillPlan plan_shared_prefills(const std::vector<std::span<const int32_t>>& prompts, int64_t min_shared) {
  PrefillPlan plan;
  plan.fork_of.assign(prompts.size(), -1);
  plan.from.assign(prompts.size(), 0);
  std::vector<size_t> all;
  for (size_t i = 0; i < prompts.size(); ++i) {
    check(!prompts[i].empty(), "plan_shared_prefills: prompt ", i, " is empty");
    all.push_back(i);
  }
  plan_members(prompts, std::move(all), 0, -1, std::max<int64_t>(min_shared, 1), plan);
  return plan;
}

}  // namespace sqlrl::rl
