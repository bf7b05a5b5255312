"""Encoding throughput: seetjax's Flax encoder vs sentence-transformers (torch), all-MiniLM-L6-v2.

Both embed the same BFCL tool docs (the first --docs of the corpus, cut at 256 tokens) in batches
of --batch; rounds alternate between the two so machine load hits both alike. Prints and records
docs/s of each, the ratio, and the largest difference between their embeddings.

    python experiments/benchmarks/bench_retrieval.py [--docs 512 --batch 64 --rounds 3]
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

import numpy as np

from seetjax.retrieval.bfcl_tools import load_bfcl_tools
from seetjax.retrieval.hf_encoder import minilm_dir
from seetjax.retrieval.sentence import SentenceEncoder

sys.path.insert(0, os.path.dirname(__file__))
from harness import alternate, load, pin_threads, record, summary  # noqa: E402
from report import add_row, cpu_machine  # noqa: E402

TITLE = "Retrieval encoder: seetjax vs sentence-transformers (bench_retrieval.py)"
COLUMNS = ["date", "machine", "setting", "seetjax docs/s", "sentence-transformers docs/s",
           "ratio", "max embedding difference"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=512)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="CPUs (0: all)")
    parser.add_argument("--no-record", action="store_true", help="print only")
    args = parser.parse_args()
    cpus = pin_threads(args.threads)
    from sentence_transformers import SentenceTransformer  # after pinning: torch reads threads

    texts = [d.text for d in load_bfcl_tools().docs[:args.docs]]
    ours = SentenceEncoder.from_dir(minilm_dir())
    theirs = SentenceTransformer(str(minilm_dir()), device="cpu")
    runs = {"seetjax": lambda: ours.encode(texts, args.batch),
            "sentence-transformers": lambda: theirs.encode(texts, batch_size=args.batch)}
    diff = float(np.abs(runs["seetjax"]() - runs["sentence-transformers"]()).max())
    times = alternate(runs, args.rounds, warmup=0)  # the calls above compiled and warmed up
    rates = {name: summary(t, len(texts)) for name, t in times.items()}
    ratio = rates["seetjax"].rate / rates["sentence-transformers"].rate
    cells = [str(rates["seetjax"]), str(rates["sentence-transformers"]), f"{ratio:.2f}x",
             f"{diff:.1e}"]
    print(dict(zip(COLUMNS[3:], cells)))
    setting = (f"all-MiniLM-L6-v2 f32, {len(texts)} BFCL tool docs (<= 256 tokens), batch "
               f"{args.batch}, {len(cpus)} threads, median of {args.rounds} alternating rounds, "
               f"load {load():.1f}")
    record("retrieval encoder", setting, rates, f"{ratio:.2f}x (seetjax over torch)")
    if not args.no_record:
        add_row(TITLE, COLUMNS, [datetime.date.today().isoformat(), cpu_machine(), setting] + cells)


if __name__ == "__main__":
    main()
