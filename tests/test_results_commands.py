"""Every committed sweep result names the commands that rebuild it from today's configs.

Each results folder's `commands.txt` holds the `modformer sweep` commands its runs came
from. Resolved now (the config file, its profiles, the overrides), those commands must
build exactly the config each run recorded in its `config.yaml`, and every recorded run
must come from one of them: a config file that is renamed, merged into another's profiles
or edited cannot leave a result whose command no longer makes it.
"""

import shlex
from pathlib import Path

import pytest
import yaml

from modformer.config import config_from_dict
from modformer.configtools import flatten, to_dict
from modformer.sweep.kinds import kind_of
from modformer.sweep.spec import load_sweep

ROOT = Path(__file__).parent.parent
# How a run was carried out, not what it trained (a command line may set them or not).
OPERATIONAL = {"train.threads", "train.progress", "threads"}


def _paper(folder: Path) -> str | None:
    return (yaml.safe_load((folder / "sweep.yaml").read_text()).get("sweep") or {}).get("paper")


# The sweeps' folders (a sweep.yaml beside its runs), of every kind of run; those of a paper
# that is an example plugin (examples/<paper>, not installed in the project's environment)
# are checked with the plugin installed, by that plugin's test (tests/test_decon_plugin.py).
SWEEPS = sorted(p.parent for p in (ROOT / "results").rglob("commands.txt")
                if (p.parent / "runs").is_dir() and (p.parent / "sweep.yaml").is_file())
PLUGIN_FOLDERS = [f for f in SWEEPS if _paper(f) and (ROOT / "examples" / _paper(f)).is_dir()]
FOLDERS = [f for f in SWEEPS if f not in PLUGIN_FOLDERS]


def parse(line: str) -> tuple[str, list[str], list[str]]:
    """A `modformer sweep` command line: its config, profiles and overrides."""
    words = shlex.split(line)
    assert words[:2] == ["modformer", "sweep"], line
    config, profiles, overrides = words[2], [], []
    rest = iter(words[3:])
    for word in rest:
        if word == "--profile":
            profiles.append(next(rest))
        elif word in ("--out", "--workers", "--amend"):
            next(rest)
        elif word == "--plan-only":  # recorded the plan (an amendment) and started no run
            overrides.append(word)
        else:
            assert not word.startswith("--"), f"{word} in {line}"
            overrides.append(word)
    return config, profiles, overrides


def recorded(path: Path, kind) -> dict:
    """A run's saved config as today's code reads it."""
    data = yaml.safe_load(path.read_text())
    return flatten(to_dict(config_from_dict(data) if kind.name == "train" else kind.read(data)))


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: str(p.relative_to(ROOT / "results")))
def test_a_results_folders_commands_rebuild_every_run_it_holds(folder, monkeypatch):
    monkeypatch.chdir(ROOT)
    check_commands(folder)


def check_commands(folder: Path) -> None:
    """The check of one folder (run from the repository's root)."""
    runs = {str(p.parent.relative_to(folder / "runs")) for p in (folder / "runs").glob("**/config.yaml")}
    rebuilt, kind = set(), kind_of(folder)
    for line in filter(str.strip, (folder / "commands.txt").read_text().splitlines()):
        config, profiles, overrides = parse(line)
        if "--plan-only" in overrides:  # it recorded a plan and started no run: it must still load
            assert load_sweep(config, [o for o in overrides if o != "--plan-only"], profiles).runs()
            continue
        for run in load_sweep(config, overrides, profiles).runs():
            if run.run_id not in runs:
                continue  # a command may name runs that another folder holds, or none yet
            saved, built = recorded(folder / "runs" / run.run_id / "config.yaml", kind), flatten(to_dict(run.config))
            differ = sorted(k for k in saved.keys() | built.keys() if k not in OPERATIONAL and saved.get(k) != built.get(k))
            assert not differ, f"{run.run_id}: `{line}` now builds other {', '.join(differ)}"
            rebuilt.add(run.run_id)
    assert runs and runs == rebuilt, f"no command rebuilds {sorted(runs - rebuilt)[:3]}"
