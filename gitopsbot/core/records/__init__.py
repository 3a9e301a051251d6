"""What the bot records on the state branch: an operation's journal (``journal``) with what it
holds of each phase (``batch_record``, ``canary_record``, ``node_states``) and the kinds of
its steps (``plan_steps``), and the records of a failed pass, a fleet that would not load
and the tools it ran with; ``times`` reads back the times they hold. Imports only ``core.fleet``.
"""
