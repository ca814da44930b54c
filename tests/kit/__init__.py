"""Test-only helpers: they serve pytest alone, so they live here rather than in the package.

What the tests share with the demo and the benchmark (the control plane, "CRDs + fleet +
Ready", child processes, the in-process controller harness, list+watch waits) lives in
``computedomain.devcluster``, which hack/bench.py and the demo can import; this kit holds
only what no one else needs (polling for a condition, test defaults for the controller).
"""
