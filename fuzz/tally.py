#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Counts what a harness's parsers answer to a corpus, for the table of docs/fuzzing.md.

Runs build-fuzz/fuzz/<name>_fuzzer once over every file of the given corpus directories with
DCP_FUZZ_TALLY=1 (fuzz/fuzz_util.h prints one line per parse), and prints, per step and status
code, how many inputs got it and the commonest messages with their numbers and quoted text
replaced by N and '…'.

Usage: fuzz/tally.py NAME DIR... [--top K]
"""
import argparse
import collections
import os
import re
import subprocess
import sys


def normalize(message: str) -> str:
    message = re.sub(r"'[^']*'", "'…'", message)
    message = re.sub(r"\{.*\}", "{…}", message)
    message = re.sub(r"0x[0-9a-fA-F]+", "N", message)
    message = re.sub(r"-?\d+(\.\d+)?([eE][-+]?\d+)?", "N", message)
    return message[:140]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("name")
    parser.add_argument("dirs", nargs="+")
    parser.add_argument("--top", type=int, default=8)
    args = parser.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    fuzzer = os.path.join(repo, "build-fuzz", "fuzz", f"{args.name}_fuzzer")
    files = sorted(os.path.join(d, f) for d in args.dirs for f in os.listdir(d)
                   if os.path.isfile(os.path.join(d, f)))
    env = dict(os.environ, DCP_FUZZ_TALLY="1")
    outcomes = collections.Counter()
    messages = collections.defaultdict(collections.Counter)
    for start in range(0, len(files), 200):
        run = subprocess.run([fuzzer, "-timeout=30", *files[start:start + 200]], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             errors="replace")
        if run.returncode != 0:
            print(f"{fuzzer} failed (exit {run.returncode}) on a file of {files[start]}...",
                  file=sys.stderr)
        for line in run.stderr.splitlines():
            parts = line.split("\t", 3)
            if len(parts) != 4 or parts[0] != "DCP_FUZZ_OUTCOME":
                continue
            _, what, code, message = parts
            outcomes[(what, code)] += 1
            messages[(what, code)][normalize(message)] += 1
    print(f"{args.name}: {len(files)} inputs")
    for (what, code), count in sorted(outcomes.items()):
        print(f"  {what}: {code}: {count}")
        if code != "OK":
            for message, n in messages[(what, code)].most_common(args.top):
                print(f"      {n:6d}  {message}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
