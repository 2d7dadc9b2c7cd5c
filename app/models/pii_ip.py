"""PII rules for IP addresses: which addresses name a person under the shipped policy.

Pure regex / arithmetic, no model and no I/O (see app/models/pii_rules.py).
"""

from __future__ import annotations

import re

from app.models.pii_proposals import sentence_around

_NETMASK_OCTETS = {"0", "128", "192", "224", "240", "248", "252", "254", "255"}


# The public anycast DNS resolvers (Google, Cloudflare, Quad9, OpenDNS): services everyone
# configures, named in networking questions, never anyone's own address.
_PUBLIC_RESOLVERS = frozenset(
    [
        "8.8.8.8",
        "8.8.4.4",
        "1.1.1.1",
        "1.0.0.1",
        "9.9.9.9",
        "149.112.112.112",
        "208.67.222.222",
        "208.67.220.220",
        "2001:4860:4860::8888",
        "2001:4860:4860::8844",
        "2606:4700:4700::1111",
        "2606:4700:4700::1001",
    ]
)
# An address a DNS lookup gives a name: a host name or a DNS word, then "points/resolves to"
# ("shop.example.org resolves to X", "my domain points to X"), or an A/AAAA/DNS record's value
# ("The A record for example.org is X"; capitals kept, and "a record of his logins" is no DNS
# record). Dots inside names are text; a dot before a space ends the sentence.
_NAME_CHARS = r"(?:[^.?!\n]|\.(?=\S))"
_DNS_LOOKUP = re.compile(
    r"(?:\b(?:[a-z0-9-]+\.)+[a-z]{2,}\b|\b(?:domain|sub-?domain|host\s*name|dns|cname|nslookup|dig|record)s?\b)"
    + _NAME_CHARS
    + r"{0,40}?\b(?:points?|pointing|pointed|resolves?|resolving|resolved)\s+to\s*$",
    re.IGNORECASE,
)
_DNS_RECORD = re.compile(
    r"(?:\b(?-i:A|AAAA)|\bDNS)\s+records?\b(?!\s+of\b)" + _NAME_CHARS + r"{0,60}?\s*$", re.IGNORECASE
)
# Words that make an address someone's, whatever names it ("home.duckdns.org resolves to X, my home
# IP"): the address stays personal.
_PERSONAL_ADDRESS = re.compile(
    r"\b(?:(?:my|his|her|their|our|your)\s+(?:own\s+)?(?:home|house|flat|apartment|place|ip|connection|router)"
    r"|home\s+(?:ip|connection|network|address))\b",
    re.IGNORECASE,
)


def ip_names_a_server(text: str, start: int, value: str) -> bool:
    """A public resolver's address, or one a DNS lookup or record names (the words just before
    it), unless its sentence says whose it is."""
    if value in _PUBLIC_RESOLVERS:
        return True
    window = max(0, start - 80)
    named = _DNS_LOOKUP.search(text, window, start) or _DNS_RECORD.search(text, window, start)
    return named is not None and not _PERSONAL_ADDRESS.search(
        sentence_around(text, start, start + len(value))
    )


def ip_is_identifying(value: str) -> bool:
    """Only a globally routed address can point at a person. Unspecified, loopback, private
    (10/8, 172.16/12, 192.168/16, fc00::/7), link-local, shared (100.64/10), documentation
    (192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32) and other reserved ranges, broadcast
    and netmask values name no one outside the asker's own network: not personal data under the
    shipped policy (docs/security.md)."""
    import ipaddress

    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        return True  # Presidio's regex accepted it; leave the call to the recognizer
    if ip.is_unspecified or ip.is_loopback or ip.is_multicast or not ip.is_global:
        return False
    if ip.version == 6 and sum(1 for h in value.split(":") if h) < 3:  # "b[::2]", "fe80::1"
        return False
    octets = value.split(".")
    return not (len(octets) == 4 and octets[0] == "255" and all(o in _NETMASK_OCTETS for o in octets))
