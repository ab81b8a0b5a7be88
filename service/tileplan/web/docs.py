"""The API docs, offline: Swagger UI at /docs, its assets served by this server from the fastapi-offline package
(which ships Swagger UI 5), not a CDN. (ReDoc is left out: its bundle loads a logo from its makers' CDN.)

The page starts Swagger UI from a script file of this server (static/), so its Content-Security-Policy allows
scripts from this origin only: nothing inline, nothing from elsewhere.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from tileplan.api.auth import require_read
from tileplan.web.views import TEMPLATES

OPENAPI_URL = "/openapi.json"  # served here (not by FastAPI) so reads protected means the schema too
ASSETS = "/static/docs"  # Swagger UI's files, from fastapi-offline
OWN_STATIC = Path(__file__).resolve().parent / "static"

# Swagger UI styles elements inline and draws its icons from data: URIs.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                               "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; base-uri 'none'; "
                               "form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}

router = APIRouter(include_in_schema=False)


def asset_dir() -> Path:
    """Where the installed fastapi-offline keeps Swagger UI's files."""
    return Path(str(files("fastapi_offline") / "static"))


def install(app: FastAPI) -> None:
    """Mount the assets and add the docs pages (the app is made with docs_url=None, redoc_url=None and
    openapi_url=None: this router serves them, behind the read token rule)."""
    app.mount(ASSETS, StaticFiles(directory=asset_dir()), name="docs-assets")
    app.mount("/static", StaticFiles(directory=OWN_STATIC), name="static")
    app.include_router(router)


@router.get(OPENAPI_URL, dependencies=[Depends(require_read)])
async def openapi_schema(request: Request) -> JSONResponse:
    """The OpenAPI document, under the same token rule as the API it describes."""
    return JSONResponse(request.app.openapi())


@router.get("/docs", response_class=HTMLResponse, dependencies=[Depends(require_read)])
async def swagger_ui(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return TEMPLATES.TemplateResponse(
        request, "docs.html",
        {"title": request.app.title, "assets": root + ASSETS, "openapi_url": root + OPENAPI_URL,
         "oauth2_redirect_url": root + "/docs/oauth2-redirect"},
        headers=HEADERS)


@router.get("/docs/oauth2-redirect", response_class=HTMLResponse)
async def swagger_ui_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()
