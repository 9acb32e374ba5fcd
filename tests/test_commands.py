"""The command table: every command once, papers' commands registered from their packages,
old names that work and say the new one, and one `modformer report` for every kind of folder."""

import argparse
import shutil
from pathlib import Path

import pytest

from modformer.cli import LIBRARY, all_commands, build_parser, main
from modformer.commands import COMMANDS, Command, register

ROOT = Path(__file__).resolve().parents[1]


def test_every_command_is_one_row_and_the_papers_come_from_their_packages():
    names = [c.name for c in all_commands()]
    assert len(names) == len(set(names))
    assert {"llm-modules", "knowledge-pretrained"} <= set(COMMANDS)
    assert not {"llm-modules", "knowledge-pretrained", "modules", "kb-pretrained"} & {c.name for c in LIBRARY}
    for command in COMMANDS.values():  # a paper's command is built by a module of its package
        assert command.build.__module__.startswith("modformer.papers."), command.name
    listed = build_parser().format_help()
    assert all(f"    {c.name}" in listed for c in all_commands() if c.help)
    assert "modules-report" not in listed  # kept for old command lines, not listed


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="'modules' is registered twice"):
        register(Command("modules", "again", lambda p: None))


@pytest.mark.parametrize("old, new", [("modules", "llm-modules"), ("kb-pretrained", "knowledge-pretrained")])
def test_an_old_name_works_and_says_the_new_one(old, new, capsys):
    with pytest.raises(SystemExit) as stop:
        main([old, "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr()
    assert f"`{old}` is now `modformer {new}`" in out.err and f"usage: modformer {new}" in out.out


@pytest.mark.parametrize("name", ["facts", "facts_layers", "facts_two_bridges_one_layer", "pretrained_student"])
def test_report_of_an_llm_modules_experiment_laid_out_as_a_sweep_is_its_committed_report(name, tmp_path):
    folder = tmp_path / name
    shutil.copytree(ROOT / "results/llm_modules" / name, folder)
    assert (folder / "sweep.yaml").is_file()
    committed = (folder / "report.md").read_text()
    (folder / "report.md").unlink()
    assert main(["report", str(folder)]) == 0
    assert (folder / "report.md").read_text() == committed


def test_report_of_a_folder_of_no_known_kind_is_one_line(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "is not a sweep directory (no sweep.yaml)" in err
    assert "Traceback" not in err


def test_knowledge_pretrained_reads_a_config_file_and_refuses_a_bad_one(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    assert main(["knowledge-pretrained", "ladder", str(bad), "--out", str(tmp_path / "out")]) == 2
    assert "must hold a mapping" in capsys.readouterr().err
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("no_such_key: 1\n")
    assert main(["knowledge-pretrained", "ladder", str(unknown), "--out", str(tmp_path / "out")]) == 2
    assert "no_such_key" in capsys.readouterr().err
    assert main(["knowledge-pretrained", "ladder", str(tmp_path / "none.yaml"), "--out", str(tmp_path / "out")]) == 2
    assert "config file not found" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before the run's folder is made


def test_each_command_builds_its_parser_from_its_row():
    sub = argparse.ArgumentParser().add_subparsers()
    for command in all_commands():
        parser = sub.add_parser(command.name)
        command.build(parser)
        assert parser.get_default("func") is not None or command.name == "bench", command.name
