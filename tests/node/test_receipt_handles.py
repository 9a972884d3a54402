"""The receipt-handle key: derived from the cluster secret, or kept in the data directory of
a node without one; and the handle text it keys."""

from __future__ import annotations

import os
import stat

import pytest

from node.handle_key import KEY_FILE, HandleKeyError, receipt_handle_key
from node.receipt_handle import MalformedReceiptHandle, ReceiptHandle, ReceiptHandles


def test_nodes_with_the_same_cluster_secret_derive_the_same_key(tmp_path):
    one = receipt_handle_key("the-cluster-secret", str(tmp_path / "a"))
    assert one == receipt_handle_key("the-cluster-secret", str(tmp_path / "b"))
    assert one != receipt_handle_key("another-cluster-secret", str(tmp_path / "a"))
    assert not os.path.exists(tmp_path / "a" / KEY_FILE)  # nothing stored: it is derived


def test_a_node_without_a_cluster_secret_keeps_one_key_in_its_data_directory(tmp_path):
    key = receipt_handle_key("", str(tmp_path))
    path = tmp_path / KEY_FILE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert receipt_handle_key("", str(tmp_path)) == key  # the next start reads it back
    assert os.listdir(tmp_path) == [KEY_FILE]  # no partial file left behind
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    assert receipt_handle_key("", str(elsewhere)) != key  # random, not a default


def test_a_key_file_others_can_read_or_of_the_wrong_size_stops_the_node(tmp_path):
    receipt_handle_key("", str(tmp_path))
    path = tmp_path / KEY_FILE
    os.chmod(path, 0o644)
    with pytest.raises(HandleKeyError, match=r"readable by other users.*chmod 600"):
        receipt_handle_key("", str(tmp_path))
    os.chmod(path, 0o600)
    path.write_bytes(b"short")
    with pytest.raises(HandleKeyError, match="holds 5 bytes, a key has 32"):
        receipt_handle_key("", str(tmp_path))


def test_a_handle_verifies_only_for_its_topic_and_group_under_its_key():
    handles = ReceiptHandles(b"k" * 32)
    handle = ReceiptHandle(3, 12345, "0123456789abcdef")
    text = handles.encode(handle, "orders", "billing")
    assert handles.decode(text, "orders", "billing") == handle
    for topic, group in (("orders", "shipping"), ("invoices", "billing")):
        with pytest.raises(MalformedReceiptHandle, match="not issued by this cluster"):
            handles.decode(text, topic, group)
    with pytest.raises(MalformedReceiptHandle, match="not issued by this cluster"):
        ReceiptHandles(b"x" * 32).decode(text, "orders", "billing")
    tampered = text.replace(".12345.", ".12346.")
    with pytest.raises(MalformedReceiptHandle, match="not issued by this cluster"):
        handles.decode(tampered, "orders", "billing")
