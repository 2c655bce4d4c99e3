"""Training jobs: a Trainer (model, optimizer, schedule and input pipeline of a recipe on a
device) and the three ways the lab drives it:

    train_to_accuracy   until the validation accuracy first reaches the target, or the cap:
                        the time to accuracy, the epoch it took and the accuracy curve
    Trainer.run_epoch   one epoch, timed: the remedies experiment's time per epoch
    Trainer.run_for     for a wall-clock duration: the utilization experiment

Time to accuracy is training time: the clock runs from the first step (the model is built and
the loader's workers started before it) and stops while the model is evaluated (DAWNBench's
rule: validation is not part of the training time); the wall clock including evaluations is
kept beside it, as a training log would show it. On a GPU the clock is read after a
synchronize, so it covers the queued kernels.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from suites.common.augment import normalize_cifar10

from .loader import make_loader
from .models import build_model
from .recipes import Recipe


@dataclass(frozen=True)
class Evaluation:
    """One point of the accuracy curve."""

    step: int
    epoch: float  # epochs of training data seen
    train_seconds: float  # training time so far, evaluations excluded
    wall_seconds: float  # wall clock since the first step, evaluations included
    accuracy: float  # validation accuracy, %


def first_reaching(curve: list[Evaluation], target: float) -> Evaluation | None:
    """The first evaluation at or above the target, or None: the run did not reach it."""
    return next((e for e in curve if e.accuracy >= target), None)


@dataclass
class Run:
    """One training run to the target: its curve and the model it ended with."""

    recipe: str
    seed: int
    target: float
    max_epochs: int
    curve: list[Evaluation]
    model: nn.Module = field(repr=False)  # on the CPU, eval mode; at the target if reached

    @property
    def at_target(self) -> Evaluation | None:
        return first_reaching(self.curve, self.target)

    @property
    def reached(self) -> bool:
        return self.at_target is not None

    @property
    def time_to_accuracy(self) -> float | None:
        return self.at_target.train_seconds if self.at_target else None

    @property
    def final(self) -> Evaluation:
        return self.curve[-1]


@dataclass(frozen=True)
class EpochResult:
    seconds: float
    images: int
    mean_loss: float


def accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor,
             device: torch.device, *, channels_last: bool = False, bf16: bool = False,
             batch_size: int = 1000) -> float:
    """Top-1 accuracy in % of `model` on [0, 1] images (normalized here), in eval mode."""
    if len(images) == 0:
        raise ValueError("accuracy of an empty test set is undefined: pass at least one image")
    was_training = model.training
    model.eval()
    correct = torch.zeros((), dtype=torch.int64, device=device)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        for start in range(0, len(images), batch_size):
            x = normalize_cifar10(images[start:start + batch_size].to(device))
            y = labels[start:start + batch_size].to(device)
            logits = model(x.contiguous(memory_format=memory_format))
            correct += (logits.argmax(1) == y).sum()
    model.train(was_training)
    return 100.0 * correct.item() / len(images)


class Trainer:
    """A recipe's training job on a device, from `seed` (initialization, data order and
    augmentation all follow from it)."""

    def __init__(self, recipe: Recipe, images: torch.Tensor, labels: torch.Tensor,
                 device: torch.device, seed: int) -> None:
        self.recipe, self.device = recipe, device
        torch.manual_seed(seed)
        self.model = build_model(recipe.model).to(device)
        if recipe.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        # Evaluation uses the eager model (same parameters): compiling it too would cost a
        # second compilation for a graph that runs a few times.
        self.forward = (torch.compile(self.model, mode=recipe.compile) if recipe.compile
                        else self.model)
        if recipe.optimizer == "sgd":
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=recipe.lr, momentum=0.9,
                                             nesterov=True, weight_decay=recipe.weight_decay)
        else:
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=recipe.lr,
                                              weight_decay=recipe.weight_decay)
        # Page-locked memory only means something with a GPU to copy to.
        self.pin_memory = recipe.pin_memory and device.type == "cuda"
        self.loader, self.sampler = make_loader(
            images, labels, recipe.batch_size, seed, augment=recipe.augment,
            workers=recipe.workers, pin_memory=self.pin_memory)
        self.steps_per_epoch = len(self.loader)
        self.steps = 0
        if recipe.workers:
            # Start the worker processes now, before any sampler thread exists: forking a
            # process that runs other threads can copy a lock some thread holds.
            iter(self.loader)

    def lr_at(self, step: int) -> float:
        """Linear warm-up to the peak, then linear decay to 0 at the cap (one cycle); 0 after
        the cap (the utilization run may train longer: its work per step is unchanged)."""
        r = self.recipe
        epoch = (step + 1) / self.steps_per_epoch
        if epoch < r.warmup_epochs:
            return r.lr * epoch / r.warmup_epochs
        return r.lr * max(0.0, (r.max_epochs - epoch) / (r.max_epochs - r.warmup_epochs))

    def batches(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.sampler.epoch = epoch
        for x, y in self.loader:
            # non_blocking from pinned memory lets the copy overlap the previous step's kernels.
            x = x.to(self.device, non_blocking=self.pin_memory)
            y = y.to(self.device, non_blocking=self.pin_memory)
            if self.recipe.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            yield x, y

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One SGD step; returns the loss without waiting for it (no device sync)."""
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_at(self.steps)
        if self.recipe.compile == "reduce-overhead":  # CUDA graphs: one replay per step
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.recipe.bf16):
            loss = F.cross_entropy(self.forward(x), y,
                                   label_smoothing=self.recipe.label_smoothing)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.steps += 1
        return loss.detach()

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def evaluate(self, images: torch.Tensor, labels: torch.Tensor) -> float:
        return accuracy(self.model, images, labels, self.device,
                        channels_last=self.recipe.channels_last, bf16=self.recipe.bf16)

    def run_epoch(self, epoch: int) -> EpochResult:
        start = time.perf_counter()
        total = torch.zeros((), device=self.device)
        steps = 0
        for x, y in self.batches(epoch):
            total += self.step(x, y).float()
            steps += 1
        self.synchronize()
        return EpochResult(time.perf_counter() - start, steps * self.recipe.batch_size,
                           (total / steps).item())

    def run_for(self, seconds: float) -> EpochResult:
        """Train epoch after epoch until `seconds` of wall clock have passed."""
        start = time.perf_counter()
        total = torch.zeros((), device=self.device)
        steps = epoch = 0
        while time.perf_counter() - start < seconds:
            for x, y in self.batches(epoch):
                total += self.step(x, y).float()
                steps += 1
                if time.perf_counter() - start >= seconds:
                    break
            epoch += 1
        self.synchronize()
        return EpochResult(time.perf_counter() - start, steps * self.recipe.batch_size,
                           (total / max(steps, 1)).item())


def train_to_accuracy(recipe: Recipe, train: tuple[torch.Tensor, torch.Tensor],
                      val: tuple[torch.Tensor, torch.Tensor], device: torch.device,
                      seed: int) -> Run:
    """Train until the validation accuracy first reaches recipe.target (then stop, as a
    DAWNBench entry does) or until recipe.max_epochs; evaluate every recipe.eval_every steps,
    or after every epoch."""
    trainer = Trainer(recipe, *train, device, seed)
    every = recipe.eval_every or trainer.steps_per_epoch
    last_step = recipe.max_epochs * trainer.steps_per_epoch
    curve: list[Evaluation] = []
    evaluating = 0.0  # seconds spent evaluating, taken out of the training time
    start = time.perf_counter()
    for epoch in range(recipe.max_epochs):
        for x, y in trainer.batches(epoch):
            trainer.step(x, y)
            if trainer.steps % every and trainer.steps != last_step:
                continue
            trainer.synchronize()
            paused = time.perf_counter()
            train_seconds = paused - start - evaluating
            acc = trainer.evaluate(*val)
            evaluating += time.perf_counter() - paused
            curve.append(Evaluation(trainer.steps, trainer.steps / trainer.steps_per_epoch,
                                    train_seconds, time.perf_counter() - start, acc))
            if acc >= recipe.target:
                break
        if curve and curve[-1].accuracy >= recipe.target:
            break
    return Run(recipe.name, seed, recipe.target, recipe.max_epochs, curve,
               trainer.model.cpu().eval())
