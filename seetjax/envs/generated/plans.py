"""Call plans: user intents per API class, proposed from the LIVE state of an episode's instances.

A proposer looks at the instances as the plan has left them so far (the current folder and its
files, who is logged in, which tickets exist, the last math result) and proposes one `Action`: an
intent (the key of its paraphrase templates), the calls that fulfil it, and the slot values the
user text must mention so the calls can be inferred. The generator executes the calls on a copy of
the instances and keeps the action only if every call succeeds, so ground truth is correct by
construction, and later actions build on earlier ones (a file created in turn 1 is moved in
turn 2, a ticket opened earlier is closed, a result is divided further).

`missing` names the slot a miss_param turn may leave out of the user text (its value is supplied
on the next turn); actions without one never become miss_param turns.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bfcl_eval.eval_checker.multi_turn_eval.func_source_code.gorilla_file_system import (
    Directory,
    File,
)
from bfcl_eval.eval_checker.multi_turn_eval.func_source_code.long_context import (
    POPULATE_FILE_EXTENSION,
)

from seetjax.envs.generated.vocab import vocab
from seetjax.envs.generated.world import EXTENSIONS, WorldFacts
from seetjax.tools.calls import ToolCall
from seetjax.tools.executor import ToolExecutor


@dataclass(frozen=True)
class Action:
    """One user intent and the calls that fulfil it."""

    intent: str
    calls: tuple[ToolCall, ...]
    slots: Mapping[str, str] = field(default_factory=dict)
    missing: str | None = None


@dataclass
class PlanContext:
    """What proposers read: the live instances, the split's vocabulary and earlier outputs."""

    rng: random.Random
    split: str
    facts: WorldFacts
    executor: ToolExecutor
    initial_config: Mapping[str, Any]
    last_output: dict[str, str] = field(default_factory=dict)

    def instance(self, class_name: str) -> Any:
        return self.executor.instances[class_name]


def _call(tool: str, /, **args: Any) -> ToolCall:
    return ToolCall(tool, args)


def _q(value: str) -> str:
    return f"'{value}'"


def _words(text: str) -> list[str]:
    return [w.strip(".,!?'") for w in text.split() if len(w.strip(".,!?'")) >= 4]


# ---------------------------------------------------------------- GorillaFileSystem


def _cwd(ctx: PlanContext) -> Directory:
    return ctx.instance("GorillaFileSystem")._current_dir


def _files(directory: Directory) -> list[str]:
    # Files long_context padding added (empty, BFCL's names) are never named by a user turn.
    return [n for n, item in directory.contents.items()
            if isinstance(item, File) and n not in POPULATE_FILE_EXTENSION]


def _folders(directory: Directory) -> list[str]:
    return [n for n, item in directory.contents.items() if isinstance(item, Directory)]


def _new_file_name(ctx: PlanContext) -> str:
    return ctx.rng.choice(vocab("stem", ctx.split)) + ctx.rng.choice(EXTENSIONS)


def fs_cd(ctx: PlanContext) -> Action | None:
    folders = _folders(_cwd(ctx))
    if not folders:
        return None
    folder = ctx.rng.choice(folders)
    return Action("fs.cd", (_call("cd", folder=folder),), {"folder": _q(folder)})


def fs_cd_up(ctx: PlanContext) -> Action | None:
    if _cwd(ctx).parent is None:
        return None
    return Action("fs.cd_up", (_call("cd", folder=".."),))


def fs_ls(ctx: PlanContext) -> Action | None:
    return Action("fs.ls", (_call("ls"),))


def fs_mkdir(ctx: PlanContext) -> Action | None:
    folder = ctx.rng.choice(vocab("folder", ctx.split))
    return Action("fs.mkdir", (_call("mkdir", dir_name=folder),), {"folder": _q(folder)}, "folder")


def fs_touch(ctx: PlanContext) -> Action | None:
    name = _new_file_name(ctx)
    return Action("fs.touch", (_call("touch", file_name=name),), {"file": _q(name)}, "file")


def fs_write_new(ctx: PlanContext) -> Action | None:
    name, line = _new_file_name(ctx), ctx.rng.choice(vocab("line", ctx.split))
    return Action("fs.write_new", (_call("touch", file_name=name),
                                   _call("echo", content=line, file_name=name)),
                  {"file": _q(name), "content": _q(line)}, "content")


def fs_echo(ctx: PlanContext) -> Action | None:
    files = _files(_cwd(ctx))
    if not files:
        return None
    name, line = ctx.rng.choice(files), ctx.rng.choice(vocab("line", ctx.split))
    return Action("fs.echo", (_call("echo", content=line, file_name=name),),
                  {"file": _q(name), "content": _q(line)}, "content")


def _one_file(intent: str, tool: str) -> Callable[[PlanContext], Action | None]:
    def propose(ctx: PlanContext) -> Action | None:
        files = _files(_cwd(ctx))
        if not files:
            return None
        name = ctx.rng.choice(files)
        return Action(intent, (_call(tool, file_name=name),), {"file": _q(name)})
    propose.__name__ = f"fs_{tool}"
    return propose


def fs_move_into(ctx: PlanContext) -> Action | None:
    cwd = _cwd(ctx)
    files, folders = _files(cwd), _folders(cwd)
    if not files or not folders:
        return None
    name, folder = ctx.rng.choice(files), ctx.rng.choice(folders)
    tool = ctx.rng.choice(["mv", "cp"])
    return Action(f"fs.{tool}_into", (_call(tool, source=name, destination=folder),),
                  {"file": _q(name), "folder": _q(folder)}, "folder")


def fs_rename(ctx: PlanContext) -> Action | None:
    files = _files(_cwd(ctx))
    if not files:
        return None
    name, new = ctx.rng.choice(files), _new_file_name(ctx)
    tool = ctx.rng.choice(["mv", "cp"])
    return Action(f"fs.{tool}_as", (_call(tool, source=name, destination=new),),
                  {"file": _q(name), "new_name": _q(new)}, "new_name")


def fs_grep(ctx: PlanContext) -> Action | None:
    cwd = _cwd(ctx)
    files = [n for n in _files(cwd) if _words(cwd.contents[n].content)]
    if not files:
        return None
    name = ctx.rng.choice(files)
    pattern = ctx.rng.choice(_words(cwd.contents[name].content.split("\n")[0]) or ["the"])
    return Action("fs.grep", (_call("grep", file_name=name, pattern=pattern),),
                  {"file": _q(name), "pattern": _q(pattern)}, "pattern")


_WC_UNITS = {"l": "lines", "w": "words", "c": "characters"}


def fs_wc(ctx: PlanContext) -> Action | None:
    files = _files(_cwd(ctx))
    if not files:
        return None
    name, mode = ctx.rng.choice(files), ctx.rng.choice(list(_WC_UNITS))
    return Action("fs.wc", (_call("wc", file_name=name, mode=mode),),
                  {"file": _q(name), "unit": _WC_UNITS[mode]})


def fs_tail(ctx: PlanContext) -> Action | None:
    files = _files(_cwd(ctx))
    if not files:
        return None
    name, lines = ctx.rng.choice(files), ctx.rng.randint(1, 3)
    return Action("fs.tail", (_call("tail", file_name=name, lines=lines),),
                  {"file": _q(name), "lines": str(lines)}, "lines")


def fs_diff(ctx: PlanContext) -> Action | None:
    files = _files(_cwd(ctx))
    if len(files) < 2:
        return None
    first, second = ctx.rng.sample(files, 2)
    return Action("fs.diff", (_call("diff", file_name1=first, file_name2=second),),
                  {"file": _q(first), "other": _q(second)}, "other")


def fs_find(ctx: PlanContext) -> Action | None:
    names: list[str] = []

    def walk(directory: Directory) -> None:
        names.extend(_files(directory))
        for folder in _folders(directory):
            walk(directory.contents[folder])
    walk(_cwd(ctx))
    if not names:
        return None
    stem = ctx.rng.choice(names).split(".")[0]
    return Action("fs.find", (_call("find", name=stem),), {"name": _q(stem)}, "name")


# ---------------------------------------------------------------- MathAPI


def _number(rng: random.Random) -> int | float:
    return rng.randint(2, 500) if rng.random() < 0.6 else round(rng.uniform(1, 500), 2)


def _numbers_text(numbers: list[int | float]) -> str:
    return ", ".join(str(n) for n in numbers[:-1]) + f" and {numbers[-1]}"


_BINARY = ("add", "subtract", "multiply", "divide")


def math_binary(ctx: PlanContext) -> Action | None:
    tool, a, b = ctx.rng.choice(_BINARY), _number(ctx.rng), _number(ctx.rng)
    return Action(f"math.{tool}", (_call(tool, a=a, b=b),), {"a": str(a), "b": str(b)}, "b")


def math_chain(ctx: PlanContext) -> Action | None:
    """Continues from the last math result, which the model read in an earlier output."""
    try:
        previous = json.loads(ctx.last_output["MathAPI"])["result"]
    except (KeyError, ValueError, TypeError):
        return None
    if not isinstance(previous, (int, float)) or isinstance(previous, bool):
        return None
    tool, b = ctx.rng.choice(_BINARY), _number(ctx.rng)
    return Action(f"math.chain_{tool}", (_call(tool, a=previous, b=b),), {"b": str(b)}, "b")


_AGGREGATES = ("mean", "sum_values", "max_value", "min_value", "standard_deviation")


def math_aggregate(ctx: PlanContext) -> Action | None:
    tool = ctx.rng.choice(_AGGREGATES)
    numbers = [_number(ctx.rng) for _ in range(ctx.rng.randint(3, 5))]
    return Action(f"math.{tool}", (_call(tool, numbers=numbers),),
                  {"numbers": _numbers_text(numbers)}, "numbers")


def math_power(ctx: PlanContext) -> Action | None:
    base, exponent = ctx.rng.randint(2, 30), ctx.rng.randint(2, 4)
    return Action("math.power", (_call("power", base=base, exponent=exponent),),
                  {"a": str(base), "b": str(exponent)})


def math_percentage(ctx: PlanContext) -> Action | None:
    whole = ctx.rng.randint(50, 1000)
    part = ctx.rng.randint(1, whole)
    return Action("math.percentage", (_call("percentage", part=part, whole=whole),),
                  {"a": str(part), "b": str(whole)})


def math_round(ctx: PlanContext) -> Action | None:
    number, places = round(ctx.rng.uniform(1, 1000), 4), ctx.rng.randint(0, 2)
    return Action("math.round_number",
                  (_call("round_number", number=number, decimal_places=places),),
                  {"a": str(number), "b": str(places)})


def math_sqrt(ctx: PlanContext) -> Action | None:
    number, precision = ctx.rng.randint(2, 2000), ctx.rng.randint(2, 6)
    return Action("math.square_root",
                  (_call("square_root", number=number, precision=precision),),
                  {"a": str(number), "b": str(precision)})


# ---------------------------------------------------------------- MessageAPI


def _message_login(ctx: PlanContext) -> Action | None:
    api = ctx.instance("MessageAPI")
    if api.current_user:
        return None
    user_id = ctx.rng.choice(list(api.user_map.values()))
    return Action("msg.login", (_call("message_login", user_id=user_id),),
                  {"user_id": _q(user_id)})


def _logged_in(propose: Callable[[PlanContext], Action | None]
               ) -> Callable[[PlanContext], Action | None]:
    """Proposes the login first when nobody is logged in to the messaging app."""
    def wrapped(ctx: PlanContext) -> Action | None:
        return _message_login(ctx) or propose(ctx)
    wrapped.__name__ = propose.__name__
    return wrapped


@_logged_in
def msg_send(ctx: PlanContext) -> Action | None:
    api = ctx.instance("MessageAPI")
    name = ctx.rng.choice(list(api.user_map))
    text = ctx.rng.choice(vocab("message", ctx.split))
    return Action("msg.send", (_call("get_user_id", user=name),
                               _call("send_message", receiver_id=api.user_map[name], message=text)),
                  {"person": name, "message": _q(text)}, "message")


@_logged_in
def msg_add_and_send(ctx: PlanContext) -> Action | None:
    api = ctx.instance("MessageAPI")
    fresh = [p for p in vocab("person", ctx.split) if p not in api.user_map]
    if not fresh:
        return None
    name, text = ctx.rng.choice(fresh), ctx.rng.choice(vocab("message", ctx.split))
    new_id = f"USR{api.user_count + 1:03d}"  # add_contact's numbering; its output tells the model
    return Action("msg.add_and_send", (_call("add_contact", user_name=name),
                                       _call("send_message", receiver_id=new_id, message=text)),
                  {"person": name, "message": _q(text)}, "message")


def msg_add_contact(ctx: PlanContext) -> Action | None:
    api = ctx.instance("MessageAPI")
    fresh = [p for p in vocab("person", ctx.split) if p not in api.user_map]
    if not fresh:
        return None
    name = ctx.rng.choice(fresh)
    return Action("msg.add_contact", (_call("add_contact", user_name=name),), {"person": name})


@_logged_in
def msg_delete(ctx: PlanContext) -> Action | None:
    api = ctx.instance("MessageAPI")
    names = {user_id: name for name, user_id in api.user_map.items()}
    receivers = sorted({next(iter(m)) for m in api.inbox} & set(names))
    if not receivers:
        return None
    receiver = ctx.rng.choice(receivers)
    return Action("msg.delete", (_call("get_user_id", user=names[receiver]),
                                 _call("delete_message", receiver_id=receiver)),
                  {"person": names[receiver]})


@_logged_in
def msg_search(ctx: PlanContext) -> Action | None:
    words = sorted({w for m in ctx.instance("MessageAPI").inbox for w in _words(next(iter(m.values())))})
    if not words:
        return None
    keyword = ctx.rng.choice(words)
    return Action("msg.search", (_call("search_messages", keyword=keyword),),
                  {"keyword": _q(keyword)}, "keyword")


@_logged_in
def msg_view(ctx: PlanContext) -> Action | None:
    return Action("msg.view", (_call("view_messages_sent"),))


@_logged_in
def msg_stats(ctx: PlanContext) -> Action | None:
    return Action("msg.stats", (_call("get_message_stats"),))


def msg_list_users(ctx: PlanContext) -> Action | None:
    return Action("msg.list_users", (_call("list_users"),))


# ---------------------------------------------------------------- TicketAPI


def _ticket_login(ctx: PlanContext) -> Action | None:
    if ctx.instance("TicketAPI").current_user:
        return None
    username, password = ctx.facts.credentials["TicketAPI"]
    return Action("ticket.login", (_call("ticket_login", username=username, password=password),),
                  {"username": _q(username), "password": _q(password)})


def _ticket_logged_in(propose: Callable[[PlanContext], Action | None]
                      ) -> Callable[[PlanContext], Action | None]:
    """Proposes the login first when the user is not logged in to the ticket system."""
    def wrapped(ctx: PlanContext) -> Action | None:
        return _ticket_login(ctx) or propose(ctx)
    wrapped.__name__ = propose.__name__
    return wrapped


def _ticket(ctx: PlanContext, allowed: Callable[[dict[str, Any]], bool]
            ) -> tuple[dict[str, Any], str] | None:
    """A ticket and how the user names it: by id, or by title when the plan created it (the id
    is then only in the create_ticket output of an earlier step)."""
    queue = [t for t in ctx.instance("TicketAPI").ticket_queue if allowed(t)]
    if not queue:
        return None
    ticket = ctx.rng.choice(queue)
    created = ticket["id"] >= ctx.initial_config["TicketAPI"]["ticket_counter"]
    return ticket, (f"the {ticket['title']!r} ticket I opened" if created
                    else f"ticket {ticket['id']}")


@_ticket_logged_in
def ticket_create(ctx: PlanContext) -> Action | None:
    titles = {t["title"] for t in ctx.instance("TicketAPI").ticket_queue}
    fresh = [t for t in vocab("title", ctx.split) if t not in titles]
    if not fresh:
        return None
    title = ctx.rng.choice(fresh)
    description = ctx.rng.choice(vocab("description", ctx.split))
    priority = ctx.rng.randint(1, 5)
    return Action("ticket.create", (_call("create_ticket", title=title, description=description,
                                          priority=priority),),
                  {"title": _q(title), "description": _q(description), "priority": str(priority)},
                  "title")


def ticket_get(ctx: PlanContext) -> Action | None:
    found = _ticket(ctx, lambda t: True)
    if found is None:
        return None
    ticket, ref = found
    return Action("ticket.get", (_call("get_ticket", ticket_id=ticket["id"]),), {"ref": ref})


def ticket_close(ctx: PlanContext) -> Action | None:
    found = _ticket(ctx, lambda t: t["status"] != "Closed")
    if found is None:
        return None
    ticket, ref = found
    return Action("ticket.close", (_call("close_ticket", ticket_id=ticket["id"]),), {"ref": ref})


def ticket_resolve(ctx: PlanContext) -> Action | None:
    found = _ticket(ctx, lambda t: t["status"] != "Resolved")
    if found is None:
        return None
    ticket, ref = found
    resolution = ctx.rng.choice(vocab("resolution", ctx.split))
    return Action("ticket.resolve",
                  (_call("resolve_ticket", ticket_id=ticket["id"], resolution=resolution),),
                  {"ref": ref, "resolution": _q(resolution)}, "resolution")


def ticket_priority(ctx: PlanContext) -> Action | None:
    found = _ticket(ctx, lambda t: True)
    if found is None:
        return None
    ticket, ref = found
    priority = ctx.rng.choice([p for p in range(1, 6) if p != ticket.get("priority")])
    return Action("ticket.priority",
                  (_call("edit_ticket", ticket_id=ticket["id"], updates={"priority": priority}),),
                  {"ref": ref, "priority": str(priority)}, "priority")


@_ticket_logged_in
def ticket_list(ctx: PlanContext) -> Action | None:
    status = ctx.rng.choice(["Open", "Closed", "Resolved"])
    return Action("ticket.list", (_call("get_user_tickets", status=status),),
                  {"status": status.lower()})


Proposer = Callable[[PlanContext], Action | None]

# The proposers of each class; a proposer drawn at random that returns None is redrawn.
PROPOSERS: dict[str, tuple[Proposer, ...]] = {
    "GorillaFileSystem": (fs_cd, fs_cd, fs_cd_up, fs_ls, fs_mkdir, fs_touch, fs_write_new,
                          fs_echo, _one_file("fs.cat", "cat"), _one_file("fs.sort", "sort"),
                          _one_file("fs.rm", "rm"), fs_move_into, fs_move_into, fs_rename,
                          fs_grep, fs_wc, fs_tail, fs_diff, fs_find),
    "MathAPI": (math_binary, math_binary, math_chain, math_chain, math_aggregate, math_power,
                math_percentage, math_round, math_sqrt),
    "MessageAPI": (msg_send, msg_send, msg_add_and_send, msg_add_contact, msg_delete, msg_search,
                   msg_view, msg_stats, msg_list_users),
    "TicketAPI": (ticket_create, ticket_create, ticket_get, ticket_close, ticket_resolve,
                  ticket_priority, ticket_list),
}

CLASSES = tuple(PROPOSERS)


def propose(class_name: str, ctx: PlanContext) -> Action | None:
    """One action on `class_name` proposed from the live state, or None if the draw found none."""
    return ctx.rng.choice(PROPOSERS[class_name])(ctx)
