#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""How far any plan can get towards the simulator's ideal time (issue 23's efficiency target):
for every LDC cell of `dcp bench` (scales 0.5-4, four masks) and each seed, the default plan's
efficiency on 4x8 beside two bounds that hold for every plan of a block size.

`ideal_ms` (include/dcp/sim.h) counts the batch's mask FLOPs at the kernel model's rate on full
4096 x 4096 tiles. A plan at block size B runs its tiles' touched 128 x 128 sub-tiles at the rate of
B-sided tiles, and the tiles, sub-tiles and rates are the same whatever the placement, so the
busiest of D devices runs at least a D-th of their sum; the ideal is a D-th of the one-device
ideal. Hence the efficiency of any plan at block size B is at most what one device reaches with
every tile of the batch at B, one division and no communication:

- kernel bound: attention alone (the cluster model with every launch cost and the memory
  instructions' time set to zero): a bound of the kernel model itself, no executor can beat it;
- with memory ops: the same one-device plan with the memory instructions dcp's executor runs
  (accumulator fills, the delta reduction, fp32 -> bf16 output merges) at the model's HBM rate,
  launch costs still zero. A plan on D devices runs these for every row at least once (partial
  results add more), so this is what dcp's instruction set allows.

Each bound is the best over the block sizes the tuning considers (1024, 2048, 4096), per seed, then
the mean over the seeds (as the bench's efficiency column). Standard library only; prints a
markdown table to stdout, progress to stderr.

    bench/efficiency_bound.py --dcp build/dcp [--seeds 0 1 2] > table.md
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

SCALES = [0.5, 1, 2, 4]
MASKS = ["causal", "lambda", "causal-blockwise", "shared-question"]
BLOCK_SIZES = [1024, 2048, 4096]
# One device per node (a 1x1 topology), no launch costs; "memory" keeps the HBM rate of p4de,
# "kernel" makes the memory instructions free (the largest rate the cluster format accepts).
CLUSTERS = {
    "memory": {"preset": "p4de", "devices_per_node": 1,
               "device": {"memory_op_launch_s": 0, "attention": {"launch_s": 0}}},
    "kernel": {"preset": "p4de", "devices_per_node": 1,
               "device": {"memory_op_launch_s": 0, "hbm_bytes_per_s": 1e18,
                          "attention": {"launch_s": 0}}},
}


def simulate(dcp, args):
    out = subprocess.run([dcp, "simulate", "--json", *args], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dcp", default="build/dcp", help="the dcp binary")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--topology", default="4x8", help="of the default plans")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        cluster_files = {}
        for name, spec in CLUSTERS.items():
            cluster_files[name] = os.path.join(tmp, f"{name}.json")
            with open(cluster_files[name], "w") as f:
                json.dump(spec, f)
        print(f"LDC cells, seeds {' '.join(map(str, args.seeds))}, default plans on "
              f"{args.topology} (p4de); bounds: one device, best of blocks "
              f"{', '.join(map(str, BLOCK_SIZES))}\n")
        print("| mask | scale | default plan efficiency | bound with memory ops (block) "
              "| kernel bound (block) |")
        print("|---|---|---|---|---|")
        for mask in MASKS:
            for scale in SCALES:
                print(f"{mask} x{scale}", file=sys.stderr)
                batch = ["--dataset", "ldc", "--scale", str(scale), "--mask", mask]
                default, bounds = [], {name: [] for name in CLUSTERS}
                for seed in args.seeds:
                    seeded = batch + ["--seed", str(seed)]
                    default.append(simulate(args.dcp, seeded + ["--topology", args.topology])
                                   ["efficiency"])
                    for name, path in cluster_files.items():
                        best = max((simulate(args.dcp, seeded + [
                            "--cluster", path, "--topology", "1x1", "--block-size", str(b),
                            "--divisions", "1", "--dcp-only"])["efficiency"], b)
                                   for b in BLOCK_SIZES)
                        bounds[name].append(best)

                def cell(values):
                    blocks = sorted({b for _, b in values})
                    mean = sum(e for e, _ in values) / len(values)
                    return f"{mean:.2f} ({', '.join(map(str, blocks))})"

                mean_default = sum(default) / len(default)
                print(f"| {mask} | {scale:g} | {mean_default:.2f} | {cell(bounds['memory'])} "
                      f"| {cell(bounds['kernel'])} |")


if __name__ == "__main__":
    main()
