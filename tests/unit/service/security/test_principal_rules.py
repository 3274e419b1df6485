"""Kafka's ssl.principal.mapping.rules: the documented examples, the syntax, and a real certificate."""

from __future__ import annotations

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from tierlog.service.security.principal_rules import PrincipalMapper, subject_name

KAFKA_DOC_RULES = """
RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,
RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,
RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,
DEFAULT
"""


def test_kafka_documented_examples() -> None:
    mapper = PrincipalMapper.parse(KAFKA_DOC_RULES)
    assert (
        mapper.map("CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown") == "serviceuser"
    )
    assert mapper.map("CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown") == "adminuser@admin"
    assert mapper.map("OU=Admin,CN=Bob.Smith,O=acme") == "bob.smith"
    assert mapper.map("O=acme,OU=nobody") == "O=acme,OU=nobody"


def test_upper_case_and_first_match_wins() -> None:
    mapper = PrincipalMapper.parse(
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/U, RULE:^CN=(.*)$/$1/"
    )
    assert mapper.map("CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown") == "ADMINUSER@ADMIN"
    assert mapper.map("CN=alice") == "alice"


def test_default_and_empty_rules_keep_the_whole_name() -> None:
    for rules in ("DEFAULT", "", "  DEFAULT  ,"):
        assert PrincipalMapper.parse(rules).map("CN=alice,O=acme") == "CN=alice,O=acme"


def test_no_matching_rule_is_an_error() -> None:
    mapper = PrincipalMapper.parse("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/")
    with pytest.raises(ValueError, match=r"no ssl\.principal\.mapping\.rules rule matches"):
        mapper.map("CN=alice,OU=Humans")
    with pytest.raises(ValueError, match="empty"):
        PrincipalMapper.parse("RULE:^CN=(.*)$/$1/").map("CN=")


def test_replacement_syntax() -> None:
    assert PrincipalMapper.parse(r"RULE:^CN=(\w+),O=(\w+)$/$2\/$1\$/").map("CN=alice,O=acme") == "acme/alice$"
    assert PrincipalMapper.parse(r"RULE:^CN=(?<user>\w+).*$/${user}/").map("CN=alice,O=acme") == "alice"
    # Java takes further digits only while they name a group: $10 with one group is $1 then "0".
    assert PrincipalMapper.parse("RULE:^CN=(.*)$/$10/").map("CN=al") == "al0"
    # An escaped slash inside the pattern does not end it.
    assert PrincipalMapper.parse(r"RULE:^CN=a\/b,(.*)$/$1/").map("CN=a/b,x") == "x"
    # A comma inside the pattern is part of it.
    assert PrincipalMapper.parse("RULE:^CN=([^,]*),O=x$/$1/,DEFAULT").map("CN=al,O=x") == "al"


@pytest.mark.parametrize(
    "rules",
    [
        "RULE:^CN=(.*)$/$1",
        "RULE:^CN=(.*)$",
        "RULE:^CN=(.*)$/$2/",
        "RULE:^CN=(.*)$/${user}/",
        "RULE:^CN=(.*)$/$x/",
        "RULE:^CN=(.*)$/a\\/",
        "RULE:^CN=((.*)$/$1/",
        "RULE:^CN=(.*)$/$1/X",
        "DEFAULTS",
        "SOMETHING",
        "DEFAULT;RULE:a/b/",
    ],
)
def test_bad_rules_are_rejected(rules: str) -> None:
    with pytest.raises(ValueError):
        PrincipalMapper.parse(rules)


def test_subject_of_a_real_certificate() -> None:
    ca = trustme.CA()
    leaf = ca.issue_cert(
        "client.example", common_name="alice", organization_name="acme", organization_unit_name="eng"
    )
    pem = leaf.cert_chain_pems[0].bytes()
    der = x509.load_pem_x509_certificate(pem).public_bytes(Encoding.DER)
    assert subject_name(der) == "CN=alice,OU=eng,O=acme"
    mapper = PrincipalMapper.parse("RULE:^CN=(.*?),OU=eng,O=acme$/$1/,RULE:^CN=(.*?),.*$/$1/U")
    assert mapper.map(subject_name(der)) == "alice"
    with pytest.raises(ValueError):
        subject_name(b"not a certificate")
