"""The console's schema registry pages: the subjects with their latest version, and a subject's
versions with a diff between any two of them (difflib over the pretty-printed schemas)."""
from __future__ import annotations

import difflib
import json
from collections.abc import Callable

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from headwater.schemas.registry import LATEST, Registry, RegistryError, Version


def pretty(version: Version) -> str:
    """Avro and JSON Schema indented; Protobuf as it was registered."""
    try:
        return json.dumps(json.loads(version.schema), indent=2, ensure_ascii=False)
    except ValueError:
        return version.schema


def diff(older: Version, newer: Version) -> list[str]:
    return list(difflib.unified_diff(pretty(older).splitlines(), pretty(newer).splitlines(),
                                     f"version {older.version}", f"version {newer.version}", lineterm=""))


class SchemaPages:
    def __init__(self, registry: Registry, render: Callable[..., Response]):
        self.registry, self.render = registry, render

    def routes(self) -> list[Route]:
        return [Route("/registry", self.subjects, name="registry"),
                Route("/registry/{subject:segment}", self.subject, name="registry_subject")]

    async def subjects(self, request: Request) -> Response:
        rows = []
        for subject in self.registry.subjects():
            latest = self.registry.version(subject, LATEST)
            rows.append({"subject": subject, "versions": len(self.registry.versions(subject)),
                         "latest": latest.version, "id": latest.id, "type": latest.schema_type,
                         "compatibility": self.registry.compatibility(subject, default_to_global=True)})
        return self.render("registry.html", subjects=rows, compatibility=self.registry.compatibility(),
                           mode=self.registry.mode())

    async def subject(self, request: Request) -> Response:
        subject = request.path_params["subject"]
        try:
            versions = [self.registry.version(subject, n) for n in self.registry.versions(subject)]
        except RegistryError as error:
            raise HTTPException(error.status, error.message) from None
        numbers = [v.version for v in versions]
        older, newer = (_pick(request, name, numbers, default) for name, default in
                        (("from", numbers[-2] if len(numbers) > 1 else numbers[-1]), ("to", numbers[-1])))
        by_number = {v.version: v for v in versions}
        return self.render("registry_subject.html", subject=subject, versions=versions, numbers=numbers,
                           older=older, newer=newer, diff=diff(by_number[older], by_number[newer]),
                           shown=pretty(by_number[newer]),
                           compatibility=self.registry.compatibility(subject, default_to_global=True))


def _pick(request: Request, name: str, numbers: list[int], default: int) -> int:
    text = request.query_params.get(name, "")
    if not text:
        return default
    if not text.isdigit() or int(text) not in numbers:
        raise HTTPException(404, f"no live version {text!r}; the subject has versions {numbers}")
    return int(text)
