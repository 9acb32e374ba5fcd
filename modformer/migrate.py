"""`modformer migrate DIR`: bring a folder written by an older modformer up to today's records.

Records are read by today's code only in today's form; what older versions wrote (a key
since moved, a task since renamed, a value since written out, a folder laid out another
way) is rewritten once, here, rather than read by a compatibility path in every reader. A
migration is a function on one kind of record that changes it in place and says what it
changed, in words:

- `CONFIG`: fn(data, saved) on a run config as plain data (a run's own config.yaml and the
  config each of its checkpoints embeds with `saved` true; a sweep's base config or a run's
  start config otherwise);
- `SWEEP`: fn(data) on a sweep.yaml as plain data (its `sweep` section included);
- `SUMMARY`: fn(summary, config) on a finished run's summary (summary.json and its copy in
  the sweep's results.jsonl), with the run's config.yaml as plain data (None where absent);
- `COMMAND`: fn(words) on one recorded command (a line of a sweep's commands.txt, split as the
  shell splits it), so that the commands still rebuild the runs they made;
- `LAYOUT`: fn(folder, config) -> bool, a folder laid out another way rewritten as today's
  (a sweep), True where it recognised the folder; `config`, where given, the sweep file that
  rebuilds it (a layout that does not say its own variants, grid and seeds needs one).

The library's own are below; a paper plugin adds the migrations of what it once wrote
(`Paper.migration`). Every migration is idempotent: a folder migrated twice is unchanged the
second time. Each file is written atomically, and the format stamp (`FORMAT`, in sweep.yaml
and each run's run.json) last, so a migration stopped midway is completed by running it again.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

import yaml

from .constructions import CONSTRUCTIONS
from .errors import ModformerError
from .files import atomic_write_text
from .point_names import Point, file_safe, grid_points, point_names
from .migrate_options import command_sections, config_sections, renamed_key, renamed_point, sweep_sections
from .registry import VARIANTS
from .version import RECORDS_FORMAT

FORMAT = RECORDS_FORMAT  # of sweep.yaml and run.json; records without a stamp are format 1 (before 2026-12-06)

ConfigMigration = Callable[[dict[str, Any], bool], list[str]]
SweepMigration = Callable[[dict[str, Any]], list[str]]
SummaryMigration = Callable[[dict[str, Any], "dict[str, Any] | None"], list[str]]
CommandMigration = Callable[[list[str]], list[str]]
LayoutMigration = Callable[[Path, "Path | None"], bool]

CONFIG: list[ConfigMigration] = []
SWEEP: list[SweepMigration] = []
SUMMARY: list[SummaryMigration] = []
COMMAND: list[CommandMigration] = []
LAYOUT: list[LayoutMigration] = []


# Tasks since renamed: former name -> today's.
TASK_NAMES = {"condattend": "retrieval"}


def _today_task(name: Any) -> Any:
    """A task name as registered today (`TASK_NAMES`); anything else as it is."""
    return TASK_NAMES.get(name, name) if isinstance(name, str) else name


def _task_name(data: dict[str, Any], saved: bool) -> list[str]:
    """A task since renamed (`TASK_NAMES`): the name it is registered under today."""
    task = data.get("task")
    name = task.get("name") if isinstance(task, dict) else None
    today = _today_task(name)
    if today != name:
        task["name"] = today
        return [f"task.name {name} -> {today}"]
    return []


def _variant_mixer(data: dict[str, Any], saved: bool) -> list[str]:
    """A run recorded before variants filled in their own mixer holds the default `attention`
    beside a variant built with another (MixiT's `mixing`): it was built with the variant's."""
    model = data.get("model")
    if not (saved and isinstance(model, dict) and isinstance(model.get("variant"), str)
            and model["variant"] in VARIANTS):
        return []
    mixer = VARIANTS[model["variant"]].mixer
    if mixer is not None and model.get("mixer") == "attention" and mixer != "attention":
        model["mixer"] = mixer
        return [f"model.mixer attention -> {mixer} (the {model['variant']} variant's)"]
    return []


# Records format 4 (2026-12-07): keys that left ModelConfig for the options of the construction
# that reads them (a paper's fidelity knobs), each with the value every other model had.
CONSTRUCTION_KEYS = {"residual_scale": 1.0, "skip_scale": 1.0, "scaled_linear": None}


def _construction_keys(data: dict[str, Any], saved: bool) -> list[str]:
    """`CONSTRUCTION_KEYS` moved into `model.construction_options` where the model's
    construction declares them, dropped where they hold the value every model had; any other
    value has no construction to read it, and is refused."""
    model = data.get("model")
    if not isinstance(model, dict) or not any(key in model for key in CONSTRUCTION_KEYS):
        return []
    name = model.get("construction", "corrected")
    Options = CONSTRUCTIONS[name].Options if isinstance(name, str) else None
    declared = {f.name for f in fields(Options)} if Options is not None else set()
    changed = []
    for key, default in CONSTRUCTION_KEYS.items():
        if key not in model:
            continue
        value = model.pop(key)
        if key in declared:
            options = model.get("construction_options")
            if not isinstance(options, dict):
                options = model["construction_options"] = {}
            options.setdefault(key, value)
            changed.append(f"model.{key} -> model.construction_options.{key}")
        elif value == default:
            changed.append(f"model.{key} dropped (the value every model had; no key holds it today)")
        else:
            raise ModformerError(f"model.{key}={value!r}: construction '{name}' has no such option, and the library's "
                                 f"model no longer holds it (records format 4); a construction that declares it "
                                 f"must be installed to migrate this config")
    return changed


def _sweep_kind(data: dict[str, Any]) -> list[str]:
    """A sweep saved before `sweep.experiment` existed is a sweep of `modformer train` runs."""
    sweep = data.get("sweep")
    if isinstance(sweep, dict) and "experiment" not in sweep:
        sweep["experiment"] = "train"
        return ["sweep.experiment: train (written out)"]
    return []


def _sweep_task_names(data: dict[str, Any]) -> list[str]:
    """The sweep's base config, and a `task.name` grid axis, in today's task names."""
    changed = _task_name(data, False)
    grid = (data.get("sweep") or {}).get("grid") or {}
    names = grid.get("task.name")
    if isinstance(names, list):
        today = [_today_task(n) for n in names]
        if today != names:
            grid["task.name"] = today
            changed.append(f"sweep.grid.task.name {names} -> {today}")
    return changed


def _summary_model(summary: dict[str, Any], config: dict[str, Any] | None) -> list[str]:
    """A summary recorded before summaries named the model: its variant's name (what reports
    showed for it)."""
    if "model" not in summary and isinstance(summary.get("variant"), str):
        summary["model"] = summary["variant"]
        return [f"summary.model: {summary['variant']} (its variant)"]
    return []


def _summary_task(summary: dict[str, Any], config: dict[str, Any] | None) -> list[str]:
    """A summary's task under a name since renamed: today's."""
    name = summary.get("task")
    today = _today_task(name)
    if today != name:
        summary["task"] = today
        return [f"summary.task {name} -> {today}"]
    return []


def _summary_flops_of(summary: dict[str, Any], config: dict[str, Any] | None) -> list[str]:
    """An MFU recorded before it said whose FLOPs it counted counted the standard model's."""
    from .train.mfu import STANDARD

    mfu = summary.get("mfu")
    if isinstance(mfu, dict) and "flops_of" not in mfu:
        mfu["flops_of"] = STANDARD
        return ["summary.mfu.flops_of: the standard model's (as every older summary counted)"]
    return []


def _summary_construction(summary: dict[str, Any], config: dict[str, Any] | None) -> list[str]:
    """A summary's construction label written from its run's config as today's code writes it:
    earlier labels said less ("reference" for a run whose optimizer departs from the reference
    script's; a departure under a key since moved). The label is words about the config, which
    is the record; a construction no installed paper registers is left as it was."""
    from .constructions import CONSTRUCTIONS, construction_label

    model = config.get("model") if isinstance(config, dict) else None
    if "construction" not in summary or not isinstance(model, dict) or \
            model.get("construction", "corrected") not in CONSTRUCTIONS:
        return []
    label = construction_label(config)
    if label == summary["construction"]:
        return []
    old, summary["construction"] = summary["construction"], label
    return [f"summary.construction: '{old}' -> '{label}' (from its config)"]


def _command_task_names(words: list[str]) -> list[str]:
    """A recorded override naming a task since renamed: today's name."""
    changed = []
    for i, word in enumerate(words):
        key, _, value = word.partition("=")
        if key == "task.name" and _today_task(value) != value:
            words[i] = f"{key}={_today_task(value)}"
            changed.append(f"{word} -> {words[i]}")
    return changed


def rename_override(words: list[str], old: str, new: str) -> list[str]:
    """Recorded overrides of the key `old` (`old=value`) as of `new`, in place; what changed."""
    changed = []
    for i, word in enumerate(words):
        if word.startswith(old + "="):
            words[i] = new + word[len(old):]
            changed.append(f"{old}= -> {new}=")
    return changed


CONFIG += [_task_name, _variant_mixer, config_sections]
COMMAND += [_command_task_names, command_sections]
SWEEP += [_sweep_kind, _sweep_task_names, sweep_sections]
SUMMARY += [_summary_model, _summary_task, _summary_flops_of, _summary_construction]


@dataclass
class Migrated:
    """What `migrate` did to a folder: each file it rewrote, with what changed in it."""

    folder: Path
    kind: str  # "sweep" or "run"
    changes: dict[str, list[str]] = field(default_factory=dict)  # file (relative) -> what changed

    def lines(self) -> list[str]:
        if not self.changes:
            return [f"{self.folder}: a {self.kind} folder already in today's records (format {FORMAT}); nothing to do"]
        return [f"{self.folder}: a {self.kind} folder, {len(self.changes)} file(s) rewritten",
                *(f"  {name}: {'; '.join(sorted(set(what)))}" for name, what in sorted(self.changes.items()))]


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ModformerError(f"cannot read {path} ({e.__class__.__name__}); nothing after it was migrated") from None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModformerError(f"cannot read {path} ({e.__class__.__name__}); nothing after it was migrated") from None


def _dump_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False)


def _dump_json(data: Any, like: str) -> str:
    """`data` as JSON indented as the file it replaces was (`like`, its text): a record
    rewritten changes in what it says, not in how it is laid out."""
    second = like.split("\n", 2)[1] if like.count("\n") > 1 else ""
    indent = len(second) - len(second.lstrip(" ")) or None
    return json.dumps(data, indent=indent) + "\n"


def _config_file(path: Path, saved: bool, done: Migrated) -> dict[str, Any] | None:
    data = _read_yaml(path)
    if not isinstance(data, dict):
        return None
    changed = _config(data, saved)
    if changed:
        atomic_write_text(path, _dump_yaml(data))
        done.changes[str(path.relative_to(done.folder))] = changed
    return data


def _config(data: dict[str, Any], saved: bool) -> list[str]:
    # The format-4 step last: a paper's migration may first move a former key of its own into
    # the construction's options, which that step then extends.
    return [c for fn in (*CONFIG, _construction_keys) for c in fn(data, saved)]


def _summary(summary: dict[str, Any], config: dict[str, Any] | None) -> list[str]:
    return [c for fn in SUMMARY for c in fn(summary, config)]


def _checkpoints(run: Path, done: Migrated) -> None:
    """The config each of a run's checkpoints embeds (what `modformer eval` and the analyses
    build the model from), rewritten in place with its tensors untouched."""
    from .errors import CheckpointError
    from .train.checkpoint import list_checkpoints, rewrite_checkpoint_meta

    def config(meta: dict[str, Any]) -> list[str]:
        data = meta.get("config")
        return _config(data, True) if isinstance(data, dict) else []

    for _, path in list_checkpoints(run / "checkpoints"):
        try:
            changed = rewrite_checkpoint_meta(path, config)
        except CheckpointError as e:
            raise ModformerError(f"cannot migrate {path}: {e}; move it out of the folder and migrate again "
                                 f"(the files before it are already migrated)") from None
        if changed:
            done.changes[str(path.relative_to(done.folder))] = [f"embedded config: {c}" for c in changed]


def _run_folder(run: Path, done: Migrated) -> dict[str, Any] | None:
    """A run's own config (saved), its checkpoints' configs, its summary and its run.json's
    format stamp; returns the config as migrated (None where the run has none)."""
    config = _config_file(run / "config.yaml", True, done) if (run / "config.yaml").is_file() else None
    _checkpoints(run, done)
    if (run / "summary.json").is_file():
        summary = _read_json(run / "summary.json")
        changed = _summary(summary, config) if isinstance(summary, dict) else []
        if changed:
            atomic_write_text(run / "summary.json", _dump_json(summary, (run / "summary.json").read_text()))
            done.changes[str((run / "summary.json").relative_to(done.folder))] = changed
    info = run / "run.json"
    if info.is_file():
        data = _read_json(info)
        if isinstance(data, dict) and data.get("format") != FORMAT:
            text = info.read_text()
            data = {"format": FORMAT, **{k: v for k, v in data.items() if k != "format"}}
            atomic_write_text(info, _dump_json(data, text))
            done.changes.setdefault(str(info.relative_to(done.folder)), []).append(f"format {FORMAT}")
    return config


def _commands(path: Path, done: Migrated) -> None:
    """The sweep's recorded commands, each line rewritten where a command migration changes it."""
    if not path.is_file():
        return
    lines, changed = [], []
    for line in path.read_text().splitlines():
        words = shlex.split(line) if line.strip() else []
        what = [c for fn in COMMAND for c in fn(words)]
        lines.append(shlex.join(words) if what else line)
        changed += what
    if changed:
        atomic_write_text(path, "".join(line + "\n" for line in lines))
        done.changes[str(path.relative_to(done.folder))] = changed


def _former_name(point: Point) -> str:
    """A grid point's folder name before records format 4: each value's Python text, its
    brackets, quotes and spaces made `_` (`model.layers=__mixit_,__standard__`)."""
    return file_safe(",".join(f"{k}={v}" for k, v in point) or "default")


def _point_renamer(saved: dict[str, Any]) -> Callable[[str], str]:
    """Today's folder name of a grid point named the former way: its keys renamed
    (`renamed_point`, records format 3) and, where a value is a list or a mapping, written
    plainly (`point_names`, format 4), by the grid of the sweep file `saved` (migrated)."""
    grid = (saved.get("sweep") or {}).get("grid") if isinstance(saved.get("sweep"), dict) else None
    points = grid_points(grid) if isinstance(grid, dict) and all(isinstance(v, list) for v in grid.values()) else []
    readable = dict(zip(point_names(points, _former_name), point_names(points)))
    return lambda name: readable.get(renamed_point(name), renamed_point(name))


def _rename_points(folder: Path, records: list[dict[str, Any]], done: Migrated, rename: Callable[[str], str]) -> bool:
    """Grid points named the former way (`rename`): their run, log and config folders moved to
    today's name, and the records naming them (results.jsonl, each run's recorded commands)
    rewritten; a folder already moved is left (a migration stopped midway completes). True
    where results.jsonl's records changed."""
    for kind in ("runs", "logs", "configs"):
        for arm in sorted(p for p in (folder / kind).iterdir() if p.is_dir()) if (folder / kind).is_dir() else []:
            for point in sorted(p for p in arm.iterdir() if p.is_dir()):
                new = rename(point.name)
                if new != point.name and not (arm / new).exists():
                    point.rename(arm / new)
                    done.changes.setdefault(f"{kind}/{arm.name}", []).append(f"{point.name} -> {new}")
    # Each run's recorded commands name its folders by path: every segment in today's name (also
    # where an earlier, interrupted migration moved the folder and stopped before this).
    for info in (folder / "runs").rglob("run.json") if (folder / "runs").is_dir() else []:
        text = info.read_text()
        rewritten = re.sub(r"(?<=/)[^/\"]+(?=/)", lambda m: rename(m.group(0)), text)
        if rewritten != text:
            atomic_write_text(info, rewritten)
            done.changes.setdefault(str(info.relative_to(folder)), []).append("recorded commands: grid point renamed")
    changed = False
    for record in records:
        for name in ("run_id", "run_dir"):
            value = record.get(name)
            if isinstance(value, str):
                today = "/".join(rename(part) for part in value.split("/"))
                if today != value:
                    record[name], changed = today, True
        point = record.get("point")
        if isinstance(point, dict) and any(renamed_key(k) != k for k in point):
            record["point"], changed = {renamed_key(k): v for k, v in point.items()}, True
    return changed


def _sweep_folder(folder: Path, done: Migrated) -> None:
    saved = _read_yaml(folder / "sweep.yaml")
    if not isinstance(saved, dict):
        raise ModformerError(f"{folder / 'sweep.yaml'} is not a sweep file (a mapping); nothing was migrated")
    changed = [c for fn in SWEEP for c in fn(saved)] + _config(saved, False)
    results = folder / "results.jsonl"
    records = []
    if results.is_file():
        from .train.records import read_records

        records = list(read_records(results))
    points_moved = _rename_points(folder, records, done, _point_renamer(saved))
    for path in sorted((folder / "configs").rglob("*.yaml")) if (folder / "configs").is_dir() else []:
        _config_file(path, False, done)  # the config each run was last started with
    configs: dict[str, Any] = {}  # run folder (relative) -> its config.yaml as migrated
    for run in sorted({p.parent for p in (folder / "runs").rglob("config.yaml")}) if (folder / "runs").is_dir() else []:
        configs[str(run.relative_to(folder))] = _run_folder(run, done)
    rewritten = []
    for record in records:  # each finished run's summary, as the sweep's report reads it
        summary = record.get("summary")
        if isinstance(summary, dict):
            rewritten += _summary(summary, configs.get(record.get("run_dir", f"runs/{record.get('run_id')}")))
    if rewritten or points_moved:
        atomic_write_text(results, "".join(json.dumps(r) + "\n" for r in records))
        done.changes["results.jsonl"] = rewritten + (["grid points renamed"] if points_moved else [])
    _commands(folder / "commands.txt", done)
    if changed or saved.get("format") != FORMAT:  # the stamp last: a folder stopped midway is not yet today's
        saved = {"format": FORMAT, **{k: v for k, v in saved.items() if k != "format"}}
        atomic_write_text(folder / "sweep.yaml", _dump_yaml(saved))
        done.changes["sweep.yaml"] = [*changed, f"format {FORMAT}"]


def migrate(folder: str | Path, config: str | Path | None = None) -> Migrated:
    """Rewrite `folder` (a sweep folder, a run folder, or one laid out as a paper's experiment
    once was) in today's records; idempotent. Refuses, in one line, a folder it does not know.
    `config`: the sweep file that rebuilds a former layout that does not say its own sweep."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModformerError(f"{folder}: no such folder")
    if config is not None and not Path(config).is_file():
        raise ModformerError(f"--config {config}: no such file")
    if not (folder / "sweep.yaml").is_file():
        for layout in LAYOUT:  # a paper's former layout becomes a sweep folder first
            if layout(folder, None if config is None else Path(config)):
                break
    if (folder / "sweep.yaml").is_file():
        done = Migrated(folder, "sweep")
        _sweep_folder(folder, done)
        return done
    if (folder / "config.yaml").is_file() and ((folder / "run.json").is_file() or (folder / "metrics.jsonl").is_file()):
        done = Migrated(folder, "run")
        _run_folder(folder, done)
        return done
    raise ModformerError(f"{folder} is not a folder modformer wrote (no sweep.yaml; no config.yaml with run.json or "
                         f"metrics.jsonl), nor one of a paper's former layouts: nothing was migrated")


def _migrate_command(args) -> int:
    for folder in args.folders:
        print("\n".join(migrate(folder, args.config).lines()))
    return 0


def migrate_arguments(p) -> None:
    """The arguments and handler of `modformer migrate`."""
    from .commands import describe_parser

    describe_parser(p, "Rewrite folders an older modformer wrote (sweep folders, run folders, a paper's former "
                       "layouts) in today's records, once: former keys, task names and layouts, values since "
                       "written out, also in the config each checkpoint embeds (its tensors untouched); each "
                       f"stamped format {FORMAT}. Idempotent: a folder already up to date is left "
                       "as it is. A folder it does not recognise is refused, unchanged.")
    p.add_argument("folders", nargs="+", metavar="DIR", help="sweep or run folders")
    p.add_argument("--config", help="the sweep file that rebuilds a folder of a former layout that does not say its "
                                    "own variants, grid and seeds (a knowledge edit folder)")
    p.set_defaults(func=_migrate_command)
