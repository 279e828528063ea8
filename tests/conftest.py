"""Fixtures shared by every test folder."""

import signal

import pytest


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt in this process, as in a terminal (a background job inherits it ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
