"""Which Host and Origin the lab's doors let in (``origins``): loopback by default, the bound and told addresses,
any IP address under a wildcard bind (a rebinding page names a name), and what a user lists."""

from __future__ import annotations

import pytest

from pipeline.transport.server.origins import host_allowed, host_name, origin_allowed


@pytest.mark.parametrize(
    ("netloc", "name"),
    [("127.0.0.1:8003", "127.0.0.1"), ("[::1]:8003", "::1"), ("LAB.Example.:80", "lab.example"), ("::1", "::1")],
)
def test_a_host_header_is_read_as_its_name_without_port_brackets_case_or_final_dot(netloc: str, name: str) -> None:
    assert host_name(netloc) == name


@pytest.mark.parametrize(
    ("header", "bound", "told", "allowed", "expected"),
    [
        ("127.0.0.1:8003", "127.0.0.1", (), (), True),
        ("localhost:8003", "127.0.0.1", (), (), True),
        ("[::1]:8003", "127.0.0.1", (), (), True),
        ("lab.localhost", "127.0.0.1", (), (), True),  # RFC 6761: always this machine
        (None, "127.0.0.1", (), (), True),  # no Host: no browser's request
        ("evil.example:8003", "127.0.0.1", (), (), False),  # a rebinding page
        ("localhost.evil.example", "127.0.0.1", (), (), False),
        ("192.168.1.5:8003", "127.0.0.1", (), (), False),  # loopback only by default
        ("192.168.1.5:8003", "192.168.1.5", (), (), True),  # the address it binds
        ("192.168.1.5:8003", "0.0.0.0", (), (), True),  # every address bound: any address of it
        ("[fe80::1]:8003", "::", (), (), True),
        ("lab.example:8003", "0.0.0.0", (), (), False),  # a name is what rebinding needs: it must be listed
        ("lab.example:8003", "0.0.0.0", ("lab.example",), (), True),  # the public host devices are told
        ("lab.example:8003", "0.0.0.0", (), ("LAB.example",), True),
        ("evil.example", "127.0.0.1", (), ("*",), True),  # as the real server
    ],
)
def test_a_host_is_this_servers_when_loopback_bound_told_or_listed(
    header: str | None, bound: str, told: tuple[str, ...], allowed: tuple[str, ...], expected: bool
) -> None:
    assert host_allowed(header, bound, told, allowed) is expected


@pytest.mark.parametrize(
    ("origin", "allowed", "expected"),
    [
        (None, (), True),  # a device: firmware, py-xiaozhi and the emulator send no Origin
        ("http://localhost:5173", (), True),
        ("https://127.0.0.1", (), True),
        ("http://evil.example", (), False),
        ("null", (), False),  # a sandboxed frame or a file: anyone can make one
        ("file://", (), False),
        ("https://console.example", ("https://Console.example/",), True),
        ("https://console.example:8443", ("https://console.example",), False),
        ("http://evil.example", ("*",), True),
    ],
)
def test_an_origin_may_come_in_when_absent_of_this_machine_or_listed(
    origin: str | None, allowed: tuple[str, ...], expected: bool
) -> None:
    assert origin_allowed(origin, allowed) is expected
