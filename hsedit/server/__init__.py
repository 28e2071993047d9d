"""`hsedit serve`: one warm engine behind HTTP. The bodies (`schema`, `openai_schema`, `wire`) are
light, pydantic only (the clients import them); the rest needs the server's dependencies
(FastAPI, uvicorn, vLLM)."""
