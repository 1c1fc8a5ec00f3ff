"""`ConvertOptions` is made of groups, each its module, its fields and its check: every field
the command line offers is in exactly one group, the groups are `--help`'s sections in their
order, and a bad value in any group is refused by that group's check, naming the option."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from shardwright.cli.parser import build_parser
from shardwright.common.flags import command_line_fields, option_groups
from shardwright.errors import OptionError
from shardwright.lifecycle.run_options import RunOptions
from shardwright.options import ConvertOptions

TITLES = [
    "the volume",
    "the output format",
    "meshes and skeletons made from the segmentation",
    "meshes and skeletons converted, annotations and segment properties",
    "the source and the stores",
]


def test_every_offered_field_is_in_exactly_one_group_in_help_order() -> None:
    groups = list(option_groups(ConvertOptions))
    assert [title for title, _ in groups] == TITLES
    grouped = [f.name for _, offered in groups for f, _ in offered]
    assert grouped == [f.name for f, _ in command_line_fields(ConvertOptions)]
    assert len(set(grouped)) == len(grouped) == len(dataclasses.fields(ConvertOptions))


def test_a_class_of_no_groups_is_one_untitled_section() -> None:
    ((title, offered),) = option_groups(RunOptions)
    assert title == "" and [f for f, _ in offered] == [
        f for f, _ in command_line_fields(RunOptions)
    ]


def test_help_shows_each_group_as_a_section_of_its_flags() -> None:
    text = build_parser().format_help()  # the top level; convert's own below
    assert "convert" in text
    convert = _subcommand(build_parser(), "convert")
    sections = {g.title: [a.option_strings[0] for a in g._group_actions if a.option_strings]
                for g in convert._action_groups}  # fmt: skip
    for title, offered in option_groups(ConvertOptions):
        assert sections[title] == [flag.name for _, flag in offered]
    shown = convert.format_help()
    assert all(f"{title}:" in shown for title in TITLES)


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    (choices,) = [a.choices for a in parser._actions if isinstance(a.choices, dict)]
    found: argparse.ArgumentParser = choices[name]
    return found


@pytest.mark.parametrize(
    ("values", "named"),
    [
        (dict(memory_budget=1024), "memory_budget"),  # the volume's
        (dict(minishard_bits=21), "minishard_bits"),  # the format's
        (dict(teasar_scale=-1.0), "teasar_scale"),  # the generated objects'
        (dict(annotation_limit=0), "annotation_limit"),  # the companions'
        (dict(timeout=0), "timeout"),  # the stores'
    ],
)
def test_each_groups_check_refuses_its_bad_value_naming_it(values: dict, named: str) -> None:
    with pytest.raises(OptionError) as raised:
        ConvertOptions(**values)
    assert set(raised.value.options) == {named}
