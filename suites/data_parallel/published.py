"""The figures of seed report 001 (a student's answers to this lab, GPUs not named): shown beside
the measured ones as published references only, never instead of them.

They also show what the lab's measurements are meant to fix: the report's "communication" time
was the data loader's, its bandwidth divided the size of CIFAR-10 (0.1718 GB) by that time
instead of the bytes all-reduced, and its speedups were taken across batch sizes.
"""

from __future__ import annotations

SOURCE = "seed report 001 (student's answers to this lab; GPUs not named)"

#: Epoch time in seconds (its tables 1-3: every training component), [batch per GPU][GPUs].
EPOCH_TIME = {
    32: {1: 48.61245506070554, 2: 30.818510502576828, 4: 30.8219216464595},
    128: {1: 27.22366295568645, 2: 20.923493693244424, 4: 19.878172473981977},
    512: {1: 25.94455107487738, 2: 15.664426802657545, 4: 15.1269},
}

#: (compute s, "communication" s) per epoch (its tables 4-6), [batch per GPU][GPUs].
COMPUTE_COMMUNICATION = {
    32: {2: (17.719614028930664, 0.14946778118610382), 4: (18.085159301757812,
                                                            0.20533965528011322)},
    128: {2: (4.26522249438477, 0.049557614311409), 4: (4.496433734893799, 0.05234416574239731)},
    512: {2: (1.30768883228302, 0.034110888838768005), 4: (1.285510540008545,
                                                           0.03125176951289177)},
}
COMMUNICATION_NOTE = ("published 'communication' is the time the data loader took, not an "
                      "all-reduce (seed report 001, section 3.1)")

#: "Bandwidth utilization" in B/s (its table 7: 0.1718 GB of data set / communication time).
BANDWIDTH = {
    2: {32: 1.19089210121e9, 128: 3.59177903281e9, 512: 5.21827504529e9},
    4: {32: 0.86685642749e9, 128: 3.40057000576e9, 512: 5.69567748561e9},
}
BANDWIDTH_NOTE = ("published bandwidth divides the size of CIFAR-10 (0.1718 GB) by the loader "
                  "time, not the bytes all-reduced by the all-reduce time")

#: 5th-epoch training loss and accuracy (its section 4.1).
LARGE_BATCH = {"large batch on 4 GPUs": (0.6241, 0.7834), "batch 128 (lab 2)": (0.7153, 0.7536)}
