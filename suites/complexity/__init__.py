"""Lab: model complexity of ResNet-18/50 and VGG-16/19 (parameters, memory, FLOPs, bytes,
PALEO estimates, roofline), every figure computed and checked on any device.

    models.py       the torchvision models (the CIFAR ResNet-18 from suites/common), counts
    reference.py    published figures (torchvision, K80 datasheet), only ever used as reference
    flops.py        torch.utils.flop_counter, per layer and per layer type
    bytes_moved.py  a TorchDispatchMode counting every op's input and output bytes
    memory.py       peak memory of one SGD-with-momentum training step and its breakdown
    paleo.py        PALEO's time model, PPP, the roofline bound
    forward.py      one timed inference forward pass with its FLOPs and bytes
    sizes.py        batch sizes and resolutions per size profile

Questions -> tests: Q1 test_complexity_params, Q2 test_complexity_memory, Q3
test_complexity_flops, Q4 test_complexity_bytes, Q5 test_complexity_paleo, Q6
test_complexity_roofline; test_complexity_methods checks the instruments on known answers,
test_complexity_forward the fp32 switch of the timed forward passes.
"""
