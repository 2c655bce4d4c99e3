"""Lab: data-parallel training of ResNet-18 on CIFAR-10 at 1, 2 and 4 workers (shared/seeds 004
part A; a student's answers in 001): DataParallel and DDP, speedup, compute vs communication,
all-reduce bandwidth, large batches and their remedies; and across nodes. Every answer is a
measured number: gloo CPU ranks in `make test` (quick profile), nccl with one GPU per rank in
the full profile, and the same rank functions under torchrun or srun on one node or many.

Reading a question: its test -> lab.py (the run, started once per process) -> ranks.py (what
one rank does) -> training.py (the loop) -> instruments.py (what the loop measures) ->
figures.py (what the test records).

Measuring (no pytest, written against torch.distributed):
    config.py        plain values: lab 2's recipe (Goyal et al.'s linear scaling and warm-up),
                     the data a rank loads, the quick and full profiles (what quick scales down)
    instruments.py   host and CUDA-event clocks for the inside of a step, the union of
                     intervals; the DDP comm hook timing each gradient bucket's all-reduce; the
                     bytes of every collective, by phase
    training.py      a rank's CIFAR-10 shard (DistributedSampler, batch augmentation in 2 loader
                     workers); the training loop of one process and what each epoch measured;
                     nn.DataParallel on N GPUs in one process (GPU only)
    ranks.py         the rank functions (train, sample order, all_reduce sweep) and the CLI;
                     out-of-memory in a rank as a finding, a CPU memory budget for Q1
    nodes.py         across nodes (Q9): the nodes' layout and groups, all_reduce within a node,
                     across nodes and over every rank; training on one node, then on all
Figures and the tests' side (no torch.distributed):
    figures.py       across ranks: slowest step, compute / communication / exposed, speedup;
                     algbw, busbw, the ring all-reduce model of Patarasuk and Yuan and its fit;
                     seed report 001's figures, shown as published references only
    lab.py           the lab as tests use it: the launcher with out-of-memory as a finding, runs
                     kept per process, the device cases and the batch sweep, shared columns
    conftest.py      the `lab` fixture; ranks start with the lab already imported

Questions (the handout's numbers) -> tests: Q1 test_data_parallel_q1_batch_size, Q2
test_data_parallel_q2_speedup, Q3.1 test_data_parallel_q3_1_communication, Q3.2
test_data_parallel_q3_2_bandwidth, Q4 test_data_parallel_q4_large_batch, Q5
test_data_parallel_q5_set_epoch, Q6 and Q7 test_data_parallel_q6_q7_wire, DataParallel vs DDP
test_data_parallel_q8_dp_vs_ddp (GPU); across nodes (beyond the handout) Q9
test_data_parallel_q9_nodes; torchrun in test_data_parallel_torchrun; bad input in
test_data_parallel_bad_input; the instruments on known answers in test_data_parallel_pieces.

Under torchrun or srun the lab runs unchanged, every rank running the session
(`torchrun --nnodes=2 --nproc-per-node=G -m pytest -m data_parallel`): the cases of the job's
world size run on its ranks and nodes, the others skip saying why; rank 0 writes the report.
"""
