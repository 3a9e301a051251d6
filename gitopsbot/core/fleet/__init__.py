"""The fleet repository's file formats, parsed from text into ``core.fleet.model`` values with
located problems (docs/fleet-repo.md).

Pure: callers hand in the text of each file (``gitopsbot.fleetrepo`` reads them through a
``FileTree``). Every problem names file, line, column and field; an unknown key suggests the
nearest known one; duplicate keys, wrong types, impossible versions, bad durations and cron
expressions are errors. All problems are collected and raised together as one ``FleetError``.

Files are parsed by ``core.fleet.located_yaml`` (the project's one YAML reader, with limits).
Modules: ``fields`` (typed located reading of a
parsed file), one module per file format (``settings_file``, ``release_file``,
``values_file``, ``rollout_file``, ``credentials_file``, ``smoke_test_file``), ``layout``
(file and directory names) and ``assembly`` (a cluster, a fleet).

May import: nothing else of core
(the layers contract in pyproject.toml).
"""
