"""The HTTP door: FastAPI app (`app.create_app`), uvicorn runner (`server.serve`), routes, errors, metrics."""
