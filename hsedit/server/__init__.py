"""`hsedit serve`: one warm engine behind HTTP. `wire` is light (the clients import it); the rest
needs the server's dependencies (FastAPI, uvicorn, vLLM)."""
