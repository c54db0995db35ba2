"""Where the tests find the repository and their committed data, wherever in tests/ a test file lives."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO_ROOT = TESTS.parent
TEST_DATA = TESTS / "data"
