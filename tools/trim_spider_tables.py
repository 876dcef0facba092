#!/usr/bin/env python3
# Keeps only the tables.json entries of the databases a gold file uses (fixture-making only).
# Python 3.11, standard library only.
# usage: trim_spider_tables.py tables.json gold.txt out.json
import json
import sys

tables_path, gold_path, out_path = sys.argv[1:4]
used = set()
with open(gold_path) as f:
    for line in f:
        if line.strip():
            used.add(line.strip().split("\t")[1])
with open(tables_path) as f:
    entries = [e for e in json.load(f) if e["db_id"] in used]
with open(out_path, "w") as f:
    json.dump(entries, f, indent=1)
    f.write("\n")
print(f"{len(entries)} of {len(used)} databases kept")
