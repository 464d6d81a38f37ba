"""Fixtures for the comm tests."""

from __future__ import annotations

import pytest
from comm_facts import NCCL_FIXTURES


@pytest.fixture
def nccl_log():
    def read(name: str) -> str:
        return (NCCL_FIXTURES / name).read_text()

    return read
