#!/usr/bin/env python3
"""Where `brevis pack -j1` spends its CPU, by phase and by function, for one or
more builds side by side.

    scripts/bench/pack_profile.py [--runs N] [--freq HZ] [--level L] FILE BREVIS [BREVIS ...]

Each run records every build once, in turn, every other run in reverse
order (`perf record -e cpu-clock --call-graph dwarf`), packing FILE to
/dev/shm; a sample counts for the first phase whose function is on its
stack, and for the first function group met from its leaf up. Prints two markdown tables of milliseconds of CPU (medians
over the runs) and shares. Times under `perf` are slower than without it, for
every build alike. Needs `perf` and permission to record (root).
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections import Counter

# (substring of a frame, phase), the first on a sample's stack wins.
PHASES = [
    ("learn_prior", "learning the prior"),
    ("sha2::", "SHA-256 of the source"),
    ("synth::search::", "searching chunks"),
    ("synth::refit::", "re-fitting chunks"),
    ("partition_rows", "rows in classes"),
    ("encode_program", "encoding the programs kept"),
    ("decode_record", "decoding each record back"),
    ("input::Extent::read", "reading the source"),
    ("writer::Run::read", "reading the source"),  # builds before archive/pack/
    ("share::share", "sharing code tables"),
    ("Output::write", "writing the archive"),
    ("tensor_chunk", "planning (chunk widths)"),
    ("pack::plan::plan", "planning (chunk widths)"),
    ("pack::plan::tensor_", "planning (chunk widths)"),
    ("writer::plan", "planning (chunk widths)"),  # builds before archive/pack/
]

# (substrings of a frame, function group), met from the leaf up.
FUNCTIONS = [
    (("clear_page",), "kernel: zeroing fresh pages"),
    (("_copy_to_iter", "copy_folio_from_iter", "copy_page_to_iter"), "kernel: copying file data"),
    (("sha2::",), "SHA-256"),
    (("Stats::new", "count_dense", "count_hashed", "count_by_id", "SplitHistogram"), "histograms"),
    (("try_children", "expand::field", "MapOp::"), "deriving children's streams"),
    (("rans::model::", "rans::choose::", "rans::freqs::", "Model::"), "rANS models"),
    (("rans::simd_encode", "rans::encode::", "rans::step::"), "rANS coder"),
    (("codelen::",), "Huffman code lengths"),
    (("huffman::encode", "huffman::code::"), "Huffman encoding"),
    (("bitpack::",), "BitPack"),
    (("rans::simd_decode", "rans::decode", "rans::table::", "rans::dest::", "huffman::decode",
      "huffman::streams::", "huffman::table::", "dsl::exec"), "decoding"),
]

FRAME = re.compile(r"^\s*[0-9a-f]+\s+(.*?)(?: \(inlined\))?$")


def record(brevis, source, freq, level):
    """The samples of one run: (period in ns, frames from the leaf up)."""
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        out = "/dev/shm/pack_profile.brv"
        subprocess.run(
            ["perf", "record", "-q", "-o", data, "-F", str(freq), "-e", "cpu-clock",
             "--call-graph", "dwarf,16384", brevis, "pack", "-q", "-j1", "--level", str(level),
             "--force", source, out],
            check=True, stdout=subprocess.DEVNULL)
        os.remove(out)
        text = subprocess.run(["perf", "script", "-i", data, "-F", "period,ip,sym"],
                              check=True, capture_output=True, text=True).stdout
    for block in text.split("\n\n"):
        lines = [l for l in block.split("\n") if l.strip()]
        if len(lines) < 2:
            continue
        frames = [m.group(1) for m in map(FRAME.match, lines[1:]) if m]
        yield int(lines[0].split()[0]), frames


def classify(samples):
    """Milliseconds of CPU by phase and by function group."""
    phases, functions = Counter(), Counter()
    for period, frames in samples:
        ms = period / 1e6
        phase = next((name for key, name in PHASES if any(key in f for f in frames)), "other")
        phases[phase] += ms
        group = next((name for f in frames for keys, name in FUNCTIONS
                      if any(k in f for k in keys)), "other")
        functions[group] += ms
    return phases, functions


def table(title, names, per_build, labels):
    """A markdown table of the medians of `per_build` (build -> runs -> Counter)."""
    medians = [{n: statistics.median(run[n] for run in runs) for n in names} for runs in per_build]
    head = f"| {title} | " + " | ".join(f"{l} ms | share" for l in labels) + " |"
    print(head)
    print("| --- |" + " ---: | ---: |" * len(labels))
    for n in names + ["total"]:
        cells = []
        for m in medians:
            total = sum(m.values())
            value = total if n == "total" else m[n]
            cells.append(f"{value:.0f} | {value / total * 100:.0f}%")
        print(f"| {n} | " + " | ".join(cells) + " |")
    print()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--freq", type=int, default=2000)
    parser.add_argument("--level", type=int, default=5, help="effort level (default 5)")
    parser.add_argument("file")
    parser.add_argument("builds", nargs="+")
    args = parser.parse_args()
    phases = [[] for _ in args.builds]
    functions = [[] for _ in args.builds]
    for run in range(args.runs):
        # Every other run takes the builds in reverse: with a fixed order,
        # one build profiled against itself measured 9% slower second
        # (medians of 4 runs on the test host).
        order = list(enumerate(args.builds))
        for k, brevis in (order if run % 2 == 0 else order[::-1]):
            p, f = classify(record(brevis, args.file, args.freq, args.level))
            phases[k].append(p)
            functions[k].append(f)
            print(f"run {run + 1}, {brevis}: {sum(p.values()):.0f} ms", file=sys.stderr)
    labels = [os.path.basename(b) for b in args.builds]
    table("phase", list(dict.fromkeys(name for _, name in PHASES)) + ["other"], phases, labels)
    table("function", [name for _, name in FUNCTIONS] + ["other"], functions, labels)


if __name__ == "__main__":
    main()
