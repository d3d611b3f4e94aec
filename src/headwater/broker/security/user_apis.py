"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51): the SASL users over the
wire, as admin clients (kafka-configs, confluent-kafka's AdminClient) manage them."""
from __future__ import annotations

from kafka.protocol.admin import AlterUserScramCredentialsResponse, DescribeUserScramCredentialsResponse

from headwater.broker.security.scram import credential_from_salted_password
from headwater.broker.security.acl_operations import AclOperation as Op
from headwater.broker.security.authorization import CLUSTER_DENIED, NOT_AUTHORIZED, empty_response

MECHANISM_CODES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
CODE_OF = {name: code for code, name in MECHANISM_CODES.items()}
ITERATIONS = range(4096, 16384 + 1)  # what Kafka accepts
RESOURCE_NOT_FOUND, UNACCEPTABLE_CREDENTIAL = 91, 93


async def describe_user_scram_credentials(broker, header, request):
    Result = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
    users = broker.credentials.users()
    names = [u.name for u in request.users] if request.users else list(users)
    results = []
    for name in names:
        mechanisms = users.get(name)
        results.append(Result(user=name, error_code=0 if mechanisms else RESOURCE_NOT_FOUND,
                              error_message=None if mechanisms else f"no credentials for user {name}",
                              credential_infos=[Result.CredentialInfo(
                                  mechanism=CODE_OF[m], iterations=broker.credentials.credential(name, m).iterations)
                                  for m in mechanisms or ()]))
    return DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=0, error_message=None, results=results)


def _upsert_error(upsertion) -> str | None:
    if upsertion.mechanism not in MECHANISM_CODES:
        return f"unknown SCRAM mechanism {upsertion.mechanism}"
    if upsertion.iterations not in ITERATIONS:
        return f"iterations must be {ITERATIONS.start}..{ITERATIONS.stop - 1}"
    if not upsertion.name or not upsertion.salt or not upsertion.salted_password:
        return "a user name, a salt and a salted password are required"
    return None


async def alter_user_scram_credentials(broker, header, request):
    Result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
    results = []
    store = broker.credentials
    for deletion in request.deletions:
        mechanism = MECHANISM_CODES.get(deletion.mechanism)
        found = mechanism is not None and store.delete(deletion.name, mechanism)
        results.append(Result(user=deletion.name, error_code=0 if found else RESOURCE_NOT_FOUND,
                              error_message=None if found else "no such credential"))
    for upsertion in request.upsertions:
        error = _upsert_error(upsertion)
        if error is None:
            mechanism = MECHANISM_CODES[upsertion.mechanism]
            store.set(upsertion.name, mechanism, credential_from_salted_password(
                mechanism, bytes(upsertion.salt), bytes(upsertion.salted_password), upsertion.iterations))
        results.append(Result(user=upsertion.name, error_code=UNACCEPTABLE_CREDENTIAL if error else 0,
                              error_message=error))
    return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=results)


async def alter_user_scram_credentials_rule(access, header, request, handle):
    """ALTER on the cluster, else each user named answered CLUSTER_AUTHORIZATION_FAILED."""
    if access.cluster(Op.ALTER):
        return await handle(request)
    response = empty_response(header)
    users = dict.fromkeys(c.name for c in [*request.deletions, *request.upsertions])
    response.results = [type(response).AlterUserScramCredentialsResult(
        user=user, error_code=CLUSTER_DENIED, error_message=NOT_AUTHORIZED) for user in users]
    return response
