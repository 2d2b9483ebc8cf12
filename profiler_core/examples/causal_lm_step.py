"""Your whole training step with a Hugging Face transformers model: a GPT-2 causal language model
built from a config (random weights, nothing downloaded), AdamW, optionally under bf16 autocast,
with gradient clipping.

The whole-step form: ``step(batch)`` is the entire training step, the model's output object and
its ``.loss`` included; the tool times and captures it exactly as written. Its settings are the
keyword parameters below::

    python -m profiler_core run --workload profiler_core.examples.causal_lm_step:build \\
        --workload-arg bf16=on --out runs/gpt2-bf16

Its batch function takes the sequence length, so a run can vary it (``--vary
seq_len=file:lengths.txt``, the lengths of your dataset): a batch padded to ``pad_to`` has its
padded labels set to -100, which the model's loss ignores (right padding under a causal mask
leaves every real position's output unchanged), so padding keeps the answer.

It needs transformers (``pip install transformers``).
"""

import torch
from torch import nn


def build(device: torch.device, *, batch: int = 8, seq_len: int = 128, layers: int = 6,
          width: int = 512, heads: int = 8, vocab: int = 32000, bf16: bool = False,
          clip: float = 1.0, lr: float = 3e-4, positions: int = 1024):
    try:
        import transformers
    except ImportError as error:
        raise ModuleNotFoundError("this example needs transformers: pip install transformers",
                                  name="transformers") from error
    config = transformers.GPT2Config(n_layer=layers, n_embd=width, n_head=heads, vocab_size=vocab,
                                     n_positions=max(seq_len, positions), bos_token_id=0,
                                     eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config).to(device)
    # capturable=True keeps AdamW's step count on the GPU, so a captured step can update it
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, capturable=device.type == "cuda")

    default_length = seq_len

    def draw(generator: torch.Generator, seq_len: int = default_length, pad_to: int | None = None):
        tokens = torch.randint(0, vocab, (batch, seq_len), device=device, generator=generator)
        labels = tokens.clone()
        if pad_to is not None and pad_to > seq_len:
            tokens = nn.functional.pad(tokens, (0, pad_to - seq_len), value=0)
            labels = nn.functional.pad(labels, (0, pad_to - seq_len), value=-100)  # ignored
        return {"input_ids": tokens, "labels": labels}

    def step(data):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16, cache_enabled=False):
            loss = model(**data).loss
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        return loss.detach()

    return {"step": step, "batch": draw, "model": model, "optimizer": optimizer}
