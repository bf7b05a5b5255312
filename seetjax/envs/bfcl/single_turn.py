"""BFCL's single-turn categories as typed tasks, read from the installed `bfcl-eval` package.

Each entry is one question (a user message, sometimes with a system prompt or earlier messages)
and the function docs the model may call; one reply is judged by its calls
(`seetjax.envs.bfcl.single_turn_checker`). Our category names and bfcl_eval's files (`BFCL_v4_<file>`
in its data directory, possible answers under `possible_answer/`):

| category | file | judged by |
|---|---|---|
| simple, multiple, parallel, parallel_multiple | simple_python, ... | the AST check |
| live_simple, live_multiple, live_parallel, live_parallel_multiple | same names | the AST check |
| irrelevance, live_irrelevance | same names (no possible answers) | correct when no call is made |
| live_relevance | live_relevance (no possible answers) | correct when a call is made |

Python only: simple_java and simple_javascript are left out (their arguments are Java and
JavaScript source in strings, judged through bfcl_eval's type converters), and bfcl_eval v4 ships
no executable, REST or SQL category. Docs carry bfcl_eval's language hint, added by its own
function, so prompts match BFCL's.

Names: BFCL's single-turn tools are often dotted (`math.factorial`). Prompt styles that answer in
python show them as they are (our parser reads a documented dotted name); styles that answer in
JSON (`native`, `compact` with hermes calls) show them with "_" for ".", as bfcl_eval does for
function-calling APIs whose names cannot hold a dot, and the check reads them back the same way.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Iterable, Mapping
from typing import Any

from seetjax.envs.base import Message
from seetjax.envs.bfcl.data import data_dir, read_jsonl
from seetjax.envs.bfcl.env import BfclEnvConfig, system_prompt
from seetjax.envs.bfcl.official import decode_official_ast
from seetjax.errors import invalid
from seetjax.tools import prompts
from seetjax.tools.calls import ParseError, ToolCall
from seetjax.tools.schema import ToolSchema

NON_LIVE_AST = ("simple", "multiple", "parallel", "parallel_multiple")
LIVE_AST = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")
IRRELEVANCE = ("irrelevance", "live_irrelevance")
RELEVANCE = ("live_relevance",)
CATEGORIES = (*NON_LIVE_AST, *LIVE_AST, *IRRELEVANCE, *RELEVANCE)
_FILES = {"simple": "simple_python"}  # bfcl_eval's name where ours differs


@dataclasses.dataclass(frozen=True)
class ExpectedCall:
    """One call of a possible answer: the function and, per parameter, the values accepted
    (BFCL's possible answers as its files hold them; "" among them: the parameter may be left
    out)."""

    name: str
    choices: Mapping[str, tuple[Any, ...]]


@dataclasses.dataclass(frozen=True, eq=False)
class SingleTurnTask:
    """One BFCL single-turn entry.

    `messages` is the question (its one turn); `docs` the function docs with BFCL's language
    hint; `answers` the expected calls (empty for irrelevance and relevance entries, which have
    no possible answers: any call passes a relevance entry).
    """

    id: str
    category: str
    messages: tuple[Message, ...]
    docs: tuple[dict[str, Any], ...]
    answers: tuple[ExpectedCall, ...]

    @property
    def bfcl_category(self) -> str:
        """bfcl_eval's name of the category (`simple_python` for `simple`)."""
        return _FILES.get(self.category, self.category)


def check_categories(categories: Iterable[str]) -> None:
    """Fails naming every category that is not a single-turn one."""
    unknown = [c for c in categories if c not in CATEGORIES]
    if unknown:
        raise invalid("check_categories", "categories", unknown,
                      f"not single-turn categories; one of {', '.join(CATEGORIES)}")


@functools.cache
def load_tasks(category: str) -> tuple[SingleTurnTask, ...]:
    """Every entry of `category`, in BFCL's order."""
    from bfcl_eval.utils import add_language_specific_hint_to_function_doc

    check_categories([category])
    file_name = f"BFCL_v4_{_FILES.get(category, category)}.json"
    entries = add_language_specific_hint_to_function_doc(read_jsonl(data_dir() / file_name))
    answer_file = data_dir() / "possible_answer" / file_name
    answers = ({a["id"]: a["ground_truth"] for a in read_jsonl(answer_file)}
               if category not in (*IRRELEVANCE, *RELEVANCE) else {})
    tasks = []
    for entry in entries:
        if len(entry["question"]) != 1:
            raise ValueError(f"{entry['id']}: a single-turn entry with "
                             f"{len(entry['question'])} turns")
        expected = [ExpectedCall(name, {p: tuple(v) for p, v in params.items()})
                    for call in answers.get(entry["id"], ()) for name, params in call.items()]
        undocumented = {c.name for c in expected} - {d["name"] for d in entry["function"]}
        if undocumented:
            raise ValueError(f"{entry['id']}: expected calls of undocumented functions "
                             f"{sorted(undocumented)}")
        tasks.append(SingleTurnTask(entry["id"], category, tuple(entry["question"][0]),
                                    tuple(entry["function"]), tuple(expected)))
    return tuple(tasks)


def load(categories: Iterable[str], per_category: int | None = None) -> list[SingleTurnTask]:
    """The tasks of `categories`, category by category (the first `per_category` of each)."""
    categories = list(categories)
    check_categories(categories)
    return [task for category in categories for task in load_tasks(category)[:per_category]]


def underscored_names(config: BfclEnvConfig) -> bool:
    """Whether `config`'s prompt style shows dotted names with "_" (it answers in JSON)."""
    return config.prompt_style == "native" or config.resolved_call_format == "hermes"


def shown_docs(task: SingleTurnTask, config: BfclEnvConfig) -> tuple[dict[str, Any], ...]:
    """The docs as `config`'s prompt style shows them (see the module docstring on names)."""
    if not underscored_names(config):
        return task.docs
    docs = copy.deepcopy(task.docs)
    for doc in docs:
        doc["name"] = doc["name"].replace(".", "_")
    return docs


def opening(task: SingleTurnTask, config: BfclEnvConfig
            ) -> tuple[list[Message], list[dict[str, Any]] | None]:
    """The prompt of `task` in `config`'s style: its messages (the style's system prompt first,
    merged into a system message the question has, as BFCL does) and the native tools entries
    for the chat template (native style only)."""
    docs = shown_docs(task, config)
    system = system_prompt(docs, config)
    messages = [dict(m) for m in task.messages]
    if system is not None:
        return prompts.with_system_prompt(messages, system), None
    return messages, prompts.native_tools(docs)


def parse_reply(task: SingleTurnTask, text: str, config: BfclEnvConfig
                ) -> list[ToolCall] | ParseError:
    """The calls of the model's reply. Decoding "lenient": read as `config` reads multi-turn
    replies (its call format; positional arguments named through the shown docs); "official":
    as bfcl_eval decodes single-turn replies (`decode_official_ast`). A python-format reply
    lenient decoding refuses is marked `call_made` where bfcl_eval's decoder reads calls in it
    (the relevance rules count a call there)."""
    schemas = {doc["name"]: ToolSchema.from_doc(doc) for doc in shown_docs(task, config)}
    if config.decoding == "official":
        return decode_official_ast(text, schemas, config.max_message_chars)
    parsed = config.parse_calls(text, schemas)
    if isinstance(parsed, ParseError) and parsed.fmt == "python":
        official = decode_official_ast(text, schemas, config.max_message_chars)
        made = bool(official) if isinstance(official, list) else official.call_made
        return dataclasses.replace(parsed, call_made=made)
    return parsed
