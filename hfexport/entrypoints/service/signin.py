""" "Sign in with Hugging Face" on the request page, where the Hub offers it.

A Space with `hf_oauth: true` gets an OAuth app from the Hub, in its environment:
`OAUTH_CLIENT_ID`, `OAUTH_CLIENT_SECRET`, `OAUTH_SCOPES` and `OPENID_PROVIDER_URL` (read by
`huggingface_hub.constants`). With them the request page offers sign-in instead of asking for a
pasted token: the authorization-code flow the Hub's OpenID configuration describes (one discovery
request), the code traded with the client secret for an access token that acts as the user, and
`userinfo` naming them. Without them, `oauth_app()` is None and the page asks for a token.

A sign-in is bound to the browser that started it: `/request/login` gives that browser a random
nonce in a cookie (`SIGNIN_COOKIE`) and keeps, under the `state` it sends to the Hub, the nonce's
digest and a PKCE verifier (RFC 7636, S256). The callback signs in only the browser whose cookie
matches the state, and trades the code with that verifier: a callback URL taken from someone
else's half-done sign-in signs no one in. At most `MAX_PENDING` sign-ins wait, each `STATE_TTL_S`.

A signed-in browser holds one random session id in a cookie (HttpOnly, SameSite=Lax, scoped to
`/request`, Secure over https); the access token stays in this process's memory (`Sessions`),
as a pasted token does, and is forgotten at sign-out, after `SESSION_TTL_S`, or on a restart. A
request submitted from a session must carry that session's form key (a hidden field), so a page of
another site cannot submit one in the user's name.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlencode

COOKIE = "hfexport_session"
SIGNIN_COOKIE = "hfexport_signin"
SESSION_TTL_S = 8 * 3600  # the Hub's access tokens last 8 h
STATE_TTL_S = 600
MAX_PENDING = 1000  # sign-ins under way kept at once: the oldest goes first (a login page hit costs ~200 B)


@dataclass(frozen=True)
class OAuthApp:
    """The OAuth app the Hub gave this service (a Space's)."""

    client_id: str
    client_secret: str
    scopes: str
    provider: str  # OPENID_PROVIDER_URL: the Hub


def oauth_app() -> OAuthApp | None:
    """The Space's OAuth app, where the Hub gave one (all four variables set), else None."""
    from huggingface_hub import constants

    values = (constants.OAUTH_CLIENT_ID, constants.OAUTH_CLIENT_SECRET, constants.OPENID_PROVIDER_URL)
    if not all(values):
        return None
    client_id, secret, provider = (str(v) for v in values)
    return OAuthApp(client_id, secret, constants.OAUTH_SCOPES or "openid profile", provider.rstrip("/"))


def callback_url(base_url: str) -> str:
    """Where the Hub sends the browser back: this service's `/request/callback`, at the Space's
    public https host where it runs in one (`SPACE_HOST`; the proxy hides it from the request)."""
    host = os.environ.get("SPACE_HOST")
    base = f"https://{host}" if host else base_url.rstrip("/")
    return f"{base}/request/callback"


@dataclass(frozen=True)
class Session:
    name: str  # the Hub user
    token: str  # the access token, acting as them
    form_key: str  # the hidden field a request from this session carries
    until: float


@dataclass(frozen=True)
class SignIn:
    """One sign-in under way: the `state` sent to the Hub, the `nonce` its browser holds in a
    cookie, and the PKCE `verifier` whose challenge the Hub was sent."""

    state: str
    nonce: str
    verifier: str

    @property
    def challenge(self) -> str:
        return _s256(self.verifier)


def _s256(text: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()


class Sessions:
    """Signed-in browsers and the sign-ins under way (at most `MAX_PENDING`), in memory only."""

    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}
        self._states: dict[str, tuple[str, str, float]] = {}  # state → the nonce's digest, verifier, started
        self._lock = threading.Lock()

    def start(self) -> SignIn:
        started = SignIn(secrets.token_urlsafe(24), secrets.token_urlsafe(24), secrets.token_urlsafe(48))
        with self._lock:
            now = time.monotonic()
            self._states = {s: v for s, v in self._states.items() if now - v[2] < STATE_TTL_S}
            while len(self._states) >= MAX_PENDING:  # the oldest sign-in under way goes first
                del self._states[next(iter(self._states))]
            self._states[started.state] = (_s256(started.nonce), started.verifier, now)
        return started

    def take(self, state: str, nonce: str | None) -> str | None:
        """The PKCE verifier of the sign-in `state`, when this browser (`nonce`, its cookie) started
        it within `STATE_TTL_S`; else None. Each state is used once, whoever presents it."""
        with self._lock:
            found = self._states.pop(state, None)
        if found is None or time.monotonic() - found[2] >= STATE_TTL_S:
            return None
        return found[1] if hmac.compare_digest(found[0], _s256(nonce or "")) else None

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._states)

    def open(self, name: str, token: str) -> str:
        session_id, until = secrets.token_urlsafe(32), time.monotonic() + SESSION_TTL_S
        with self._lock:
            self._sessions[session_id] = Session(name, token, secrets.token_urlsafe(16), until)
        return session_id

    def get(self, session_id: str | None) -> Session | None:
        with self._lock:
            found = self._sessions.get(session_id or "")
            if found is not None and found.until < time.monotonic():
                del self._sessions[session_id or ""]
                return None
            return found

    def close(self, session_id: str | None) -> None:
        with self._lock:
            self._sessions.pop(session_id or "", None)


class SignInFailed(Exception):
    pass


def authorize_url(app: OAuthApp, redirect_uri: str, sign_in: SignIn) -> str:
    endpoints = _endpoints(app)
    query = {
        "client_id": app.client_id,
        "redirect_uri": redirect_uri,
        "scope": app.scopes,
        "state": sign_in.state,
        "response_type": "code",
        "code_challenge": sign_in.challenge,
        "code_challenge_method": "S256",
    }
    return f"{endpoints['authorization_endpoint']}?{urlencode(query)}"


def signed_in(app: OAuthApp, code: str, redirect_uri: str, verifier: str) -> tuple[str, str]:
    """The user the Hub signed in, and their access token, for the `code` it sent back (traded with
    the sign-in's PKCE `verifier`).

    Raises:
        SignInFailed: the Hub refused the code (used, expired, another app's) or answered otherwise.
    """
    from huggingface_hub.utils import get_session

    endpoints = _endpoints(app)
    answer = get_session().post(
        endpoints["token_endpoint"],
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
        },
        auth=(app.client_id, app.client_secret),
        timeout=30,
    )
    if answer.status_code != 200 or "access_token" not in answer.json():
        raise SignInFailed(f"the Hub refused the sign-in (HTTP {answer.status_code})")
    token = str(answer.json()["access_token"])
    who = get_session().get(endpoints["userinfo_endpoint"], headers={"authorization": f"Bearer {token}"}, timeout=30)
    if who.status_code != 200:
        raise SignInFailed(f"the Hub did not say who signed in (HTTP {who.status_code})")
    info = who.json()
    return str(info.get("preferred_username") or info.get("name")), token


_DISCOVERED: dict[str, dict[str, str]] = {}


def _endpoints(app: OAuthApp) -> dict[str, str]:
    """The Hub's OpenID configuration (`/.well-known/openid-configuration`), read once."""
    from huggingface_hub.utils import get_session

    if app.provider not in _DISCOVERED:
        answer = get_session().get(f"{app.provider}/.well-known/openid-configuration", timeout=30)
        if answer.status_code != 200:
            raise SignInFailed(f"the Hub's OpenID configuration answered HTTP {answer.status_code}")
        _DISCOVERED[app.provider] = answer.json()
    return _DISCOVERED[app.provider]
