"""The lab's CIFAR-10 CNN (two 5x5 convolutions with 2x2 max pooling, three linear layers),
its training loop and its accuracy. The fp32 model trained here is the reference every
quantized variant is compared against."""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

LAYERS = ("conv1", "conv2", "fc1", "fc2", "fc3")
#: Values each layer receives per image: the 3 x 32 x 32 input, conv1's 6 channels pooled to
#: 14 x 14, conv2's 16 pooled to 5 x 5, then fc1's 120 and fc2's 84 outputs.
INPUT_FEATURES = {"conv1": 3 * 32 * 32, "conv2": 6 * 14 * 14, "fc1": 16 * 5 * 5, "fc2": 120,
                  "fc3": 84}

# Called with (layer name, the layer's input); returns what the layer actually sees. Profiling
# (step c) and activation quantization (step d) are both just such a hook.
InputHook = Callable[[str, torch.Tensor], torch.Tensor]


def normalize(images: torch.Tensor) -> torch.Tensor:
    """[0, 1] pixels -> [-1, 1], the classic tutorial's transform; it centres the input so a
    symmetric int8 scale uses both halves of its range."""
    return (images - 0.5) / 0.5


class CifarCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def layer_outputs(self, x: torch.Tensor, input_hook: InputHook | None = None
                      ) -> dict[str, torch.Tensor]:
        """Each layer's output after its activation (ReLU for hidden layers, logits for fc3),
        before pooling: the points where quantized variants are compared with fp32."""
        hook = input_hook or (lambda _name, t: t)
        out = {}
        x = out["conv1"] = F.relu(self.conv1(hook("conv1", x)))
        x = F.max_pool2d(x, 2)
        x = out["conv2"] = F.relu(self.conv2(hook("conv2", x)))
        x = F.max_pool2d(x, 2).flatten(1)
        x = out["fc1"] = F.relu(self.fc1(hook("fc1", x)))
        x = out["fc2"] = F.relu(self.fc2(hook("fc2", x)))
        out["fc3"] = self.fc3(hook("fc3", x))
        return out

    def forward(self, x: torch.Tensor, input_hook: InputHook | None = None) -> torch.Tensor:
        return self.layer_outputs(x, input_hook)["fc3"]

    def quantizable_layers(self) -> dict[str, nn.Conv2d | nn.Linear]:
        return {name: getattr(self, name) for name in LAYERS}


def train_cnn(images: torch.Tensor, labels: torch.Tensor, *, epochs: int, batch_size: int = 64,
              lr: float = 1e-3, seed: int = 0, device: torch.device | str = "cpu") -> CifarCNN:
    """Plain Adam training, one pass over a shuffled permutation per epoch."""
    torch.manual_seed(seed)
    model = CifarCNN().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    images, labels = images.to(device), labels.to(device)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(images), generator=generator).to(device)
        for start in range(0, len(images), batch_size):
            batch = order[start:start + batch_size]
            loss = F.cross_entropy(model(images[batch]), labels[batch])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    return model.eval().cpu()


@torch.no_grad()
def predictions(forward: Callable[[torch.Tensor], torch.Tensor], images: torch.Tensor,
                batch_size: int = 500) -> torch.Tensor:
    """Predicted class per image for any forward function returning logits."""
    return torch.cat([forward(images[i:i + batch_size]).argmax(1).cpu()
                      for i in range(0, len(images), batch_size)])


def accuracy(forward: Callable[[torch.Tensor], torch.Tensor], images: torch.Tensor,
             labels: torch.Tensor, batch_size: int = 500) -> float:
    """Top-1 accuracy in percent."""
    if len(images) == 0:
        raise ValueError("accuracy of an empty test set is undefined: pass at least one image")
    return 100.0 * (predictions(forward, images, batch_size) == labels.cpu()).float().mean().item()


def parameter_bytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())
