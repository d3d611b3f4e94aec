"""The web console: server-rendered pages over the broker's state, and /metrics.

Pages: the overview (topics, groups, a plot of message rates), a topic (partitions,
configs, a message browser, a live tail over server-sent events), a consumer group
(members, assignment, committed offsets, lag and its plot, reset offsets), a share group
(members, assignment, each share-partition's delivery state, configs, its dead-letter
topic), ACLs and SCRAM users, a topic's message search, the schema registry's subjects and a diff
between two versions of one (``schema_pages``; the registry's API is ``schema_registry``). Read-only unless the broker runs
with --console-allow-writes: then offsets can be reset, records produced and deleted, topics
created and their configs set, ACLs and users added and deleted (``admin``: as the Kafka APIs
do, as the logged-in user). Bad input gets an error page with the right HTTP status, never
a stack trace; the broker's Kafka side is untouched either way.
"""
from __future__ import annotations

import asyncio
import base64
import functools
import json
import logging
import time
from datetime import datetime, timezone
from urllib.parse import urlencode, urlsplit
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from headwater.broker.security.acl_operations import AclOperation
from headwater.broker.broker import Broker
from headwater.broker.groups.reset import MODES, ResetTo
from headwater.http.admin import Admin, Refused
from headwater.http.exposition import exposition
from headwater.http.history import RATE_WINDOW_S, History
from headwater.http.login import ConsoleLogin, peer
from headwater.http.metrics import BrokerMetrics
from headwater.http.rest import RestApi, produce
from headwater.http.schema_pages import SchemaPages
from headwater.http.schema_registry import SchemaRegistryApi
from headwater.http.search import SCAN_BUDGET, SHOWN, BadFilter, Filter, search
from headwater.http.segments import KeepEncodedSeparators, segment
from headwater.http.state import (CDC_POSITIONS_TOPIC, GroupView, connector_positions, consumer_group,
                                         consumer_groups, group_offsets, records_from, share_partitions,
                                         stable_offset)
from headwater.http.transactions import held_back, transactions
from headwater.broker.security.acls import CLUSTER_NAME, OPERATION_ALL, AclBinding, PatternType, Permission, ResourceType
from headwater.log import Log, Topic
from headwater.records import Record
from headwater.schemas.registry import Registry

logger = logging.getLogger("headwater.console")
HERE = Path(__file__).parent
BROWSE_LIMIT = 50       # records per page of the message browser, at most
MAX_BROWSE_LIMIT = 1000
TAIL_BATCH = 100        # records per server-sent event burst of the live tail
CONSOLE_CLIENT_ID = "headwater-console"   # whose producer_byte_rate quota the console's produce is charged to
SEARCH_FIELDS = ("partition", "key", "key_match", "value", "path", "equals", "header", "header_value", "since", "until",
                 "resume")
ACL_OPERATIONS = {"ALL": OPERATION_ALL, **{op.name: int(op) for op in AclOperation}}

templates = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape())


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


templates.filters["isotime"] = _time
templates.filters["segment"] = segment  # a group id in a link: `/` quoted too


def _lsn(value) -> str:
    """A PostgreSQL LSN as PostgreSQL shows it (pg_lsn: two hex halves), to compare with pg_replication_slots."""
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}" if isinstance(value, int) else str(value)


def _text(data: bytes | None) -> str | None:
    """A key, value or header as text: JSON pretty-printed, UTF-8 as is, anything else as base64."""
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode()
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    return json.dumps(parsed, indent=2, ensure_ascii=False) if isinstance(parsed, (dict, list)) else text


def record_view(partition: int, record: Record) -> dict:
    return {"partition": partition, "offset": record.offset, "timestamp": record.timestamp,
            "time": _time(record.timestamp), "key": _text(record.key), "value": _text(record.value),
            "headers": [[name, _text(value)] for name, value in record.headers]}


class Console:
    def __init__(self, broker: Broker, metrics: BrokerMetrics, history: History, allow_writes: bool,
                 login: ConsoleLogin | None = None, registry: Registry | None = None):
        self.broker, self.metrics, self.history, self.allow_writes = broker, metrics, history, allow_writes
        self.login = login  # None: the broker is not secured, the console is open
        self.registry = registry  # the schema registry's API and pages, at the root

    # --- pages -------------------------------------------------------------------------------

    def page(self, template: str, status: int = 200, **context) -> HTMLResponse:
        html = templates.get_template(template).render(allow_writes=self.allow_writes,
                                                       secured=self.login is not None, **context)
        return HTMLResponse(html, status_code=status)

    async def overview(self, request: Request) -> Response:
        topics = [{"name": t.name, "partitions": len(t.partitions),
                   "size": sum(p.size_bytes for p in t.partitions),
                   "records": sum(p.log_end_offset - p.log_start_offset for p in t.partitions),
                   "policy": "compact" if t.config.compact else "delete"}
                  for t in sorted(self.broker.log_manager.topics.values(), key=lambda t: t.name)]
        return self.page("overview.html", rate_window=RATE_WINDOW_S, topics=topics, groups=self._groups(), share_groups=self._share_groups())

    async def rates(self, request: Request) -> Response:
        times, rates = self.history.message_rates()
        return JSONResponse({"times": times, "series": rates})

    def _groups(self) -> list[dict]:
        return [{"id": group.group_id, "type": group.type, "state": group.state, "members": len(group.members),
                 "lag": sum(r.lag for r in group_offsets(self.broker, group.group_id))}
                for group in consumer_groups(self.broker)]

    async def groups(self, request: Request) -> Response:
        return self.page("groups.html", groups=self._groups(), share_groups=self._share_groups())

    def _share_groups(self) -> list[dict]:
        return [{"id": g.group_id, "state": g.state, "members": len(g.members),
                 "lag": sum(r.lag for r in share_partitions(self.broker, g.group_id)),
                 "dead_letters": g.config.dead_letter_topic}
                for g in sorted(self.broker.share.groups.values(), key=lambda g: g.group_id)]

    async def share_group(self, request: Request) -> Response:
        group_id = request.path_params["group"]
        group = self.broker.share.groups.get(group_id)
        if group is None:
            raise HTTPException(404, f"share group {group_id!r} does not exist")
        members = [{"id": m.member_id, "epoch": m.epoch, "client": m.client_id, "host": m.client_host,
                    "subscription": ", ".join(m.subscription),
                    "partitions": ", ".join(f"{t}-{p}" for t, ps in sorted(m.assignment.items()) for p in ps)}
                   for m in sorted(group.members.values(), key=lambda m: m.member_id)]
        configs = [(name, value or "", "group" if overridden else "default")
                   for name, value, overridden in group.config.entries()]
        dead_letters = group.config.dead_letter_topic
        return self.page("share_group.html", group=group, members=members, configs=configs,
                         partitions=share_partitions(self.broker, group_id), dead_letters=dead_letters,
                         dead_letters_exist=dead_letters in self.broker.log_manager.topics)

    async def cdc(self, request: Request) -> Response:
        """What the broker knows of CDC connectors: the positions they stored, and when."""
        now = time.time()
        connectors = [{"connector": c.connector, "kind": c.kind, "time": _time(c.stored_at),
                       "age": max(round(now - c.stored_at / 1000), 0),
                       "position": ", ".join(f"{name} {_lsn(value) if name == 'lsn' else value}"
                                             for name, value in c.position.items())}
                      for c in connector_positions(self.broker)]
        return self.page("cdc.html", connectors=connectors, topic=CDC_POSITIONS_TOPIC,
                         topic_exists=CDC_POSITIONS_TOPIC in self.broker.log_manager.topics)

    def _topic(self, request: Request) -> Topic:
        name = request.path_params["name"]
        topic = self.broker.log_manager.topics.get(name)
        if topic is None:
            raise HTTPException(404, f"topic {name!r} does not exist")
        return topic

    async def topic(self, request: Request) -> Response:
        topic = self._topic(request)
        query = request.query_params
        browse = {"mode": query.get("mode", "newest"), "partition": query.get("partition", ""),
                  "offset": query.get("offset", ""), "time": query.get("time", ""),
                  "limit": query.get("limit", str(BROWSE_LIMIT))}
        messages = self._browse(topic, browse)
        partitions = [{"partition": i, "start": p.log_start_offset, "end": p.log_end_offset, "size": p.size_bytes,
                       "segments": len(p.segments)} for i, p in enumerate(topic.partitions)]
        configs = [(name, value, "topic" if name in topic.configs else "default")
                   for name, value in sorted(topic.config.to_topic_configs().items())]
        return self.page("topic.html", topic=topic.name, partitions=partitions, configs=configs,
                         browse=browse, messages=messages, partition_count=len(partitions), budget=SCAN_BUDGET,
                         query=dict.fromkeys(SEARCH_FIELDS, ""))

    def _browse(self, topic: Topic, browse: dict) -> list[dict]:
        """The records the browser shows: newest first, or from an offset or a time onwards."""
        mode = browse["mode"]
        limit = _integer(browse["limit"], "limit", minimum=1)
        limit = min(limit, MAX_BROWSE_LIMIT)
        logs = self._partitions(topic, browse["partition"])
        found: list[dict] = []
        for index, plog in logs:
            if mode == "newest":
                start = max(plog.log_end_offset - limit, plog.log_start_offset)
            elif mode == "offset":
                start = _integer(browse["offset"], "offset", minimum=0)
                if not plog.log_start_offset <= start <= plog.log_end_offset:
                    raise HTTPException(416, f"offset {start} is outside partition {index} of {topic.name!r}, "
                                             f"which holds offsets {plog.log_start_offset} to {plog.log_end_offset}")
            elif mode == "time":
                found_at = plog.offset_for_timestamp(_timestamp(browse["time"]))
                start = found_at[0] if found_at else plog.log_end_offset
            else:
                raise HTTPException(400, f"unknown browse mode {mode!r}: use newest, offset or time")
            upto = stable_offset(self.broker, topic.name, index, plog)
            found.extend(record_view(index, r) for r in records_from(plog, start, limit, upto))
        if mode == "newest":
            found.sort(key=lambda r: (r["timestamp"], r["offset"]), reverse=True)
        else:
            found.sort(key=lambda r: (r["timestamp"], r["partition"], r["offset"]))
        return found[:limit]

    async def search(self, request: Request) -> Response:
        """Records matching the filters, reading at most SCAN_BUDGET records: the page says how far
        it got and links to go on from there."""
        topic = self._topic(request)
        query = {name: request.query_params.get(name, "") for name in SEARCH_FIELDS}
        since = _timestamp(query["since"]) if query["since"] else None
        try:
            where = Filter(key=query["key"], key_exact=query["key_match"] == "exact", value=query["value"],
                           path=query["path"], equals=query["equals"], header=query["header"],
                           header_value=query["header_value"], since=since,
                           until=_timestamp(query["until"]) if query["until"] else None)
        except BadFilter as exc:
            raise HTTPException(400, str(exc)) from None
        resume = _positions(query["resume"])
        partitions = []
        for index, plog in self._partitions(topic, query["partition"]):
            if index in resume:
                start = resume[index]
            elif since is not None:   # the time index: the first offset at or after the from-time
                found_at = plog.offset_for_timestamp(since)
                start = found_at[0] if found_at else plog.log_end_offset
            else:
                start = plog.log_start_offset
            partitions.append((index, plog, start, stable_offset(self.broker, topic.name, index, plog)))
        found = search(partitions, where)
        resume_at = ",".join(f"{i}:{o}" for i, o in sorted(found.positions.items()))
        more = None if found.done else f"/topics/{topic.name}/search?" + urlencode({**query, "resume": resume_at})
        return self.page("search.html", topic=topic.name, query=query, found=found, budget=SCAN_BUDGET, shown=SHOWN,
                         messages=[record_view(i, r) for i, r in found.matches], more=more,
                         partition_count=len(topic.partitions), resume_at=resume_at)

    @staticmethod
    def _partitions(topic: Topic, text: str) -> list[tuple[int, Log]]:
        if text in ("", "all"):
            return list(enumerate(topic.partitions))
        index = _integer(text, "partition", minimum=0)
        if index >= len(topic.partitions):
            raise HTTPException(404, f"topic {topic.name!r} has no partition {index} "
                                     f"(it has {len(topic.partitions)})")
        return [(index, topic.partitions[index])]

    async def tail(self, request: Request) -> Response:
        """Server-sent events: each record appended to the topic from now on, as JSON."""
        topic = self._topic(request)
        positions = {i: p.log_end_offset for i, p in enumerate(topic.partitions)}
        watched = [(topic.name, i) for i in positions]

        async def events():
            yield ": tailing\n\n"  # the response starts at once, so the browser knows the stream is open
            while not await request.is_disconnected():
                with self.broker.wakeups.watch(watched) as watch:
                    if self.broker.log_manager.topics.get(topic.name) is not topic:
                        yield "event: gone\ndata: {}\n\n"
                        return
                    for index, offset in positions.items():
                        plog = topic.partitions[index]
                        upto = stable_offset(self.broker, topic.name, index, plog)
                        for record in records_from(plog, offset, TAIL_BATCH, upto):
                            yield f"data: {json.dumps(record_view(index, record))}\n\n"
                            positions[index] = record.offset + 1
                    await watch.wait(1.0)  # wake now and then to notice a closed page

        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    def _group(self, request: Request) -> GroupView:
        group_id = request.path_params["group"]
        group = consumer_group(self.broker, group_id)
        if group is None:
            raise HTTPException(404, f"consumer group {group_id!r} does not exist")
        return group

    async def group(self, request: Request) -> Response:
        group = self._group(request)
        owner = {tp: m.member_id for m in group.members for tp in m.partitions}
        members = [{"id": m.member_id, "instance": m.instance_id, "client": m.client_id, "host": m.client_host,
                    "epoch": m.epoch, "partitions": ", ".join(f"{t}-{p}" for t, p in m.partitions),
                    "target": None if m.target is None else ", ".join(f"{t}-{p}" for t, p in m.target)}
                   for m in group.members]
        offsets = [{"topic": r.topic, "partition": r.partition, "committed": r.committed, "end": r.log_end,
                    "lag": r.lag, "member": owner.get((r.topic, r.partition))}
                   for r in group_offsets(self.broker, group.group_id)]
        topics = sorted({r["topic"] for r in offsets} | {t for t, _ in owner})
        return self.page("group.html", group=group, members=members, offsets=offsets, topics=topics, modes=MODES)

    async def group_lag(self, request: Request) -> Response:
        group = self._group(request)
        times, series = self.history.group_lag(group.group_id)
        return JSONResponse({"times": times, "series": series})

    async def reset(self, request: Request) -> Response:
        """Reset a group's offsets on one topic: the first POST shows the new offsets and asks
        for confirmation; the POST with confirm=yes commits them. Refused while the group has
        members, as `headwater groups reset-offsets` refuses."""
        form, admin = await self._write(request)
        group = self._group(request)
        topic = self.broker.log_manager.topics.get(form.get("topic", ""))
        if topic is None:
            raise HTTPException(404, f"topic {form.get('topic', '')!r} does not exist")
        reset_to = _reset_to(form.get("to", ""), form.get("value", ""))
        if group.members:
            raise HTTPException(409, f"consumer group {group.group_id!r} has {len(group.members)} active member(s); "
                                     "stop its consumers before resetting offsets")
        committed = self.broker.groups.committed(group.group_id)
        rows = []
        for index, plog in enumerate(topic.partitions):
            at_time = -1
            if reset_to.mode == "datetime":
                found = plog.offset_for_timestamp(reset_to.value)
                at_time = found[0] if found else -1
            previous = committed.get((topic.name, index))
            previous_offset = previous.offset if previous else None
            rows.append({"partition": index, "previous": previous_offset,
                         "new": reset_to.target(plog.log_start_offset, plog.log_end_offset, previous_offset, at_time)})
        if form.get("confirm") != "yes":
            return self.page("reset.html", group=group, topic=topic.name, to=form.get("to"),
                             value=form.get("value", ""), rows=rows)
        await _act(admin.commit_offsets(group.group_id, topic.name, {r["partition"]: r["new"] for r in rows}))
        logger.info("console reset offsets of group %r on %s to %r", group.group_id, topic.name, reset_to)
        return RedirectResponse(request.url_for("group", group=group.group_id), status_code=303)

    # --- writes: each a POST from a console page, refused unless --console-allow-writes ------------

    async def _write(self, request: Request) -> tuple[dict, Admin]:
        """The form of a write, and the actions as the request's user. Another site's page cannot
        post it: a browser names the page's origin, which must be this console."""
        if not self.allow_writes:
            raise HTTPException(403, "the console is read-only: start the broker with --console-allow-writes")
        origin = request.headers.get("origin")
        if origin is not None and urlsplit(origin).netloc != request.headers.get("host"):
            raise HTTPException(403, f"a form posted from {origin!r}, another site, is refused")
        form = await request.form()
        return ({k: str(v) for k, v in form.items()},
                Admin(self.broker, getattr(request.state, "user", None), peer(request)))

    async def produce(self, request: Request) -> Response:
        """One record from the topic page's form, by the REST API's produce path."""
        topic = self._topic(request)
        form, admin = await self._write(request)
        entry = {"key": _string(form.get("key", "")), "value": _string(form.get("value", "")),
                 "headers": _headers(form.get("headers", ""))}
        if form.get("partition", "") not in ("", "any"):
            entry["partition_id"] = _integer(form["partition"], "partition", minimum=0)
        size = sum(len(form.get(f, "").encode()) for f in ("key", "value", "headers"))
        result, = await produce(self.broker, topic, [entry], CONSOLE_CLIENT_ID, size, admin)
        if "error_code" in result:
            raise HTTPException(result["error_code"], result["message"])
        logger.info("console produced to %s-%d at %d", topic.name, result["partition_id"], result["offset"])
        return RedirectResponse(f"/topics/{topic.name}?mode=offset&partition={result['partition_id']}"
                                f"&offset={result['offset']}&limit=1", status_code=303)

    async def create_topic(self, request: Request) -> Response:
        form, admin = await self._write(request)
        name = form.get("name", "").strip()
        partitions = _integer(form.get("partitions", "") or "-1", "partitions", minimum=-1)
        await _act(admin.create_topic(name, partitions, _configs(form.get("configs", ""))))
        return RedirectResponse(f"/topics/{name}", status_code=303)

    async def alter_configs(self, request: Request) -> Response:
        """Set one config of a topic, or (empty value) back to its default: IncrementalAlterConfigs."""
        topic = self._topic(request)
        form, admin = await self._write(request)
        name, value = form.get("name", "").strip(), form.get("value", "").strip()
        await _act(admin.alter_topic_configs(topic.name, {name: value} if value else {}, [] if value else [name]))
        return RedirectResponse(f"/topics/{topic.name}", status_code=303)

    async def delete_records(self, request: Request) -> Response:
        """DeleteRecords: the first POST says what would go, the POST with confirm=yes moves the log start."""
        topic = self._topic(request)
        form, admin = await self._write(request)
        index = _integer(form.get("partition", ""), "partition", minimum=0)
        (_, plog), = self._partitions(topic, str(index))
        before = plog.log_end_offset if form.get("before", "") in ("", "end") else \
            _integer(form["before"], "offset", minimum=0)
        if form.get("confirm") != "yes":
            return self.page("delete_records.html", topic=topic.name, partition=index, start=plog.log_start_offset,
                             end=plog.log_end_offset, before=before, gone=max(before - plog.log_start_offset, 0))
        await _act(admin.delete_records(topic.name, index, before))
        return RedirectResponse(f"/topics/{topic.name}", status_code=303)

    # --- ACLs and users -----------------------------------------------------------------------------

    async def acls(self, request: Request) -> Response:
        admin = Admin(self.broker, getattr(request.state, "user", None), peer(request))
        acls = sorted(await _act(admin.acls()), key=lambda a: (a.resource_type, a.resource_name, a.principal,
                                                              a.operation, a.permission))
        return self.page("acls.html", acls=[_acl_view(a) for a in acls], operations=list(ACL_OPERATIONS),
                         resource_types=[t.name for t in ResourceType if t is not ResourceType.ANY])

    async def change_acl(self, request: Request) -> Response:
        """Create an ACL, or (action=delete) delete exactly that one: CreateAcls / DeleteAcls."""
        form, admin = await self._write(request)
        acl = _acl(form)
        if form.get("action") == "delete":
            await _act(admin.delete_acl(acl))
        else:
            await _act(admin.create_acl(acl))
        return RedirectResponse("/acls", status_code=303)

    async def users(self, request: Request) -> Response:
        admin = Admin(self.broker, getattr(request.state, "user", None), peer(request))
        users = await _act(admin.users())
        return self.page("users.html", users=[{"name": name, "mechanisms": ", ".join(
            f"{m} ({n} iterations)" for m, n in mechanisms)} for name, mechanisms in users.items()])

    async def change_user(self, request: Request) -> Response:
        """Create (or change the password of) a SCRAM user, or (action=delete) delete it: AlterUserScramCredentials."""
        form, admin = await self._write(request)
        name = form.get("name", "").strip()
        if form.get("action") == "delete":
            await _act(admin.delete_user(name))
        else:
            if not form.get("password"):
                raise HTTPException(400, "a new user needs a password")
            await _act(admin.create_user(name, form["password"], form.get("mechanism", "SCRAM-SHA-256")))
        return RedirectResponse("/users", status_code=303)

    async def transactions(self, request: Request) -> Response:
        return self.page("transactions.html", transactions=transactions(self.broker), held_back=held_back(self.broker),
                         completed=self.broker.transactions.completed)

    async def scrape(self, request: Request) -> Response:
        # The broker's state is read here, on the event loop that alone changes it; the families read are
        # the collectors' own new objects, so their text (half a 10,000-partition scrape's CPU) is
        # written in a worker thread while the loop serves Kafka clients.
        families = list(self.metrics.registry.collect())
        return Response(await asyncio.to_thread(exposition, families), media_type=CONTENT_TYPE_LATEST)

    async def error(self, request: Request, exc: HTTPException) -> Response:
        return self.page("error.html", status=exc.status_code, status_code=exc.status_code, message=exc.detail)

    async def failure(self, request: Request, exc: Exception) -> Response:
        logger.error("console: %s %r failed", request.method, request.url.path, exc_info=exc)
        return self.page("error.html", status=500, status_code=500,
                         message="the console failed to build this page; the broker's log has the details")

    def app(self) -> Starlette:
        # The REST API first: Starlette tries routes in order, and a records:batch request
        # matched against every page's pattern first paid ~8% of its CPU for it (py-spy).
        # No page path starts with /v3, so nothing else is routed differently.
        routes = [
            Mount("/v3", app=RestApi(self.broker).app()),
            Route("/", self.overview, name="overview"),
            Route("/rates.json", self.rates),
            Route("/topics/{name}", self.topic, name="topic"),
            Route("/topics/{name}/tail", self.tail),
            Route("/groups", self.groups, name="groups"),
            Route("/groups/{group:segment}", self.group, name="group"),
            Route("/groups/{group:segment}/lag.json", self.group_lag),
            Route("/groups/{group:segment}/reset", self.reset, methods=["POST"]),
            Route("/share-groups/{group:segment}", self.share_group, name="share_group"),
            Route("/topics", self.create_topic, methods=["POST"]),
            Route("/topics/{name}/search", self.search, name="search"),
            Route("/topics/{name}/produce", self.produce, methods=["POST"]),
            Route("/topics/{name}/configs", self.alter_configs, methods=["POST"]),
            Route("/topics/{name}/delete-records", self.delete_records, methods=["POST"]),
            Route("/acls", self.acls, name="acls"),
            Route("/acls", self.change_acl, methods=["POST"]),
            Route("/users", self.users, name="users"),
            Route("/users", self.change_user, methods=["POST"]),
            Route("/cdc", self.cdc, name="cdc"),
            Route("/transactions", self.transactions, name="transactions"),
            Route("/metrics", self.scrape),
            *(SchemaRegistryApi(self.broker, self.registry).routes() + SchemaPages(self.registry, self.page).routes()
              if self.registry is not None else []),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ]
        middleware = [Middleware(KeepEncodedSeparators)]
        if self.login is not None:
            routes += [Route("/login", functools.partial(self.login.form, render=self.page), methods=["GET", "POST"]),
                       Route("/logout", self.login.logout)]
            middleware += self.login.middleware()
        return Starlette(routes=routes, middleware=middleware,
                         exception_handlers={HTTPException: self.error, Exception: self.failure})


def _integer(text: str, what: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise HTTPException(400, f"{what} must be a whole number, got {text!r}") from None
    if value < minimum:
        raise HTTPException(400, f"{what} must be at least {minimum}, got {value}")
    return value


def _timestamp(text: str) -> int:
    """Unix milliseconds from an ISO 8601 date-time (UTC unless a zone is given)."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise HTTPException(400, f"{text!r} is not an ISO 8601 date-time, e.g. 2026-11-22T10:00:00Z") from None
    moment = moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def _positions(text: str) -> dict[int, int]:
    """A search's continuation: ``partition:offset`` pairs, comma-separated."""
    positions = {}
    for pair in filter(None, text.split(",")):
        partition, _, offset = pair.partition(":")
        positions[_integer(partition, "partition", minimum=0)] = _integer(offset, "offset", minimum=0)
    return positions


def _reset_to(mode: str, value: str) -> ResetTo:
    if mode not in MODES:
        raise HTTPException(400, f"reset to {mode!r}? use one of {', '.join(MODES)}")
    if mode in ("earliest", "latest"):
        return ResetTo(mode)
    if mode == "datetime":
        return ResetTo(mode, _timestamp(value))
    return ResetTo(mode, _integer(value, "the offset" if mode == "offset" else "the shift",
                                  minimum=0 if mode == "offset" else -(2**63)))


async def _act(action):
    """Await an admin action; the broker's refusal becomes the page's error (403 when not authorized)."""
    try:
        return await action
    except Refused as refused:
        raise HTTPException(403 if refused.denied else 400, str(refused)) from None


def _string(text: str) -> dict | None:
    """A form field as a REST record's key or value: empty is null (no key; a tombstone value)."""
    return {"type": "STRING", "data": text} if text else None


def _pairs(text: str, what: str, separator: str) -> list[tuple[str, str]]:
    """``name<separator>value`` lines (blank lines skipped)."""
    pairs = []
    for line in text.splitlines():
        if line.strip():
            name, sep, value = line.partition(separator)
            if not sep or not name.strip():
                raise HTTPException(400, f"{what} {line!r} is not name{separator}value")
            pairs.append((name.strip(), value.strip()))
    return pairs


def _headers(text: str) -> list[dict]:
    return [{"name": name, "value": base64.b64encode(value.encode()).decode()}
            for name, value in _pairs(text, "header", ":")]


def _configs(text: str) -> dict[str, str]:
    return dict(_pairs(text, "config", "="))


def _acl_view(acl: AclBinding) -> dict:
    operations = {code: name for name, code in ACL_OPERATIONS.items()}
    return {"resource_type": ResourceType(acl.resource_type).name, "resource_name": acl.resource_name,
            "pattern": PatternType(acl.pattern_type).name, "principal": acl.principal, "host": acl.host,
            "operation": operations.get(acl.operation, str(acl.operation)),
            "permission": Permission(acl.permission).name}


def _acl(form: dict) -> AclBinding:
    try:
        return AclBinding(ResourceType[form.get("resource_type", "")],
                          form.get("resource_name", "").strip() or (CLUSTER_NAME if form.get(
                              "resource_type") == "CLUSTER" else ""),
                          PatternType[form.get("pattern", "LITERAL")], form.get("principal", "").strip(),
                          form.get("host", "").strip() or "*", ACL_OPERATIONS[form.get("operation", "")],
                          Permission[form.get("permission", "ALLOW")])
    except KeyError as missing:
        raise HTTPException(400, f"unknown ACL field value {missing}") from None
