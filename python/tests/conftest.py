"""Shared fixtures: the golden vectors, the abf command, digest makers."""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import tempfile
import time

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
DATA = pathlib.Path(os.environ.get("ABF_TEST_DATA", HERE.parent.parent / "tests" / "data"))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """tmp_path folders go under a folder of this run's own, removed when it
    ends: by default pytest keeps the last three runs' in
    $TMPDIR/pytest-of-<user>. (Runs before pytest's own configure hook,
    which reads --basetemp; a --basetemp given on the command line stands.)"""
    if config.option.basetemp is None:
        config.option.basetemp = tempfile.mkdtemp(prefix="abf-pytest-")
        config.abf_own_basetemp = config.option.basetemp


def pytest_unconfigure(config):
    own = getattr(config, "abf_own_basetemp", None)
    if own:
        shutil.rmtree(own, ignore_errors=True)


def wait_until(predicate, timeout=60.0, interval=0.02, what="the condition"):
    """Asks `predicate` every `interval` seconds until it returns a true
    value, and returns that value; when `timeout` seconds pass first, fails
    naming `what` (a string, or a function called for the message). The
    predicate is asked once more at the deadline. For a test that waits on
    another thread or process: it never assumes how long anything takes."""
    deadline = time.monotonic() + timeout
    while True:
        last_chance = time.monotonic() >= deadline
        value = predicate()
        if value:
            return value
        if last_chance:
            pytest.fail("waited %.0f s for %s, in vain" % (
                timeout, what() if callable(what) else what))
        time.sleep(max(0.0, min(interval, deadline - time.monotonic())))


def sha256_rows(texts) -> np.ndarray:
    """SHA-256 of each text, as an (N, 32) uint8 array."""
    joined = b"".join(hashlib.sha256(t.encode()).digest() for t in texts)
    return np.frombuffer(joined, np.uint8).reshape(-1, 32).copy()


def members(count: int, start: int = 0) -> np.ndarray:
    """SHA-256("member:<i>"), the golden vectors' members."""
    return sha256_rows(f"member:{i}" for i in range(start, start + count))


def non_members(count: int) -> np.ndarray:
    """SHA-256("non-member:<i>"), the golden vectors' probes."""
    return sha256_rows(f"non-member:{i}" for i in range(count))


def random_digests(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (count, 32), dtype=np.uint8)


@pytest.fixture(scope="session")
def data_dir() -> pathlib.Path:
    if not (DATA / "vectors" / "builds.tsv").exists():
        pytest.fail(f"golden vectors not found under {DATA} (set ABF_TEST_DATA)")
    return DATA


@pytest.fixture(scope="session")
def abf_cli() -> str:
    cli = os.environ.get("ABF_CLI") or shutil.which("abf")
    if not cli or not os.path.exists(cli):
        pytest.skip("the abf command is not built (ABF_CLI)")
    return cli
