"""`python -m shardwright.cli`: the command line."""

from shardwright.cli import entry

raise SystemExit(entry())
