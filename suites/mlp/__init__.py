"""Lab: the course's 2-layer MLP (784-H-10, sigmoid), trained sequentially and data-parallel
(shared/seeds 000).

    model.py          forward and backward written out, every GEMM through one switchable matmul
    training.py       the course's recipe (inputs 0..255, where each choice comes from): sequential
                      SGD, and data-parallel SGD on N ranks (one all_reduce)
    step_profile.py   where one data-parallel step spends its time, and the lab's time model
    tiled_matmul.py   the lab's TiledMatMul as a Triton kernel

Questions -> tests: Q1.1 test_mlp_data_parallel; Q1.2-1.4 test_mlp_hyperparams; Q2.1-2.5
test_mlp_profile; the Triton matmul in test_mlp_tiled_matmul; the pieces in test_mlp_model.

Data: MNIST under --hpml-data-root, or Fashion-MNIST with --hpml-dataset fashion-mnist (same
format, its own figures), else a synthetic stand-in; every row says which (data=...). The tests
that reproduce a published accuracy run on MNIST itself only.
"""
