"""Published figures the lab compares with, and only ever shown as references.

Coleman et al., "Analysis of DAWNBench, a Time-to-Accuracy Machine Learning Performance
Benchmark", SIGOPS OSR 2019, Table 3a: the coefficient of variation of time to accuracy of
ResNet-50 on ImageNet (1 x TPU). The figure could not be verified offline when this lab was
written, so none is recorded (a remembered number presented as published would be worse than
none). Put the value (in %) here once checked against the paper, and the stability table
shows it beside the measured CVs.
"""

from __future__ import annotations

COLEMAN_TTA_CV_PERCENT: float | None = None
COLEMAN_SOURCE = ("Coleman et al. 2019, Analysis of DAWNBench (SIGOPS OSR), Table 3a: "
                  "ResNet-50, ImageNet, 1 x TPU")
COLEMAN_MISSING_NOTE = ("published CV of Coleman et al. 2019 Table 3a (ResNet-50, 1 x TPU) not "
                        "shown: it could not be verified offline; set it in "
                        "suites/tta/reference.py")

# The course's own documents quote one run-to-run spread of a training time on other hardware:
# seed report 000 (shared/seeds), the MLP lab's parallel training on a 4-GPU V100 node, 10
# repeats of the same job: mean 0.101922 s, standard deviation 0.00129016 s. The same work
# each time, so it compares with the "same seed" rows (only the machine varies), not with
# runs whose seeds differ.
SEED_000_TIME_MEAN = 0.101922
SEED_000_TIME_STD = 0.00129016
SEED_000_TIME_CV_PERCENT = 100 * SEED_000_TIME_STD / SEED_000_TIME_MEAN
SEED_000_SOURCE = ("seed report 000: MLP training on a 4 x V100 node (MPI + CUDA), 10 repeats of "
                   "the same job, std 0.00129016 s / mean 0.101922 s")
