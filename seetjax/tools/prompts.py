"""How tool docs are shown to a model: three renderings of the same JSON function docs.

* `bfcl_system_prompt`: BFCL's default prompting system prompt (format
  `ret_fmt=python&tool_call_tag=False&func_doc_fmt=json&prompt_fmt=plaintext&style=classic`): the
  docs as indented JSON, answers as a python list of calls. Its wording is read from the installed
  `bfcl_eval` package, not copied here.
* `native_tools`: the docs as OpenAI-style tool entries for a chat template's own tools section
  (our `Tokenizer.chat_text(messages, tools=...)`, Qwen's template); answers are `<tool_call>` blocks.
* `compact_system_prompt`: one signature line per tool, for small models and short contexts
  (~620 tokens instead of ~5.5k for a median BFCL episode, see FACTS.md).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from bfcl_eval.constants import default_prompts
from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI, GORILLA_TO_PYTHON

from seetjax.errors import invalid

PromptStyle = Literal["bfcl", "native", "compact"]
PROMPT_STYLES: tuple[str, ...] = ("bfcl", "native", "compact")

# The user message of a miss_func turn that reveals held-out tools (BFCL's own wording).
MORE_FUNCTIONS_MESSAGE = default_prompts.DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC


def bfcl_system_prompt(docs: Sequence[Mapping[str, Any]]) -> str:
    """BFCL's default system prompt for prompting (non function-calling) models."""
    style = default_prompts.PROMPT_STYLE_TEMPLATES["classic"]
    call_format = style["tool_call_no_tag"].format(
        output_format=default_prompts.OUTPUT_FORMAT_MAPPING["python"],
        param_types=default_prompts.PARAM_TYPE_MAPPING["python"])
    tools = style["available_tools"].format(format="json", functions=json.dumps(list(docs), indent=4))
    return default_prompts.PROMPT_TEMPLATE_MAPPING["plaintext"].format(
        persona=style["persona"], task=style["task"], tool_call_format=call_format,
        multiturn_behavior=style["multiturn_behavior"], available_tools=tools)


def with_system_prompt(messages: Sequence[Mapping[str, Any]], system: str) -> list[dict[str, Any]]:
    """Puts `system` first, in front of the content of a system message already there (as BFCL)."""
    out = [dict(m) for m in messages]
    if out and out[0].get("role") == "system":
        out[0]["content"] = f"{system}\n\n{out[0]['content']}"
        return out
    return [{"role": "system", "content": system}, *out]


def native_tools(docs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI-style `{"type": "function", "function": doc}` entries with JSON-schema types
    (BFCL's Gorilla type names mapped by its own GORILLA_TO_OPENAPI table)."""
    tools = []
    for doc in docs:
        function = copy.deepcopy(dict(doc))
        parameters = function.setdefault("parameters", {})
        parameters["type"] = "object"
        parameters["properties"] = _openapi_properties(parameters.get("properties") or {})
        tools.append({"type": "function", "function": function})
    return tools


def _openapi_properties(properties: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for name, spec in properties.items():
        spec = dict(spec)
        spec["type"] = GORILLA_TO_OPENAPI.get(spec.get("type", "string"), "string")
        if "properties" in spec:
            spec["properties"] = _openapi_properties(spec["properties"])
        if isinstance(spec.get("items"), Mapping):
            spec["items"] = _openapi_properties({"_": spec["items"]})["_"]
        out[name] = spec
    return out


def compact_signatures(docs: Sequence[Mapping[str, Any]], description_chars: int = 80) -> str:
    """One line per tool: `name(arg: type, opt: type = default) - first sentence of its doc`."""
    lines = []
    for doc in docs:
        parameters = doc.get("parameters") or {}
        required = set(parameters.get("required") or ())
        args = []
        for name, spec in (parameters.get("properties") or {}).items():
            arg = f"{name}: {_python_type(spec)}"
            if name not in required:
                arg += f" = {spec['default']!r}" if "default" in spec else " = None"
            args.append(arg)
        line = f"{doc['name']}({', '.join(args)})"
        summary = _first_sentence(str(doc.get("description", "")), description_chars)
        lines.append(f"{line} - {summary}" if summary else line)
    return "\n".join(lines)


def compact_system_prompt(docs: Sequence[Mapping[str, Any]], call_format: str = "python",
                          description_chars: int = 80) -> str:
    """A short system prompt: the signatures and how to answer in `call_format`."""
    if call_format == "python":
        how = ("To call tools, reply with only a Python list of calls with keyword arguments, "
               "e.g. [tool_a(x=1), tool_b(name='y')].")
    elif call_format == "hermes":
        how = ('To call a tool, reply with <tool_call>{"name": "tool_a", "arguments": {"x": 1}}'
               "</tool_call>, one block per call.")
    else:
        raise invalid("compact_system_prompt", "call_format", call_format,
                      "one of 'python', 'hermes'")
    return ("You are an agent that completes the user's requests with the tools below. "
            f"{how} Keep calling tools until the request is done, then reply in plain text. If no "
            "tool fits or a required value is missing, say so in plain text.\n\nTools:\n"
            + compact_signatures(docs, description_chars))


def more_functions_message(docs: Sequence[Mapping[str, Any]], style: str) -> str:
    """The user message of the turn that reveals held-out tools (miss_func).

    bfcl: BFCL's own prompting message (the docs, then its sentence). native and compact: the new
    docs in the episode's rendering (`functions_listing`), then BFCL's sentence; the conversation
    so far is unchanged, so its tokens stay a prefix of the next prompt.
    """
    if style == "bfcl":
        return default_prompts.DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING.format(
            functions=list(docs))
    return f"{functions_listing(docs, style)}\n{MORE_FUNCTIONS_MESSAGE}"


def functions_listing(docs: Sequence[Mapping[str, Any]], style: str,
                      description_chars: int = 80) -> str:
    """Docs as a user message lists them mid-episode (miss_func reveals, retrieved toolsets):
    bfcl: as BFCL's reveal message formats them (the list's Python form); native: one JSON tool
    entry a line; compact: signature lines (`compact_signatures`)."""
    if style == "bfcl":
        return str(list(docs))
    if style == "native":
        return "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in native_tools(docs))
    if style == "compact":
        return compact_signatures(docs, description_chars)
    raise invalid("functions_listing", "style", style, f"one of {PROMPT_STYLES}")


def _python_type(spec: Mapping[str, Any]) -> str:
    name = GORILLA_TO_PYTHON.get(str(spec.get("type", "any")), "Any")
    items = spec.get("items")
    if name == "list" and isinstance(items, Mapping):
        return f"list[{_python_type(items)}]"
    return name


def _first_sentence(text: str, limit: int) -> str:
    if limit <= 0:
        return ""
    sentence = text.strip().split("\n")[0]
    end = sentence.find(". ")
    sentence = sentence if end < 0 else sentence[:end + 1]
    return sentence if len(sentence) <= limit else sentence[:limit - 3].rstrip() + "..."
