"""The lab's training jobs and how much of each to run, as plain values.

A recipe is one training job: model, optimizer and schedule, the input pipeline, the target
validation accuracy its time is measured to, and the cap after which a run counts as "not
reached". Profiles say which recipes run, how many times, and how long utilization is sampled.

    small-cnn      quick profile (and the CPU rows of the full one): a 4-layer CNN that reaches
                   its target on the synthetic stand-in in about a second of one CPU core
    resnet9-fast   the fast recipe: the small residual net of Page's DAWNBench CIFAR-10 entry
                   (cifar10-fast, 94 % in 24 epochs), bf16 and channels_last, on a GPU
    resnet50       the lab's setting: torchvision's ResNet-50 (CIFAR stem), batch 128, 92 %,
                   an ordinary fp32 PyTorch job on a GPU

The GPU targets are CIFAR-10 figures; on the synthetic stand-in they are only a threshold, and
every row says which data it used.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Recipe:
    name: str
    model: str  # a name of models.build_model
    target: float  # validation accuracy (%) the time to accuracy is measured to
    batch_size: int
    optimizer: str  # "sgd" (Nesterov momentum 0.9) | "adam"
    lr: float  # peak learning rate
    weight_decay: float
    label_smoothing: float
    max_epochs: int  # the cap, and the length of the schedule: linear decay to 0 by then
    warmup_epochs: float  # linear warm-up from 0 to the peak (0: start at the peak)
    eval_every: int | None  # evaluate every k steps; None: after every epoch
    augment: bool  # random crop (pad 4) and horizontal flip on every training batch
    train_images: int | None  # None: the whole training split
    val_images: int | None  # None: the whole test split (DAWNBench validates on it)
    devices: tuple[str, ...]  # where the recipe is meant to run; other devices skip
    # Input pipeline and execution: the remedies of the utilization experiment switch these.
    workers: int = 0  # DataLoader worker processes (0: batches made in the training process)
    pin_memory: bool = False  # page-locked host batches, copied with non_blocking=True
    channels_last: bool = False  # NHWC activations, which cuDNN's tensor-core kernels prefer
    bf16: bool = False  # torch.autocast to bfloat16
    compile: str = ""  # "": eager; else a torch.compile mode ("default", "reduce-overhead")

    def __post_init__(self) -> None:
        if not 0 < self.target <= 100:
            raise ValueError(f"{self.name}: target accuracy must be in (0, 100] %, "
                             f"got {self.target}")
        for field in ("batch_size", "max_epochs"):
            if getattr(self, field) <= 0:
                raise ValueError(f"{self.name}: {field} must be positive")
        if not 0 <= self.warmup_epochs < self.max_epochs:
            raise ValueError(f"{self.name}: warmup_epochs must be in [0, max_epochs)")
        if self.eval_every is not None and self.eval_every <= 0:
            raise ValueError(f"{self.name}: eval_every must be a positive number of steps")
        if self.optimizer not in ("sgd", "adam"):
            raise ValueError(f"{self.name}: optimizer must be 'sgd' or 'adam'")
        if self.compile not in ("", "default", "reduce-overhead", "max-autotune"):
            raise ValueError(f"{self.name}: compile must be '' or a torch.compile mode")


RECIPES = {r.name: r for r in (
    # Tuned on the synthetic stand-in (suites/common/data.py): with crop/flip it learns ~3x
    # more slowly (its classes already differ by shifts, and a mirrored template is no longer
    # its class's), so the quick recipe trains without augmentation.
    Recipe("small-cnn", model="small_cnn", target=60.0, batch_size=64, optimizer="adam",
           lr=1e-2, weight_decay=0.0, label_smoothing=0.0, max_epochs=8, warmup_epochs=0,
           eval_every=5, augment=False, train_images=4096, val_images=500,
           devices=("cpu", "cuda")),
    # Page (2018), "How to train your ResNet": batch 512, lr 0.4 peaking at epoch 5 and
    # decaying to 0 at 24, Nesterov, weight decay 5e-4, label smoothing 0.2.
    Recipe("resnet9-fast", model="resnet9", target=94.0, batch_size=512, optimizer="sgd",
           lr=0.4, weight_decay=5e-4, label_smoothing=0.2, max_epochs=24, warmup_epochs=5,
           eval_every=None, augment=True, train_images=None, val_images=None,
           devices=("cuda",), workers=8, pin_memory=True, channels_last=True, bf16=True),
    # The lab's job as a student writes it: fp32, two loader workers, nothing tuned for speed.
    Recipe("resnet50", model="resnet50", target=92.0, batch_size=128, optimizer="sgd",
           lr=0.1, weight_decay=5e-4, label_smoothing=0.0, max_epochs=40, warmup_epochs=2,
           eval_every=None, augment=True, train_images=None, val_images=None,
           devices=("cuda",), workers=2),
)}

#: The recipe sweep of every experiment, per size profile.
RECIPE_SWEEP = {"quick": ["small-cnn"], "full": ["small-cnn", "resnet9-fast", "resnet50"]}

#: Runs per seeding (the lab asks for at least 5 per configuration). "different seeds" varies
#: the initialization, the data order and the augmentation; "same seed" repeats seed 0, so
#: what still varies is the kernels' nondeterminism and the machine's timing noise.
RUNS = {"quick": 5, "full": 5}
SEEDINGS = ("different seeds", "same seed")


def seeds(seeding: str, runs: int) -> list[int]:
    if seeding == "different seeds":
        return list(range(runs))
    if seeding == "same seed":
        return [0] * runs
    raise ValueError(f"seeding must be one of {SEEDINGS}, got {seeding!r}")


#: Utilization sampling: how long the sampled training lasts (the lab: 3 minutes) and the
#: sampling interval (nvidia-smi's default loop is 1 s).
UTILIZATION = {"quick": dict(seconds=3.0, interval=0.25),
               "full": dict(seconds=180.0, interval=1.0)}

#: The remedies experiment: epochs timed per remedy after one untimed warm-up epoch, the
#: training images of an epoch (None: the recipe's), the utilization sampling interval (short:
#: a small-cnn epoch lasts a fraction of a second), the most DataLoader workers it tries (never
#: more than the machine's cores), and how much larger the larger batch is.
REMEDY_SETTINGS = {
    "quick": dict(epochs=3, train_images=2048, interval=0.1, workers=2, batch_scale=4),
    "full": dict(epochs=3, train_images=None, interval=0.2, workers=8, batch_scale=4),
}
