"""The PyTorch side of the training benchmarks: a transformers model and its AdamW update."""

from __future__ import annotations

from typing import Any


def torch_model_and_optimizer(hf_dir: str, lr: float) -> tuple[Any, Any]:
    """The HF directory's model in f32, in training mode, and AdamW (no weight decay) over it."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8,
                                  weight_decay=0.0)
    return model, optimizer


def optimizer_step(model: Any, optimizer: Any, loss: Any, max_norm: float) -> dict:
    """One update from `loss`: backward, global-norm clipping, the optimizer step."""
    import torch

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return {"loss": loss.item()}
