"""Lab: vector add on CPU and GPU, explicit vs unified memory, with one Triton kernel
(shared/seeds 003, problem 3).

    cpu_loop.cpp / cpu_loop.py   the C++ loop baseline, compiled once and loaded with ctypes
    vector_add.cu / cuda_program.py   the handout's CUDA C++ program, built with nvcc for
                                 sm_80 and sm_90, loaded with ctypes
    build.py                     the cached native builds of both
    kernel.py                    the Triton kernel and the lab's three launch configurations
    cuda_memory.py               cudaMalloc / cudaMallocManaged arrays seen as torch tensors
    gpu_programs.py              the whole GPU programs (allocate, copy, add, copy back, free)
    sizes.py                     K million -> elements, the sweeps, STREAM's byte count
    rows.py                      what the tables share: inputs, the CPU rows, % of copy ceiling

Questions -> tests: Q1 test_vector_add_cpu; Q2-Q4 test_vector_add_gpu (explicit and unified
memory, three launch configurations, Triton and CUDA C++, the charts); test_vector_add_triton
checks the kernel under Triton's interpreter; test_vector_add_compiled compiles the kernel and
the CUDA program for the A100 and the H100 (no GPU needed); test_vector_add_pieces and
test_vector_add_cuda_fakes check the parts with fakes.
"""
