"""Engines the local target can run: the simulator (harness.sim) or a real one (vllm)."""
