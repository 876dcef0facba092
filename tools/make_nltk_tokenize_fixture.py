#!/usr/bin/env python3
# Golden outputs of NLTK's word tokenizer for tests/sql_eval (sql/eval/lexer.cpp nltk_word_tokenize).
# Pinned: Python 3.11, nltk==3.8 (the version the Spider fixtures were made with).
# The inputs have no quote characters, as in process_sql.tokenize (quotes become placeholders).
# usage: make_nltk_tokenize_fixture.py out.jsonl
import json
import sys

import nltk
from nltk.tokenize import NLTKWordTokenizer

assert nltk.__version__ == "3.8", nltk.__version__

CASES = [
    "SELECT a FROM t WHERE a >= 1", "a>=1", "a=1", "a<>1", "a-b", "a - b", "T1.name", "count(*)",
    "cannot", "CanNot do", "in (1,2)", "in (1, 2)", "a.", "t1.a", "x , y", "select a,b from t",
    "a--b", "x wanna y", "wanna", "gonna gotta gimme lemme", "a :b", "a:1", "x;y", "a!=1", "a != 1",
    "a ! = 1", "a < = 1", "where x like __val_3_9__ .", "select t.a from t limit 1.",
    "select a from t;", "select a from t ;", "a..b", "a...", "end .)", "end.) ", "x @y #z $w %v &u",
    "what?", "hi!", "a*b", "a/b", "a+b", "[a] {b} <c>", "``a``", "```b", "a,", "a,,b", ",",
    "select max(a) , min(b) from t group by c having count(*) > 1 order by d desc limit 3",
    "select t1.name from a as t1 join b as t2 on t1.id = t2.id",
    "\u00abquoted\u00bb \u201cq\u201d \u2018s\u2019 \u201elow",
    "na\u00efve caf\u00e9 \u00c9cole", "tab\tsep\nnew", "  lead and trail  ", "",
    "select count(distinct x) from y where z between 1 and 2",
    "1.5e3 -2 +3 .5 5.", "__val_0_4__,__val_6_10__", "a.b.c", "a. b", "x.)", "x.]", "x.}",
]

with open(sys.argv[1], "w") as f:
    tok = NLTKWordTokenizer()
    for text in CASES:
        f.write(json.dumps({"text": text, "tokens": tok.tokenize(text)}, ensure_ascii=False) + "\n")
print(f"{len(CASES)} cases")
