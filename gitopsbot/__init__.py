"""gitopsbot: upgrades TensorFusion clusters from Git.

A pull request shows and judges what an upgrade will do, a merge applies it pool by pool under
the maintenance window and deadline kept in Git, and a revert rolls it back.
"""

__version__ = "0.1.0"
