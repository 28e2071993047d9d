"""The API key: every request but those to the open paths must carry `Authorization: Bearer KEY`.
Plain ASGI, ahead of routing, so a request without the key learns nothing else (not even which
paths exist), and streamed answers pass through untouched."""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from typing import Any

from hsedit.server.http_error import HttpError, error_response


class RequireKey:
    def __init__(self, app: Any, api_key: str | None, open_paths: Iterable[str] = ()) -> None:
        self.app, self.api_key, self.open_paths = app, api_key, frozenset(open_paths)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] not in self.open_paths and not self._authorized(scope):
            refusal = HttpError(401, "missing or wrong API key (Authorization: Bearer KEY)", "authentication_error")
            await error_response(refusal)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _authorized(self, scope: dict) -> bool:
        if self.api_key is None:
            return True
        header = dict(scope["headers"]).get(b"authorization", b"")
        scheme, _, given = header.partition(b" ")
        # compare_digest: the time taken says nothing about how much of the key was right
        return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.api_key.encode())
