"""Kafka's ``ssl.principal.mapping.rules``: from a client certificate's subject to a user name.

The rules are a comma-separated list, tried in order; the first that matches names the user::

    RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,
    RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,
    DEFAULT

``RULE:pattern/replacement/`` applies when ``pattern`` matches the whole distinguished name; every match of
it in the name is then replaced by ``replacement`` (Java's ``replaceAll``: ``$1`` or ``${name}`` is a group,
``\\x`` a literal ``x``). A trailing ``L`` or ``U`` turns the result to lower or upper case. In the pattern
and the replacement, ``\\/`` is a ``/`` that does not end the part. ``DEFAULT`` is the whole name.

The distinguished name is the subject in RFC 4514 form, most specific part first (``CN=alice,OU=eng,O=acme``),
as Kafka's ``X500Principal.getName()`` writes it for the common attributes (CN, L, ST, O, OU, C, STREET, DC,
UID); other attributes appear as dotted OIDs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cryptography import x509

__all__ = ["PrincipalMapper", "subject_name"]


def subject_name(der_certificate: bytes) -> str:
    """The RFC 4514 subject of a DER certificate (``CN=alice,OU=eng,O=acme``). Pure.

    Raises:
        ValueError: the bytes are not a DER X.509 certificate.
    """
    return x509.load_der_x509_certificate(der_certificate).subject.rfc4514_string()


_Part = str | int
# Java writes a named group (?<name>...); Python (?P<name>...).
_JAVA_NAMED_GROUP = re.compile(r"(?<!\\)\(\?<(?=[A-Za-z])")


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None
    replacement: tuple[_Part, ...] = ()
    case: str = ""
    text: str = "DEFAULT"

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        result = self.pattern.sub(self._expand, name)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result

    def _expand(self, match: re.Match[str]) -> str:
        return "".join(
            part if isinstance(part, str) else (match.group(part) or "") for part in self.replacement
        )


def _until_slash(text: str, start: int) -> tuple[str, int]:
    """The raw text from ``start`` to the next unescaped ``/`` (with ``\\/`` kept as ``/``), and the index
    after that slash."""
    out: list[str] = []
    i = start
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            following = text[i + 1]
            out.append("/" if following == "/" else char + following)
            i += 2
            continue
        if char == "/":
            return "".join(out), i + 1
        out.append(char)
        i += 1
    raise ValueError(f"invalid rule at {text[start:]!r}: expected RULE:pattern/replacement/")


def _replacement(raw: str, pattern: re.Pattern[str], rule: str) -> tuple[_Part, ...]:
    """Java's ``Matcher.replaceAll`` syntax as literal text and group references (numbers or names)."""
    parts: list[_Part] = []
    literal: list[str] = []
    i = 0
    while i < len(raw):
        char = raw[i]
        if char == "\\":
            if i + 1 == len(raw):
                raise ValueError(f"invalid rule {rule!r}: the replacement ends with a lone backslash")
            literal.append(raw[i + 1])
            i += 2
            continue
        if char != "$":
            literal.append(char)
            i += 1
            continue
        group: _Part
        if raw.startswith("{", i + 1):
            end = raw.find("}", i + 2)
            group = raw[i + 2 : end] if end > 0 else ""
            if not group or group not in pattern.groupindex:
                raise ValueError(f"invalid rule {rule!r}: no group named {group!r} in the pattern")
            group = pattern.groupindex[group]
            i = end + 1
        else:
            if i + 1 == len(raw) or not raw[i + 1].isdigit():
                raise ValueError(f"invalid rule {rule!r}: $ must name a group ($1, ${{name}}) or be escaped")
            group = int(raw[i + 1])
            i += 2
            while i < len(raw) and raw[i].isdigit() and group * 10 + int(raw[i]) <= pattern.groups:
                group = group * 10 + int(raw[i])
                i += 1
            if group > pattern.groups:
                raise ValueError(f"invalid rule {rule!r}: the pattern has no group {group}")
        if literal:
            parts.append("".join(literal))
            literal = []
        parts.append(group)
    if literal:
        parts.append("".join(literal))
    return tuple(parts)


def _parse_rule(text: str, start: int) -> tuple[_Rule, int]:
    if text.startswith("DEFAULT", start):
        return _Rule(None), start + len("DEFAULT")
    if not text.startswith("RULE:", start):
        raise ValueError(
            f"invalid rule at {text[start:]!r}: expected RULE:pattern/replacement/[LU] or DEFAULT"
        )
    raw_pattern, i = _until_slash(text, start + len("RULE:"))
    raw_replacement, i = _until_slash(text, i)
    case = ""
    if i < len(text) and text[i] in "LU":
        case = text[i]
        i += 1
    rule_text = text[start:i]
    try:
        pattern = re.compile(_JAVA_NAMED_GROUP.sub("(?P<", raw_pattern))
    except re.error as err:
        raise ValueError(f"invalid rule {rule_text!r}: bad pattern ({err})") from err
    return _Rule(pattern, _replacement(raw_replacement, pattern, rule_text), case, rule_text), i


class PrincipalMapper:
    """Parsed mapping rules. Immutable; safe to share between tasks and threads."""

    def __init__(self, rules: tuple[_Rule, ...]) -> None:
        self._rules = rules

    @classmethod
    def parse(cls, rules: str) -> PrincipalMapper:
        """The rules of ``rules`` (``ssl.principal.mapping.rules``); empty text is ``DEFAULT``. Pure.

        Raises:
            ValueError: a rule that is neither ``DEFAULT`` nor ``RULE:pattern/replacement/[LU]``, a pattern
                that is not a regular expression, or a replacement naming a group the pattern lacks.
        """
        text = rules.strip()
        if not text:
            return cls((_Rule(None),))
        parsed: list[_Rule] = []
        i = 0
        while True:
            while i < len(text) and text[i].isspace():
                i += 1
            rule, i = _parse_rule(text, i)
            parsed.append(rule)
            while i < len(text) and text[i].isspace():
                i += 1
            if i == len(text):
                return cls(tuple(parsed))
            if text[i] != ",":
                raise ValueError(f"invalid rules: unexpected {text[i:]!r} after {rule.text!r}")
            i += 1
            if text[i:].strip() == "":
                return cls(tuple(parsed))

    def map(self, distinguished_name: str) -> str:
        """The user name of the first rule matching ``distinguished_name``. Pure.

        Raises:
            ValueError: no rule matches, or the matching rule produces an empty name.
        """
        for rule in self._rules:
            result = rule.apply(distinguished_name)
            if result is None:
                continue
            if not result:
                raise ValueError(f"the rule {rule.text!r} maps {distinguished_name!r} to an empty name")
            return result
        raise ValueError(f"no ssl.principal.mapping.rules rule matches {distinguished_name!r}")

    def __repr__(self) -> str:
        return f"PrincipalMapper({', '.join(rule.text for rule in self._rules)!r})"
