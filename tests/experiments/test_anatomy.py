"""experiments/benchmarks/anatomy.py and hlo_anatomy.py: the HLO reading finds a copy planted in a
program (in place vs behind a copy, at the top level and in a loop body), and the decode
program's anatomy at tiny shapes counts its loop body's cache updates and attention reads."""

import jax
import jax.numpy as jnp
import pytest


@pytest.fixture(scope="module")
def anatomy(experiment):
    return experiment("benchmarks/anatomy.py")


@pytest.fixture(scope="module")
def hlo(anatomy):
    return anatomy.hlo  # as anatomy.py imports it (a dataclass module needs its sys.modules entry)


def _module(hlo, fn, *args, donate=()):
    return hlo.parse_module(jax.jit(fn, donate_argnums=donate).lower(*args).compile().as_text())


def test_a_planted_copy_is_found_and_an_update_in_place_is_not(hlo):
    x = jnp.zeros((64, 256))  # 64 KiB
    # The old x is returned too, so the update cannot write into x's buffer: XLA copies it.
    kept = _module(hlo, lambda x: (x, x.at[3].set(1.0)), x)
    assert hlo.updates(kept, kept.entry) == {"count": 1, "not_in_place": 1,
                                             "not_in_place_bytes": 64 * 256 * 4}
    assert hlo.copies(kept, kept.entry)["largest"] == 64 * 256 * 4
    donated = _module(hlo, lambda x: x.at[3].set(1.0), x, donate=(0,))
    assert hlo.updates(donated, donated.entry) == {"count": 1, "not_in_place": 0,
                                                   "not_in_place_bytes": 0}
    assert hlo.copies(donated, donated.entry)["count"] == 0


def test_a_copy_in_a_loop_body_is_found(hlo):
    def loop(x):
        def body(carry):
            i, buffer, total = carry  # the old buffer is read after the update: a copy per trip
            return i + 1, buffer.at[i].set(1.0), total + buffer.sum()
        return jax.lax.while_loop(lambda c: c[0] < 4, body, (0, x, 0.0))

    module = _module(hlo, loop, jnp.zeros((64, 256)), donate=(0,))
    body = hlo.largest_loop_body(module)
    assert hlo.updates(module, body)["not_in_place"] == 1
    assert hlo.copies(module, body)["largest"] == 64 * 256 * 4
    top = hlo.ranked(module, body, top=3)
    assert top[0]["bytes"] >= 2 * 64 * 256 * 4 and top == sorted(top, key=lambda r: -r["bytes"])


def test_shape_bytes_and_instruction_parsing(hlo):
    assert hlo.shape_bytes("(bf16[64,2,128,1024]{3,2,1,0}, s32[4]{0}, pred[])") == (
        64 * 2 * 128 * 1024 * 2 + 16 + 1)
    module = hlo.parse_module(
        "HloModule m\n\nENTRY %main (p: f32[8]) -> f32[8] {\n"
        "  %p = f32[8]{0} parameter(0)\n"
        "  ROOT %copy.1 = f32[8]{0} copy(%p), metadata={op_name=\"jit(f)/x\"}\n}\n")
    copy = module.computations["main"][1]
    assert (copy.opcode, copy.operands, copy.root, copy.bytes) == ("copy", ("p",), True, 32)
    with pytest.raises(ValueError, match="no ENTRY"):
        hlo.parse_module("HloModule m\n")


def test_decode_anatomy_at_tiny_shapes(anatomy):
    bench = anatomy.DecodeBench("tiny-qwen2", "float32", batch=2, prompt=4, new=2)
    d = anatomy.decode_section(bench, repeats=1)
    layers, body = bench.cfg.num_layers, d["loop_body"]
    # Per step: each layer's keys and values written in place, plus the tokens and logprobs.
    assert body["updates"] == {"count": 2 * layers + 2, "not_in_place": 0,
                               "not_in_place_bytes": 0}
    # The attention reads each layer's keys and values, all of the bucket's slots.
    assert d["attention"]["cache_readers"] == 2 * layers
    assert d["attention"]["slots_read_per_step"] == bench.slots == 128
    assert body["ops"] > body["fusions"] > 0 and d["step_s"] > 0
    assert d["cost"]["flops"] >= d["model_flops_per_step"]  # the body once, not per trip
    assert d["cost"]["flops"] < 2 * d["model_flops_per_step"]
    assert "decode step" in anatomy.headline({"sections": {"decode": d}, "skipped": []})


def test_the_update_writes_its_state_in_place(anatomy):
    """The update copies no parameter or optimizer state: the skip of a non-finite update keeps
    the old state by a `lax.cond`, where `jnp.where(ok, new, old)` copied two thirds of it."""
    u = anatomy.learner_section("tiny-qwen2", "float32", rows=8, length=64)
    state = u["memory"]["alias_size_in_bytes"]
    assert state > 0
    copied = sum(u[part]["copies"]["bytes"] for part in ("entry", "loop_body") if part in u)
    assert copied < 0.01 * state, (copied, state)


def test_peak_buffers_name_what_is_live_at_the_peak(hlo, tmp_path):
    """A program whose peak holds a 1 MiB array it made (returned, so XLA cannot fuse it away)
    beside its 1 MiB input: the live-range report XLA dumps names both, with their shapes, and
    the made one with the jax op that made it."""
    def f(x):
        big = jnp.exp(x @ x)  # 512 x 512 f32
        return big, big.sum()

    x = jnp.ones((512, 512))
    compiled = jax.jit(f).lower(x).compile({"xla_dump_to": str(tmp_path),
                                            "xla_dump_hlo_as_text": True})
    report = sorted(tmp_path.glob("*after_optimizations-live-range.txt"))[-1].read_text()
    peak = hlo.peak_buffers(report, hlo.parse_module(compiled.as_text()))
    two = [(b["shape"], b["bytes"], b["opcode"]) for b in peak["largest"][:2]]
    assert sorted(two, key=lambda b: b[2] == "parameter") == [
        ("f32[512,512]", 512 * 512 * 4, "fusion"), ("f32[512,512]", 512 * 512 * 4, "parameter")]
    made = next(b for b in peak["largest"] if b["opcode"] == "fusion")
    assert made["op_name"].rsplit("/", 1)[-1] in ("exp", "dot_general"), made
    assert peak["live_bytes"] >= 2 * 512 * 512 * 4
    assert [b["bytes"] for b in peak["largest"]] == sorted(
        (b["bytes"] for b in peak["largest"]), reverse=True)
    assert hlo.peak_buffers("HloLiveRange (max 3):\n", hlo.parse_module(compiled.as_text())) == {}
