"""The typed-config toolkit, property by property (tests/test_config.py drives it through whole
run configs): a file is read as one mapping or refused in one line; a value is checked
against its annotation, converted only where nothing is lost; unknown keys, wrong types and
a section's own check each name the dotted key; overrides, dotted keys and the help rows do
what their docstrings say."""

import dataclasses
import enum
import math
import typing
from typing import Any, Literal

import pytest

from modformer.configtools import (MAX_CONFIG_BYTES, MAX_INT, apply_override, check_option_types, check_seeds,
                                   coerce, describe, field_help, flatten, from_dict, get_dotted, key_lines, option,
                                   read_yaml, set_dotted, to_dict)
from modformer.errors import ConfigError


class Colour(enum.Enum):
    RED = "red"
    ONE = 1


@dataclasses.dataclass
class Inner:
    width: int = option(4, "how wide")


@dataclasses.dataclass
class Outer:
    need: int = option(help="required")
    lr: float = option(1e-3, "the learning rate")
    name: str = option("x", "a name")
    tags: list[str] = option(default_factory=list, help="tags")
    inner: Inner = option(default_factory=Inner, help="a section")
    seed: int | None = option(None, "a seed")

    def __post_init__(self):
        if self.lr > 1:
            raise ValueError(f"lr {self.lr} is more than 1")


def refused(fn, *args, match: str, **kwargs):
    with pytest.raises(ConfigError, match=match) as e:
        fn(*args, **kwargs)
    assert "\n" not in str(e.value)
    return str(e.value)


# -- reading a file ---------------------------------------------------------------------------

def test_a_config_file_is_one_mapping_or_one_line_saying_why_not(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  lr: 0.1\n")
    assert read_yaml(path) == {"train": {"lr": 0.1}}
    assert read_yaml(str(path)) == {"train": {"lr": 0.1}}
    refused(read_yaml, tmp_path / "none.yaml", match=rf"^config file not found: {tmp_path / 'none.yaml'}$")
    refused(read_yaml, tmp_path, match=rf"^config file {tmp_path} is not a regular file$")
    cases = {
        "train:\n  lr: 1\ntrain:\n  lr: 2\n": r"key 'train' is given twice in one mapping \(lines 1 and 3\)$",
        "train: [1\n": r"is not valid YAML at line 2$",
        "": r"is empty \(no keys\); give at least",
        "{}\n": r"is empty \(no keys\)",
        "- 1\n- 2\n": r"must hold a mapping with sections model, task, train$",
        "? [1, 2]\n: 3\n": r"a key must be a name, not a list or mapping\)$",
        "a: " + "[" * 5000 + "]" * 5000 + "\n": r"nests deeper than a config does$",
    }
    for text, message in cases.items():
        path.write_text(text)
        assert refused(read_yaml, path, match=message).startswith(f"config file {path}")
    path.write_bytes(b"\xff\xfe\x00binary")
    refused(read_yaml, path, match=r"^cannot read config file .*: UnicodeDecodeError$")


def test_a_file_larger_than_a_config_is_refused_unread(tmp_path):
    path = tmp_path / "big.yaml"
    with open(path, "wb") as f:
        f.truncate(MAX_CONFIG_BYTES + 1)  # sparse: no disk spent
    refused(read_yaml, path, match=rf"is {MAX_CONFIG_BYTES + 1:,} bytes, more than a config holds "
                                   rf"\({MAX_CONFIG_BYTES:,} at most\)$")
    with open(path, "r+b") as f:
        f.truncate(MAX_CONFIG_BYTES)
    # exactly the limit is read (and its NULs are no YAML: the reader's error, which has no line)
    refused(read_yaml, path, match=rf"^config file {path} is not valid YAML$")
    assert MAX_CONFIG_BYTES == 16 * 2 ** 20


def test_an_unreadable_file_is_named(tmp_path, monkeypatch):
    path = tmp_path / "c.yaml"
    path.write_text("a: 1\n")

    def denied(self, *args, **kwargs):  # as a file without read permission refuses (root reads any)
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(type(path), "read_text", denied)
    refused(read_yaml, path, match=rf"^cannot read config file {path}: PermissionError$")


# -- declaring fields -------------------------------------------------------------------------

def test_an_option_carries_its_help_and_refuses_a_shared_mutable_default():
    for mutable in ([], {}, set()):
        with pytest.raises(TypeError, match=r"^use default_factory for mutable defaults$"):
            option(mutable, "x")

    # declared here, not at import: the declaration itself is what is checked
    @dataclasses.dataclass
    class Declared:
        plain: int = option(5)
        helped: float = option(0.5, "a rate")
        listed: list[int] = option(default_factory=lambda: [1, 2], help="a list")
        bare: int = dataclasses.field(default=3)  # no help at all

    assert Declared() == Declared(5, 0.5, [1, 2], 3) and Declared().listed is not Declared().listed
    assert [field_help(Declared, n) for n in ("plain", "helped", "listed", "bare")] == ["", "a rate", "a list", ""]
    assert [r[3] for r in describe(Declared, "s")] == ["", "a rate", "a list", ""]
    assert [r[2] for r in describe(Declared, "s")] == ["5", "0.5", "[1, 2]", "3"]
    assert field_help(Outer, "lr") == "the learning rate" and field_help(Outer, "need") == "required"
    assert Outer(need=1).tags == [] and Outer(need=1).tags is not Outer(need=1).tags
    assert option(None, "x").default is None  # None is no mutable default


def test_negative_seeds_are_refused_by_name():
    @dataclasses.dataclass
    class S:
        seed: Any = None
        seeds: Any = None

    check_seeds(S(0, [0, 1]), "train", "seed", "seeds")
    check_seeds(S(None, None), "train", "seed", "seeds")
    refused(check_seeds, S(-1, None), "train", "seed", "seeds", match=r"^train\.seed must be a seed >= 0, got -1$")
    refused(check_seeds, S(0, [2, -3]), "train", "seed", "seeds", match=r"^train\.seeds must be a seed >= 0, "
                                                                            r"got \[2, -3\]$")


# -- checking a value against its annotation --------------------------------------------------

@pytest.mark.parametrize("value, tp, expected", [
    (3, float, 3.0), ("3e-3", float, 0.003), (2.5, float, 2.5), (-MAX_INT, int, -MAX_INT), (MAX_INT, int, MAX_INT),
    (None, int | None, None), (5, int | None, 5), ("a", int | str, "a"), (1, float | str, 1.0),
    ("b", Literal["a", "b"], "b"), (1, Literal[1, 2], 1), (True, Literal[True], True),
    ("red", Colour, Colour.RED), (1, Colour, Colour.ONE), ("ONE", Colour, Colour.ONE), (Colour.RED, Colour, Colour.RED),
    ({"width": 2}, Inner, Inner(2)), (Inner(3), Inner, Inner(3)),
    ((1, 2), list[int], [1, 2]), ([1, 2], tuple[int, ...], (1, 2)), ([1, "a"], tuple[int, str], (1, "a")),
    ({"a": 1}, dict[str, float], {"a": 1.0}), ([1, {"x": 2}], Any, [1, {"x": 2}]), ("s", str, "s"),
    (False, bool, False),
])
def test_a_value_is_taken_as_its_annotation_converting_only_what_loses_nothing(value, tp, expected):
    result = coerce(value, tp, "k")
    assert result == expected and type(result) is type(expected)


@pytest.mark.parametrize("value, tp, message", [
    (True, float, r"^k: expected float, got True$"),
    (True, int, r"^k: expected int, got True$"),
    (1.0, int, r"^k: expected int, got 1\.0$"),
    ("x", float, r"^k: expected float, got 'x'$"),
    (float("nan"), float, r"^k: expected a finite number, got nan$"),
    ("inf", float, r"^k: expected a finite number, got 'inf'$"),
    (float("-inf"), float, r"^k: expected a finite number, got -inf$"),
    (MAX_INT + 1, int, r"^k: 9223372036854775808 is beyond the 64-bit integers torch and numpy take$"),
    (-MAX_INT - 2, int, r"is beyond the 64-bit integers"),
    ("x", int | None, r"^k: expected int \| null, got 'x'$"),
    (1, Literal["a", "b"], r"^k: expected one of a, b, got 1$"),
    (True, Literal[1], r"^k: expected one of 1, got True$"),  # True == 1, but it is no 1
    ("blue", Colour, r"^k: expected one of red, 1, got 'blue'$"),
    ("1", Colour, r"^k: expected one of red, 1, got '1'$"),  # a value of another type is not a member's
    ([1, "a"], list[int], r"^k\[1\]: expected int, got 'a'$"),
    ([1, 2, 3], tuple[int, int], r"^k: expected tuple\[int, int\], got \[1, 2, 3\]$"),
    ([1, "a"], tuple[int, ...], r"^k\[1\]: expected int, got 'a'$"),
    ([1, "a"], tuple[int, int], r"^k\[1\]: expected int, got 'a'$"),
    (1, typing.ForwardRef("Later"), r"^k: expected ForwardRef\('Later'\), got 1$"),  # a type without a name
    ({"a": "x"}, dict[str, int], r"^k\.a: expected int, got 'x'$"),
    ({1: 2}, dict[str, int], r"^k: expected str, got 1$"),
    ("ab", list[str], r"^k: expected list\[str\], got 'ab'$"),
    ({"width": "w"}, Inner, r"^k\.width: expected int, got 'w'$"),
    (3, Inner, r"^k: expected Inner, got 3$"),
    (None, str, r"^k: expected str, got None$"),
    (1, type(None), r"^k: expected null, got 1$"),
])
def test_a_value_of_another_type_is_refused_naming_the_key(value, tp, message):
    refused(coerce, value, tp, "k", match=message)


# -- building sections ------------------------------------------------------------------------

def test_a_section_is_built_strictly_and_every_refusal_names_its_dotted_key():
    built = from_dict(Outer, {"lr": 1, "inner": {"width": 9}, "need": 2, "tags": ["a"]})
    assert built == Outer(lr=1.0, inner=Inner(9), need=2, tags=["a"]) and isinstance(built.lr, float)
    assert from_dict(Inner, None) == Inner() and from_dict(Inner, {}) == Inner()
    refused(from_dict, Inner, {"widht": 1}, "model", match=r"^unknown config key 'model\.widht' \(known keys in "
                                                           r"model: width\)$")
    refused(from_dict, Inner, {"widht": 1}, match=r"^unknown config key 'widht' \(known keys in config: width\)$")
    refused(from_dict, Outer, {"lrr": 1}, match=r"^unknown config key 'lrr' \(known keys in config: need, lr, name, tags, "
                                                r"inner, seed\)$")
    refused(from_dict, Outer, {"inner": {"width": "w"}, "need": 1}, "train", match=r"^train\.inner\.width: expected")
    refused(from_dict, Outer, {"lr": "x", "need": 1}, match=r"^lr: expected float")
    refused(from_dict, Inner, [1], "model", match=r"^model: expected a mapping of keys to values, got \[1\]$")
    refused(from_dict, Inner, 3, match=r"^config: expected a mapping")
    refused(from_dict, Outer, {"lr": 2, "need": 1}, "train", match=r"^train: lr 2\.0 is more than 1$")


def test_a_sections_own_config_error_passes_through_unchanged():
    @dataclasses.dataclass
    class Own:
        x: int = 0

        def __post_init__(self):
            if self.x:
                raise ConfigError("own.x: its own words")

    refused(from_dict, Own, {"x": 1}, "own", match=r"^own\.x: its own words$")


def test_plain_data_comes_back_as_it_was_written():
    data = to_dict(Outer(lr=0.5, tags=["a"], need=3))
    assert data == {"need": 3, "lr": 0.5, "name": "x", "tags": ["a"], "inner": {"width": 4}, "seed": None}
    assert to_dict({"c": Colour.ONE, "t": (1, Colour.RED)}) == {"c": 1, "t": [1, "red"]}
    assert from_dict(Outer, data) == Outer(lr=0.5, tags=["a"], need=3)


# -- dotted keys ------------------------------------------------------------------------------

def test_an_override_sets_a_dotted_key_to_a_yaml_value():
    data = {"train": {"lr": 1}}
    apply_override(data, "train.lr=3e-3")
    apply_override(data, "model.layers=[1, {a: 2}]")
    apply_override(data, "task.name=")
    apply_override(data, "task.note=  ")
    apply_override(data, "x=a=b")
    assert data == {"train": {"lr": "3e-3"}, "model": {"layers": [1, {"a": 2}]}, "task": {"name": "", "note": ""},
                    "x": "a=b"}
    refused(apply_override, data, "train.lr", match=r"^override 'train\.lr' is not of the form key=value")
    for bad in ("=1", "a..b=1", ".a=1", "a.=1"):
        refused(apply_override, data, bad, match=rf"^override '{bad}': empty key$".replace(".", r"\."))
    refused(apply_override, data, "a=[1", match=r"^override 'a=\[1': cannot parse value \(\w+\)$")
    refused(apply_override, data, "train.lr.x=1", match=r"^override 'train\.lr\.x=1': 'train\.lr' is not a section$")


def test_dotted_keys_flatten_set_and_get_as_nested_sections():
    nested = {"a": {"b": {"c": 1}, "d": 2}, "e": 3, "f": {}}
    assert flatten(nested) == {"a.b.c": 1, "a.d": 2, "e": 3}
    assert flatten({"x": 1}, "p") == {"p.x": 1}
    data: dict = {"a": {"b": 1}}
    set_dotted(data, "a.c.d", 5, "here")
    set_dotted(data, "z", 6, "here")
    assert data == {"a": {"b": 1, "c": {"d": 5}}, "z": 6}
    refused(set_dotted, data, "a.b.x", 1, "sweep.grid", match=r"^sweep\.grid: 'a\.b' is not a section$")
    assert get_dotted(data, "a.c.d") == 5 and get_dotted(data, "a.c") == {"d": 5}
    assert get_dotted(data, "a.x") is None and get_dotted(data, "a.b.x") is None
    with pytest.raises(KeyError) as missing:
        get_dotted(data, "a.x", strict=True)
    assert missing.value.args == ("a.x",)  # the key asked for, to name in a message
    with pytest.raises(KeyError):
        get_dotted(data, "a.b.x", strict=True)


# -- the help and the options a part may declare ----------------------------------------------

def test_the_help_rows_name_every_key_its_type_and_default():
    rows = describe(Outer, "train")
    assert rows == [("train.need", "int", "(required)", "required"),
                    ("train.lr", "float", "0.001", "the learning rate"), ("train.name", "str", "'x'", "a name"),
                    ("train.tags", "list[str]", "[]", "tags"), ("train.inner.width", "int", "4", "how wide"),
                    ("train.seed", "int | null", "None", "a seed")]
    assert describe(Inner, "")[0][0] == "width"
    rows = rows[1:]
    lines = key_lines(rows[:2])
    assert lines == ["  train.lr    the learning rate [float, default 0.001]",
                     "  train.name  a name [str, default 'x']"]
    assert key_lines(rows[:1], width=10) == ["  train.lr    the learning rate [float, default 0.001]"]
    assert key_lines([]) == []


def test_an_options_class_is_refused_unless_a_config_can_give_every_field():
    @dataclasses.dataclass
    class Good:
        a: int = 1
        b: list[float] = dataclasses.field(default_factory=list)
        c: tuple[int, ...] = ()
        d: dict[str, Literal["x", "y"]] = dataclasses.field(default_factory=dict)
        e: Colour | None = None
        f: Inner = dataclasses.field(default_factory=Inner)
        g: Any = None

    check_option_types(Good, "part 'p'")
    bad_types = [set[int], dict[int, str], list, tuple, tuple[()], dict, Literal[math.pi, None.__class__], complex,
                 list[set[int]], int | bytes]
    for tp in bad_types:
        Bad = dataclasses.make_dataclass("Bad", [("x", tp, dataclasses.field(default=None))])
        refused(check_option_types, Bad, "part 'p'", match=r"^part 'p': option 'x' has the type .*, which a config "
                                                           r"cannot give; options may be int, float")
    refused(check_option_types, dict, "part 'p'", match=r"^part 'p': its Options must be a dataclass")
    refused(check_option_types, Good(), "part 'p'", match=r"its Options must be a dataclass")

    # an annotation naming a type its module cannot see
    Unseen = dataclasses.make_dataclass("Unseen", [("x", "NoSuchType", dataclasses.field(default=None))])
    refused(check_option_types, Unseen, "part 'p'", match=r"^part 'p': cannot read the annotations of Unseen: ")
