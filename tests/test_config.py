"""One table of TORCHNEURON_* knobs: read only through torchneuron.config, documented
in README exactly as the table says."""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

from torchneuron import config

ROOT = pathlib.Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "torchneuron"


def test_readme_table_is_the_config_table():
    readme = (ROOT / "README.md").read_text()
    for row in config.markdown_rows():
        assert row in readme, f"README lacks (or words differently) the row: {row}"
    documented = set(re.findall(r"^\| `(TORCHNEURON_[A-Z0-9_]+)`", readme, re.M))
    users = {k.name for k in config.KNOBS.values() if not k.internal}
    assert documented == users


def test_knobs_are_read_only_in_config():
    readers = []
    for p in SRC.rglob("*.py"):
        if p.name == "config.py":
            continue
        for i, line in enumerate(p.read_text().splitlines(), 1):
            if re.search(r"environ(\.get)?\s*[\[(]\s*[\"']TORCHNEURON_", line):
                readers.append(f"{p.relative_to(ROOT)}:{i}")
    assert not readers, f"TORCHNEURON_* read outside config.py: {readers}"
    used = set()
    for p in SRC.rglob("*.py"):
        used |= set(re.findall(r"\bget\(\"(TORCHNEURON_[A-Z0-9_]+)\"\)", p.read_text()))
    # TORCHNEURON_AUTOLOAD is read by the autoload module, outside the package (importing
    # torchneuron.config would register the device before the decision); the internal
    # knobs of the test scripts are read by tests/ and scripts/
    scripts = {"TORCHNEURON_TEST_WORKERS", "TORCHNEURON_SKIP_GATE", "TORCHNEURON_SKIP_SLOW"}
    assert used == set(config.KNOBS) - {"TORCHNEURON_AUTOLOAD"} - scripts, \
        set(config.KNOBS) ^ used
    autoload = (ROOT / "src" / "_torchneuron_autoload.py").read_text()
    assert "TORCHNEURON_AUTOLOAD" in autoload
    tree = "\n".join(p.read_text() for p in [*(ROOT / "tests").rglob("*.py"),
                                              *(ROOT / "scripts").glob("*")] if p.is_file())
    assert all(k in tree for k in scripts)


@pytest.mark.parametrize("name,text,value", [
    ("TORCHNEURON_EXECUTABLE_CACHE", "12", 12),
    ("TORCHNEURON_MAPS_FRACTION", "0.25", 0.25),
    ("TORCHNEURON_INDEX_CHECKS", "off", False),
    ("TORCHNEURON_INDEX_CHECKS", "1", True),
    ("TORCHNEURON_FALLBACK", " Error ", "error"),
    ("TORCHNEURON_MEMORY_LIMIT", "2GiB", "2GiB"),
])
def test_values_are_parsed(monkeypatch, name, text, value):
    monkeypatch.setenv(name, text)
    assert config.get(name) == value


def test_defaults_and_bad_choice(monkeypatch):
    monkeypatch.delenv("TORCHNEURON_FALLBACK", raising=False)
    assert config.get("TORCHNEURON_FALLBACK") == "warn"
    monkeypatch.setenv("TORCHNEURON_FALLBACK", "sometimes")
    with pytest.raises(ValueError, match="TORCHNEURON_FALLBACK='sometimes' is not valid: "
                                         "expected one of 'warn', 'silent', 'error'"):
        config.get("TORCHNEURON_FALLBACK")
    with pytest.raises(KeyError):
        config.raw("TORCHNEURON_NOPE")


def test_cli_prints_the_settings():
    r = subprocess.run([sys.executable, "-m", "torchneuron.cli", "config"], capture_output=True,
                       text=True, timeout=120, env={**__import__("os").environ,
                                                    "TORCHNEURON_SDPA": "math"})
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("TORCHNEURON_SDPA"))
    assert "'math'" in line and "(set)" in line
