"""The distillation run's configuration: the typed models a YAML config is validated into before
any request (`seetjax.distill.load` reads the file, applies overrides and checks what needs the
registries). A declaration: it imports none of the modules that run a distillation.

Every field is checked on load (pydantic, unknown fields refused), and cross-field rules after
(endpoint names unique, `preferred_order` naming known endpoints, scenario families registered,
API-key variables set), so a bad config fails naming the field, e.g.
`teacher_pool[1].base_url: must be an http(s):// URL`.
"""

from __future__ import annotations

import hashlib
import json
import os
import urllib.parse
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class ConfigError(ValueError):
    """A config that cannot run; the message names the field at fault."""


class _Strict(BaseModel):
    # No inf or nan anywhere: a weight of .inf or a min_score of nan would pass every bound.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Sampling(_Strict):
    """Sampling parameters sent with every request to an endpoint."""

    temperature: float = Field(0.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(1024, ge=1)
    seed: int | None = 0


class EndpointSpec(_Strict):
    """One OpenAI-compatible endpoint of a pool."""

    name: str = Field(min_length=1)
    base_url: str
    model: str = Field(min_length=1)
    api_key_env: str | None = None  # the variable holding its key (never the key itself)
    provider: str = "openai-compatible"  # recorded in metadata.generation
    weight: float = Field(1.0, gt=0.0, le=1e6)  # relative: bounded so that sums stay finite
    sampling: Sampling = Sampling()
    timeout_s: float = Field(120.0, gt=0.0)  # per attempt, from request to the reply's last byte
    max_requests: int = Field(0, ge=0)  # this endpoint's budget (0: unlimited)
    max_tokens: int = Field(0, ge=0)  # prompt + completion tokens (0: unlimited)

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("must be an http(s):// URL")
        parts = urllib.parse.urlsplit(v)
        if not parts.hostname:
            raise ValueError(f"{v!r} has no host")
        try:
            port = parts.port
        except ValueError:
            port = 0
        if port is not None and not 1 <= port <= 65535:
            raise ValueError(f"{v!r} has no port in 1..65535")
        return v.rstrip("/")

    def api_key(self) -> str:
        """The key from `api_key_env` ("EMPTY" without one: local servers take any)."""
        return os.environ.get(self.api_key_env, "") if self.api_key_env else "EMPTY"


class Retries(_Strict):
    """Per endpoint: attempts on 429 / 5xx / timeouts / malformed replies before falling back;
    waits grow exponentially from `initial_s` to `max_s` with up to `jitter_s` of jitter, and are
    at least an answer's Retry-After."""

    max_attempts: int = Field(4, ge=1)
    initial_s: float = Field(0.5, ge=0.0)
    max_s: float = Field(30.0, ge=0.0)
    jitter_s: float = Field(0.5, ge=0.0)


class Concurrency(_Strict):
    max_workers: int = Field(8, ge=1)  # scenarios in flight


class Budget(_Strict):
    """Run-wide limits over all endpoints (0: unlimited), counted over every invocation of the
    output (its usage.json), as endpoints' own limits are: a rerun goes on from what earlier ones
    spent. When spent, no new scenario starts and unfinished ones stay undone for a later run."""

    max_requests: int = Field(0, ge=0)
    max_tokens: int = Field(0, ge=0)


class ReviewFlow(_Strict):
    """A reviewer scores each valid trace; below `min_score` (or `needs_revision`) the teacher
    gets the feedback and tries again, up to `max_rounds` refinement rounds."""

    enabled: bool = False
    min_score: float = Field(0.7, ge=0.0, le=1.0)
    max_rounds: int = Field(1, ge=0)
    parse_retries: int = Field(2, ge=0)  # unparsable reviewer replies asked again
    refine_on_validation: bool = True  # a trace failing validation is also sent back


class LanguagePolicy(_Strict):
    """English-dominant narrative, message by message for the parts named in `english_parts`
    (rationales: the text of a reply with calls; final answers, without their summary line); a
    Chinese summary where required (per scenario overridable)."""

    english_min_share: float = Field(0.6, ge=0.0, le=1.0)
    english_parts: tuple[Literal["rationale", "final_answer"], ...] = ("rationale",
                                                                      "final_answer")
    require_chinese_summary: bool = False
    summary_marker: str = "中文摘要："


class PromptOverrides(_Strict):
    """Per-scenario prompt settings; the global guardrails always stay."""

    extra: str = ""
    require_chinese_summary: bool | None = None


class PromptConfig(_Strict):
    guardrails: str = ""  # '' = the built-in guardrails (`seetjax.distill.prompts.GUARDRAILS`)
    extra: str = ""


DEFAULT_VALIDATORS = ("schema", "execution", "ground_truth", "tool_loops", "truncated",
                      "final_answer", "answer_length", "faithfulness", "language_policy")


class Validation(_Strict):
    """Validators run on every trace; `required` ones must pass, all are scored against the
    scenario's rubric (weights per validator)."""

    validators: tuple[str, ...] = DEFAULT_VALIDATORS
    required: tuple[str, ...] = DEFAULT_VALIDATORS
    max_repeated_calls: int = Field(2, ge=1)  # identical calls in a row before it is a loop
    max_execution_errors: int = Field(0, ge=0)
    max_answer_chars: int = Field(4000, ge=1)  # a final answer's length limit

    @model_validator(mode="after")
    def _subset(self) -> Validation:
        if set(self.required) - set(self.validators):
            raise ValueError("required: every required validator must also be in validators")
        return self


class EpisodeConfig(_Strict):
    max_steps_per_turn: int = Field(8, ge=1)
    reflection_passes: int = Field(0, ge=0)  # self-reflection on the final answer


class Dedup(_Strict):
    exact: bool = True
    near: bool = True
    threshold: float = Field(0.85, gt=0.0, le=1.0)  # exact Jaccard of word shingles
    num_perm: int = Field(128, ge=16)
    shingle_words: int = Field(5, ge=1)


class Output(_Strict):
    """Where shards go: a local path or an fsspec URL (`s3://...`); the journal that makes the
    writer resumable stays in `state_dir` (default: `url` itself, which must then be local)."""

    url: str = Field(min_length=1)
    state_dir: str = ""
    formats: tuple[Literal["jsonl", "parquet"], ...] = ("jsonl",)
    shard_size: int = Field(1000, ge=1)
    fsync: bool = True

    @model_validator(mode="after")
    def _state(self) -> Output:
        if not self.formats:
            raise ValueError("formats: name at least one of jsonl, parquet")
        if "://" in self.url and not self.url.startswith("file://") and not self.state_dir:
            raise ValueError("state_dir: a local directory is needed when url is remote")
        return self


class ScenarioSpec(_Strict):
    """A family's scenarios in this run: `quota` of them at `difficulty`, with pinned parameters
    (family-specific: e.g. `categories`, `split`, generator knobs)."""

    family: str
    quota: int = Field(ge=0)
    difficulty: Literal["easy", "medium", "hard"] = "medium"
    seed: int = 0
    params: dict[str, Any] = Field(default_factory=dict)
    prompt: PromptOverrides = PromptOverrides()

    def key(self) -> str:
        """What makes this spec's scenarios distinct (part of their ids)."""
        if not self.params:
            return f"{self.family}/{self.difficulty}/{self.seed}"
        pinned = hashlib.sha256(json.dumps(self.params, sort_keys=True).encode()).hexdigest()[:6]
        return f"{self.family}/{self.difficulty}/{self.seed}/{pinned}"


class DistillConfig(_Strict):
    run_name: str = Field(min_length=1)
    seed: int = 0
    output: Output
    scenarios: tuple[ScenarioSpec, ...] = Field(min_length=1)
    teacher_pool: tuple[EndpointSpec, ...] = Field(min_length=1)
    reviewer_pool: tuple[EndpointSpec, ...] = ()
    preferred_order: tuple[str, ...] = ()
    concurrency: Concurrency = Concurrency()
    retries: Retries = Retries()
    budget: Budget = Budget()
    review_flow: ReviewFlow = ReviewFlow()
    language_policy: LanguagePolicy = LanguagePolicy()
    prompt: PromptConfig = PromptConfig()
    validation: Validation = Validation()
    episode: EpisodeConfig = EpisodeConfig()
    dedup: Dedup = Dedup()
    preflight: bool = True  # GET /models on every endpoint before any scenario
    # Rejection reasons a rerun tries again (the endpoints' failures by default; a validator's
    # name or `review` to judge such scenarios again, () to keep every outcome final).
    retry_failed: tuple[str, ...] = ("teacher_failed", "reviewer_failed")

    @model_validator(mode="after")
    def _cross(self) -> DistillConfig:
        names = [e.name for e in (*self.teacher_pool, *self.reviewer_pool)]
        for field, pool in (("teacher_pool", self.teacher_pool),
                            ("reviewer_pool", self.reviewer_pool)):
            seen: set[str] = set()
            for i, endpoint in enumerate(pool):
                if endpoint.name in seen:
                    raise ValueError(f"{field}[{i}].name: {endpoint.name!r} appears twice")
                seen.add(endpoint.name)
        for i, name in enumerate(self.preferred_order):
            if name not in names:
                raise ValueError(f"preferred_order[{i}]: {name!r} names no endpoint of the "
                                 f"pools ({sorted(set(names))})")
        if self.review_flow.enabled and not self.reviewer_pool:
            raise ValueError("reviewer_pool: review_flow.enabled needs at least one reviewer")
        keys: set[str] = set()
        for i, spec in enumerate(self.scenarios):
            if spec.key() in keys:
                raise ValueError(f"scenarios[{i}]: the same family, difficulty, seed and params "
                                 "as an earlier entry (raise its quota instead)")
            keys.add(spec.key())
        return self

    def fingerprint(self) -> str:
        """What a resumed run must share with the run it continues: everything that shapes
        records, but not quotas, concurrency, budgets or endpoint URLs (a rerun may extend
        quotas and move endpoints)."""
        shaping = self.model_dump(mode="json", include={"run_name", "seed", "dedup", "output"})
        shaping["output"] = {k: shaping["output"][k] for k in ("formats", "shard_size")}
        return hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()[:16]

    def rules(self) -> dict[str, Any]:
        """What decides whether a trace is accepted, and how it is made: the manifest records
        them, and a rerun under others is refused unless allowed (records judged by two sets of
        rules would mix silently)."""
        return self.model_dump(mode="json", include={
            "review_flow", "language_policy", "validation", "episode", "prompt"},
            exclude={"review_flow": {"parse_retries"}})


def field_path(loc: Sequence[Any]) -> str:
    """A pydantic error location as a field path: `teacher_pool[1].base_url`."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path
