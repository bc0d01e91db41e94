"""FASTCOMP_* environment variables: one parser, the usual spellings of on/off, and clear errors for the rest."""
import os
import subprocess
import sys

import pytest

import fastcomp
from fastcomp import config


@pytest.mark.parametrize("value, expected", [
    ("1", True), ("true", True), ("TRUE", True), ("Yes", True), ("on", True), (" On ", True),
    ("0", False), ("false", False), ("False", False), ("no", False), ("NO", False), ("off", False),
])
def test_on_off_variables_take_the_usual_spellings(monkeypatch, value, expected):
    for variable, setting in [("FASTCOMP_CUDA_BACKEND", "cuda_backend"), ("FASTCOMP_SUPPRESS_ERRORS", "suppress_errors")]:
        monkeypatch.setenv(variable, value)
        assert config._from_env(setting) is expected


def test_unset_or_empty_variables_give_the_defaults(monkeypatch):
    monkeypatch.delenv("FASTCOMP_CUDA_BACKEND", raising=False)
    monkeypatch.setenv("FASTCOMP_RECOMPILE_LIMIT", "")
    assert config._from_env("cuda_backend") is True
    assert config._from_env("recompile_limit") == 8
    assert config._from_env("automatic_dynamic_on_disk") is False


@pytest.mark.parametrize("variable, setting, value, message", [
    ("FASTCOMP_CUDA_BACKEND", "cuda_backend", "maybe",
     "FASTCOMP_CUDA_BACKEND='maybe' is not an on/off value; use 1/0, true/false, yes/no or on/off (any case), or "
     "unset it for the default (on)"),
    ("FASTCOMP_ERROR_ON_RECOMPILE", "error_on_recompile", "2",
     "FASTCOMP_ERROR_ON_RECOMPILE='2' is not an on/off value; use 1/0, true/false, yes/no or on/off (any case), or "
     "unset it for the default (off)"),
    ("FASTCOMP_RECOMPILE_LIMIT", "recompile_limit", "abc",
     "FASTCOMP_RECOMPILE_LIMIT='abc' is not a whole number >= 0; unset it for the default (8)"),
    ("FASTCOMP_RECOMPILE_LIMIT", "recompile_limit", "-3",
     "FASTCOMP_RECOMPILE_LIMIT='-3' is not a whole number >= 0; unset it for the default (8)"),
    ("FASTCOMP_NVRTC_THREADS", "nvrtc_threads", "2.5",
     "FASTCOMP_NVRTC_THREADS='2.5' is not a whole number >= 0; unset it for the default (0)"),
    ("FASTCOMP_NVRTC_FAST_COMPILE", "nvrtc_fast_compile", "fast",
     "FASTCOMP_NVRTC_FAST_COMPILE='fast' is not one of '', 'min', 'mid', 'max'"),
    ("FASTCOMP_GUARD_MEMO", "guard_memo", "on",
     "FASTCOMP_GUARD_MEMO='on' is not one of 'auto', 'always', 'off'"),
])
def test_invalid_values_are_rejected_naming_the_variable(monkeypatch, variable, setting, value, message):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError) as info:
        config._from_env(setting)
    assert str(info.value) == message


def test_import_fails_with_the_variable_named_not_a_bare_int_error():
    root = os.path.dirname(os.path.dirname(fastcomp.__file__))
    env = dict(os.environ, FASTCOMP_RECOMPILE_LIMIT="abc",
               PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-c", "import fastcomp"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == (
        "ValueError: FASTCOMP_RECOMPILE_LIMIT='abc' is not a whole number >= 0; unset it for the default (8)")


def test_settings_set_from_code_are_checked_the_same_way():
    with pytest.raises(ValueError, match=r"^fastcomp.config.recompile_limit must be >= 0, got -3$"):
        fastcomp.config.recompile_limit = -3
    with pytest.raises(TypeError, match=r"^fastcomp.config.recompile_limit must be int, got bool$"):
        fastcomp.config.recompile_limit = True
    with pytest.raises(ValueError, match=r"^fastcomp.config.nvrtc_fast_compile='fast' is not one of"):
        fastcomp.config.nvrtc_fast_compile = "fast"
    assert fastcomp.config.recompile_limit == 8 and fastcomp.config.nvrtc_fast_compile == ""
