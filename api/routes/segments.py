"""Path segments beside routes of their own: a `{param:<convertor>}` that never takes a
sibling route's literal name, so each such path is served by its own route for every
method (a wrong method is a 405 naming that route's methods, not a read of a resource of
that name), and the parameter's own pattern still answers a malformed value with a 422
naming the field."""

from __future__ import annotations

import re
from collections.abc import Iterable

from starlette.convertors import StringConvertor, register_url_convertor


def segment_except(convertor: str, reserved: Iterable[str]) -> None:
    """Register `convertor`: one path segment, anything but the `reserved` names."""
    names = "|".join(re.escape(name) for name in reserved)

    class Segment(StringConvertor):
        regex = f"(?!(?:{names})(?:/|$))[^/]+"

    register_url_convertor(convertor, Segment())
