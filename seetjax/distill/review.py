"""The reviewer: an endpoint of the reviewer pool scores a trace against the scenario's rubric.

It answers a JSON object, `{"score": 0..1, "needs_revision": bool, "feedback": str,
"chinese_summary": str}`. A reply that is not such an object (prose, a code fence around broken
JSON, a score out of range) is asked again with the parse error, up to
`review_flow.parse_retries` times; after that the review fails with `ReviewUnparsed` (the trace is
rejected with reason `review_unparsed`), never with a crash.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from seetjax.distill.config import DistillConfig
from seetjax.distill.endpoints import SCENARIO_HEADER, Reply
from seetjax.distill.pools import Pool
from seetjax.distill.records import Turn
from seetjax.distill.scenarios import Scenario

REVIEW_MARKER = "You review tool-use transcripts"
REVIEWER_SYSTEM = (
    f"{REVIEW_MARKER} written by an assistant for training data. Judge whether every request "
    "was done correctly with the right tools and arguments, whether each answer is faithful to "
    "the tool results, concise and in English, and whether the rubric is met.\n"
    "Reply with one JSON object and nothing else: {\"score\": a number from 0 to 1, "
    "\"needs_revision\": true or false, \"feedback\": \"what to fix, in English\", "
    "\"chinese_summary\": \"a one-sentence summary of the transcript in Chinese\"}.")


class ReviewVerdict(BaseModel):
    model_config = ConfigDict(extra="ignore")

    score: float = Field(ge=0.0, le=1.0)
    needs_revision: bool
    feedback: str = ""
    chinese_summary: str = ""


class ReviewUnparsed(Exception):
    """The reviewer never answered a readable verdict; the message lists its parse errors."""


def render_trace(turns: Sequence[Turn]) -> str:
    """A transcript for the reviewer: one line per message, calls with their arguments."""
    lines = []
    for turn in turns:
        if turn.kind == "system":
            continue
        text = turn.content.strip()
        calls = " ".join(f"{c.name}({c.arguments})" for c in turn.tool_calls)
        lines.append(f"[{turn.kind}] " + " -> ".join(p for p in (text, calls) if p))
    return "\n".join(lines)


def review_request(scenario: Scenario, turns: Sequence[Turn]) -> list[dict[str, str]]:
    rubric = ", ".join(f"{name} (weight {w:g})" for name, w in scenario.template.rubric.items())
    return [{"role": "system", "content": REVIEWER_SYSTEM},
            {"role": "user", "content": f"Goal: {scenario.template.goal}\nRubric: {rubric}\n\n"
                                        f"Transcript:\n{render_trace(turns)}"}]


def parse_verdict(text: str | None) -> ReviewVerdict:
    """The verdict in a reply (the outermost `{...}`, fences and prose around it ignored);
    raises ValueError saying what is wrong."""
    text = text or ""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError(f"no JSON object in the reply: {text[:120]!r}")
    try:
        return ReviewVerdict.model_validate(json.loads(text[start:end + 1]))
    except json.JSONDecodeError as e:
        raise ValueError(f"the JSON object does not parse: {e}") from None
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors())
        raise ValueError(f"the verdict is not valid: {problems}") from None


async def review(pool: Pool, scenario: Scenario, turns: Sequence[Turn], config: DistillConfig,
                 round_: int) -> tuple[ReviewVerdict, Reply]:
    """The reviewer's verdict on `turns` (see the module docstring); raises ReviewUnparsed, or
    the pool's PoolExhausted when no reviewer answers at all."""
    messages = review_request(scenario, turns)
    errors = []
    for _ in range(config.review_flow.parse_retries + 1):
        reply = await pool.chat(f"{scenario.id}/review/{round_}", messages,
                                headers={SCENARIO_HEADER: scenario.id})
        try:
            return parse_verdict(reply.message.content), reply
        except ValueError as e:
            errors.append(str(e))
            messages = [*messages, {"role": "assistant", "content": reply.message.content or ""},
                        {"role": "user", "content": f"That reply could not be read ({e}). "
                                                    "Reply with the JSON object only."}]
    raise ReviewUnparsed("; ".join(errors))
