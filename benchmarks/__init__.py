"""The fastcomp benchmark harness: workloads W1–W9 (ANCHORS.md) against eager, torch.compile and fastcomp.

Run `python -m benchmarks --help`; `benchmarks/README.md` explains the columns and the method.
"""
