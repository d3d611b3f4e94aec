"""The schema registry's REST API, the subset of Confluent Schema Registry's that its clients
use, at the root of the HTTP listener so that ``schema.registry.url`` is the listener's URL:

    GET  /subjects                                   ?deleted ?deletedOnly ?subjectPrefix
    POST /subjects/{s}                               which version of s holds this schema  ?deleted
    DELETE /subjects/{s}                             soft, or ?permanent=true once soft-deleted
    GET  /subjects/{s}/versions                      ?deleted ?deletedOnly
    POST /subjects/{s}/versions                      register -> {"id": N}
    GET  /subjects/{s}/versions/{v|latest}           ?deleted;  .../schema the text alone
    GET  /subjects/{s}/versions/{v}/referencedby     ids of the schemas referencing it
    DELETE /subjects/{s}/versions/{v|latest}         soft, or ?permanent=true
    GET  /schemas/ids/{id}                           ?subject;  .../schema, .../versions, .../subjects
    ?format=serialized on a version or an id: a Protobuf schema as a base64 FileDescriptorProto
    GET  /schemas/types
    GET|PUT|DELETE /config, /config/{s}              compatibility levels  ?defaultToGlobal
    GET|PUT /mode, GET|PUT|DELETE /mode/{s}          READWRITE, READONLY, READONLY_OVERRIDE, IMPORT  ?force
    POST /compatibility/subjects/{s}/versions[/{v|latest}]   ?verbose -> {"is_compatible", "messages"}

Answers are ``application/vnd.schemaregistry.v1+json``; errors ``{"error_code", "message"}``
with Confluent's codes (``registry.RegistryError``). On a secured broker the listener's login
lets a request in (HTTP Basic, as ``basic.auth.user.info`` sends it); a change also needs WRITE
on the ``_schemas`` topic, the log it writes, as the REST API's produce needs WRITE on its topic.
A body must say it is JSON (so another site's form cannot post one) and is read up to the
largest schema a ``_schemas`` record holds, the rest drained unread.
"""
from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from headwater.broker.broker import Broker
from headwater.broker.security.acl_operations import AclOperation
from headwater.broker.security.acls import ResourceType
from headwater.http.admin import Admin
from headwater.http.login import peer
from headwater.schemas.registry import (COMPATIBILITY, MODE, SCHEMA_TYPES, Registry, RegistryError, Setting, Version,
                                       parse_version)
from headwater.schemas.store import SCHEMAS_TOPIC

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
JSON_TYPES = ("application/vnd.schemaregistry.v1+json", "application/vnd.schemaregistry+json", "application/json")
BODY_SLACK = 64 << 10      # a request's fields and JSON around the largest schema
DRAIN_LIMIT = 64 << 20     # past this a body is not read on: the connection is dropped


def answer(body, status: int = 200) -> Response:
    return Response(json.dumps(body), status_code=status, media_type=CONTENT_TYPE)


def _api(handler: Callable[..., Awaitable]) -> Callable[[Request], Awaitable[Response]]:
    """An endpoint answering JSON, its RegistryError as Confluent's error body."""
    @functools.wraps(handler)
    async def endpoint(self: "SchemaRegistryApi", request: Request) -> Response:
        try:
            result = await handler(self, request)
        except RegistryError as error:
            return answer({"error_code": error.code, "message": error.message}, error.status)
        return result if isinstance(result, Response) else answer(result)
    return endpoint


def _flag(request: Request, *names: str) -> bool:
    return any(request.query_params.get(n, "").lower() == "true" for n in names)


def _version(request: Request) -> int:
    return parse_version(request.path_params["version"])


def _serialized(request: Request) -> bool:
    return request.query_params.get("format", "").lower() == "serialized"


def version_json(version: Version, text: str) -> dict:
    """A version as Confluent answers it: schemaType left out for Avro, references when there are some."""
    body = {"subject": version.subject, "version": version.version, "id": version.id}
    return {**body, **schema_json(version, text)}


def schema_json(version: Version, text: str) -> dict:
    body: dict = {"schema": text}
    if version.schema_type != "AVRO":
        body["schemaType"] = version.schema_type
    if version.references:
        body["references"] = [r.to_json() for r in version.references]
    return body


def _page(items: list, request: Request) -> list:
    """?offset and ?limit (negative: no limit), as the client pages lists."""
    try:
        offset, limit = int(request.query_params.get("offset", 0)), int(request.query_params.get("limit", -1))
    except ValueError:
        raise RegistryError(400, 400, "offset and limit must be whole numbers") from None
    items = items[max(offset, 0):]
    return items if limit < 0 else items[:limit]


class SchemaRegistryApi:
    def __init__(self, broker: Broker, registry: Registry):
        self.broker, self.registry = broker, registry

    def routes(self) -> list[Route]:
        subject = "/subjects/{subject:segment}"
        version = subject + "/versions/{version}"
        schema_id = "/schemas/ids/{id:int}"
        return [
            Route("/subjects", self.subjects),
            Route(subject, self.lookup, methods=["POST"]),
            Route(subject, self.delete_subject, methods=["DELETE"]),
            Route(subject + "/versions", self.versions),
            Route(subject + "/versions", self.register, methods=["POST"]),
            Route(version, self.version),
            Route(version, self.delete_version, methods=["DELETE"]),
            Route(version + "/schema", self.version_schema),
            Route(version + "/referencedby", self.referenced_by),
            Route(schema_id, self.schema),
            Route(schema_id + "/schema", self.schema_text),
            Route(schema_id + "/versions", self.id_versions),
            Route(schema_id + "/subjects", self.id_subjects),
            Route("/schemas/types", self.types),
            Route("/config", self._setting(COMPATIBILITY), methods=["GET", "PUT", "DELETE"]),
            Route("/config/{subject:segment}", self._setting(COMPATIBILITY), methods=["GET", "PUT", "DELETE"]),
            Route("/mode", self._setting(MODE), methods=["GET", "PUT"]),
            Route("/mode/{subject:segment}", self._setting(MODE), methods=["GET", "PUT", "DELETE"]),
            Route("/compatibility" + subject + "/versions", self.compatibility, methods=["POST"]),
            Route("/compatibility" + version, self.compatibility, methods=["POST"]),
        ]

    # --- requests ---------------------------------------------------------------------------------

    def _may_change(self, request: Request) -> None:
        admin = Admin(self.broker, getattr(request.state, "user", None), peer(request))
        if not admin.may(AclOperation.WRITE, ResourceType.TOPIC, SCHEMAS_TOPIC):
            raise RegistryError(403, 40301, f"not authorized to change the schema registry: it needs WRITE on "
                                            f"topic {SCHEMAS_TOPIC!r}")

    async def _body(self, request: Request) -> dict:
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media not in JSON_TYPES:
            raise RegistryError(415, 415, f"send Content-Type: {CONTENT_TYPE}")
        limit = self.registry.max_schema_bytes + BODY_SLACK
        raw, size = bytearray(), 0
        async for chunk in request.stream():
            size += len(chunk)
            if size <= limit:
                raw += chunk
            elif size > DRAIN_LIMIT:
                break
        if size > limit:
            raise RegistryError(422, 42201, f"Invalid schema: the request is {size} bytes; a schema stored in "
                                            f"{SCHEMAS_TOPIC} may be at most {self.registry.max_schema_bytes}"
                                            " (message.max.bytes)")
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise RegistryError(400, 400, f"the body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise RegistryError(400, 400, "the body must be a JSON object")
        return body

    async def _schema(self, request: Request) -> tuple[dict, tuple[str, object, list]]:
        """A request's body, and its (schemaType, schema, references)."""
        body = await self._body(request)
        references = body.get("references") or []
        if not isinstance(references, list):
            raise RegistryError(422, 42201, "Invalid schema: references must be a list")
        return body, (str(body.get("schemaType") or "AVRO").upper(), body.get("schema"), references)

    # --- subjects and versions -------------------------------------------------------------------

    @_api
    async def subjects(self, request: Request):
        return _page(self.registry.subjects(_flag(request, "deleted"), _flag(request, "deletedOnly", "deleted_only"),
                                            request.query_params.get("subjectPrefix", "")), request)

    @_api
    async def versions(self, request: Request):
        return _page(self.registry.versions(request.path_params["subject"], _flag(request, "deleted"),
                                            _flag(request, "deletedOnly", "deleted_only")), request)

    @_api
    async def register(self, request: Request):
        self._may_change(request)
        body, schema = await self._schema(request)
        schema_id, number = body.get("id"), body.get("version")
        for value, what in ((schema_id, "id"), (number, "version")):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise RegistryError(422, 42201 if what == "id" else 42202, f"{what} must be a positive number")
        return {"id": self.registry.register(request.path_params["subject"], *schema, schema_id, number)}

    @_api
    async def lookup(self, request: Request):
        _, schema = await self._schema(request)
        found = self.registry.lookup(request.path_params["subject"], *schema, _flag(request, "deleted"))
        return version_json(found, found.schema)

    @_api
    async def version(self, request: Request):
        found = self.registry.version(request.path_params["subject"], _version(request), _flag(request, "deleted"))
        return version_json(found, self.registry.text(found, _serialized(request)))

    @_api
    async def version_schema(self, request: Request):
        found = self.registry.version(request.path_params["subject"], _version(request), _flag(request, "deleted"))
        return Response(self.registry.text(found, _serialized(request)), media_type=CONTENT_TYPE)

    @_api
    async def referenced_by(self, request: Request):
        return self.registry.referenced_by(request.path_params["subject"], _version(request))

    @_api
    async def delete_subject(self, request: Request):
        self._may_change(request)
        return self.registry.delete_subject(request.path_params["subject"], _flag(request, "permanent"))

    @_api
    async def delete_version(self, request: Request):
        self._may_change(request)
        return self.registry.delete_version(request.path_params["subject"], _version(request),
                                            _flag(request, "permanent"))

    # --- schemas by id ---------------------------------------------------------------------------

    @_api
    async def schema(self, request: Request):
        found = self.registry.by_id(request.path_params["id"])
        return schema_json(found, self.registry.text(found, _serialized(request)))

    @_api
    async def schema_text(self, request: Request):
        found = self.registry.by_id(request.path_params["id"])
        return Response(self.registry.text(found, _serialized(request)), media_type=CONTENT_TYPE)

    @_api
    async def id_versions(self, request: Request):
        return _page([{"subject": v.subject, "version": v.version}
                      for v in self.registry.id_versions(request.path_params["id"], _flag(request, "deleted"))],
                     request)

    @_api
    async def id_subjects(self, request: Request):
        versions = self.registry.id_versions(request.path_params["id"], _flag(request, "deleted"))
        return _page(sorted({v.subject for v in versions}), request)

    @_api
    async def types(self, request: Request):
        return list(SCHEMA_TYPES)

    # --- settings and checks ---------------------------------------------------------------------

    def _setting(self, setting: Setting) -> Callable[[Request], Awaitable[Response]]:
        """GET, PUT and DELETE of a setting, the registry's or (a path with a subject) a subject's."""
        @_api
        async def endpoint(self: SchemaRegistryApi, request: Request):
            subject = request.path_params.get("subject")
            if request.method == "GET":
                return {setting.field: self.registry.setting(setting, subject, _flag(request, "defaultToGlobal"))}
            self._may_change(request)
            if request.method == "DELETE":
                return {setting.field: self.registry.delete_setting(setting, subject)}
            body = await self._body(request)
            chosen = body.get(setting.request_field, body.get(setting.field))
            return {setting.request_field: self.registry.set_setting(setting, subject, chosen, _flag(request, "force"))}
        return functools.partial(endpoint, self)

    @_api
    async def compatibility(self, request: Request):
        number = _version(request) if "version" in request.path_params else None
        _, schema = await self._schema(request)
        problems = self.registry.check(request.path_params["subject"], number, *schema)
        verdict: dict = {"is_compatible": not problems}
        if _flag(request, "verbose"):
            verdict["messages"] = problems
        return verdict

