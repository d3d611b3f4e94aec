"""ApiVersions: the first request of every client, and how versions get negotiated."""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import MESSAGE_CLASSES, Api, ApiKey

ApiVersionsResponse = MESSAGE_CLASSES[ApiKey.API_VERSIONS][1]


def api_versions_body(apis: Iterable[Api], error: ErrorCode = ErrorCode.NONE):
    keys = [ApiVersionsResponse.ApiVersion(api_key=int(a.key), min_version=a.min_version, max_version=a.max_version)
            for a in sorted(apis, key=lambda a: a.key)]
    return ApiVersionsResponse(error_code=error, api_keys=keys, throttle_time_ms=0)


class ApiVersions:
    """The handler: answers with the table of APIs it was given (the broker's advertised ones)."""

    def __init__(self, advertised: Mapping[int, Api]):
        self.advertised = advertised

    async def __call__(self, broker, header, request):
        return api_versions_body(self.advertised.values())
