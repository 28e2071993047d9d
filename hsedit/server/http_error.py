"""An HTTP error and its response: every refusal the server makes, from any route or middleware,
is `schema.ErrorBody` (one line of message) with its status."""

from __future__ import annotations

from starlette.responses import JSONResponse

from hsedit.server.schema import ErrorBody


class HttpError(Exception):
    def __init__(self, status: int, message: str, kind: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.exit_code = status, kind, exit_code

    def body(self) -> ErrorBody:
        return ErrorBody.of(str(self), self.kind, self.exit_code)


def error_response(error: HttpError) -> JSONResponse:
    headers = {"Retry-After": "1"} if error.status == 429 else None  # a full queue: come back soon
    return JSONResponse(error.body().model_dump(), status_code=error.status, headers=headers)
