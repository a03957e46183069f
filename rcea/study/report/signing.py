"""Optional ed25519 signature of a bundle (``rcea report publish --sign KEY``,
``rcea report verify --key PUB``).

The signature covers the exact bytes of ``hashes.json``, which lists the SHA-256 of every
other bundle file, so it covers the whole bundle. ``signature.json`` holds
``{"algorithm": "ed25519", "signed_file": "hashes.json", "public_key": <raw key, hex>,
"key_fingerprint": <first 16 hex of SHA-256 of the raw public key>, "signature": <hex>}``.
Keys are PEM files (PKCS#8 private, SubjectPublicKeyInfo public), e.g. from
:func:`generate_keypair` or ``openssl genpkey -algorithm ed25519``. Needs the
``cryptography`` package (the ``sign`` extra).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

SIGNED_FILE = "hashes.json"
SIGNATURE_FILE = "signature.json"


class SignatureError(ValueError):
    """The signature is missing, malformed or does not verify with the given key."""


def _crypto() -> tuple[Any, Any]:
    try:  # the optional `sign` extra: only signing and verifying a signature need it
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:  # pragma: no cover - depends on the install
        raise SignatureError(
            "signing needs the cryptography package: pip install 'rcea-audit[sign]'"
        ) from None
    return serialization, ed25519


def _raw(public_key: Any) -> bytes:
    serialization, _ = _crypto()
    return public_key.public_bytes(  # type: ignore[no-any-return]  # the third-party call is untyped (returns Any)
        encoding=serialization.Encoding.Raw, format=serialization.PublicFormat.Raw
    )


def fingerprint(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()[:16]


def generate_keypair(private_path: Path, public_path: Path) -> str:
    """Write a new ed25519 key pair as PEM files; returns the key fingerprint."""
    serialization, ed25519 = _crypto()
    key = ed25519.Ed25519PrivateKey.generate()
    private_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public_path.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return fingerprint(_raw(key.public_key()))


def sign_bundle(bundle: Path, private_key: Path) -> str:
    """Sign ``bundle/hashes.json`` with the PEM private key; writes ``signature.json`` and
    returns the key fingerprint."""
    serialization, ed25519 = _crypto()
    try:
        key = serialization.load_pem_private_key(private_key.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise SignatureError(f"{private_key}: not an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise SignatureError(f"{private_key}: not an ed25519 key")
    raw = _raw(key.public_key())
    sig = key.sign((bundle / SIGNED_FILE).read_bytes())
    body = {
        "algorithm": "ed25519",
        "signed_file": SIGNED_FILE,
        "public_key": raw.hex(),
        "key_fingerprint": fingerprint(raw),
        "signature": sig.hex(),
    }
    (bundle / SIGNATURE_FILE).write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    return body["key_fingerprint"]  # type: ignore[no-any-return]  # a value read from JSON (typed Any)


def verify_signature(bundle: Path, public_key: Path) -> str:
    """Check ``signature.json`` against ``hashes.json`` with the PEM public key; returns
    the key fingerprint, raises :class:`SignatureError` naming what is wrong."""
    serialization, ed25519 = _crypto()
    from cryptography.exceptions import InvalidSignature  # the optional `sign` extra

    try:
        pub = serialization.load_pem_public_key(public_key.read_bytes())
    except (OSError, ValueError) as exc:
        raise SignatureError(f"{public_key}: not a PEM public key ({exc})") from None
    if not isinstance(pub, ed25519.Ed25519PublicKey):
        raise SignatureError(f"{public_key}: not an ed25519 public key")
    try:
        body = json.loads((bundle / SIGNATURE_FILE).read_text(encoding="utf-8"))
        sig = bytes.fromhex(body["signature"])
    except (OSError, ValueError, KeyError) as exc:
        raise SignatureError(f"{SIGNATURE_FILE}: unreadable ({exc})") from None
    fp = fingerprint(_raw(pub))
    if body.get("key_fingerprint") != fp:
        raise SignatureError(
            f"signed with key {body.get('key_fingerprint')}, not with the given key {fp}"
        )
    try:
        pub.verify(sig, (bundle / SIGNED_FILE).read_bytes())
    except InvalidSignature:
        raise SignatureError(
            f"the ed25519 signature of {SIGNED_FILE} does not verify with key {fp}"
        ) from None
    return fp
