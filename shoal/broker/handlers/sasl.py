"""SaslHandshake, SaslAuthenticate, and SCRAM credential admin (Describe/AlterUserScramCredentials).

The handshake and the tokens are decided by the connection's `security.authenticator.SaslSession`
(the connection lets nothing else through before success); these handlers translate. A failed
step is answered after connection.failed.authentication.delay.ms, and the connection closes once
the answer is out. On a listener that does not speak SASL, or after success, both answer
ILLEGAL_SASL_STATE (re-authentication is not served).

Credential admin follows Kafka's rules: DESCRIBE (describe) or ALTER (alter) on the CLUSTER,
else CLUSTER_AUTHORIZATION_FAILED as Kafka's error responses for these APIs have it (Alter:
one result per distinct user, sorted; Describe: the top-level error and one unnamed result
per user asked about). Otherwise one result per user named; a user whose changes hold
an error (an unknown mechanism, an iteration count outside 4096..16384, the same credential
twice, a deletion of a credential that does not exist) has none of them applied.
"""

from __future__ import annotations

import asyncio
from typing import Any

from shoal.broker.handlers import HandlerTable
from shoal.broker.handlers.authz import ALTER, DESCRIBE, allowed_on_cluster
from shoal.broker.handlers.contract import Broker
from shoal.broker.net.contract import RequestContext
from shoal.broker.security.authenticator import AuthFailed
from shoal.broker.security.scram_store import Deletion, Upsertion
from shoal.protocol import messages
from shoal.protocol.errors import ErrorCode
from shoal.protocol.sasl.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramMechanism,
    credential_from_salted,
    mechanism_by_id,
)


def register(t: HandlerTable) -> None:
    t.add("SaslHandshake", handle_sasl_handshake)
    t.add("SaslAuthenticate", handle_sasl_authenticate)
    t.add("DescribeUserScramCredentials", handle_describe_user_scram_credentials)
    t.add("AlterUserScramCredentials", handle_alter_user_scram_credentials)


def _refused(broker: Broker, ctx: RequestContext, answer: Any, reason: str) -> Any:
    """Answer ``answer`` after the failure delay; nothing more is read, then the connection closes."""
    conn = ctx.connection
    conn.close_after_answers(reason)
    delay = broker.sasl.failure_delay_ms / 1000

    async def later() -> Any:
        await asyncio.sleep(delay)
        return answer

    return later()


def handle_sasl_handshake(broker: Broker, ctx: RequestContext, req: messages.SaslHandshakeRequest) -> Any:
    cls = messages.SaslHandshakeResponse
    session = getattr(ctx.connection, "sasl", None)
    if session is None:
        return cls(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    code, mechanisms = session.handshake(req.mechanism, ctx.api_version)
    answer = cls(error_code=code, mechanisms=mechanisms)
    if code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
        return _refused(broker, ctx, answer, "SASL handshake with a mechanism that is not enabled")
    return answer


def handle_sasl_authenticate(broker: Broker, ctx: RequestContext, req: messages.SaslAuthenticateRequest) -> Any:
    cls = messages.SaslAuthenticateResponse
    session = getattr(ctx.connection, "sasl", None)
    if session is None or session.complete:
        return cls(
            error_code=ErrorCode.ILLEGAL_SASL_STATE,
            error_message="SaslAuthenticate outside a SASL exchange (re-authentication is not served)",
            auth_bytes=b"",
        )
    try:
        token = session.authenticate(bytes(req.auth_bytes))
    except AuthFailed as e:
        answer = cls(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(e), auth_bytes=b"")
        return _refused(broker, ctx, answer, "SASL authentication failed")
    return cls(error_code=ErrorCode.NONE, error_message=None, auth_bytes=token, session_lifetime_ms=0)


# -- SCRAM credential admin ---------------------------------------------------------------


def handle_describe_user_scram_credentials(
    broker: Broker, ctx: RequestContext, req: messages.DescribeUserScramCredentialsRequest
) -> Any:
    cls = messages.DescribeUserScramCredentialsResponse
    if not allowed_on_cluster(broker, ctx, DESCRIBE):
        code, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "DESCRIBE on the cluster is required"
        # one result per user asked about, its name left empty (as Kafka's error response has it)
        refused = [
            cls.DescribeUserScramCredentialsResult(user="", error_code=code, error_message=message, credential_infos=[])
            for _ in req.users or ()
        ]
        return cls(throttle_time_ms=0, error_code=code, error_message=message, results=refused)
    store = broker.sasl.store
    assert store is not None
    results = []

    def shown(user: str) -> Any:
        infos = [cls.CredentialInfo(mechanism=_ID[m], iterations=i) for m, i in store.describe(user)]
        if not infos:
            return cls.DescribeUserScramCredentialsResult(
                user=user,
                error_code=ErrorCode.RESOURCE_NOT_FOUND,
                error_message="No SCRAM credential exists for this user",
                credential_infos=[],
            )
        return cls.DescribeUserScramCredentialsResult(
            user=user, error_code=0, error_message=None, credential_infos=infos
        )

    if not req.users:
        results = [shown(u) for u in store.users()]
    else:
        names = [u.name for u in req.users]
        for name in dict.fromkeys(names):
            if names.count(name) > 1:
                results.append(
                    cls.DescribeUserScramCredentialsResult(
                        user=name,
                        error_code=ErrorCode.DUPLICATE_RESOURCE,
                        error_message="A user may be named only once per request",
                        credential_infos=[],
                    )
                )
            else:
                results.append(shown(name))
    return cls(throttle_time_ms=0, error_code=0, error_message=None, results=results)


_ID = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}


def handle_alter_user_scram_credentials(
    broker: Broker, ctx: RequestContext, req: messages.AlterUserScramCredentialsRequest
) -> Any:
    cls = messages.AlterUserScramCredentialsResponse
    if not allowed_on_cluster(broker, ctx, ALTER):
        names = sorted({d.name for d in req.deletions} | {u.name for u in req.upsertions})
        code, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "ALTER on the cluster is required"
        refused = [cls.AlterUserScramCredentialsResult(user=n, error_code=code, error_message=message) for n in names]
        return cls(throttle_time_ms=0, results=refused)
    store = broker.sasl.store
    assert store is not None
    errors: dict[str, tuple[int, str]] = {}  # user -> its first error
    order: dict[str, None] = {}
    seen: set[tuple[str, int]] = set()
    deletions: list[Deletion] = []
    upsertions: list[Upsertion] = []

    def refuse(user: str, code: int, message: str) -> None:
        errors.setdefault(user, (code, message))

    def check(name: str, mech_id: int) -> ScramMechanism | None:
        """The mechanism of one change, or None with the user's error recorded."""
        order.setdefault(name, None)
        mech = mechanism_by_id(mech_id)
        if not name:
            refuse(name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "A user name must not be empty")
        elif mech is None:
            refuse(name, ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {mech_id}")
        elif (name, mech_id) in seen:
            refuse(name, ErrorCode.DUPLICATE_RESOURCE, "A credential may be altered only once per request")
        else:
            seen.add((name, mech_id))
            return mech
        return None

    for d in req.deletions:
        mech = check(d.name, d.mechanism)
        if mech is None:
            continue
        if store.get(d.name, mech.name) is None:
            refuse(d.name, ErrorCode.RESOURCE_NOT_FOUND, "No such credential to delete")
        deletions.append(Deletion(d.name, mech.name))
    for u in req.upsertions:
        mech = check(u.name, u.mechanism)
        if mech is None:
            continue
        if u.iterations < MIN_ITERATIONS:
            refuse(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Too few iterations: at least {MIN_ITERATIONS}")
        elif u.iterations > MAX_ITERATIONS:
            refuse(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Too many iterations: at most {MAX_ITERATIONS}")
        elif not u.salt or len(u.salted_password) != mech.digest_size:
            refuse(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "The salt or the salted password is malformed")
        else:
            cred = credential_from_salted(mech, bytes(u.salted_password), bytes(u.salt), u.iterations)
            upsertions.append(Upsertion(u.name, mech.name, cred))
    good_deletions = [d for d in deletions if d.user not in errors]
    good_upsertions = [u for u in upsertions if u.user not in errors]
    if good_deletions or good_upsertions:
        store.apply(good_deletions, good_upsertions)
    results = [
        cls.AlterUserScramCredentialsResult(
            user=user,
            error_code=errors[user][0] if user in errors else 0,
            error_message=errors[user][1] if user in errors else None,
        )
        for user in order
    ]
    return cls(throttle_time_ms=0, results=results)
