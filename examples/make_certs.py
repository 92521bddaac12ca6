"""Certificates for trying Shoal over TLS: a CA, a broker certificate and a client certificate.

    pip install trustme
    python examples/make_certs.py --out certs --host localhost

writes, in ``certs/``:

- ``ca.pem``: the CA certificate; clients trust it (``ssl.ca.location``), and so does the
  broker for client certificates (``ssl.truststore.location``);
- ``broker.pem``: the broker's private key and certificate chain for every ``--host`` (names or
  IP addresses; clients check the name they connect to), the broker's ``ssl.keystore.location``
  (PEM, Kafka's ``ssl.keystore.type=PEM``; the same file docker/entrypoint.sh looks for in
  ``SHOAL_TLS_DIR``);
- ``client.crt`` and ``client.key``: a client certificate (CN=``--client``) for brokers with
  ``ssl.client.auth=required`` (librdkafka's ``ssl.certificate.location`` and
  ``ssl.key.location``).

Keys are written readable by their owner only. The CA's own key is not kept: to issue more
certificates, run the script again (into a fresh directory) and hand out the new ``ca.pem``.
Made with trustme (on top of the cryptography package): fine for a test or a private network;
a production deployment uses its organisation's CA.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import trustme


def _write(path: Path, data: bytes, private: bool = False) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def make_certs(out: Path, hosts: list[str], client: str = "client") -> None:
    out.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(organization_name="Shoal example CA")
    _write(out / "ca.pem", ca.cert_pem.bytes())
    broker = ca.issue_cert(*hosts, common_name=hosts[0])
    _write(out / "broker.pem", broker.private_key_and_cert_chain_pem.bytes(), private=True)
    cert = ca.issue_cert(f"{client}.clients.invalid", common_name=client)
    _write(out / "client.crt", b"".join(pem.bytes() for pem in cert.cert_chain_pems))
    _write(out / "client.key", cert.private_key_pem.bytes(), private=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="certs", help="directory to write (default: certs)")
    p.add_argument(
        "--host",
        action="append",
        help="a name or address clients connect to the broker by (repeatable; default: localhost and 127.0.0.1)",
    )
    p.add_argument("--client", default="client", help="the client certificate's common name (default: client)")
    args = p.parse_args()
    make_certs(Path(args.out), args.host or ["localhost", "127.0.0.1"], args.client)
    print(f"wrote ca.pem, broker.pem, client.crt and client.key in {args.out}")


if __name__ == "__main__":
    main()
