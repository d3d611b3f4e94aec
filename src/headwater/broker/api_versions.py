"""ApiVersions: the first request of every client, and how versions get negotiated."""
from headwater.broker.handlers import handles, supported_apis
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import ApiKey, MESSAGE_CLASSES

ApiVersionsResponse = MESSAGE_CLASSES[ApiKey.API_VERSIONS][1]


def api_versions_body(error: ErrorCode = ErrorCode.NONE):
    keys = [ApiVersionsResponse.ApiVersion(api_key=int(a.key), min_version=a.min_version, max_version=a.max_version)
            for a in sorted(supported_apis().values(), key=lambda a: a.key)]
    return ApiVersionsResponse(error_code=error, api_keys=keys, throttle_time_ms=0)


@handles(ApiKey.API_VERSIONS, 0, 4)
async def api_versions(broker, header, request):
    return api_versions_body()
