"""Queue operations through the official Python SDK: create (201/204/409),
delete, metadata, list with paging, ACLs; names and metadata rules."""

import pytest
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.storage.queue import AccessPolicy, QueueSasPermissions
from conftest import SCHEME


def code(e):
    return e.value.error_code


def test_create_201_then_identical_204_then_conflict(svc, qname):
    q = svc.get_queue_client(qname)
    q.create_queue(metadata={"Color": "red"})
    # Python turns Azure's 204 (identical re-create) into ResourceExistsError
    with pytest.raises(ResourceExistsError):
        q.create_queue(metadata={"color": "red"})
    with pytest.raises(ResourceExistsError) as e:
        q.create_queue(metadata={"Color": "blue"})
    assert code(e) == "QueueAlreadyExists"
    q.delete_queue()


def test_create_status_codes_on_the_wire(raw, qname):
    path = f"/devstoreaccount1/{qname}"
    assert raw.request("PUT", path)[0] == 201
    assert raw.request("PUT", path)[0] == 204
    status, headers, body = raw.request("PUT", path, headers={"x-ms-meta-a": "1"})
    assert status == 409 and headers["x-ms-error-code"] == "QueueAlreadyExists"
    assert "<Code>QueueAlreadyExists</Code>" in body and "RequestId:" in body
    assert raw.request("DELETE", path)[0] == 204
    status, headers, _ = raw.request("DELETE", path)
    assert status == 404 and headers["x-ms-error-code"] == "QueueNotFound"


@pytest.mark.parametrize("name,error", [("ab", "OutOfRangeInput"), ("a" * 64, "OutOfRangeInput"),
                                        ("Upper", "InvalidResourceName"), ("a--b", "InvalidResourceName"),
                                        ("-ab", "InvalidResourceName"), ("a_b", "InvalidResourceName")])
def test_invalid_queue_names(svc, name, error):
    with pytest.raises(HttpResponseError) as e:
        svc.create_queue(name)
    assert code(e) == error and e.value.status_code == 400


def test_delete_missing_and_exists(svc, qname):
    q = svc.get_queue_client(qname)
    with pytest.raises(ResourceNotFoundError) as e:
        q.delete_queue()
    assert code(e) == "QueueNotFound"
    with pytest.raises(ResourceNotFoundError):
        q.get_queue_properties()


def test_metadata_round_trip_keeps_case(queue):
    queue.set_queue_metadata({"MixedCase": "v1", "other_1": ""})
    props = queue.get_queue_properties()
    assert props.metadata == {"MixedCase": "v1", "other_1": ""}
    queue.set_queue_metadata({})
    assert queue.get_queue_properties().metadata == {}


def test_metadata_rules(queue, raw):
    with pytest.raises(HttpResponseError) as e:
        queue.set_queue_metadata({"1bad": "x"})
    assert code(e) == "InvalidMetadata"
    with pytest.raises(HttpResponseError) as e:
        queue.set_queue_metadata({"big": "v" * 9000})
    assert code(e) == "MetadataTooLarge"
    status, headers, _ = raw.request("PUT", f"/devstoreaccount1/{queue.queue_name}", "comp=metadata", {"x-ms-meta-": "x"})
    assert (status, headers["x-ms-error-code"]) == (400, "EmptyMetadataKey")


def test_get_metadata_headers_and_head(raw, queue):
    queue.set_queue_metadata({"Foo": "bar"})
    queue.send_message("m")
    path = f"/devstoreaccount1/{queue.queue_name}"
    status, headers, body = raw.request("HEAD", path, "comp=metadata")
    assert status == 200 and body == ""
    assert headers["x-ms-approximate-messages-count"] == "1"
    assert headers["x-ms-meta-foo"] == "bar"
    status, headers, body = raw.request("HEAD", "/devstoreaccount1/nosuchqueue1", "comp=metadata")
    assert status == 404 and body == "" and headers["x-ms-error-code"] == "QueueNotFound"


def test_list_queues_prefix_paging_and_metadata(svc):
    names = [f"listq-{i:02d}" for i in range(7)]
    for n in names:
        svc.create_queue(n, metadata={"Idx": n[-2:]})
    try:
        got = [q.name for q in svc.list_queues(name_starts_with="listq-")]
        assert got == names
        pages = svc.list_queues(name_starts_with="listq-", results_per_page=3).by_page()
        sizes = [len(list(p)) for p in pages]
        assert sizes == [3, 3, 1]
        with_md = list(svc.list_queues(name_starts_with="listq-0", include_metadata=True))
        assert with_md[0].metadata == {"Idx": "00"}
    finally:
        for n in names:
            svc.delete_queue(n)


def test_list_queues_wire_shape_and_errors(raw):
    status, _, body = raw.request("GET", "/devstoreaccount1/", "comp=list&maxresults=1&prefix=zzzz-none")
    assert status == 200
    assert f'<EnumerationResults ServiceEndpoint="{SCHEME}://127.0.0.1:' in body
    assert "<Prefix>zzzz-none</Prefix><MaxResults>1</MaxResults><Queues /><NextMarker />" in body
    status, headers, body = raw.request("GET", "/devstoreaccount1/", "comp=list&maxresults=0")
    assert (status, headers["x-ms-error-code"]) == (400, "OutOfRangeQueryParameterValue")
    status, headers, _ = raw.request("GET", "/devstoreaccount1/", "comp=list&marker=garbage")
    assert (status, headers["x-ms-error-code"]) == (400, "InvalidMarker")
    status, headers, _ = raw.request("GET", "/devstoreaccount1/", "comp=list&include=acl")
    assert (status, headers["x-ms-error-code"]) == (400, "InvalidQueryParameterValue")


def test_acl_round_trip_and_limits(queue, raw):
    policy = AccessPolicy(permission=QueueSasPermissions(read=True, process=True),
                          expiry="2099-01-01T00:00:00Z", start="2020-01-01T00:00:00Z")
    queue.set_queue_access_policy(signed_identifiers={"p1": policy, "p2": AccessPolicy()})
    got = queue.get_queue_access_policy()
    assert set(got) == {"p1", "p2"}
    assert got["p1"].permission == "rp"
    status, _, body = raw.request("GET", f"/devstoreaccount1/{queue.queue_name}", "comp=acl")
    assert status == 200 and "<Start>2020-01-01T00:00:00.0000000Z</Start>" in body
    too_many = {f"p{i}": AccessPolicy(permission="r", expiry="2099-01-01T00:00:00Z") for i in range(6)}
    with pytest.raises(HttpResponseError) as e:
        queue.set_queue_access_policy(signed_identifiers=too_many)
    assert code(e) == "InvalidXmlDocument"
    queue.set_queue_access_policy(signed_identifiers={})
    assert queue.get_queue_access_policy() == {}


def test_unsupported_verb_and_bad_uri(raw, queue):
    status, headers, _ = raw.request("POST", f"/devstoreaccount1/{queue.queue_name}")
    assert (status, headers["x-ms-error-code"]) == (405, "UnsupportedHttpVerb")
    status, headers, _ = raw.request("GET", f"/devstoreaccount1/{queue.queue_name}/notmessages")
    assert (status, headers["x-ms-error-code"]) == (400, "InvalidUri")
    status, headers, _ = raw.request("GET", f"/devstoreaccount1/{queue.queue_name}", "comp=bogus")
    assert (status, headers["x-ms-error-code"]) == (400, "InvalidQueryParameterValue")
