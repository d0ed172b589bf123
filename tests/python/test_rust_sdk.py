"""The official Rust SDK (azure_storage_queue 1.1.0) over an account-SAS URL:
tools/test-all builds tests/rust-sdk and this runs it against the server."""

import os
import pathlib
import subprocess
from datetime import datetime, timedelta, timezone

import pytest
from azure.storage.queue import AccountSasPermissions, ResourceTypes, generate_account_sas

from conftest import ACCOUNT, KEY, ROOT, plain_http_only

CHECK = pathlib.Path(os.environ.get("HEMATITE_RUST_SDK_CHECK", ROOT / "target" / "rust-sdk" / "debug" / "hematite-rust-sdk-check"))


@plain_http_only
@pytest.mark.skipif(not CHECK.exists(), reason="tests/rust-sdk is not built (tools/test-all builds it)")
def test_rust_sdk_main_flows(server):
    sas = generate_account_sas(ACCOUNT, KEY, resource_types=ResourceTypes(container=True, object=True),
                               permission=AccountSasPermissions(read=True, write=True, delete=True, add=True, update=True, process=True),
                               expiry=datetime.now(timezone.utc) + timedelta(hours=1))
    url = f"{server.endpoint}/rustsdkq?{sas}"
    out = subprocess.run([str(CHECK)], env={**os.environ, "QUEUE_SAS_URL": url}, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr + out.stdout
    assert "all checks passed" in out.stdout
