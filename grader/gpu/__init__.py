"""The GPU wing: what grading a kernel for real GPUs takes, with or without one.

``aot`` compiles a submission's kernel for real GPU targets on a machine
without a GPU (Triton's ``GPUTarget`` and its bundled ``ptxas``);
``calibrate`` measures and keeps the speed tiers' thresholds on a GPU
(``grader/data/``); ``versions`` says which Triton and NumPy versions the
grader supports and what ``check`` and ``grade`` do on the others.  The
speed grade itself is ``grader/reference/flash_speed.py``.
"""
