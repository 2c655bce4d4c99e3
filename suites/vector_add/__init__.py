"""Lab: vector add on CPU and GPU, explicit vs unified memory, with one Triton kernel."""
