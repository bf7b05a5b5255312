"""Requests on GorillaFileSystem, proposed from the current folder and its files."""

from __future__ import annotations

from collections.abc import Callable

from bfcl_eval.eval_checker.multi_turn_eval.func_source_code.gorilla_file_system import (
    Directory,
    File,
)
from bfcl_eval.eval_checker.multi_turn_eval.func_source_code.long_context import (
    POPULATE_FILE_EXTENSION,
)

from seetjax.envs.generated.plans.base import Action, PlanContext, call, quoted, words_of
from seetjax.envs.generated.vocab import vocab
from seetjax.envs.generated.world import EXTENSIONS


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
    return Action("fs.cd", (call("cd", folder=folder),), {"folder": quoted(folder)})


def fs_cd_up(ctx: PlanContext) -> Action | None:
    if _cwd(ctx).parent is None:
        return None
    return Action("fs.cd_up", (call("cd", folder=".."),))


def fs_ls(ctx: PlanContext) -> Action | None:
    return Action("fs.ls", (call("ls"),))


def fs_mkdir(ctx: PlanContext) -> Action | None:
    folder = ctx.rng.choice(vocab("folder", ctx.split))
    return Action("fs.mkdir", (call("mkdir", dir_name=folder),), {"folder": quoted(folder)}, "folder")


def fs_touch(ctx: PlanContext) -> Action | None:
    name = _new_file_name(ctx)
    return Action("fs.touch", (call("touch", file_name=name),), {"file": quoted(name)}, "file")


def fs_write_new(ctx: PlanContext) -> Action | None:
    name, line = _new_file_name(ctx), ctx.rng.choice(vocab("line", ctx.split))
    return Action("fs.write_new", (call("touch", file_name=name),
                                   call("echo", content=line, file_name=name)),
                  {"file": quoted(name), "content": quoted(line)}, "content")


def fs_echo(ctx: PlanContext) -> Action | None:
    files = _files(_cwd(ctx))
    if not files:
        return None
    name, line = ctx.rng.choice(files), ctx.rng.choice(vocab("line", ctx.split))
    return Action("fs.echo", (call("echo", content=line, file_name=name),),
                  {"file": quoted(name), "content": quoted(line)}, "content")


def one_file(intent: str, tool: str) -> Callable[[PlanContext], Action | None]:
    def propose(ctx: PlanContext) -> Action | None:
        files = _files(_cwd(ctx))
        if not files:
            return None
        name = ctx.rng.choice(files)
        return Action(intent, (call(tool, file_name=name),), {"file": quoted(name)})
    propose.__name__ = f"fs_{tool}"
    return propose


def fs_move_into(ctx: PlanContext) -> Action | None:
    cwd = _cwd(ctx)
    files, folders = _files(cwd), _folders(cwd)
    if not files or not folders:
        return None
    name, folder = ctx.rng.choice(files), ctx.rng.choice(folders)
    tool = ctx.rng.choice(["mv", "cp"])
    return Action(f"fs.{tool}_into", (call(tool, source=name, destination=folder),),
                  {"file": quoted(name), "folder": quoted(folder)}, "folder")


def fs_rename(ctx: PlanContext) -> Action | None:
    files = _files(_cwd(ctx))
    if not files:
        return None
    name, new = ctx.rng.choice(files), _new_file_name(ctx)
    tool = ctx.rng.choice(["mv", "cp"])
    return Action(f"fs.{tool}_as", (call(tool, source=name, destination=new),),
                  {"file": quoted(name), "new_name": quoted(new)}, "new_name")


def fs_grep(ctx: PlanContext) -> Action | None:
    cwd = _cwd(ctx)
    files = [n for n in _files(cwd) if words_of(cwd.contents[n].content)]
    if not files:
        return None
    name = ctx.rng.choice(files)
    pattern = ctx.rng.choice(words_of(cwd.contents[name].content.split("\n")[0]) or ["the"])
    return Action("fs.grep", (call("grep", file_name=name, pattern=pattern),),
                  {"file": quoted(name), "pattern": quoted(pattern)}, "pattern")


_WC_UNITS = {"l": "lines", "w": "words", "c": "characters"}


def fs_wc(ctx: PlanContext) -> Action | None:
    files = _files(_cwd(ctx))
    if not files:
        return None
    name, mode = ctx.rng.choice(files), ctx.rng.choice(list(_WC_UNITS))
    return Action("fs.wc", (call("wc", file_name=name, mode=mode),),
                  {"file": quoted(name), "unit": _WC_UNITS[mode]})


def fs_tail(ctx: PlanContext) -> Action | None:
    files = _files(_cwd(ctx))
    if not files:
        return None
    name, lines = ctx.rng.choice(files), ctx.rng.randint(1, 3)
    return Action("fs.tail", (call("tail", file_name=name, lines=lines),),
                  {"file": quoted(name), "lines": str(lines)}, "lines")


def fs_diff(ctx: PlanContext) -> Action | None:
    files = _files(_cwd(ctx))
    if len(files) < 2:
        return None
    first, second = ctx.rng.sample(files, 2)
    return Action("fs.diff", (call("diff", file_name1=first, file_name2=second),),
                  {"file": quoted(first), "other": quoted(second)}, "other")


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
    return Action("fs.find", (call("find", name=stem),), {"name": quoted(stem)}, "name")


PROPOSERS = (fs_cd, fs_cd, fs_cd_up, fs_ls, fs_mkdir, fs_touch, fs_write_new, fs_echo,
             one_file("fs.cat", "cat"), one_file("fs.sort", "sort"), one_file("fs.rm", "rm"),
             fs_move_into, fs_move_into, fs_rename, fs_grep, fs_wc, fs_tail, fs_diff, fs_find)
