"""Protobuf schemas: their descriptors (from proto_files), and the wire-compatibility rules of
protobuf's language guide as Confluent's registry applies them (messages by name, fields by
number; a repeated field may become singular and back), between a reader's and a writer's
descriptors."""

import base64
from dataclasses import dataclass

from google.protobuf import descriptor_pb2, text_format

from headwater.schemas.proto_files import compile_schema

Field = descriptor_pb2.FieldDescriptorProto
# Scalar types the wire format reads as one another (protobuf's language guide).
WIRE_COMPATIBLE = [
    {Field.TYPE_INT32, Field.TYPE_UINT32, Field.TYPE_INT64, Field.TYPE_UINT64, Field.TYPE_BOOL},
    {Field.TYPE_SINT32, Field.TYPE_SINT64},
    {Field.TYPE_FIXED32, Field.TYPE_SFIXED32},
    {Field.TYPE_FIXED64, Field.TYPE_SFIXED64},
    {Field.TYPE_STRING, Field.TYPE_BYTES},
]


@dataclass(frozen=True)
class ProtobufSchema:
    file: descriptor_pb2.FileDescriptorProto

    @property
    def canonical(self) -> str:
        # The descriptor, not the text: comments, whitespace and option order do not count.
        return text_format.MessageToString(self.file)

    def messages(self) -> dict[str, descriptor_pb2.DescriptorProto]:
        """Every message, nested ones too, by its name within the package."""
        found = {}
        pending = [("", m) for m in self.file.message_type]
        while pending:
            prefix, message = pending.pop()
            name = prefix + message.name
            found[name] = message
            pending += [(name + ".", nested) for nested in message.nested_type]
        return found

    def type_name(self, field: descriptor_pb2.FieldDescriptorProto) -> str:
        package = f".{self.file.package}." if self.file.package else "."
        return field.type_name.removeprefix(package)


def parse(schema: str, references: dict[str, str]) -> ProtobufSchema:
    main = compile_schema(schema, references)
    main.ClearField("name")
    return ProtobufSchema(main)


def serialized(schema: str, references: dict[str, str]) -> str:
    """The schema as confluent-kafka's clients ask for it (`format=serialized`): a base64 FileDescriptorProto."""
    return base64.standard_b64encode(parse(schema, references).file.SerializeToString()).decode("ascii")


def problems(reader: ProtobufSchema, writer: ProtobufSchema) -> list[str]:
    """What keeps a reader with `reader` from reading every message written with `writer`."""
    found = []
    if reader.file.package != writer.file.package:
        found.append(f"package: {writer.file.package!r} in the writer, {reader.file.package!r} in the reader")
    readers = reader.messages()
    for name, written in writer.messages().items():
        if name not in readers:
            found.append(f"message {name}: missing in the reader's schema")
        else:
            found += _fields(name, readers[name], written, reader, writer)
            found += _oneofs(name, readers[name], written)
    return found


def _fields(name: str, read: descriptor_pb2.DescriptorProto, written: descriptor_pb2.DescriptorProto,
            reader: ProtobufSchema, writer: ProtobufSchema) -> list[str]:
    read_fields = {f.number: f for f in read.field}
    written_fields = {f.number: f for f in written.field}
    found = []
    for number, w in sorted(written_fields.items()):
        if number not in read_fields and w.label == Field.LABEL_REQUIRED:
            found.append(f"{name}.{w.name} = {number}: a required field the reader lacks")
    for number, r in sorted(read_fields.items()):
        where = f"{name}.{r.name} = {number}"
        w = written_fields.get(number)
        if r.label == Field.LABEL_REQUIRED and (w is None or w.label != Field.LABEL_REQUIRED):
            found.append(f"{where}: required in the reader, not always written by the writer")
        elif w is not None and _kind(r, reader) != _kind(w, writer):
            found.append(f"{where}: {_kind(w, writer)} in the writer, {_kind(r, reader)} in the reader")
    return found


def _kind(field: descriptor_pb2.FieldDescriptorProto, schema: ProtobufSchema) -> str:
    """A field's type, named so that two wire-compatible types get the same name."""
    if field.type_name:
        return f"{'enum' if field.type == Field.TYPE_ENUM else 'message'} {schema.type_name(field)}"
    group = next((g for g in WIRE_COMPATIBLE if field.type in g), {field.type})
    return "/".join(sorted(Field.Type.Name(t).removeprefix("TYPE_").lower() for t in group))


def _oneof_members(message: descriptor_pb2.DescriptorProto) -> dict[str, dict[int, str]]:
    """Each real oneof (not proto3's `optional`) by name: its fields' numbers and names."""
    members: dict[str, dict[int, str]] = {o.name: {} for o in message.oneof_decl}
    for f in message.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            members[message.oneof_decl[f.oneof_index].name][f.number] = f.name
    return {name: fields for name, fields in members.items() if fields}


def _oneofs(name: str, read: descriptor_pb2.DescriptorProto, written: descriptor_pb2.DescriptorProto) -> list[str]:
    """A field may move into a new oneof alone; moving several into a oneof (or one into a oneof
    that had others) makes data with more than one of them set unreadable, and so does a field
    leaving a oneof the reader still has."""
    read_oneofs, written_oneofs = _oneof_members(read), _oneof_members(written)
    in_written_oneof = {n for fields in written_oneofs.values() for n in fields}
    written_numbers = {f.number for f in written.field}
    found = []
    for oneof, fields in sorted(read_oneofs.items()):
        members = [n for n in fields if n in written_numbers]
        moved = sorted(fields[n] for n in members if n not in in_written_oneof)
        if moved and len(members) > 1:
            found.append(f"{name}.{oneof}: fields {moved} moved into a oneof with {len(members) - 1} other field(s) the writer writes")
    for oneof, fields in sorted(written_oneofs.items()):
        if oneof in read_oneofs:
            gone = sorted(f for n, f in fields.items() if n not in read_oneofs[oneof])
            if gone:
                found.append(f"{name}.{oneof}: the writer's oneof fields {gone} are not in the reader's oneof")
    return found
