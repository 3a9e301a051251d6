"""One module per subcommand; each exposes ``register(subparsers)``. Two are no
command: ``options``, the options several share, and ``failures``, how commands end on
the bot's errors.

A command parses its arguments, wires adapters (through ``gitopsbot.app``) and prints. No
domain logic lives here.

``SUMMARIES`` is each command's line in ``gitopsbot --help``, kept here so the top-level help
and the parser of one command are built without importing the others (gitopsbot/cli.py).
"""

from __future__ import annotations

# In the order --help shows them.
SUMMARIES: dict[str, str] = {
    "validate": "check a fleet repository (files, secrets, policies) from Git alone",
    "plan": "show what upgrading one cluster will do, and the policy verdict",
    "rehearse": "play one cluster's upgrade in a sandbox on a virtual clock; print its timeline",
    "sandbox": "run a local Kubernetes API with TensorFusion installed (up/down)",
    "propose": "propose upstream chart versions as pull requests",
    "comment": "post the plan of one cluster on an existing pull request",
    "run": "apply merged changes: the long-running bot",
    "status": "where each cluster stands (from Git)",
    "drift": "compare each cluster's deployed state with Git (read only)",
    "demo": "play the whole story in a local sandbox: propose, merge, roll out, revert",
    "post_render": "Helm post-renderer: pin the Git rollout policy, switches closed (internal)",
    "tools": "where the pinned helm and kubectl are; put them on PATH",
}
