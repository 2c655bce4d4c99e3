"""Measuring: device-aware clocks and the adaptive sampler (a Timing), the statistics of
samples, the machine's yardstick, measured ceilings, utilization sampling and closeness checks.
No module here imports a hook module or the fixture."""
