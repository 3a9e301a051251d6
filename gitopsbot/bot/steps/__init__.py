"""The apply engine: one step kind per module, run by ``executor.Executor``."""
