"""Fixtures for the interoperability suite: local fixture data, zarrd servers, moto's S3.

Servers are session-scoped (started once) and always stopped at teardown. Two zarrd
processes are used so a failing S3 set-up cannot take the local tests down with it:

- `zarrd`:    mounts `data` (fixture directory written by zarr-python, read tests),
              `rw` (empty scratch directory, write tests), `mem` (memory://).
- `zarrd_s3`: mounts `s3data` (the fixture directory uploaded to the bucket) and
              `s3rw` (an empty prefix), both on moto's server.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from fixture_data import write_fixtures
from zarrd_harness import RUNNING, S3_BUCKET, Moto, s3_keys, start_zarrd, upload_tree


@pytest.fixture(scope="session")
def fixture_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fixtures")


@pytest.fixture(scope="session")
def array_cases(fixture_dir):
    """Write the fixture arrays locally with zarr-python (before zarrd mounts the directory)."""
    return write_fixtures(fixture_dir)


@pytest.fixture(scope="session")
def rw_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("rw")


@pytest.fixture(scope="session")
def logs_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("logs")


@pytest.fixture(scope="session")
def zarrd(array_cases, fixture_dir, rw_dir, logs_dir):
    server = start_zarrd(
        {
            "data": fixture_dir.as_uri(),
            "rw": str(rw_dir),  # a plain path, the other accepted spelling
            "mem": "memory://",
        },
        log_path=logs_dir / "zarrd.log",
    )
    yield server
    server.stop()


@pytest.fixture(scope="session")
def moto():
    server = Moto()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3(moto):
    """A boto3 client on moto, with the test bucket created."""
    client = moto.client()
    client.create_bucket(Bucket=S3_BUCKET)
    return client


@pytest.fixture(scope="session")
def zarrd_s3(moto, s3, array_cases, fixture_dir, logs_dir):
    uploaded = upload_tree(s3, S3_BUCKET, fixture_dir, "data")
    assert uploaded > 0
    assert s3_keys(s3, S3_BUCKET, "data"), "upload to moto failed"
    server = start_zarrd(
        {
            "s3data": f"s3://{S3_BUCKET}/data",
            "s3rw": f"s3://{S3_BUCKET}/rw",
        },
        log_path=logs_dir / "zarrd-s3.log",
        env=moto.zarrd_env(),
    )
    yield server
    server.stop()


@pytest.fixture
def unique() -> str:
    """A fresh name, so tests sharing a mount never collide."""
    return uuid.uuid4().hex[:10]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On failure, attach the tail of every running zarrd's log."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or report.passed:
        return
    for server in RUNNING:
        report.sections.append((f"zarrd log {server.log_path.name} (tail)", server.log_tail(30)))


# --- Azurite (Azure Blob emulator) for the replica and store-fault tests ---------------------


@pytest.fixture(scope="session")
def azurite_endpoint():
    """The Azurite blob endpoint: the one scripts/test-all started (ZARRD_TEST_AZURITE_ENDPOINT),
    else one started (and stopped) here."""
    from azurite import Azurite, endpoint_from_env

    given = endpoint_from_env()
    if given:
        yield given
        return
    server = Azurite().start()
    yield server.endpoint
    server.stop()


@pytest.fixture
def blob(azurite_endpoint):
    """A direct (Shared Key signed) client of Azurite."""
    from azurite import BlobClient

    return BlobClient(azurite_endpoint)
