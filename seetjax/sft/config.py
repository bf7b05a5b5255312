"""Agent SFT configs: every field of an SFT run with its default (`default_sft_config`), and
`validate`, which fails on a bad setting, naming it, before any model is loaded or data converted.
configs/sft.py ships the defaults, configs/tiny.py embeds them as the RL warm-up (the RL config
validates that section here), `seetjax.defaults.base_model` builds the pretrained embedded default
with them, and `seetjax.sft.run.SFTRun` reads them. A declaration: it never imports the run."""

import jax
import ml_collections
import numpy as np

from seetjax.config.fields import as_dataclass, check_finite, checked_field
from seetjax.config.sections import generated_section, lora_section
from seetjax.data.coreset import CoresetConfig
from seetjax.data.dialogs import TASK_TYPES
from seetjax.data.pipeline import PipelineConfig
from seetjax.data.qa_dialogs import TEAM_SOURCE
from seetjax.data.replay import ReplayBuffer
from seetjax.data.single_turn_dialogs import SELECTION_CATEGORIES, check_settings
from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.envs.qa_search.run import NAME as QA_SOURCE
from seetjax.envs.qa_search.run import QASearchRunConfig
from seetjax.envs.qa_search.run import check_split as qa_check_split
from seetjax.envs.task_source import SOURCES, source_of
from seetjax.errors import invalid, require_int
from seetjax.learner.config import learner_config
from seetjax.models.hf import load_options
from seetjax.rollout.multi_agent import MultiAgentConfig


def default_sft_config() -> ml_collections.ConfigDict:
    """The defaults of an SFT run (`seetjax.sft.run.SFTRun`): configs/sft.py as shipped."""
    config = ml_collections.ConfigDict()
    config.seed = 0

    # An HF checkpoint directory; '' = the embedded default (see configs/tiny.py).
    config.model = ml_collections.ConfigDict()
    config.model.path = ""
    config.model.dtype = "float32"
    config.model.compute_dtype = "float32"

    # A copy (induction) circuit written into the loaded weights before the first step
    # (seetjax.models.copy_circuit; for a freshly initialised model such as the embedded
    # default): `hold` keeps its heads' query/key projections unchanged through training, and
    # `rows` of every batch's `data.batch_size` rows are repeated random tokens, which keep it
    # copying (the dialogs fill the others).
    config.copy_circuit = ml_collections.ConfigDict(dict(install=False, hold=True, rows=1))

    config.data = ml_collections.ConfigDict()
    # "bfcl": convert BFCL multi-turn ground truth; "generated": generated tasks' ground truth
    # (`generated`: the stream, as in run configs); "jsonl": read dialogs from `paths`.
    config.data.source = "bfcl"
    config.data.generated = generated_section()
    config.data.paths = ""  # jsonl: comma-separated files
    # "qa_search": oracle dialogs of QA search questions, in this environment section (a run's
    # `env`; empty: QASearchRunConfig's defaults); split and tasks_per_category pick them.
    config.data.qa_search = ml_collections.ConfigDict()
    # "qa_team": the oracle team's dialogs (a coordinator's and its workers' per question) in that
    # section, with this multi_agent section (a run's; empty: MultiAgentConfig's defaults).
    config.data.multi_agent = ml_collections.ConfigDict()
    config.data.split = "train"  # bfcl: train, validation, train_full, ...; generated: train, ...
    config.data.categories = "base,miss_func,miss_param,long_context"  # bfcl
    # bfcl: how tools are shown ("bfcl", "native", "compact") and calls written ("python",
    # "hermes"; '' = the style's own). compact + python is what SEET rollouts use by default.
    config.data.prompt_style = "compact"
    config.data.call_format = ""
    config.data.compact_description_chars = 80  # compact: characters of each tool's description
    config.data.tasks_per_category = 0  # the first N tasks of each category (0: all, bfcl only)
    config.data.parallel_calls = False
    # BFCL single-turn entries as extra dialogs of every stage, in the prompt style above
    # (seetjax.data.single_turn_dialogs; their training split only): `selection` tool_selection
    # and `retrieval` tool_retrieval dialogs (0: none, -1: all there are), from `categories`;
    # retrieval prompts offer BM25's top `retrieval_k` tools of a library of training docs.
    config.data.single_turn = ml_collections.ConfigDict(dict(
        selection=0, retrieval=0, categories=",".join(SELECTION_CATEGORIES), retrieval_k=5))
    # Continual stages: ';'-separated groups of categories (bfcl) or of paths (jsonl), trained
    # one after another; '' = one stage with everything.
    config.data.stages = ""
    config.data.max_len = 2048  # longer dialogs are truncated at a message boundary or dropped
    config.data.truncate = True
    # > 0: each tool observation cut to this many tokens and marked, as rollouts show it
    # (`limits.max_observation_tokens` of the RL run the SFT warms up); 0: kept whole
    config.data.max_observation_tokens = 0
    # The loss weight of each token of a dialog's last reply (its answer), the other reply
    # tokens weighing 1; a truncated dialog's last kept reply is not its last.
    config.data.final_reply_weight = 1.0
    config.data.seq_len = 2048  # tokens per row (>= max_len)
    config.data.batch_size = 4  # rows per step over all processes
    config.data.packing = True
    config.data.packing_bins = 0  # 0: one batch's rows
    config.data.shuffle_window = 256
    config.data.prefetch = 2
    config.data.task_weighting = True
    config.data.task_weights = ml_collections.ConfigDict(dict(zip(
        TASK_TYPES, (0.35, 0.30, 0.20, 0.15))))
    # Held-out dialogs for the evaluation loss ('' = none): a bfcl split, or a JSONL path.
    config.data.eval_split = "validation"

    # Coreset selection at the start of each stage, with the model as it is then.
    config.coreset = ml_collections.ConfigDict()
    config.coreset.strategy = "none"  # none, random, loss_topk, diversity, hybrid
    config.coreset.size = 0  # examples kept; or
    config.coreset.fraction = 0.0  # the share kept
    config.coreset.hybrid_loss_fraction = 0.5
    config.coreset.embedding = "auto"  # model, ngram, auto (model)
    config.coreset.batch_size = 8  # scoring batch

    # Rehearsal memory: each finished stage's examples are offered to it; later stages mix its
    # contents in at `ratio`.
    config.replay = ml_collections.ConfigDict()
    config.replay.capacity = 0  # 0: no replay
    config.replay.policy = "reservoir"  # reservoir, recency
    config.replay.ratio = 0.2

    # seetjax.learner.learner_config fields.
    config.learner = ml_collections.ConfigDict()
    config.learner.algorithm = "sft"
    config.learner.optimizer = ml_collections.ConfigDict()
    config.learner.optimizer.learning_rate = 1e-3  # the embedded model starts from random weights
    config.learner.optimizer.warmup_steps = 10
    config.learner.optimizer.decay_steps = 300
    config.learner.optimizer.final_lr_fraction = 0.1
    config.learner.optimizer.weight_decay = 0.01
    config.learner.optimizer.max_grad_norm = 1.0
    config.learner.lora = lora_section()  # rank 0: full fine-tuning
    # The pipeline packs rows already (data.packing); the learner repacking them would only
    # copy rows on the host and gather outputs in the step.
    config.learner.pack_rows = False

    config.train = ml_collections.ConfigDict()
    config.train.steps = 300  # updates per stage
    config.train.log_every = 10
    config.train.eval_every = 100  # 0: only at the end
    config.train.checkpoint_every = 100
    config.train.keep_checkpoints = 2
    config.train.save_model = True  # write the final model as an HF directory (workdir/model)
    return config


def env_config(data: ml_collections.ConfigDict) -> BfclEnvConfig:
    """The prompt settings of the single-turn dialogs (those `bfcl_dialogs` takes)."""
    return BfclEnvConfig(prompt_style=data.prompt_style, call_format=data.call_format or None,
                         compact_description_chars=data.compact_description_chars)


def single_turn_categories(data: ml_collections.ConfigDict) -> list[str]:
    """`data.single_turn.categories` as a list."""
    return [c.strip() for c in data.single_turn.categories.split(",") if c.strip()]


def copy_rows(config: ml_collections.ConfigDict) -> int:
    """Rows of each batch (over all processes) that are repeated random tokens."""
    return config.copy_circuit.rows if config.copy_circuit.install else 0


def check_copy_circuit(config: ml_collections.ConfigDict) -> None:
    """`config.copy_circuit`, each field named."""
    circuit = config.copy_circuit
    for name in ("install", "hold"):
        if not isinstance(circuit[name], bool):
            raise invalid("config.copy_circuit", name, circuit[name], "must be True or False")
    require_int("config.copy_circuit", "rows", circuit.rows, 0)
    if circuit.install and (circuit.rows >= config.data.batch_size
                            or circuit.rows % jax.process_count()):
        raise invalid("config.copy_circuit", "rows", circuit.rows, "must be below "
                         f"data.batch_size={config.data.batch_size} (the dialogs' rows are the "
                         f"rest) and a multiple of the {jax.process_count()} processes")
    if circuit.install and config.learner.lora.rank:
        raise invalid("config.copy_circuit", "install", True, "with config.learner.lora: the circuit "
                         "is written into (and held in) the base weights LoRA freezes; train in "
                         "full")


def stage_groups(data: ml_collections.ConfigDict) -> list[str]:
    """The comma-separated group of BFCL categories or JSONL paths of each stage (qa_search,
    qa_team: one group)."""
    default = {"jsonl": data.paths, QA_SOURCE: QA_SOURCE, TEAM_SOURCE: TEAM_SOURCE}.get(
        data.source, data.categories)
    groups = [g.strip() for g in (data.stages or default).split(";") if g.strip()]
    if not groups:
        raise invalid("config.data", "stages", data.stages,
                      "no dialogs named (set categories, paths or stages)")
    return groups


def qa_section(data: ml_collections.ConfigDict) -> QASearchRunConfig:
    """The QA search environment of a qa_search source (`data.qa_search`: a run's `env` section,
    `name` aside), its fields named."""
    values = {k: v for k, v in data.qa_search.to_dict().items() if k != "name"}
    return as_dataclass(QASearchRunConfig, values, "data.qa_search")


def team_config(data: ml_collections.ConfigDict) -> MultiAgentConfig:
    """The teams of a qa_team source (`data.multi_agent`: a run's `multi_agent` section; its
    max_rounds caps the coordinator's replies and is shown in its prompt), its fields named."""
    return as_dataclass(MultiAgentConfig, data.multi_agent.to_dict(), "data.multi_agent")


def pipeline_config(config: ml_collections.ConfigDict, stage: int, pad_id: int) -> PipelineConfig:
    data = config.data
    return PipelineConfig(
        seq_len=data.seq_len, batch_size=data.batch_size - copy_rows(config), packing=data.packing,
        packing_bins=data.packing_bins, shuffle_window=data.shuffle_window,
        prefetch=data.prefetch, replay_ratio=config.replay.ratio if config.replay.capacity else 0.0,
        task_weights=data.task_weights.to_dict() if data.task_weighting else None,
        seed=config.seed + 1000 * stage, pad_id=pad_id)


def coreset_config(config: ml_collections.ConfigDict, stage: int) -> CoresetConfig:
    c = config.coreset
    return CoresetConfig(strategy=c.strategy, size=c.size, fraction=c.fraction,
                         hybrid_loss_fraction=c.hybrid_loss_fraction, embedding=c.embedding,
                         seed=config.seed + stage)


def check_qa_source(data: ml_collections.ConfigDict) -> None:
    """A qa_search or qa_team source's settings, each named: its environment section, splits
    and (qa_team) teams, whose coordinator must have a reply for every hop and one to answer."""
    section = qa_section(data)
    for split, name in ((data.split, "data.split"), (data.eval_split, "data.eval_split")):
        if split:
            qa_check_split(section, split, data.tasks_per_category, name,
                           "data.tasks_per_category")
    if data.source != TEAM_SOURCE:
        return
    rounds = team_config(data).max_rounds
    if section.corpus == "world" and rounds <= section.max_hops:
        raise invalid(
            "config.data.multi_agent", "max_rounds", rounds, "the oracle team delegates each of up "
            f"to data.qa_search.max_hops={section.max_hops} hops in a reply of its own, then "
            f"answers; needs >= {section.max_hops + 1}")


def validate(config: ml_collections.ConfigDict) -> None:
    """Fails on a bad setting, naming it, before any model is loaded or data converted."""
    check_finite(config.to_dict())
    load_options(config.model)
    data = config.data
    if data.source not in (*SOURCES, "jsonl", QA_SOURCE, TEAM_SOURCE):
        raise invalid("config.data", "source", data.source, "one of "
                         f"{(*SOURCES, 'jsonl', QA_SOURCE, TEAM_SOURCE)}")
    if data.source in (QA_SOURCE, TEAM_SOURCE):
        check_qa_source(data)
    elif data.source != "jsonl":
        source = source_of(data)
        for split in (data.split, data.eval_split):
            if split:
                checked_field("data.split", lambda split=split: source.resolve(split))
                checked_field("data.tasks_per_category",
                              lambda split=split: source.check(split, data.tasks_per_category))
    section = data.single_turn
    checked_field("data.single_turn", lambda: check_settings(
        section.selection, section.retrieval, single_turn_categories(data), section.retrieval_k))
    if section.selection or section.retrieval:
        checked_field("data.prompt_style", lambda: env_config(data))
    if data.max_len > data.seq_len:
        raise invalid("config.data", "max_len", data.max_len, f"must be <= seq_len={data.seq_len} "
                      "(a dialog must fit in a row)")
    cap = data.max_observation_tokens
    require_int("config.data", "max_observation_tokens", cap, 0, " (0: observations kept whole)")
    weight = data.final_reply_weight
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not (
            np.isfinite(weight) and weight > 0):
        raise invalid("config.data", "final_reply_weight", weight, "must be a finite number > 0 "
                         "(1: the final reply weighs as every other reply token)")
    stage_groups(data)
    check_copy_circuit(config)
    pipeline_config(config, 0, 0)
    coreset_config(config, 0)
    if not 0.0 <= config.replay.ratio < 1.0:
        raise invalid("config.replay", "ratio", config.replay.ratio, "must be in [0, 1)")
    if config.replay.capacity:
        ReplayBuffer(config.replay.capacity, config.replay.policy)
    learner_config(config.learner.to_dict())
    for name in ("steps", "log_every", "checkpoint_every", "keep_checkpoints"):
        if config.train[name] < 1:
            raise invalid("config.train", name, config.train[name], "must be >= 1")
