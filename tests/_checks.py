"""Assertion helpers shared by the test modules."""

from __future__ import annotations

import re
from collections.abc import Callable


def check_rejects(fn: Callable[[], object], match: str) -> None:
    """The check: ``fn()`` raises a ValueError whose message names ``match``."""
    try:
        fn()
    except ValueError as err:
        assert re.search(match, str(err)), f"ValueError does not name {match!r}: {err}"
        return
    except Exception as err:
        raise AssertionError(f"expected ValueError naming {match!r}, got {type(err).__name__}: {err}") from err
    raise AssertionError(f"expected ValueError naming {match!r}; nothing was raised")
