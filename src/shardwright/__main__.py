"""`python -m shardwright`: the command line, its exit status the command's."""

from shardwright.cli import entry

raise SystemExit(entry())
