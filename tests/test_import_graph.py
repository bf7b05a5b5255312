"""The house stays as drawn (docs/architecture.md): no import cycles, no import up the layers.

Every module under seetjax/ is parsed with `ast`; every import counts, the ones inside functions
too (a lazy import hides a cycle from Python, not from this test). An import's edge goes to the
module it names: `from seetjax.a import b` reads module `seetjax.a.b` where there is one, else
`seetjax.a` (a package's `__init__`); `import seetjax.a.b` reads `seetjax.a.b`.

A module belongs to the package under seetjax/ that holds it (`seetjax.envs.bfcl.env.env` -> envs;
`seetjax/batch.py` -> batch). LAYERS ranks the packages, lowest first: a package imports only
packages of lower layers, never one of its own layer (those are independent of each other), and
never one of the NEVER pairs, which the ranks alone would allow. docs/architecture.md shows these
same tuples; change both together.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Lowest first. A package imports only packages of the layers before its own.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors",),  # the one error helper (`Owner.field=value: requirement`), imported by anything
    ("batch", "runtime", "report", "tools", "losses"),  # foundations: import only errors
    ("models",),  # the decoder, HF in/out, tokenizer, LoRA
    ("config", "sampling", "learner"),  # config helpers name models' LoRA projections
    ("retrieval",),  # a library the environments call (its trainer uses the learner)
    ("envs",),  # ToolEnv, registry, bfcl/, generated/, qa_search/
    ("seet", "rewards"),  # SEET mechanics and rewards, over any environment
    ("rollout",),  # the episode driver
    ("data", "eval"),  # SFT data from rollouts and envs; the evaluation harness
    ("serving", "sft"),  # the server and its endpoint client; the SFT run
    ("distill", "defaults"),  # distillation over endpoints; the embedded default and its base
    ("rl",),  # the RL run: config -> plan, trainer, evaluations, report
)

# (importer, imported): forbidden although the ranks would allow it (DESIGN.md's rules).
NEVER: tuple[tuple[str, str], ...] = (
    ("rollout", "learner"),  # the rollout and the learner meet only in batch.py
    ("seet", "learner"),  # SEET's mechanics never touch the learner
    ("distill", "learner"),  # distillation never imports the learner
)


def modules() -> dict[str, Path]:
    """Dotted name -> file of every module under seetjax/ (a package under its own name)."""
    out = {}
    for path in sorted((ROOT / "seetjax").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(tree: ast.AST, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """(imported seetjax module, line) for every import in `tree`, at any depth."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known
                     else node.module for a in node.names]
        else:
            continue  # relative imports: there are none (ruff's isort keeps them absolute)
        for name in names:
            while name and name not in known:  # `import seetjax.a.b as c`, attributes
                name = name.rpartition(".")[0]
            if name.startswith("seetjax"):
                yield name, node.lineno


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported module: first line}, seetjax modules only, no self-edges."""
    known = modules()
    graph = {}
    for name, path in known.items():
        edges = graph.setdefault(name, {})
        for target, line in imports(ast.parse(path.read_text(encoding="utf-8")), known):
            if target != name and target != "seetjax":
                edges.setdefault(target, line)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def package(module: str) -> str:
    return module.split(".")[1]


def rank() -> dict[str, int]:
    return {name: i for i, layer in enumerate(LAYERS) for name in layer}


def layer_violations(graph: dict[str, dict[str, int]]) -> list[str]:
    ranks, never = rank(), set(NEVER)
    out = []
    for source, edges in sorted(graph.items()):
        for target, line in sorted(edges.items()):
            a, b = package(source), package(target)
            if a == b or a not in ranks or b not in ranks:
                continue
            where = f"{source} (line {line}) imports {target}"
            if ranks[a] < ranks[b]:
                out.append(f"{where}: up the layers ({a} is below {b})")
            elif ranks[a] == ranks[b]:
                out.append(f"{where}: {a} and {b} share a layer, so neither imports the other")
            elif (a, b) in never:
                out.append(f"{where}: {a} never imports {b}")
    return out


def test_every_package_has_a_layer():
    ranks = rank()
    assert len(ranks) == sum(len(layer) for layer in LAYERS), "a package is in two layers"
    packages = {package(m) for m in modules() if m != "seetjax"}
    assert not packages - set(ranks), f"packages without a layer: {sorted(packages - set(ranks))}"
    assert not set(ranks) - packages, f"layers name missing packages: {sorted(set(ranks) - packages)}"
    assert all(a in ranks and b in ranks for a, b in NEVER)


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles (counting imports inside functions):\n" + "\n".join(
        "  " + " <-> ".join(c) for c in found)


def test_no_imports_up_the_layers():
    found = layer_violations(import_graph())
    assert not found, "imports against the layers (docs/architecture.md):\n" + "\n".join(
        "  " + v for v in found)


def test_the_graph_sees_imports_inside_functions():
    tree = ast.parse("def f():\n    from seetjax.batch import TrajectoryBatch\n")
    assert list(imports(tree, modules())) == [("seetjax.batch", 2)]
