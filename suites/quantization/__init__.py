"""Lab: post-training int8 quantization of the CIFAR-10 CNN (weights, activations, int32
biases, integer-only inference on a Triton int8 GEMM). Steps a-e: test_quantization_steps.py."""
