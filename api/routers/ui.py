"""`/ui`: the read-only web pages, files shipped with the package and served as they are.

The pages hold no data: they ask the `/v1` endpoints with the bearer token the person typed
into the login form (kept in the tab's session storage), so the UI has exactly the REST API's
authentication and tenant isolation. Files are read once, at import; the Content-Security-Policy
allows only this origin's scripts, styles and connections (no inline code, no CDN).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException, status
from fastapi.responses import RedirectResponse, Response

router = APIRouter(prefix="/ui", include_in_schema=False)

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'"
)


FOLDER = Path(__file__).parent.parent / "ui"
"""api/ui, found relative to this module: `gangq.api` has no `__init__.py`, and under
setuptools' default editable install `importlib.resources` cannot read such a package."""


def _files() -> dict[str, tuple[bytes, str]]:
    found = {}
    for entry in FOLDER.iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in CONTENT_TYPES:
            found[entry.name] = (entry.read_bytes(), CONTENT_TYPES[suffix])
    return found


FILES = _files()


@router.get("")
async def root() -> Response:
    return RedirectResponse("/ui/", status_code=status.HTTP_308_PERMANENT_REDIRECT)


@router.get("/{name:path}")
async def asset(name: str) -> Response:
    body, content_type = FILES.get(name or "index.html") or _missing(name)
    return Response(
        body,
        media_type=content_type,
        headers={"Content-Security-Policy": POLICY, "Cache-Control": "no-cache"},
    )


def _missing(name: str) -> tuple[bytes, str]:
    raise HTTPException(status.HTTP_404_NOT_FOUND, f"no file {name!r} in the web UI")
