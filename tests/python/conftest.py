"""Fixtures: the real hematite binary on a free port and a temporary data
directory, SDK clients for it, and a raw Shared Key client for wire-level
checks (error bodies, headers, versions).

HEMATITE_PY_IN_MEMORY=1 runs every server of the suite with --in-memory
instead of a data directory (tools/test-all runs the suite both ways); tests
that need what only a disk gives (a restart that keeps the data, files in
the data directory) are marked `needs_disk` and skipped then."""

import base64
import hashlib
import hmac
import http.client
import os
import pathlib
import socket
import subprocess
import shutil
import tempfile
import time
import urllib.parse
import uuid
from email.utils import formatdate

import pytest
from azure.storage.queue import QueueServiceClient

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = os.environ.get("HEMATITE_BIN", str(ROOT / "target" / "debug" / "hematite"))
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
KEY2 = base64.b64encode(b"the second key of the dev account").decode()
OTHER = "otheraccount"
OTHER_KEY = base64.b64encode(b"a key for another account, 32 b").decode()
IN_MEMORY = os.environ.get("HEMATITE_PY_IN_MEMORY", "") not in ("", "0")
# HEMATITE_PY_TLS=1: every server serves HTTPS with the test certificate
# (tests/certs, signed by a test CA the SDKs are told to trust).
TLS = os.environ.get("HEMATITE_PY_TLS", "") not in ("", "0")
CERTS = ROOT / "tests" / "certs"
CA = str(CERTS / "ca.pem")
SCHEME = "https" if TLS else "http"
if TLS:
    # azure-core's default transport (requests) trusts this bundle.
    os.environ["REQUESTS_CA_BUNDLE"] = CA
plain_http_only = pytest.mark.skipif(TLS, reason="checks plain HTTP itself")
needs_disk = pytest.mark.skipif(IN_MEMORY, reason="--in-memory keeps nothing on disk and nothing across a restart")


def connection(port, timeout=10):
    """An http.client connection to the server, over TLS when the suite runs so."""
    if TLS:
        import ssl
        return http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=ssl.create_default_context(cafile=CA))
    return http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)


def open_socket(port, timeout=10):
    """A raw socket to the server (TLS-wrapped when the suite runs so)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    if TLS:
        import ssl
        s = ssl.create_default_context(cafile=CA).wrap_socket(s, server_hostname="127.0.0.1")
    return s


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """The binary on `port` (default: a free one), storing in `data` (default:
    a new temporary directory), or in memory (`data` is then None)."""

    def __init__(self, extra_args=(), port=None, data=None):
        self.port = port or free_port()
        args = [BIN, "--addr", f"127.0.0.1:{self.port}"]
        if IN_MEMORY:
            assert data is None, "a test that passes a data directory needs the disk: mark it needs_disk"
            self.data = None
            args += ["--in-memory"]
        else:
            self.data = data or tempfile.mkdtemp(prefix="hematite-test-")
            args += ["--data-dir", self.data]
        # A directory made here is removed at stop (its segments are
        # preallocated: left behind, runs fill /tmp).
        self.owns_data = data is None and not IN_MEMORY
        args += ["--account", f"{ACCOUNT}:{KEY}:{KEY2}", "--account", f"{OTHER}:{OTHER_KEY}"]
        if TLS:
            args += ["--cert", str(CERTS / "server.pem"), "--key", str(CERTS / "server.key")]
        args += list(extra_args)
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if "hematite ready" not in line:
            # No ready line: the process is exiting; its stderr says why.
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            err = self.proc.stderr.read()
            raise RuntimeError(f"hematite did not start: {line!r} {err}")
        self.ready_line = line
        assert ("in memory" in line) == IN_MEMORY, f"not the storage the suite asked for: {line!r}"

    @property
    def endpoint(self):
        return f"{SCHEME}://127.0.0.1:{self.port}/{ACCOUNT}"

    def conn_str(self, account=ACCOUNT, key=KEY):
        return (
            f"DefaultEndpointsProtocol={SCHEME};AccountName={account};AccountKey={key};"
            f"QueueEndpoint={SCHEME}://127.0.0.1:{self.port}/{account};"
        )

    def stop(self):
        self.proc.terminate()
        code = self.proc.wait(timeout=20)
        if self.owns_data:
            shutil.rmtree(self.data, ignore_errors=True)
        return code


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    assert s.stop() == 0, "hematite must exit 0 on SIGTERM"


@pytest.fixture
def svc(server):
    return QueueServiceClient.from_connection_string(server.conn_str())


@pytest.fixture
def qname():
    return "q" + uuid.uuid4().hex[:20]


@pytest.fixture
def queue(svc, qname):
    q = svc.create_queue(qname)
    yield q
    try:
        q.delete_queue()
    except Exception:
        pass


def signature(key, sts):
    """Base64 HMAC-SHA256 of a string to sign under a base64 account key:
    the signature of Shared Key, Shared Key Lite and every SAS."""
    return base64.b64encode(hmac.new(base64.b64decode(key), sts.encode(), hashlib.sha256).digest()).decode()


class Raw:
    """A minimal Shared Key client, written from the reference, for wire checks."""

    def __init__(self, port, account=ACCOUNT, key=KEY):
        self.port, self.account, self.key = port, account, key

    def sign(self, method, path, query, headers):
        lower = {k.lower(): v for k, v in headers.items()}
        length = lower.get("content-length", "")
        if length == "0":
            length = ""
        lines = [method, lower.get("content-encoding", ""), lower.get("content-language", ""), length,
                 lower.get("content-md5", ""), lower.get("content-type", ""), "" if "x-ms-date" in lower else lower.get("date", ""),
                 lower.get("if-modified-since", ""), lower.get("if-match", ""), lower.get("if-none-match", ""),
                 lower.get("if-unmodified-since", ""), lower.get("range", "")]
        ms = sorted((k, v.strip()) for k, v in lower.items() if k.startswith("x-ms-"))
        canon_headers = "".join(f"{k}:{v}\n" for k, v in ms)
        resource = f"/{self.account}{path}"
        params = {}
        for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True):
            params.setdefault(k.lower(), []).append(v)
        for k in sorted(params):
            resource += f"\n{k}:{','.join(sorted(params[k]))}"
        sts = "\n".join(lines) + "\n" + canon_headers + resource
        sig = signature(self.key, sts)
        return f"SharedKey {self.account}:{sig}"

    def sign_lite(self, method, path, query, headers):
        lower = {k.lower(): v for k, v in headers.items()}
        ms = sorted((k, v.strip()) for k, v in lower.items() if k.startswith("x-ms-"))
        resource = f"/{self.account}{path}"
        comp = dict(urllib.parse.parse_qsl(query)).get("comp")
        if comp:
            resource += f"?comp={comp}"
        sts = "\n".join([method, lower.get("content-md5", ""), lower.get("content-type", ""), ""]) + "\n"
        sts += "".join(f"{k}:{v}\n" for k, v in ms) + resource
        sig = signature(self.key, sts)
        return f"SharedKeyLite {self.account}:{sig}"

    def request(self, method, path, query="", headers=None, body=b"", sign=True, lite=False, sign_path=None):
        headers = dict(headers or {})
        headers.setdefault("x-ms-date", formatdate(usegmt=True))
        headers.setdefault("x-ms-version", "2026-10-06")
        if body:
            headers["Content-Length"] = str(len(body))
        if sign:
            signer = self.sign_lite if lite else self.sign
            headers["Authorization"] = signer(method, sign_path or path, query, headers)
        conn = connection(self.port)
        conn.request(method, path + ("?" + query if query else ""), body=body or None, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data.decode("utf-8", "replace")


@pytest.fixture
def raw(server):
    return Raw(server.port)


def wait_until(pred, timeout=5.0):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False
