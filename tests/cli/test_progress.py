"""Progress bars (``_progress``): on stderr only, never on stdout, and only when asked for or on a terminal."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from odradek.cli import _progress, dump_log
from tests.storage.helpers import batch, open_log, small_config


@pytest.fixture
def segment(tmp_path: Path) -> Path:
    path = tmp_path / "t-0"
    log = open_log(path, config=small_config())
    for _ in range(5):
        log.append(batch(5, value_size=40))
    log.close()
    return sorted(path.glob("*.log"))[0]


def _dump(path: Path) -> tuple[int, str]:
    out = io.StringIO()
    status = dump_log.run(argparse.Namespace(files=[path], print_data_log=False), out=out)
    return status, out.getvalue()


def test_dump_log_draws_a_bar_on_stderr_only_when_wanted(
    segment: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    status, plain = _dump(segment)
    assert status == 0
    assert capsys.readouterr().err == ""  # stderr is not a terminal here: no bar

    monkeypatch.setenv(_progress.PROGRESS_ENV, "1")
    status, with_bar = _dump(segment)
    assert status == 0
    assert with_bar == plain  # stdout is the same
    err = capsys.readouterr().err
    assert segment.name in err and "B/s" in err


def test_the_setting_and_the_minimum(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_progress.PROGRESS_ENV, "0")
    assert not _progress.wanted(10**9)
    monkeypatch.setenv(_progress.PROGRESS_ENV, "1")
    assert _progress.wanted(1, min_total=50)
    monkeypatch.delenv(_progress.PROGRESS_ENV)
    assert not _progress.wanted(1, min_total=50)
