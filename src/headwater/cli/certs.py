"""`headwater certs`: a local certificate authority and certificates signed by it, for development.

Writes ca.pem / ca.key (kept to sign more), broker.pem / broker.key for the names given
with --host, and with --client NAME a client certificate NAME.pem / NAME.key whose
subject ``CN=NAME`` becomes the principal ``User:CN=NAME`` on an mTLS listener.
"""
from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from headwater.cli.common import CommandError

VALIDITY = datetime.timedelta(days=825)  # what browsers and most TLS stacks accept for a leaf


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("certs", help="make a local CA, a broker certificate and client certificates")
    p.add_argument("--out", required=True, type=Path, help="directory for the PEM files")
    p.add_argument("--host", action="append", default=[], metavar="NAME",
                   help="a DNS name or IP address of the broker (repeatable; default localhost and 127.0.0.1)")
    p.add_argument("--client", action="append", default=[], metavar="NAME",
                   help="also make a client certificate with subject CN=NAME, for mTLS (repeatable)")
    p.set_defaults(func=run)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Headwater development"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(out: Path, stem: str, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
    (out / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    fd = os.open(out / f"{stem}.key", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))


def _load_or_make_ca(out: Path) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    if (out / "ca.pem").exists():
        key = serialization.load_pem_private_key((out / "ca.key").read_bytes(), None)
        return key, x509.load_pem_x509_certificate((out / "ca.pem").read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name("Headwater development CA"))
            .issuer_name(_name("Headwater development CA")).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + 2 * VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    _write(out, "ca", key, cert)
    return key, cert


def issue(out: Path, stem: str, common_name: str, hosts: list[str], usage, valid_for=VALIDITY) -> None:
    """Sign a leaf certificate with the CA in ``out`` (made first if absent)."""
    ca_key, ca_cert = _load_or_make_ca(out)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + valid_for)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False))
    if hosts:
        builder = builder.add_extension(x509.SubjectAlternativeName([_general_name(h) for h in hosts]), critical=False)
    _write(out, stem, key, builder.sign(ca_key, hashes.SHA256()))


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def run(args) -> int:
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        hosts = args.host or ["localhost", "127.0.0.1"]
        issue(args.out, "broker", hosts[0], hosts, ExtendedKeyUsageOID.SERVER_AUTH)
        for client in args.client:
            issue(args.out, client, client, [], ExtendedKeyUsageOID.CLIENT_AUTH)
    except (OSError, ValueError) as exc:
        raise CommandError(f"cannot write certificates to {args.out}: {exc}") from exc
    made = ["ca.pem", "broker.pem", *(f"{c}.pem" for c in args.client)]
    print(f"wrote {', '.join(made)} (and their .key files) to {args.out}")
    return 0
