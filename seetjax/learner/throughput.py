"""Tokens per second and model-FLOPs utilisation (MFU) of an update.

MFU = achieved model FLOPs / peak FLOPs of the devices, with model FLOPs from
`ModelConfig.flops_per_token` (PaLM, Chowdhery et al. 2022: 2N + 4 L H Q T per token forward,
3x that for forward + backward), so rematerialisation and padding do not count as useful work.
"""

from __future__ import annotations

import jax

from seetjax.models.config import ModelConfig

# Dense bf16 peak FLOP/s per device (vendor figures, without sparsity).
PEAK_FLOPS = {
    "H100": 989e12,
    "H200": 989e12,
    "A100": 312e12,
    "L4": 121e12,
    "TPU v4": 275e12,
    "TPU v5 lite": 197e12,
    "TPU v5e": 197e12,
    "TPU v5p": 459e12,
    "TPU v6 lite": 918e12,
}


def peak_flops(device: jax.Device) -> float | None:
    """Peak FLOP/s of `device` by its kind, or None when unknown (CPUs: measure and pass it)."""
    kind = device.device_kind
    for name, flops in PEAK_FLOPS.items():
        if name.lower() in kind.lower():
            return flops
    return None


def throughput(tokens: float, flop_tokens: float, seconds: float, cfg: ModelConfig,
               seq_len: int, num_devices: int, peak_per_device: float | None) -> dict[str, float]:
    """tokens_per_s, and mfu when the peak is known. `flop_tokens` counts each token once per
    forward-pass equivalent (3 with a backward pass, 1 without)."""
    out = {"tokens_per_s": tokens / seconds}
    if peak_per_device:
        achieved = cfg.flops_per_token(seq_len) * flop_tokens / seconds
        out["mfu"] = achieved / (peak_per_device * num_devices)
    return out
