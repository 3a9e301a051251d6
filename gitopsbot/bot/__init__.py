"""The reconcile side: observe → decide (pure core) → execute one step → record."""
