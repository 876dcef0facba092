#!/usr/bin/env python3
# Peer for bench/bench_tokenizer.cpp: Hugging Face `tokenizers` (Rust), single thread, encoding
# the same corpus with the same tokenizer.json. Run by hand, never by CI:
#   pip install tokenizers==0.21.1
#   build/bench/bench_tokenizer --write_corpus=/tmp/tok_corpus.jsonl
#   RAYON_NUM_THREADS=1 python3 bench/tokenizer_peer.py /tmp/tok_corpus.jsonl \
#       tests/fixtures/tokenizer/qwen3_tokenizer.json [--ours build/llm_sqlrl]
# Prints MB/s, the token count and the FNV-1a hash of all ids (bench_tokenizer prints the same
# two for its run). With --ours it also runs `llm_sqlrl tokenize` on the corpus and compares the
# ids document by document; --fuzz N adds N random short texts (ASCII, white-space oddities,
# any assigned or unassigned code point up to U+2FFFF except U+FEFF/U+0085, see
# tests/fixtures/tokenizer/README.md) and compares those too.
# Pinned: Python 3.11, tokenizers==0.21.1.
import argparse
import json
import os
import random
import subprocess
import tempfile
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
from tokenizers import Tokenizer  # noqa: E402


def fnv1a_ids(h, ids):
    for v in ids:
        v &= 0xFFFFFFFF
        for b in range(4):
            h = ((h ^ ((v >> (8 * b)) & 0xFF)) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("tokenizer")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ours", help="path of llm_sqlrl: compare its ids document by document")
    ap.add_argument("--fuzz", type=int, default=0, help="with --ours: also compare N random texts")
    args = ap.parse_args()
    docs = [json.loads(line)["text"] for line in open(args.corpus, encoding="utf-8")]
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    tok = Tokenizer.from_file(args.tokenizer)
    best = None
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        encs = [tok.encode(d, add_special_tokens=False) for d in docs]  # one call per document: one thread
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    all_ids = [e.ids for e in encs]
    h = 0xCBF29CE484222325
    for ids in all_ids:
        h = fnv1a_ids(h, ids)
    tokens = sum(len(ids) for ids in all_ids)
    print(f"hf tokenizers {__import__('tokenizers').__version__}: {len(docs)} docs, {nbytes / 1e6:.2f} MB, "
          f"best of {args.repeats}: {best:.3f} s = {nbytes / 1e6 / best:.2f} MB/s, "
          f"{tokens} tokens, ids_fnv_lo32={h & 0xFFFFFFFF}")
    if args.ours:
        out = subprocess.run([args.ours, "tokenize", "--tokenizer", args.tokenizer, "--input", args.corpus],
                             check=True, capture_output=True, text=True).stdout.splitlines()
        ours = [json.loads(line)["ids"] for line in out]
        bad = [i for i, (a, b) in enumerate(zip(ours, all_ids)) if a != b]
        print(f"llm_sqlrl ids vs hf: {len(ours)} docs, {len(bad)} differ" + (f" (first: {bad[:5]})" if bad else ""))
    if args.ours and args.fuzz:
        fuzz(args, tok)


def fuzz(args, tok):
    rng = random.Random(7)

    def one_char():
        r = rng.random()
        if r < 0.4:
            return chr(rng.randint(0x20, 0x7E))
        if r < 0.5:
            return rng.choice(" \t\n\r\u00a0\u3000\u2009\u200b'sStT")
        while True:
            c = rng.randint(0x80, 0x2FFFF)
            if not (0xD800 <= c <= 0xDFFF or c in (0xFEFF, 0x85)):
                return chr(c)

    texts = ["".join(one_char() for _ in range(rng.randint(1, 40))) for _ in range(args.fuzz)]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    out = subprocess.run([args.ours, "tokenize", "--tokenizer", args.tokenizer, "--input", f.name],
                         check=True, capture_output=True, text=True).stdout.splitlines()
    os.unlink(f.name)
    bad = [t for t, line in zip(texts, out) if json.loads(line)["ids"] != tok.encode(t, add_special_tokens=False).ids]
    print(f"fuzz: {len(texts)} random texts, {len(bad)} differ" + (f" (first: {bad[0]!r})" if bad else ""))


if __name__ == "__main__":
    main()
