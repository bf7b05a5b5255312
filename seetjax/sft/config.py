"""Agent SFT configs: every field of an SFT run with its default (`default_sft_config`), read by
`seetjax.sft.run.validate` and `SFTRun`; configs/sft.py ships it, configs/tiny.py embeds it as the RL
warm-up, and `seetjax.defaults.base_model` builds the pretrained embedded default with it. The
`copy_circuit` section's check and row count live here too."""

import jax
import ml_collections

from seetjax.config.sections import generated_section, lora_section
from seetjax.data.dialogs import TASK_TYPES
from seetjax.data.single_turn_dialogs import SELECTION_CATEGORIES


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


def copy_rows(config: ml_collections.ConfigDict) -> int:
    """Rows of each batch (over all processes) that are repeated random tokens."""
    return config.copy_circuit.rows if config.copy_circuit.install else 0


def check_copy_circuit(config: ml_collections.ConfigDict) -> None:
    """`config.copy_circuit`, each field named."""
    circuit = config.copy_circuit
    for name in ("install", "hold"):
        if not isinstance(circuit[name], bool):
            raise ValueError(f"config.copy_circuit.{name}={circuit[name]!r}: must be True or "
                             "False")
    if not isinstance(circuit.rows, int) or isinstance(circuit.rows, bool) or circuit.rows < 0:
        raise ValueError(f"config.copy_circuit.rows={circuit.rows!r}: must be an integer >= 0")
    if circuit.install and (circuit.rows >= config.data.batch_size
                            or circuit.rows % jax.process_count()):
        raise ValueError(f"config.copy_circuit.rows={circuit.rows}: must be below "
                         f"data.batch_size={config.data.batch_size} (the dialogs' rows are the "
                         f"rest) and a multiple of the {jax.process_count()} processes")
    if circuit.install and config.learner.lora.rank:
        raise ValueError("config.copy_circuit.install=True with config.learner.lora: the circuit "
                         "is written into (and held in) the base weights LoRA freezes; train in "
                         "full")
