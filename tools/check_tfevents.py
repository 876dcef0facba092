#!/usr/bin/env python3
"""Reads a run's TensorBoard event files (RUN/tb, rl/tb_log.h) with TensorBoard's own reader and
prints every tag with its step count and step range: a check by the peer that the files written
by llm_sqlrl (no Python at run time) load as TensorBoard loads them. Never run by the build or
the tests (tests/rl_train/test_tensorboard.cpp reads the files independently in C++).

Pinned (Python 3.11, PyPI):  tensorboard==2.21.0

    python3 -m venv /tmp/tbvenv && /tmp/tbvenv/bin/pip install tensorboard==2.21.0
    /tmp/tbvenv/bin/python tools/check_tfevents.py RUN/tb [--metrics RUN/metrics.jsonl]

With --metrics it also checks that each scalar equals its metrics.jsonl number (as float32) at
every step, and exits non-zero on a difference or on a step logged twice.
"""
import argparse
import json
import math
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator


def flatten(value, tag, out):
    # rl/tb_log.cpp metrics_scalars: nested keys joined by '/', booleans as 0/1, strings and nulls left out.
    if isinstance(value, dict):
        for k, v in value.items():
            flatten(v, f"{tag}/{k}" if tag else k, out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            flatten(v, f"{tag}/{i}", out)
    elif isinstance(value, bool):
        out[tag] = 1.0 if value else 0.0
    elif isinstance(value, (int, float)):
        out[tag] = float(value)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tb_dir")
    ap.add_argument("--metrics", help="the run's metrics.jsonl, to compare every scalar with")
    args = ap.parse_args()
    # size_guidance 0: keep every event (the default samples scalars down to 10,000, text to 10).
    acc = event_accumulator.EventAccumulator(args.tb_dir, size_guidance={event_accumulator.SCALARS: 0,
                                                                         event_accumulator.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()
    problems = 0
    print(f"{args.tb_dir}: {len(tags['scalars'])} scalar tags, {len(tags['tensors'])} tensor (text) tags")
    for kind, read in (("scalars", acc.Scalars), ("tensors", acc.Tensors)):
        for tag in sorted(tags[kind]):
            steps = [e.step for e in read(tag)]
            dup = len(steps) - len(set(steps))
            problems += dup > 0
            print(f"  {kind[:-1]:6} {tag:48} {len(steps):4} steps  {min(steps)}..{max(steps)}"
                  + (f"  DUPLICATE STEPS: {dup}" if dup else ""))
    # The text plugin lists the tags whose metadata names it (what its dashboard shows).
    text_tags = sorted(acc.PluginTagToContent("text"))
    print(f"  text plugin tags: {text_tags}")
    problems += text_tags != sorted(tags["tensors"])
    for tag in sorted(tags["tensors"]):
        first = acc.Tensors(tag)[0]
        text = first.tensor_proto.string_val[0].decode("utf-8")
        print(f"  text {tag} at step {first.step}: {len(text)} characters, first line: {text.splitlines()[0].strip()!r}")
    if args.metrics:
        scalars = {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in tags["scalars"]}
        compared = 0
        for line in open(args.metrics):
            j = json.loads(line)
            flat = {}
            for k, v in j.items():
                if k != "step":
                    flatten(v, k, flat)
            for tag, value in flat.items():
                got = scalars.get(tag, {}).get(j["step"])
                same = got is not None and (got == f32(value) or (math.isnan(got) and math.isnan(value)))
                problems += not same
                compared += 1
                if not same:
                    print(f"  MISMATCH step {j['step']} {tag}: metrics.jsonl {value}, tensorboard {got}")
        print(f"  {compared} metrics.jsonl numbers compared with the scalars")
    print("ok" if problems == 0 else f"{problems} problems")
    return 0 if problems == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
