"""What an optimized XLA program spends its memory traffic on, read from its HLO text alone
(`jax.jit(f).lower(...).compile().as_text()`): no profiler, any backend.

    module = parse_module(compiled.as_text())
    body = module.computations[largest_loop_body(module)]
    ranked(module, body)          # the body's ops by the bytes their operands and results occupy
    copies(module, body)          # copy / copy-start ops: count and bytes
    updates(module, body)         # dynamic-update-slice / scatter, in place or behind a copy

An in-place update (dynamic-update-slice or scatter, bare or as a fusion's root) writes into its
operand's buffer; where XLA cannot give it that buffer (the old value is still needed), copy
insertion puts a `copy` of the operand in front of it: so an update whose buffer operand is a
copy is counted as NOT in place, and its bytes are the copy's.
"""

from __future__ import annotations

import dataclasses
import math
import re

# Bytes per element of HLO's primitive types (pred is stored in a byte).
ITEMSIZE = {"pred": 1, "s4": 1, "u4": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2,
            "bf16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8,
            "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3b11fnuz": 1, "f8e4m3fnuz": 1,
            "f8e5m2fnuz": 1}
_ARRAY = re.compile(r"\b(" + "|".join(sorted(ITEMSIZE, key=len, reverse=True))
                    + r")\[([\d,]*)\]")
_HEADER = re.compile(r"^(ENTRY )?%([\w.\-]+) .*\{$")
_INSTRUCTION = re.compile(r"^\s*(ROOT )?%([\w.\-]+) = ")
# Ops that move no data of their own: views, tuples, parameters, constants.
NO_TRAFFIC = {"parameter", "get-tuple-element", "tuple", "constant", "bitcast", "after-all",
              "partition-id", "replica-id", "iota"}
UPDATES = {"dynamic-update-slice", "scatter"}
COPIES = {"copy", "copy-start"}


@dataclasses.dataclass(frozen=True)
class Instruction:
    """One HLO instruction: its name, result shape text, opcode, operand names and attributes."""

    name: str
    shape: str
    opcode: str
    operands: tuple[str, ...]
    arguments: str  # the text inside the parentheses (a parameter's number)
    attributes: str
    root: bool

    @property
    def bytes(self) -> int:
        return shape_bytes(self.shape)

    def called(self, key: str) -> str | None:
        """The computation an attribute names (`calls`, `body`, `condition`), or None."""
        found = re.search(rf"\b{key}=%([\w.\-]+)", self.attributes)
        return found.group(1) if found else None


@dataclasses.dataclass
class Module:
    """Computations by name (instructions in order) and the entry computation's name."""

    computations: dict[str, list[Instruction]]
    entry: str


def shape_bytes(shape: str) -> int:
    """Bytes of every array in a shape text ('bf16[64,2,128,1024]{3,2,1,0}', tuples summed)."""
    return sum(ITEMSIZE[t] * math.prod(int(d) for d in dims.split(",") if d)
               for t, dims in _ARRAY.findall(shape))


def shape_dims(shape: str) -> list[tuple[str, tuple[int, ...]]]:
    """(type, dims) of every array in a shape text."""
    return [(t, tuple(int(d) for d in dims.split(",") if d)) for t, dims in _ARRAY.findall(shape)]


def _split_shape(rest: str) -> tuple[str, str]:
    """'(a, b) op(...)' or 'f32[2]{0} op(...)' -> (shape, 'op(...)')."""
    if rest.startswith("("):
        depth = 0
        for i, ch in enumerate(rest):
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if depth == 0:
                return rest[:i + 1], rest[i + 1:].lstrip()
    shape, _, tail = rest.partition(" ")
    return shape, tail


def _parse_instruction(line: str) -> Instruction | None:
    found = _INSTRUCTION.match(line)
    if not found:
        return None
    shape, tail = _split_shape(line[found.end():])
    opcode, _, args = tail.partition("(")
    depth, end = 1, 0
    for end, ch in enumerate(args):  # noqa: B007 (end is used after the loop)
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            break
    operands = tuple(re.findall(r"%([\w.\-]+)", args[:end]))
    return Instruction(name=found.group(2), shape=shape, opcode=opcode.strip(), operands=operands,
                       arguments=args[:end], attributes=args[end + 1:], root=bool(found.group(1)))


def parse_module(text: str) -> Module:
    """The computations of an HLO module's text (`Compiled.as_text()`)."""
    computations: dict[str, list[Instruction]] = {}
    entry, current = "", None
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            current = header.group(2)
            computations[current] = []
            entry = current if header.group(1) else entry
        elif line.startswith("}"):
            current = None
        elif current is not None:
            instruction = _parse_instruction(line)
            if instruction:
                computations[current].append(instruction)
    if not entry:
        raise ValueError("parse_module: no ENTRY computation in the HLO text")
    return Module(computations=computations, entry=entry)


def loops(module: Module) -> list[tuple[str, Instruction]]:
    """(computation holding it, while instruction) for every while loop of the module."""
    return [(name, i) for name, body in module.computations.items() for i in body
            if i.opcode == "while"]


def trip_count(loop: Instruction) -> int | None:
    """The loop's trip count where XLA knows it (backend_config's known_trip_count)."""
    found = re.search(r'"known_trip_count":\{"n":"(\d+)"', loop.attributes)
    return int(found.group(1)) if found else None


def largest_loop_body(module: Module) -> str:
    """The name of the while body with the most instructions (a decode loop's step)."""
    bodies = [loop.called("body") for _, loop in loops(module)]
    if not bodies:
        raise ValueError("largest_loop_body: the module has no while loop")
    return max(bodies, key=lambda b: len(module.computations[b]))


def _shapes(module: Module, computation: str) -> dict[str, str]:
    return {i.name: i.shape for i in module.computations[computation]}


def _operand_bytes(shapes: dict[str, str], instruction: Instruction) -> int:
    return sum(shape_bytes(shapes.get(o, "")) for o in instruction.operands)


def ranked(module: Module, computation: str, top: int = 10) -> list[dict]:
    """The computation's data-moving ops, largest first by operand + result bytes (an in-place
    update counts its buffer twice: as operand and as result)."""
    shapes = _shapes(module, computation)
    rows = [{"name": i.name, "opcode": i.opcode, "shape": i.shape.split("{")[0],
             "bytes": i.bytes + _operand_bytes(shapes, i),
             "op_name": _op_name(i)}
            for i in module.computations[computation] if i.opcode not in NO_TRAFFIC]
    return sorted(rows, key=lambda r: -r["bytes"])[:top]


def _op_name(instruction: Instruction) -> str:
    found = re.search(r'op_name="([^"]*)"', instruction.attributes)
    return found.group(1) if found else ""


def copies(module: Module, computation: str) -> dict:
    """Count and bytes (of what each copies) of the computation's copy / copy-start ops."""
    found = [i for i in module.computations[computation] if i.opcode in COPIES]
    shapes = _shapes(module, computation)
    nbytes = [_operand_bytes(shapes, i) for i in found]
    return {"count": len(found), "bytes": sum(nbytes), "largest": max(nbytes, default=0)}


def _update_root(module: Module, instruction: Instruction) -> Instruction | None:
    """The update an instruction is: itself, or its fusion's root when that is an update."""
    if instruction.opcode in UPDATES:
        return instruction
    fused = instruction.called("calls") if instruction.opcode == "fusion" else None
    if fused and fused in module.computations:
        root = next((i for i in module.computations[fused] if i.root), None)
        if root and root.opcode in UPDATES:
            return root
    return None


def is_update(module: Module, instruction: Instruction) -> bool:
    """Whether the instruction is a dynamic-update-slice or scatter, bare or as a fusion's root."""
    return _update_root(module, instruction) is not None


def _buffer_operand(module: Module, instruction: Instruction, root: Instruction) -> str | None:
    """The name of the operand whose buffer the update writes into (the fusion operand that
    feeds its root's first operand)."""
    if root is instruction:
        return instruction.operands[0] if instruction.operands else None
    fused = module.computations[instruction.called("calls")]
    param = next((i for i in fused if i.name == root.operands[0]), None)
    if param is None or param.opcode != "parameter":
        return None
    index = int(param.arguments)
    return instruction.operands[index] if index < len(instruction.operands) else None


def updates(module: Module, computation: str) -> dict:
    """Dynamic-update-slice / scatter ops (bare or fused) of a computation: how many, and how
    many (and what bytes) write into a buffer that a copy made first (not in place)."""
    total, out_of_place, nbytes = 0, 0, 0
    shapes = _shapes(module, computation)
    made = {i.name: i for i in module.computations[computation]}
    for instruction in module.computations[computation]:
        root = _update_root(module, instruction)
        if root is None:
            continue
        total += 1
        name = _buffer_operand(module, instruction, root)
        producer = made.get(name)
        if producer is not None and producer.opcode in COPIES:
            out_of_place += 1
            nbytes += _operand_bytes(shapes, producer)
    return {"count": total, "not_in_place": out_of_place, "not_in_place_bytes": nbytes}


def buffer_readers(module: Module, computation: str, arrays: set[tuple[str, tuple[int, ...]]]
                   ) -> list[Instruction]:
    """The ops of a computation that read a buffer of one of `arrays` ((type, dims)) taken from
    its parameter (e.g. a loop's carried KV cache), through views (bitcast), copies and in-place
    updates of it: the reads of that buffer, the updates aside."""
    aliases: set[str] = set()
    found = []
    for i in module.computations[computation]:
        if i.opcode in ("get-tuple-element", "parameter"):
            if len(shape_dims(i.shape)) == 1 and shape_dims(i.shape)[0] in arrays:
                aliases.add(i.name)
        elif aliases & set(i.operands) and i.opcode != "tuple":
            if i.opcode in ("bitcast", *COPIES) or is_update(module, i):
                aliases.add(i.name)
            else:
                found.append(i)
    return found


def fusions(module: Module, computation: str | None = None) -> int:
    """Fusion ops in one computation, or in the whole module."""
    names = [computation] if computation else list(module.computations)
    return sum(i.opcode == "fusion" for n in names for i in module.computations[n])


_PEAK = re.compile(r"^\s*Live ranges at \d+ \(peak\):\s*$")
_LIVE = re.compile(r"^\s*([\w.\-]+)\{[\d,]*\}: (\d+) bytes")


def peak_buffers(live_range: str, module: Module, top: int = 12) -> dict:
    """What XLA's buffer assignment holds at the program's peak, from the live-range report it
    dumps (`*after_optimizations-live-range.txt`, under `xla_dump_to`): the total of the buffers
    live there and the `top` largest, each with its producer's shape, opcode and op_name (the
    jax function that made it). {} when the report has no peak section."""
    lines = live_range.splitlines()
    start = next((n for n, line in enumerate(lines) if _PEAK.match(line)), None)
    if start is None:
        return {}
    live = []
    for line in lines[start + 1:]:
        found = _LIVE.match(line)
        if not found:
            break
        live.append((found.group(1), int(found.group(2))))
    made = {i.name: i for body in module.computations.values() for i in body}
    rows = []
    for name, nbytes in sorted(live, key=lambda x: -x[1])[:top]:
        producer = made.get(name)
        rows.append({"name": name, "bytes": nbytes,
                     "shape": producer.shape.split("{")[0] if producer else "",
                     "opcode": producer.opcode if producer else "",
                     "op_name": _op_name(producer) if producer else ""})
    return {"live_bytes": sum(b for _, b in live), "buffers": len(live), "largest": rows}
