"""OAuth bearer tokens under --oauth basic (docs/OPERATIONS.md, "OAuth"),
from the Python SDK with a token credential that mints Entra-shaped tokens
itself: accepted when well-formed, in their lifetime, from an Entra issuer
and for Azure Storage; refused with Azure's 401 otherwise. Without the flag
bearer tokens keep their 403."""

import base64
import json
import time

import pytest
from azure.core.credentials import AccessToken
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError
from azure.storage.queue import QueueServiceClient

from conftest import CA, CERTS, TLS, Server

TLS_ARGS = [] if TLS else ["--cert", str(CERTS / "server.pem"), "--key", str(CERTS / "server.key")]


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


class MintedToken:
    """A TokenCredential, as DefaultAzureCredential is one: each token is
    a JWT whose signature is junk (the server does not check it)."""

    def __init__(self, **overrides):
        self.overrides = overrides

    def get_token(self, *scopes, **kwargs):
        now = int(time.time())
        claims = {"aud": "https://storage.azure.com", "iss": "https://sts.windows.net/00000000-0000-0000-0000-000000000000/",
                  "iat": now, "nbf": now - 60, "exp": now + 3600, "oid": "test-user"}
        claims.update(self.overrides)
        header = {"alg": "RS256", "typ": "JWT"}
        token = ".".join([b64url(json.dumps(header).encode()), b64url(json.dumps(claims).encode()), b64url(b"unsigned")])
        return AccessToken(token, now + 3600)


@pytest.fixture(scope="module")
def oauth_server():
    s = Server(extra_args=TLS_ARGS + ["--oauth", "basic"])
    yield s
    assert s.stop() == 0


def client(server, credential):
    url = f"https://127.0.0.1:{server.port}/devstoreaccount1"
    return QueueServiceClient(url, credential=credential, connection_verify=CA)


def test_a_minted_token_works_for_every_operation(oauth_server):
    svc = client(oauth_server, MintedToken())
    q = svc.create_queue("oauthq")
    q.send_message("hello")
    assert q.receive_message().content == "hello"
    assert [x.name for x in svc.list_queues(name_starts_with="oauth")] == ["oauthq"]
    q.delete_queue()


@pytest.mark.parametrize("bad", [
    {"exp": int(time.time()) - 10},
    {"nbf": int(time.time()) + 600},
    {"aud": "https://vault.azure.net"},
    {"iss": "https://accounts.example.com/"},
])
def test_tokens_that_fail_a_rule_get_azures_401(oauth_server, bad):
    svc = client(oauth_server, MintedToken(**bad))
    with pytest.raises((ClientAuthenticationError, HttpResponseError)) as e:
        svc.create_queue("oauthbad")
    assert e.value.status_code == 401
    assert e.value.error_code == "InvalidAuthenticationInfo"


def test_without_the_flag_bearer_tokens_are_refused():
    s = Server(extra_args=TLS_ARGS)
    try:
        with pytest.raises(HttpResponseError) as e:
            client(s, MintedToken()).create_queue("oauthnone")
        assert e.value.status_code == 403 and e.value.error_code == "AuthenticationFailed"
    finally:
        assert s.stop() == 0


def test_oauth_without_https_is_refused_at_startup():
    if TLS:
        pytest.skip("the suite's servers all have a certificate")
    with pytest.raises(RuntimeError) as e:
        Server(extra_args=["--oauth", "basic"])
    assert "needs HTTPS" in str(e.value)
