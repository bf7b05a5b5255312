"""What a streamed chat choice sends as it decodes: its content, held back where it is or may
become a tool call (`ContentStream`), or a forced call's deltas (`ForcedCallStream`). Either
way, what goes out is always the start of what the full reply gives (`seetjax.serving.chat`).
"""

from __future__ import annotations

import re
from typing import Any

from seetjax.models.tokenizer import TOOL_CALL_OPEN
from seetjax.serving.chat import tool_call_id

_CALL_START = re.compile(r"[A-Za-z_][\w.]*\(")  # `name(`: a python-format call begins
_IDENTIFIER = re.compile(r"[A-Za-z_][\w.]*\Z")  # could still become `name(`


class ContentStream:
    """Releases a choice's text as streamed content. With tools active, text that is or may
    become a tool call waits for the end of the reply (then it goes out as tool_calls, or as
    content when it does not parse), and so does trailing whitespace (`ChatFormat.reply` drops
    it before a call), so the streamed content is always the start of the final content."""

    def __init__(self, tools_active: bool, forced: bool = False):
        self.tools_active = tools_active
        self.text = ""
        self.sent = ""
        self._holding = forced  # a forced call: all of it is a call

    def feed(self, delta: str) -> str:
        self.text += delta
        if not self.tools_active:
            out, self.sent = self.text[len(self.sent):], self.text
            return out
        if self._holding:
            return ""
        body = self.text
        head = body.lstrip()
        if head.startswith(("[", "{")) or _CALL_START.match(head):
            self._holding = True  # python or JSON calls: the whole message is the call
            return ""
        if not head or _IDENTIFIER.match(head):
            return ""  # nothing yet, or `name` that may become `name(`
        opened = body.find(TOOL_CALL_OPEN)
        if opened >= 0:
            body = body[:opened]
        else:
            body = body[:len(body) - _partial_suffix(body, TOOL_CALL_OPEN)]
        body = body.rstrip()  # trailing whitespace waits: it is stripped before a call
        if len(body) <= len(self.sent):
            return ""
        out, self.sent = body[len(self.sent):], body
        return out

    def finish(self, final_content: str | None) -> str:
        """The rest of the final content (what the full reply gives) not streamed yet."""
        final = final_content or ""
        if final.startswith(self.sent):
            return final[len(self.sent):]
        return ""  # cannot happen with the rules above; never send contradicting text


class ForcedCallStream:
    """Streams a forced call (`ChatFormat.forced_call`) as OpenAI does: a first tool-call delta
    with its id and name once the name is written, then the arguments as they decode. The
    automaton fixes the reply's form (opening, name, arguments, closing), so the arguments are
    all that follows the name but the closing's length: what goes out is always the start of
    the final arguments."""

    def __init__(self, call_parts: tuple[str, str, str]):
        self.before_name, self.after_name, self.after_args = call_parts
        self.text, self.id, self.sent = "", None, 0

    def feed(self, delta: str) -> list[dict[str, Any]]:
        """The tool-call deltas (OpenAI's form, call index 0) that `delta` completes."""
        self.text += delta
        name, found, arguments = self.text[len(self.before_name):].partition(self.after_name)
        if not found:
            return []
        out: list[dict[str, Any]] = []
        if self.id is None:
            self.id = tool_call_id()
            out.append({"index": 0, "id": self.id, "type": "function",
                        "function": {"name": name, "arguments": ""}})
        ready = arguments[:max(0, len(arguments) - len(self.after_args))]
        if len(ready) > self.sent:
            out.append({"index": 0, "function": {"arguments": ready[self.sent:]}})
            self.sent = len(ready)
        return out


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `marker`."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:k]):
            return k
    return 0
