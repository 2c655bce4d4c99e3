"""Lab: post-training int8 quantization of the CIFAR-10 CNN (shared/seeds 004, part B):
weights, activations, int32 biases, integer-only inference on a Triton int8 GEMM.

    cnn.py             the CNN, its training loop and accuracy (the fp32 reference)
    lab.py             the lab's shared state (sizes per profile, data, trained model) and
                       the summary rows
    scales.py          symmetric int8 scales, (de)quantization, int32 biases
    calibration.py     activation ranges on calibration batches (step c) and their scales (d)
    fake_quant.py      steps b and d as simulated quantization
    fixed_point.py     the M0 * 2^-shift rescale of Jacob et al. (2018)
    int8_gemm.py       the Triton int8 GEMM with fused epilogues, and its torch reference
    integer_model.py   step e: the integer-only CNN on that GEMM, built from the lab's model
                       (one pass, memoized, serves accuracy and per-layer errors)
    plots.py           histograms for steps a and c

Steps -> tests: a-e in test_quantization_steps; the kernel in test_quantization_int8_gemm
(correctness, each GPU autotune config included, and the autotuner's pruning) and
test_quantization_benchmark (GPU throughput; on CPU, that its timed calls do nothing but the
product); the fixed-point rescale in
test_quantization_fixed_point; bad input in test_quantization_bad_input.
"""
