"""Redirects to link-local and cloud metadata hosts: refused before anything connects, in one line naming the host, not
retried (hub/hosts.py); loopback and private addresses stay allowed for mirrors and tests.

The test Hub answers the API call, the config.json download or the CDN's header read with a real 302 to such a host.
That nothing connected there is read from Python's own `socket.connect` audit events, which every connection raises.
"""

from __future__ import annotations

import socket
import sys
import time
from ipaddress import ip_address

import pytest

from hfmem.cli.main import run
from hfmem.hub.hosts import refusal, resolved

MODEL = "openai-community/gpt2"
STEPS = {"api": ("/api/models/*", "hub"), "config": ("*/resolve/*/config.json", "hub"),
         "header": ("*/model.safetensors", "cdn")}
TARGETS = {  # the Location's host -> what the error names
    "169.254.169.254": "169.254.169.254 is a cloud instance-metadata address",
    "2852039166": "2852039166 resolves to 169.254.169.254",  # the same address as a number: resolved, not parsed
    "0xa9.0xfe.0x01.0x02": "0xa9.0xfe.0x01.0x02 resolves to 169.254.1.2, a link-local address",
    "[fe80::1]": "fe80::1 is a link-local address",
    "[fd00:ec2::254]": "fd00:ec2::254 is a cloud instance-metadata address",
    "100.100.100.200": "100.100.100.200 is a cloud instance-metadata address",
    "metadata.google.internal": "metadata.google.internal is a cloud instance-metadata host",
}
_connects: list[tuple] = []
_watching: list[bool] = []


def _audit(event: str, args: tuple) -> None:
    if event == "socket.connect" and _watching:
        _connects.append(args[1])


sys.addaudithook(_audit)  # cannot be removed: it records only while a test watches


@pytest.fixture
def connections():
    """The addresses sockets of this process connect to while the test runs."""
    _connects.clear()
    _watching.append(True)
    yield _connects
    _watching.clear()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("step", STEPS)
def test_a_redirect_to_a_metadata_host_is_refused(hub, capsys, connections, step, target):
    pattern, host = STEPS[step]
    fault = hub.inject(pattern, host=host, status=302, times=None,
                       headers={"Location": f"http://{target}/latest/meta-data/iam/security-credentials/"})
    capsys.readouterr()
    started = time.monotonic()
    code = run([MODEL, "--format", "json", "--timeout", "5"])
    elapsed = time.monotonic() - started
    out, err = capsys.readouterr()
    assert code == 6 and out == "", err
    assert err.startswith("hfmem: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert TARGETS[target] in err and "refused to connect" in err, err
    # Not retried (before, 5 tries each); one more hit can come from the previous case's header fetch, which its
    # config failure left running on a daemon thread in this process.
    assert fault.hits <= 2
    assert elapsed < 5  # no connection attempt waited for its timeout
    ports = {hub.url.rsplit(":", 1)[1], hub.cdn_url.rsplit(":", 1)[1]}
    assert all(a[0] == "127.0.0.1" and str(a[1]) in ports for a in connections), connections


def test_loopback_and_private_hosts_stay_allowed():
    for host in ("127.0.0.1", "127.8.9.10", "localhost", "[::1]", "10.0.0.7", "172.16.5.4", "192.168.1.10",
                 "[fc00::1]", "[fd12:3456::1]", "100.64.0.1", "8.8.8.8"):
        assert refusal(host) is None, host


def test_each_way_to_write_a_refused_address():
    assert refusal("169.254.0.1") == "169.254.0.1 is a link-local address"
    assert refusal("[::ffff:169.254.169.254]") == "[::ffff:169.254.169.254] is a cloud instance-metadata address"
    assert refusal("fe80::1%eth0") == "fe80::1%eth0 is a link-local address"
    assert refusal("febf::1") == "febf::1 is a link-local address" and refusal("fec0::1") is None  # fe80::/10 ends
    assert refusal("METADATA.google.internal.") == "METADATA.google.internal. is a cloud instance-metadata host"
    assert refusal("169.254.43518") == "169.254.43518 resolves to 169.254.169.254, a cloud instance-metadata address"
    assert refusal("192.0.0.192") == "192.0.0.192 is a cloud instance-metadata address"


def test_names_are_resolved_as_the_connection_would():
    assert resolved("localhost") and all(ip_address(a).is_loopback for a in resolved("localhost"))
    assert set(resolved("2852039166")) == {ip_address("169.254.169.254")}
    assert resolved("no-such-host.invalid") == ()
    assert socket.getaddrinfo("2852039166", None)[0][4][0] == "169.254.169.254"  # what a connection would reach


def test_the_audit_events_show_every_connection(hub, connections):
    """What the refusal test relies on: a connection, even one that fails, is in `connections` before it is made."""
    port = int(hub.url.rsplit(":", 1)[1])
    socket.create_connection(("127.0.0.1", port), timeout=1).close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", 9), timeout=1)  # discard port: nothing listens
    assert connections == [("127.0.0.1", port), ("127.0.0.1", 9)]
