"""The harness measuring itself: a fixed workload, timed the way every lab is timed."""
