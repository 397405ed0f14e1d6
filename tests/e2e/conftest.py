import pytest


@pytest.fixture(scope="session")
def prefect_harness():
    """Prefect's own test harness (a temporary database and API), with heartbeats off for speed."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        with temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            yield
