"""Lab: time to accuracy (TTA), its stability across runs and devices, how the trained models
generalize, and how busy the device is while they train (shared/seeds 003, problem 2, after
Coleman et al., "Analysis of DAWNBench", 2019).

    recipes.py     the training jobs (small CNN, the fast ResNet-9, the lab's ResNet-50) and, per
                   size profile, which run, how many times, how long utilization is sampled
    models.py      the models: a small CNN, Page's ResNet-9, torchvision ResNets with a CIFAR stem
    loader.py      the input pipeline: seeded shuffled batches, augmentation, DataLoader workers
    training.py    the Trainer and the loops: to the target (TTA), per epoch, for a duration
    stability.py   coefficient of variation, its jackknife, runs that did not reach the target
    shift.py       the shifted test set (noise, blur, contrast, JPEG-like) and photo folders
    remedies.py    the utilization remedies, one at a time, and where each applies
    lab.py         data and training runs shared by the tests, once per session and process
    reference.py   published figures (Coleman et al. Table 3a: not yet verified, so empty)
    plots.py       the accuracy-curve chart

Questions -> tests: 1 (time to accuracy) test_tta_time_to_accuracy; 2 (stability, CV)
test_tta_stability; 3 (generalization) test_tta_generalization; 4 and 5 (utilization and
raising it) test_tta_utilization; the pieces on known answers in test_tta_pieces.
"""
