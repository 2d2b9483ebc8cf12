"""Your whole training step, as you would write it: torchvision's ResNet-50 trained with SGD and
momentum, optionally under bf16 autocast and with gradient clipping.

This is the whole-step form: ``build`` returns ``step(batch)``, a function that does the entire
training step (zero_grad, autocast, forward, loss, backward, clipping, optimizer step), and the
tool times and captures it exactly as written. Its settings are the keyword parameters below::

    python -m profiler_core run --workload profiler_core.examples.resnet50_step:build \\
        --workload-arg batch=1 --out runs/resnet50-b1
    python -m profiler_core sweep --workload profiler_core.examples.resnet50_step:build \\
        --param batch=1:64:x2 --out runs/resnet50-batch

It needs torchvision (``pip install torchvision``, the build that matches your torch). Nothing is
downloaded: the weights are random, the images random tensors drawn on the device.
"""

import torch
from torch import nn


def build(device: torch.device, *, batch: int = 32, image_size: int = 224, classes: int = 1000,
          bf16: bool = False, clip: float = 0.0, lr: float = 0.01, momentum: float = 0.9):
    try:
        import torchvision
    except ImportError as error:
        raise ModuleNotFoundError("this example needs torchvision: pip install torchvision (the "
                                  "build that matches your torch)", name="torchvision") from error
    model = torchvision.models.resnet50(num_classes=classes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    loss_fn = nn.CrossEntropyLoss()

    def draw(generator: torch.Generator):
        images = torch.randn(batch, 3, image_size, image_size, device=device, generator=generator)
        labels = torch.randint(0, classes, (batch,), device=device, generator=generator)
        return images, labels

    def step(data):
        images, labels = data
        optimizer.zero_grad(set_to_none=True)
        # cache_enabled=False: autocast's cache of cast weights must not outlive a graph capture
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16, cache_enabled=False):
            loss = loss_fn(model(images), labels)
        loss.backward()
        if clip > 0:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        return loss.detach()

    return {"step": step, "batch": draw, "model": model, "optimizer": optimizer}
