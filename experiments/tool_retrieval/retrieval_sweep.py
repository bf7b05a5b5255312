"""Retrieval fine-tuning settings compared on a dev split carved from the training queries.

The dev split is the benchmark's split taken wider (test_fraction 0.35, unseen_fraction 0.28:
the same hashes, so its training set lies inside the real one) less the real test queries: its
dev-seen and dev-unseen queries are training queries of the real split and its held-out tools
are real training tools. Settings are picked here, never on the test sets. Each setting
(TrainConfig fields as JSON) trains from all-MiniLM-L6-v2 on the dev training set and is scored
by NDCG@10 (95% bootstrap interval) on dev-seen and dev-unseen, next to the zero-shot encoder.

    python experiments/tool_retrieval/retrieval_sweep.py '{"steps": 124}' \\
        '{"steps": 190, "trainable_layers": 3}'
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

from seetjax.retrieval.bfcl_tools import Split, load_bfcl_tools, split_queries
from seetjax.retrieval.evaluate import evaluate_system
from seetjax.retrieval.hf_encoder import minilm_dir
from seetjax.retrieval.retriever import DenseRetriever
from seetjax.retrieval.sentence import SentenceEncoder
from seetjax.retrieval.train import TrainConfig, train, training_pairs


def dev_split() -> Split:
    """The wider split's train and held-out docs; its test sets less the real test queries."""
    data = load_bfcl_tools()
    real, wide = split_queries(data), split_queries(data, 0.35, 0.28)
    tested = {q.text for q in real.seen_test + real.unseen_test + real.no_tool_test}
    dev = lambda queries: tuple(q for q in queries if q.text not in tested)
    return Split(wide.train, dev(wide.seen_test), dev(wide.unseen_test), (), wide.held_out_docs)


def score(name: str, encoder: SentenceEncoder, docs: list, split: Split) -> str:
    results, _ = evaluate_system(name, DenseRetriever(encoder, docs, strict=False), split)
    return "  ".join(f"{r.test_set} {r.mean['ndcg@10']:.3f} [{r.interval['ndcg@10'][0]:.3f}, "
                     f"{r.interval['ndcg@10'][1]:.3f}]" for r in results)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("settings", nargs="+", help="TrainConfig fields as JSON, one per run")
    args = parser.parse_args()
    docs = list(load_bfcl_tools().docs)
    split = dev_split()
    encoder = SentenceEncoder.from_dir(minilm_dir())
    print(f"dev: {len(split.train)} training, {len(split.seen_test)} seen, "
          f"{len(split.unseen_test)} unseen queries; {len(split.held_out_docs)} held-out docs")
    print(f"zero-shot: {score('zero-shot', encoder, docs, split)}", flush=True)
    for setting in args.settings:
        cfg = TrainConfig(**{"checkpoint_every": 10_000, **json.loads(setting)})
        pairs = training_pairs(encoder, docs, [(q.text, q.gold) for q in split.train], cfg,
                               split.held_out_docs)
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as workdir:
            result = train(encoder, pairs, cfg, workdir)
        trained = SentenceEncoder(result.model, encoder.tokenizer, encoder.max_length,
                                  encoder.source)
        print(f"{setting} ({time.perf_counter() - start:.0f} s): "
              f"{score('fine-tuned', trained, docs, split)}", flush=True)


if __name__ == "__main__":
    main()
