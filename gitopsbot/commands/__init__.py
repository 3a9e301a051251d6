"""One module per subcommand; each exposes ``register(subparsers)``.

A command parses its arguments, wires adapters (through ``gitopsbot.app``) and prints. No
domain logic lives here.
"""
