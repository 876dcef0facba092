#!/usr/bin/env python3
# Renders the Qwen2.5 / Qwen2.5-Coder Instruct chat template over ~100 conversations into
# tests/fixtures/chat_template/qwen25_chat_golden.jsonl (same shape as qwen3_chat_golden.jsonl).
#
# Pinned: Python 3.11, jinja2==3.1.6 (PyPI: pip install jinja2==3.1.6).
# The jinja2 sandbox is configured as Hugging Face transformers configures it for
# apply_chat_template (and as the Qwen3 goldens were rendered, tests/fixtures/chat_template/README.md):
# ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, the loopcontrols extension,
# `tojson` = json.dumps(ensure_ascii=False) and a `raise_exception` global.
#
# Inputs: a deterministic selection of the Qwen3 golden conversations (their reasoning_content
# and enable_thinking are passed along; the Qwen2.5 template ignores both) plus hand-built cases
# for what only Qwen2.5 does: the default system prompt, tool-call arguments given as JSON
# strings (tojson quotes them), tool calls without the "function" wrapper, empty tool lists,
# runs of tool messages, a tool message first, system turns after the first, unknown roles.
#
# Run from the repository root: python3 tools/make_qwen25_chat_fixtures.py
import json
import os
import random

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

assert jinja2.__version__ == "3.1.6", jinja2.__version__

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "chat_template")


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


SQL_TOOL = {"type": "function", "function": {
    "name": "execute_sql", "description": "Run one SQLite query on the database and return the rows.",
    "parameters": {"type": "object", "properties": {"sql": {"type": "string", "description": "the query"}},
                   "required": ["sql"]}}}
SCHEMA_TOOL = {"type": "function", "function": {
    "name": "get_schema", "description": "Tables and columns of a database (\"main\" by default).",
    "parameters": {"type": "object", "properties": {"db_id": {"type": "string"}, "limit": {"type": "integer"},
                                                    "sample": {"type": "number"}}, "required": []}}}
CJK_TOOL = {"type": "function", "function": {
    "name": "查询", "description": "数据库查询 — ünïcode ok",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}

QUESTIONS = [
    "How many singers are there?",
    "List the names of students older than 20.",
    "各国的歌手数量是多少？",
    "What's the average age of employees in 'Sales'?",
    "Show the \"top\" 3 rows\nordered by id.",
    "",
    "  leading and trailing spaces  ",
    "emoji 😀 and tab\there",
]
SQLS = [
    "SELECT count(*) FROM singer",
    "SELECT name FROM student WHERE age > 20",
    "SELECT country, count(*) FROM singer GROUP BY country",
    "SELECT avg(age) FROM employee WHERE dept = 'Sales'",
    "SELECT * FROM t ORDER BY id LIMIT 3 -- \"quoted\" \\ backslash",
]
OBSERVATIONS = [
    "   count(*)\n0         6",
    "Error: no such column: agee",
    "name\nAlice\nBob",
    "<|im_end|> inside a tool result",
    "",
    "结果：3 行",
]


def call(rng, wrapped=True, as_string=False, name=None):
    sql = rng.choice(SQLS)
    args = {"sql": sql} if rng.random() < 0.7 else {"db_id": "concert_singer", "limit": rng.randint(0, 50),
                                                    "sample": 0.5, "flags": [True, None]}
    if as_string:
        args = json.dumps(args, ensure_ascii=rng.random() < 0.5)
    fn = {"name": name or ("execute_sql" if "sql" in str(args) else "get_schema"), "arguments": args}
    return {"type": "function", "function": fn} if wrapped else fn


def hand_built(rng, n):
    cases = []
    for k in range(n):
        messages = []
        style = k % 8
        if style in (0, 3, 6):
            messages.append({"role": "system", "content": rng.choice(["You are a SQL expert.", "", "系统提示\n第二行"])})
        if style == 7:
            # A tool message first: the template opens a user turn for it.
            messages.append({"role": "tool", "content": rng.choice(OBSERVATIONS)})
        messages.append({"role": "user", "content": rng.choice(QUESTIONS)})
        for turn in range(rng.randint(1, 3)):
            n_calls = rng.choice([0, 1, 1, 2, 3])
            msg = {"role": "assistant", "content": rng.choice(["", "Let me check.", "<think>\nhmm\n</think>\n\nrunning",
                                                               "<solution>SELECT 1</solution>"])}
            if n_calls:
                msg["tool_calls"] = [call(rng, wrapped=rng.random() < 0.7, as_string=rng.random() < 0.5)
                                     for _ in range(n_calls)]
            elif rng.random() < 0.2:
                msg["tool_calls"] = []  # empty list: falsy, rendered as a plain assistant turn
            messages.append(msg)
            for _ in range(n_calls if n_calls else rng.choice([0, 0, 1])):
                messages.append({"role": "tool", "content": rng.choice(OBSERVATIONS)})
            if style == 5 and turn == 0:
                messages.append({"role": "system", "content": "Reminder: answer with one query."})
            if style == 4 and turn == 0:
                messages.append({"role": "observer", "content": "unknown roles render nothing"})
            if rng.random() < 0.4:
                messages.append({"role": "user", "content": rng.choice(QUESTIONS)})
        tools = None
        r = rng.random()
        if r < 0.45:
            tools = rng.sample([SQL_TOOL, SCHEMA_TOOL, CJK_TOOL], rng.randint(1, 3))
        elif r < 0.55:
            tools = []  # empty list: falsy, no tools block
        cases.append({"messages": messages, "tools": tools, "add_generation_prompt": rng.random() < 0.5,
                      "enable_thinking": rng.choice([None, None, True, False])})
    return cases


def main():
    rng = random.Random(20261123)
    with open(os.path.join(FIXTURES, "qwen2_5_chat_template.jinja"), encoding="utf-8") as f:
        template = make_env().from_string(f.read())
    with open(os.path.join(FIXTURES, "qwen3_chat_golden.jsonl"), encoding="utf-8") as f:
        qwen3 = [json.loads(line) for line in f if line.strip()]
    # Every third Qwen3 case: 67 conversations with their original mix of features.
    cases = [{k: row[k] for k in ("messages", "tools", "add_generation_prompt", "enable_thinking")}
             for row in qwen3[::3]]
    cases += hand_built(rng, 40)
    out_path = os.path.join(FIXTURES, "qwen25_chat_golden.jsonl")
    with open(out_path, "w", encoding="utf-8") as out:
        for case in cases:
            kwargs = {"messages": case["messages"], "tools": case["tools"],
                      "add_generation_prompt": case["add_generation_prompt"]}
            if case["enable_thinking"] is not None:
                kwargs["enable_thinking"] = case["enable_thinking"]
            case["rendered"] = template.render(**kwargs)
            out.write(json.dumps(case, ensure_ascii=False) + "\n")
    print(f"{len(cases)} renders -> {out_path}")


if __name__ == "__main__":
    main()
