"""The Hub as an OAuth provider ("Sign in with Hugging Face"), for apps registered on this Hub.

The Hub's OpenID Connect discovery, authorization-code flow and userinfo, as a Space with
`hf_oauth: true` uses them: the app sends the browser to `/oauth/authorize` with its client id,
redirect URI, scopes and state; the user approves; the browser comes back to the redirect URI with
a code and the state; the app trades the code (with its client secret) at `/oauth/token` for an
access token that acts as the user; `/oauth/userinfo` names them. Where the real Hub signs the
browser in with its own session, this page takes the user's token (the local Hub has no logins).
A code is used once, within 10 minutes, by the app and redirect URI it was issued to; an unknown
client, a redirect URI not registered or a wrong secret is refused as the Hub refuses it.
"""

from __future__ import annotations

import base64
import hashlib
import html
import secrets
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from .store import Store, StoreError

CODE_TTL_S = 600


@dataclass(frozen=True)
class OAuthApp:
    client_id: str
    client_secret: str
    redirect_uris: tuple[str, ...]


@dataclass
class OAuthProvider:
    store: Store
    apps: dict[str, OAuthApp] = field(default_factory=dict)
    # code → user, app, redirect uri, scope, issued at, PKCE challenge ("" without)
    _codes: dict[str, tuple[str, str, str, str, float, str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def register(self, redirect_uris: list[str]) -> OAuthApp:
        app = OAuthApp(secrets.token_hex(8), secrets.token_hex(16), tuple(redirect_uris))
        self.apps[app.client_id] = app
        return app

    def routes(self) -> list[tuple[str, str, object]]:
        return [
            ("GET", r"/\.well-known/openid-configuration", self.configuration),
            ("GET", r"/oauth/authorize", self.authorize_page),
            ("POST", r"/oauth/authorize", self.approve),
            ("POST", r"/oauth/token", self.token),
            ("GET", r"/oauth/userinfo", self.userinfo),
        ]

    async def configuration(self, request: Request) -> Response:
        base = str(request.base_url).rstrip("/")
        return JSONResponse(
            {
                "issuer": base,
                "authorization_endpoint": f"{base}/oauth/authorize",
                "token_endpoint": f"{base}/oauth/token",
                "userinfo_endpoint": f"{base}/oauth/userinfo",
                "response_types_supported": ["code"],
                "code_challenge_methods_supported": ["S256"],
                "scopes_supported": ["openid", "profile", "read-repos", "write-repos", "manage-repos"],
            }
        )

    def _app(self, client_id: str | None, redirect_uri: str | None) -> OAuthApp:
        app = self.apps.get(client_id or "")
        if app is None:
            raise StoreError(400, "Unknown client_id")
        if redirect_uri not in app.redirect_uris:
            raise StoreError(400, "redirect_uri is not registered for this app")
        return app

    async def authorize_page(self, request: Request) -> Response:
        q = request.query_params
        if q.get("response_type") != "code":
            raise StoreError(400, "response_type must be code")
        app = self._app(q.get("client_id"), q.get("redirect_uri"))
        e = html.escape
        hidden = "".join(
            f'<input type="hidden" name="{name}" value="{e(q.get(name) or "")}">'
            for name in ("client_id", "redirect_uri", "state", "scope", "code_challenge", "code_challenge_method")
        )
        return HTMLResponse(
            "<!doctype html><title>Sign in to the local Hub</title><h1>Authorize the app</h1>"
            f"<p>{e(app.client_id)} asks for: {e(q.get('scope') or '')}</p>"
            f'<form method="post" action="/oauth/authorize">{hidden}'
            '<label>Your token <input type="password" id="hub-token" name="token"></label>'
            "<button type=submit id=authorize>Authorize</button></form>"
        )

    async def approve(self, request: Request) -> Response:
        form = {k: v[0] for k, v in parse_qs((await request.body()).decode()).items()}
        app = self._app(form.get("client_id"), form.get("redirect_uri"))
        user = self.store.user_for(form.get("token"))
        if user is None:
            raise StoreError(401, "Sign in first")
        challenge, method = form.get("code_challenge", ""), form.get("code_challenge_method", "plain")
        if challenge and method != "S256":  # as the Hub: PKCE with S256, or none
            raise StoreError(400, "code_challenge_method must be S256")
        code = secrets.token_urlsafe(24)
        with self._lock:
            self._codes[code] = (
                user,
                app.client_id,
                form["redirect_uri"],
                form.get("scope", ""),
                time.monotonic(),
                challenge,
            )
        query = urlencode({"code": code, "state": form.get("state", "")})
        return RedirectResponse(f"{form['redirect_uri']}?{query}", status_code=302)

    async def token(self, request: Request) -> Response:
        form = {k: v[0] for k, v in parse_qs((await request.body()).decode()).items()}
        client_id, secret = form.get("client_id"), form.get("client_secret")
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("basic "):
            client_id, _, secret = base64.b64decode(auth[6:]).decode().partition(":")
        app = self.apps.get(client_id or "")
        if app is None or not secrets.compare_digest(app.client_secret, secret or ""):
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        if form.get("grant_type") != "authorization_code":
            return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)
        with self._lock:
            issued = self._codes.pop(form.get("code") or "", None)
        if (
            issued is None
            or issued[1] != app.client_id
            or issued[2] != form.get("redirect_uri")
            or time.monotonic() - issued[4] > CODE_TTL_S
            or (issued[5] and not secrets.compare_digest(issued[5], _s256(form.get("code_verifier") or "")))
        ):
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        access = self.store.add_user(issued[0], f"hf_oauth_{secrets.token_hex(16)}")
        return JSONResponse({"access_token": access, "token_type": "bearer", "expires_in": 28800, "scope": issued[3]})

    async def userinfo(self, request: Request) -> Response:
        auth = request.headers.get("authorization", "")
        user = self.store.user_for(auth[7:].strip() if auth.lower().startswith("bearer ") else None)
        if user is None:
            return JSONResponse({"error": "invalid_token"}, status_code=401)
        return JSONResponse({"sub": user, "name": user, "preferred_username": user})


def _s256(verifier: str) -> str:
    """PKCE's S256 challenge of `verifier` (RFC 7636): base64url of its SHA-256, unpadded."""
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
