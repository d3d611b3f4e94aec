"""A Protobuf schema as the registry receives it, .proto text or (as confluent-kafka's
serializers send it) a base64 FileDescriptorProto, with its references, turned into one
checked FileDescriptorProto: protoc (grpcio-tools carries it as a Python extension) compiles
the text, protobuf's descriptor pool links the files and refuses a type that resolves to nothing."""

import base64
import binascii
import os
import re
import tempfile
from importlib.resources import files

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message import DecodeError
from grpc_tools import _protoc_compiler, protoc

from headwater.schemas.invalid import InvalidSchema

FileProto = descriptor_pb2.FileDescriptorProto
MAIN = "registered_schema.proto"
WELL_KNOWN = str(files("grpc_tools") / "_proto")  # google/protobuf/*.proto, importable by every schema
# An import path: relative, slash-separated, no "." or ".." segments (it becomes a file name).
IMPORT_PATH = re.compile(r"(?!.*(^|/)\.\.?(/|$))[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)*")


def compile_schema(schema: str, references: dict[str, str]) -> FileProto:
    """The schema's own file, every import resolved; InvalidSchema otherwise."""
    for name in references:
        if not IMPORT_PATH.fullmatch(name) or name == MAIN:
            raise InvalidSchema(f"Invalid schema: reference name {name!r} is not an import path")
    given = {MAIN: schema, **references}
    decoded = {name: d for name, text in given.items() if (d := _decoded(name, text)) is not None}
    texts = {name: text for name, text in given.items() if name not in decoded}
    compiled = _protoc(texts, decoded, [WELL_KNOWN]) if texts else {}
    known = {**compiled, **decoded}
    pool = descriptor_pool.DescriptorPool()
    _link(MAIN, known, pool, set())
    try:
        pool.FindFileByName(MAIN)
    except (TypeError, KeyError) as e:
        raise InvalidSchema(f"Invalid schema: {_named(str(e))}") from e
    return known[MAIN]


def _decoded(name: str, text: str) -> FileProto | None:
    """A base64 FileDescriptorProto's file, or None for .proto text (never valid base64: it has spaces)."""
    if not text.strip():
        return None
    try:
        proto = FileProto.FromString(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError, DecodeError):
        return None
    proto.name = name  # as confluent-kafka's clients do: the reference's name is the file's
    return proto


def _protoc(texts: dict[str, str], decoded: dict[str, FileProto], includes: list[str]) -> dict[str, FileProto]:
    with tempfile.TemporaryDirectory(prefix="proto-") as workdir:
        root = os.path.join(workdir, "sources")
        os.makedirs(root)
        for name, text in texts.items():
            path = os.path.join(root, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            try:
                with open(path, "w", encoding="utf-8") as out:
                    out.write(text)
            except UnicodeEncodeError as e:
                raise InvalidSchema(f"Invalid schema: {_named(name)} is not UTF-8 text") from e
        arguments = ["protoc", f"-I{root}", *(f"-I{i}" for i in includes), "--include_imports"]
        if decoded:
            given = os.path.join(workdir, "given.pb")
            with open(given, "wb") as out:
                out.write(descriptor_pb2.FileDescriptorSet(file=decoded.values()).SerializeToString())
            arguments.append(f"--descriptor_set_in={given}")
        else:
            for name in texts:  # protoc's errors as an exception rather than on stderr
                try:
                    _protoc_compiler.get_protos(name.encode(), [root.encode(), *(i.encode() for i in includes)])
                except _protoc_compiler.ProtocErrors as e:
                    raise InvalidSchema(f"Invalid schema: {_errors(e, root)}") from e
        out_path = os.path.join(workdir, "compiled.pb")
        if protoc.main([*arguments, f"--descriptor_set_out={out_path}", *texts]) != 0:
            raise InvalidSchema("Invalid schema: protoc could not compile it against its references")
        with open(out_path, "rb") as data:
            return {f.name: f for f in descriptor_pb2.FileDescriptorSet.FromString(data.read()).file}


def _link(name: str, known: dict[str, FileProto], pool: descriptor_pool.DescriptorPool, linked: set[str]) -> None:
    """Adds a file to the pool after the files it imports."""
    if name in linked:
        return
    linked.add(name)
    if name not in known:
        known.update(_well_known(name))
    for dependency in known[name].dependency:
        _link(dependency, known, pool, linked)
    try:
        pool.Add(known[name])
    except (TypeError, KeyError) as e:
        raise InvalidSchema(f"Invalid schema: {_named(str(e))}") from e


def _well_known(name: str) -> dict[str, FileProto]:
    if not os.path.isfile(os.path.join(WELL_KNOWN, name)):
        raise InvalidSchema(f"Invalid schema: import {name!r} refers to nothing (no such reference)")
    with tempfile.TemporaryDirectory(prefix="proto-") as workdir:
        out_path = os.path.join(workdir, "compiled.pb")
        protoc.main(["protoc", f"-I{WELL_KNOWN}", "--include_imports", f"--descriptor_set_out={out_path}", name])
        with open(out_path, "rb") as data:
            return {f.name: f for f in descriptor_pb2.FileDescriptorSet.FromString(data.read()).file}


def _errors(errors: "_protoc_compiler.ProtocErrors", root: str) -> str:
    lines = []
    for error in errors.errors():
        where = _named(_text(error.filename).removeprefix(root + os.sep))
        if error.line >= 0:  # protoc counts from 0 here; people count from 1
            where += f":{error.line + 1}:{error.column + 1}"
        lines.append(f"{where}: {_text(error.message)}")
    return "; ".join(lines)


def _named(text: str) -> str:
    return text.replace(MAIN, "schema")


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
