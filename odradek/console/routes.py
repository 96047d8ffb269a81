"""The console's HTTP surface: server-rendered pages (GET) and actions (POST under ``/api/``).

Pages are Jinja2 templates (``templates/``, autoescaped) filled from the read models of this package; the only
JavaScript is ``static/console.js`` (the live tail), and every action is a plain HTML form. An action answers JSON
when asked for it (``Accept: application/json``), else redirects back to its page (303) with a notice or error in
the query string, so reloading never repeats it.

Invariants:
- handlers run on the broker's event loop: they read in-memory state directly, and run anything that reads log
  files (message pages, timestamp lookups) in a worker thread; in a cluster the topic, message, group and
  transaction pages and actions await Kafka requests to the other brokers (``peers.py``, each bounded in time) for
  what those lead or coordinate, whose failures are notices on the page (``peer_notices``) or refusals of the
  action, never a 500; the live tail follows partitions led elsewhere with long-poll Fetch requests (``tail.py``);
- a POST whose ``Origin`` names another host than the request's is refused (403): a page elsewhere cannot drive
  the console through the operator's browser (cross-site request forgery);
- with an ACL authorizer every page and action first checks the user's ACLs (``access.py``): 403 when refused;
- user mistakes and broker refusals (``ConsoleError``, ``KafkaError``) become a message on the page or a 400 JSON
  answer, never a 500.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlparse

import jinja2
from aiohttp import web

from odradek.console import access, admin, cluster_view, groups, messages, tail, topics
from odradek.console.access import AccessDenied
from odradek.console.errors import ConsoleError
from odradek.console.lag_history import LagHistory, chart_svg
from odradek.console.peers import LATEST, Fetched, Peers
from odradek.protocol.errors import KafkaError
from odradek.quota.entity import DEFAULT_NAME
from odradek.security.acl import CLUSTER_NAME, AclBinding, AclOperation, ResourceType

if TYPE_CHECKING:
    from odradek.broker.broker import Broker
    from odradek.cluster.metadata import Topic

HERE = Path(__file__).parent
BROKER: web.AppKey[Broker] = web.AppKey("console_broker")
HISTORY: web.AppKey[LagHistory] = web.AppKey("console_lag_history")
PEERS: web.AppKey[Peers] = web.AppKey("console_peers")
TAILS: web.AppKey[set[asyncio.Task[Any]]] = web.AppKey("console_tails")
MESSAGE_LIMIT = 100
MAX_MESSAGE_LIMIT = 1000
NO_OFFSET = 1 << 62  # a start past any log's end: read_remote clamps it to the end (an empty page)
MAX_ROWS = 500  # rows of a list that is not paginated (transactions, producers, quotas, ACLs)

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _when(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(n)


_env.filters["when"] = _when
_env.filters["size"] = _size
_env.filters["dash"] = lambda v: "-" if v is None else v
_env.filters["seg"] = lambda v: quote(str(v), safe="")  # one path segment (a group id may hold "/")


def render(request: web.Request, template: str, **context: Any) -> web.Response:
    html = _env.get_template(template).render(
        notice=request.query.get("notice"),
        error=context.pop("error", None) or request.query.get("error"),
        path=request.path,
        peer_notices=context.pop("peer_notices", None) or [],
        **context,
    )
    return web.Response(text=html, content_type="text/html")


def _broker(request: web.Request) -> Broker:
    return request.app[BROKER]


def _peers(request: web.Request) -> Peers | None:
    """The console's client of the other brokers when this one is in a cluster, else None (single node: the group
    and transaction pages read this broker's coordinators in memory)."""
    peers = request.app[PEERS]
    return peers if peers.clustered else None


def _int(value: str | None, what: str, default: int | None = None) -> int | None:
    if value is None or value.strip() == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ConsoleError(f"{what} must be a whole number, got {value!r}") from None


# -- pages ------------------------------------------------------------------------------------------------


def _page_denied(e: AccessDenied) -> web.HTTPForbidden:
    return web.HTTPForbidden(text=e.message)


def _require_page(
    request: web.Request, b: Broker, operation: AclOperation, resource_type: ResourceType, name: str
) -> None:
    try:
        access.require(request, b, operation, resource_type, name)
    except AccessDenied as e:
        raise _page_denied(e) from None


def _cluster_page(request: web.Request) -> Broker:
    """The broker, for a page of cluster-wide state: 403 without DESCRIBE on the cluster."""
    b = _broker(request)
    try:
        access.require_cluster(request, b, AclOperation.DESCRIBE)
    except AccessDenied as e:
        raise _page_denied(e) from None
    return b


def _page_topic(request: web.Request, operation: AclOperation) -> tuple[Broker, str, Topic]:
    """The broker, name and topic of a page under ``/topics/{name}``: 403 without ``operation`` on the topic, 404
    when it does not exist."""
    b = _broker(request)
    name = request.match_info["name"]
    _require_page(request, b, operation, ResourceType.TOPIC, name)
    topic = b.registry.get(name)
    if topic is None:
        raise web.HTTPNotFound(text=f"topic '{name}' does not exist")
    return b, name, topic


async def overview(request: web.Request) -> web.Response:
    b = _cluster_page(request)
    peers = _peers(request)
    notices: list[str] = []
    if peers is None:
        group_count = len(b.groups.view().list_groups())
    else:
        found, notices = await groups.cluster_listed(b, peers)
        group_count = len(found)
    return render(
        request,
        "overview.html",
        peer_notices=notices,
        cluster_id=cluster_view.cluster_id(b),
        controller=cluster_view.controller_id(b),
        brokers=cluster_view.brokers(b),
        health=cluster_view.health(b),
        topic_count=len(b.registry.topics),
        group_count=group_count,
        mode="cluster" if b.cluster else "single node",
        node_id=b.node_id,
    )


async def topics_page(request: web.Request) -> web.Response:
    b = _broker(request)
    q = request.query.get("q", "")
    internal = request.query.get("internal", "1") != "0"
    unhealthy = request.query.get("unhealthy") == "1"
    listing = topics.list_topics(
        b,
        q,
        _int(request.query.get("page"), "page", 1) or 1,
        internal=internal,
        visible=lambda name: access.allowed(request, b, AclOperation.DESCRIBE, ResourceType.TOPIC, name),
        unhealthy=unhealthy,
    )
    peers = _peers(request)
    notices: list[str] = []
    if peers is not None:
        listing, notices = await topics.leaders_rows(b, peers, listing)
    return render(
        request,
        "topics.html",
        listing=listing,
        peer_notices=notices,
        q=q,
        internal=internal,
        unhealthy=unhealthy,
        default_partitions=b.config.num_partitions,
        default_rf=b.config.default_replication_factor,
    )


async def topic_page(request: web.Request) -> web.Response:
    b, name, topic = _page_topic(request, AclOperation.DESCRIBE)
    parts = cluster_view.partitions(b, topic)
    peers = _peers(request)
    notices: list[str] = []
    if peers is not None:
        parts, notices = await topics.leaders_figures(b, peers, parts)
    return render(
        request,
        "topic.html",
        topic=topic,
        partitions=parts,
        configs=topics.configs(b, name),
        min_isr=cluster_view.min_isr(b, topic),
        peer_notices=notices,
    )


async def messages_page(request: web.Request) -> web.Response:
    b, name, topic = _page_topic(request, AclOperation.READ)
    q = request.query
    fmt = q.get("format", "text") if q.get("format") in messages.FORMATS else "text"
    error = None
    elsewhere: list[int] = []
    notices: list[str] = []
    page_messages: list[messages.Message] = []
    next_offsets: dict[int, int] = {}
    stopped = False
    peers = _peers(request)
    try:
        partition = _int(q.get("partition"), "partition")
        limit = min(_int(q.get("limit"), "limit", MESSAGE_LIMIT) or MESSAGE_LIMIT, MAX_MESSAGE_LIMIT)
        offset = _int(q.get("offset"), "offset")
        ts = messages.parse_time(q["timestamp"]) if q.get("timestamp", "").strip() else None
        filt = messages.Filter(q.get("key") or None, q.get("value") or None, q.get("header") or None)
        wanted = [partition] if partition is not None else list(range(topic.partitions))
        if partition is not None and not 0 <= partition < topic.partitions:
            raise ConsoleError(f"topic '{name}' has no partition {partition}")
        committed = q.get("isolation") == "read_committed"
        if peers is None:
            logs = {p: part.log for p in wanted if (part := b.replicas.get(name, p)) is not None}
            elsewhere = [p for p in wanted if p not in logs]
            page_messages, next_offsets, stopped = await _read_messages(logs, offset, ts, limit, filt, committed)
        else:
            page_messages, next_offsets, stopped, notices = await _read_cluster(
                b, peers, name, wanted, offset, ts, limit, filt, committed
            )
    except (ConsoleError, KafkaError) as e:
        error = e.message
    return render(
        request,
        "messages.html",
        topic=topic,
        q=q,
        fmt=fmt,
        formats=messages.FORMATS,
        messages=page_messages,
        show=messages.show,
        next_offsets=next_offsets,
        stopped=stopped,
        elsewhere=elsewhere,
        error=error,
        limit=MESSAGE_LIMIT,
        peer_notices=notices,
    )


Read = tuple[list[messages.Message], dict[int, int], bool]


def _merge(pages: dict[int, messages.Page], limit: int) -> Read:
    """One page over ``pages`` (by timestamp across partitions, offset within one), and where each partition's next
    page starts."""
    out: list[messages.Message] = []
    nexts: dict[int, int] = {}
    stopped = False
    for p, page in pages.items():
        out += page.messages
        nexts[p] = page.next_offset
        stopped |= page.stopped_early
    if len(pages) > 1:
        out.sort(key=lambda m: (m.timestamp, m.partition, m.offset))
        if len(out) > limit:
            out = out[:limit]
            for p in pages:  # the next page of each partition starts after what this page shows of it
                shown = [m.offset for m in out if m.partition == p]
                if shown:
                    nexts[p] = shown[-1] + 1
                else:
                    nexts.pop(p, None)
    return out, nexts, stopped


def _read_local(
    logs: dict[int, Any], offset: int | None, ts: int | None, limit: int, filt: messages.Filter, committed: bool
) -> dict[int, messages.Page]:
    """Each of ``logs`` read from ``offset``, the first record at ``ts``, or its start. Blocking."""
    pages: dict[int, messages.Page] = {}
    for p, lg in logs.items():
        if ts is not None:
            start = messages.offset_for_timestamp(lg, ts)
        elif offset is not None:
            start = offset if offset >= 0 else max(lg.high_watermark + offset, lg.log_start_offset)
        else:
            start = lg.log_start_offset
        pages[p] = messages.read_partition(lg, p, start, limit, filt, committed=committed)
    return pages


async def _read_messages(
    logs: dict[int, Any], offset: int | None, ts: int | None, limit: int, filt: messages.Filter, committed: bool
) -> Read:
    """The first ``limit`` records over ``logs`` (by timestamp across partitions, offset within one), each partition
    read from ``offset``, the first record at ``ts``, or its start; and where each partition's next page starts."""

    def read() -> Read:
        return _merge(_read_local(logs, offset, ts, limit, filt, committed), limit)

    return await asyncio.to_thread(read)


async def _read_cluster(
    b: Broker,
    peers: Peers,
    topic: str,
    wanted: list[int],
    offset: int | None,
    ts: int | None,
    limit: int,
    filt: messages.Filter,
    committed: bool,
) -> tuple[list[messages.Message], dict[int, int], bool, list[str]]:
    """``_read_messages`` in a cluster: the partitions this broker leads from their logs, the others with Fetch
    requests to their leaders (concurrently); a notice per partition without a leader or whose leader did not
    answer."""
    notices: list[str] = []
    logs: dict[int, Any] = {}
    remote: dict[int, int] = {}
    for p in wanted:
        leader = peers.leader(topic, p)
        part = b.replicas.get(topic, p)
        if leader is None:
            notices.append(f"{topic}-{p} has no leader: its records cannot be read now")
        elif leader == b.node_id and part is not None and part.is_leader:
            logs[p] = part.log
        elif leader == b.node_id:
            notices.append(f"{topic}-{p}: this broker is not its leader yet")
        else:
            remote[p] = leader
    starts: dict[int, int] = {}
    if remote:
        if ts is not None or (offset is not None and offset < 0):
            spec = ts if ts is not None else LATEST
            found, failed = await peers.list_offsets({(topic, p): spec for p in remote})
            notices += failed
            for p in list(remote):
                o = found.get((topic, p))
                if o is None:
                    del remote[p]
                elif ts is not None:
                    starts[p] = o if o >= 0 else NO_OFFSET  # none at or after ts: an empty page at the end
                else:
                    assert offset is not None
                    starts[p] = max(o + offset, 0)
        else:
            starts = dict.fromkeys(remote, offset or 0)

    async def one(p: int) -> messages.Page:
        leader = remote[p]

        def fetch(at: int) -> Awaitable[Fetched]:
            return peers.fetch(leader, topic, p, at, committed=committed)

        return await messages.read_remote(fetch, p, starts[p], limit, filt, committed=committed)

    pages, (remote_pages, failed) = await asyncio.gather(
        asyncio.to_thread(_read_local, logs, offset, ts, limit, filt, committed),
        peers.each({p: one(p) for p in remote}),
    )
    pages.update(remote_pages)
    out, nexts, stopped = _merge(dict(sorted(pages.items())), limit)
    return out, nexts, stopped, notices + failed


async def groups_page(request: web.Request) -> web.Response:
    q = request.query.get("q", "")
    b = _broker(request)
    page = _int(request.query.get("page"), "page", 1) or 1
    peers = _peers(request)
    notices: list[str] = []

    def visible(g: str) -> bool:
        return access.allowed(request, b, AclOperation.DESCRIBE, ResourceType.GROUP, g)

    if peers is None:
        listing = groups.list_groups(b, q, page, visible=visible)
    else:
        listing, notices = await groups.list_groups_cluster(b, peers, q, page, visible=visible)
    return render(request, "groups.html", listing=listing, q=q, peer_notices=notices, clustered=peers is not None)


async def group_page(
    request: web.Request,
    *,
    reset: groups.ResetResult | None = None,
    error: str | None = None,
    form: dict[str, str] | None = None,
) -> web.Response:
    b = _broker(request)
    group_id = request.match_info["group"]
    _require_page(request, b, AclOperation.DESCRIBE, ResourceType.GROUP, group_id)
    peers = _peers(request)
    notices: list[str] = []
    if peers is None:
        detail = groups.describe(b, group_id)
    else:
        detail, notices = await groups.describe_cluster(b, peers, group_id)
    if detail is None:
        where = "its group coordinator" if peers is not None else "this broker's group coordinator"
        raise web.HTTPNotFound(text=f"group '{group_id}' is not known to {where}")
    history = request.app[HISTORY]
    if peers is None and history.due(b.clock.milliseconds()):  # in a cluster the sampler alone asks the brokers
        history.sample(b.clock.milliseconds(), groups.total_lags(b))
    chart = chart_svg(history.series(group_id))
    return render(
        request,
        "group.html",
        group=detail,
        chart=chart,
        modes=groups.MODES,
        reset=reset,
        error=error,
        topics=sorted({p.topic for p in detail.partitions}),
        form=form or {},
        peer_notices=notices,
    )


async def transactions_page(request: web.Request) -> web.Response:
    b = _cluster_page(request)
    peers = _peers(request)
    if peers is None:
        found = admin.ClusterTransactions(
            admin.transactions(b), admin.open_producers(b), admin.hanging_transactions(b), []
        )
    else:
        found = await admin.cluster_transactions(b, peers)
    return render(
        request,
        "transactions.html",
        transactions=found.transactions[:MAX_ROWS],
        producers=found.producers[:MAX_ROWS],
        hanging=found.hanging[:MAX_ROWS],
        max_rows=MAX_ROWS,
        now=b.clock.milliseconds(),
        peer_notices=found.notices,
        clustered=peers is not None,
    )


async def security_page(request: web.Request) -> web.Response:
    b = _cluster_page(request)
    acls = admin.acls(b)
    return render(
        request,
        "security.html",
        quotas=admin.quotas(b)[:MAX_ROWS],
        acls=None if acls is None else acls[:MAX_ROWS],
        max_rows=MAX_ROWS,
        may_alter_quotas=access.allowed(request, b, AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME),
        may_alter_acls=access.allowed(request, b, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME),
        quota_keys=admin.QUOTA_KEYS,
        default_name=DEFAULT_NAME,
        resource_types=admin.ACL_RESOURCE_TYPES,
        operations=admin.ACL_OPERATIONS,
        permissions=admin.ACL_PERMISSIONS,
        pattern_types=admin.ACL_PATTERN_TYPES,
    )


# -- actions ----------------------------------------------------------------------------------------------


def _wants_json(request: web.Request) -> bool:
    return "application/json" in request.headers.get("Accept", "")


def _check_origin(request: web.Request) -> None:
    """Refuse a cross-site POST (its ``Origin`` names another host): see the module's invariants."""
    origin = request.headers.get("Origin")
    if origin and urlparse(origin).netloc != request.host:
        raise web.HTTPForbidden(text="cross-site request refused: use the console's own pages")


async def _form(request: web.Request) -> dict[str, str]:
    _check_origin(request)
    if request.content_type == "application/json":
        doc = await request.json()
        if not isinstance(doc, dict):
            raise ConsoleError("the request body must be a JSON object")
        return {k: v if isinstance(v, str) else ("" if v is None else str(v)) for k, v in doc.items()}
    form = await request.post()
    return {k: v for k, v in form.items() if isinstance(v, str)}


def _done(request: web.Request, back: str, notice: str, **data: Any) -> web.Response:
    if _wants_json(request):
        return web.json_response({"ok": True, "message": notice, **data})
    raise web.HTTPSeeOther(f"{back}?{urlencode({'notice': notice})}")


def _failed(request: web.Request, back: str, message: str, status: int = 400) -> web.Response:
    if _wants_json(request):
        return web.json_response({"ok": False, "error": message}, status=status)
    raise web.HTTPSeeOther(f"{back}?{urlencode({'error': message})}")


Action = Callable[[web.Request, "Broker", dict[str, str]], Awaitable[tuple[str, str, dict[str, Any]]]]


def action(fn: Action, back: Callable[[web.Request], str]) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A POST handler: ``fn`` returns (page to go back to, notice, JSON data) or raises a refusal."""

    async def handler(request: web.Request) -> web.Response:
        try:
            form = await _form(request)
            where, notice, data = await fn(request, _broker(request), form)
        except (ConsoleError, KafkaError) as e:
            return _failed(request, back(request), e.message, 403 if isinstance(e, AccessDenied) else 400)
        return _done(request, where, notice, **data)

    return handler


def _topic_path(request: web.Request) -> str:
    return f"/topics/{request.match_info['name']}"


async def create_topic(request: web.Request, b: Broker, form: dict[str, str]) -> tuple[str, str, dict[str, Any]]:
    name = form.get("name", "").strip()
    access.require_create(request, b, name)
    await topics.create(
        b,
        name,
        _int(form.get("partitions"), "partitions"),
        _int(form.get("replication_factor"), "replication factor"),
        topics.parse_configs(form.get("configs", "")),
    )
    return f"/topics/{name}", f"created topic {name}", {"topic": name}


async def delete_topic(request: web.Request, b: Broker, form: dict[str, str]) -> tuple[str, str, dict[str, Any]]:
    name = request.match_info["name"]
    access.require(request, b, AclOperation.DELETE, ResourceType.TOPIC, name)
    if form.get("confirm", "") != name:
        raise ConsoleError(f"type the topic's name ({name}) to confirm its deletion")
    await topics.delete(b, name)
    return "/topics", f"deleted topic {name}", {"topic": name}


async def alter_configs(request: web.Request, b: Broker, form: dict[str, str]) -> tuple[str, str, dict[str, Any]]:
    name = request.match_info["name"]
    access.require(request, b, AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, name)
    set_configs = topics.parse_configs(form.get("set", ""))
    delete_keys = [k.strip() for k in form.get("delete", "").replace(",", "\n").splitlines() if k.strip()]
    if not set_configs and not delete_keys:
        raise ConsoleError("nothing to change: give key=value lines to set or keys to delete")
    new = topics.alter_configs(b, name, set_configs, delete_keys)
    return f"/topics/{name}", f"altered the configs of {name}", {"overrides": new}


async def add_partitions(request: web.Request, b: Broker, form: dict[str, str]) -> tuple[str, str, dict[str, Any]]:
    name = request.match_info["name"]
    access.require(request, b, AclOperation.ALTER, ResourceType.TOPIC, name)
    count = _int(form.get("count"), "partition count")
    if count is None:
        raise ConsoleError("give the new partition count")
    await topics.add_partitions(b, name, count)
    return f"/topics/{name}", f"{name} now has {count} partitions", {"partitions": count}


async def produce(request: web.Request, b: Broker, form: dict[str, str]) -> tuple[str, str, dict[str, Any]]:
    name = request.match_info["name"]
    access.require(request, b, AclOperation.WRITE, ResourceType.TOPIC, name)
    headers = []
    for line in form.get("headers", "").splitlines():
        if line.strip():
            k, sep, v = line.partition("=")
            headers.append((k.strip(), v.encode() if sep else None))
    key = form.get("key", "")
    p, offset = messages.produce(
        b,
        name,
        _int(form.get("partition"), "partition"),
        key.encode() if key != "" else None,
        form.get("value", "").encode(),
        tuple(headers),
    )
    return (
        f"/topics/{name}/messages",
        f"produced to partition {p} at offset {offset}",
        {"partition": p, "offset": offset},
    )


async def abort_transaction(request: web.Request, b: Broker, form: dict[str, str]) -> tuple[str, str, dict[str, Any]]:
    access.require_cluster(request, b, AclOperation.ALTER)  # WriteTxnMarkers from an operator
    topic = form.get("topic", "")
    partition = _int(form.get("partition"), "partition")
    start = _int(form.get("start_offset"), "start offset")
    if partition is None or start is None:
        raise ConsoleError("give the topic, partition and start offset of the transaction to abort")
    peers = _peers(request)
    if peers is None:
        p = await admin.abort_transaction(b, topic, partition, start)
    else:
        p = await admin.abort_transaction_cluster(b, peers, topic, partition, start)
    return (
        "/transactions",
        f"aborted the transaction of producer {p.producer_id} (epoch {p.producer_epoch}) in {topic}-{partition} "
        f"that started at offset {start}",
        {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch},
    )


async def set_quota(request: web.Request, b: Broker, form: dict[str, str]) -> tuple[str, str, dict[str, Any]]:
    access.require_cluster(request, b, AclOperation.ALTER_CONFIGS)  # AlterClientQuotas
    entity, configs = await admin.set_quota(b, form)
    key = form.get("key", "").strip()
    return "/security", f"set {key}={configs[key]} for {entity}", {"entity": entity, "configs": configs}


async def remove_quota(request: web.Request, b: Broker, form: dict[str, str]) -> tuple[str, str, dict[str, Any]]:
    access.require_cluster(request, b, AclOperation.ALTER_CONFIGS)  # AlterClientQuotas
    entity, configs = await admin.remove_quota(b, form)
    return "/security", f"removed {form.get('key', '').strip()} from {entity}", {"entity": entity, "configs": configs}


def _acl_text(binding: AclBinding) -> str:
    p, e = binding.pattern, binding.entry
    return (
        f"{e.permission.name} {e.principal} {e.operation.name} from host {e.host} on {p.resource_type.name} "
        f"{p.pattern_type.name} '{p.name}'"
    )


async def add_acl(request: web.Request, b: Broker, form: dict[str, str]) -> tuple[str, str, dict[str, Any]]:
    access.require_cluster(request, b, AclOperation.ALTER)  # CreateAcls
    binding = await admin.add_acl(b, form)
    return "/security", f"added ACL: {_acl_text(binding)}", {}


async def remove_acl(request: web.Request, b: Broker, form: dict[str, str]) -> tuple[str, str, dict[str, Any]]:
    access.require_cluster(request, b, AclOperation.ALTER)  # DeleteAcls
    binding = await admin.remove_acl(b, form)
    return "/security", f"removed ACL: {_acl_text(binding)}", {}


async def reset_offsets(request: web.Request) -> web.Response:
    """Dry run (the default) or ``execute``: the group page with the plan, or JSON."""
    b = _broker(request)
    group_id = request.match_info["group"]
    form: dict[str, str] = {}
    try:
        form = await _form(request)
        execute = form.get("execute") in ("1", "true", "on")
        access.require(
            request, b, AclOperation.READ if execute else AclOperation.DESCRIBE, ResourceType.GROUP, group_id
        )
        peers = _peers(request)

        def may_commit(topic: str) -> bool:
            return access.allowed(request, b, AclOperation.READ, ResourceType.TOPIC, topic)

        asked = (group_id, form.get("topic") or None, form.get("mode", ""), form.get("value"))
        result = await (
            groups.reset_offsets(b, *asked, execute=execute, may_commit=may_commit)
            if peers is None
            else groups.reset_offsets_cluster(b, peers, *asked, execute=execute, may_commit=may_commit)
        )
    except (ConsoleError, KafkaError) as e:
        if _wants_json(request):
            return web.json_response(
                {"ok": False, "error": e.message}, status=403 if isinstance(e, AccessDenied) else 400
            )
        return await group_page(request, error=e.message, form=form)
    if _wants_json(request):
        return web.json_response(
            {
                "ok": not result.errors,
                "executed": result.executed,
                "notes": result.plan.notes,
                "offsets": [
                    {"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(result.plan.offsets.items())
                ],
                "errors": {f"{t}-{p}": e for (t, p), e in result.errors.items()},
            }
        )
    return await group_page(request, reset=result, form=form)


async def tail_events(request: web.Request) -> web.StreamResponse:
    b, name, topic = _page_topic(request, AclOperation.READ)
    try:
        partition = _int(request.query.get("partition"), "partition")
    except ConsoleError as e:
        raise web.HTTPBadRequest(text=e.message) from None
    fmt = request.query.get("format", "text")
    wanted = [partition] if partition is not None else list(range(topic.partitions))
    tails = request.app[TAILS]
    task = asyncio.current_task()
    assert task is not None
    tails.add(task)
    try:
        return await tail.stream(
            request, b, name, wanted, fmt if fmt in messages.FORMATS else "text", peers=_peers(request)
        )
    finally:
        tails.discard(task)


# -- wiring -----------------------------------------------------------------------------------------------


async def _cancel_tails(app: web.Application) -> None:
    for task in list(app[TAILS]):
        task.cancel()


def add_routes(app: web.Application) -> None:
    app[TAILS] = set()
    app.on_shutdown.append(_cancel_tails)
    r = app.router
    r.add_get("/", overview)
    r.add_get("/topics", topics_page)
    r.add_get("/topics/{name}", topic_page)
    r.add_get("/topics/{name}/messages", messages_page)
    r.add_get("/groups", groups_page)
    r.add_get("/groups/{group}", group_page)
    r.add_get("/transactions", transactions_page)
    r.add_get("/security", security_page)
    r.add_post("/api/topics", action(create_topic, lambda _r: "/topics"))
    r.add_post("/api/topics/{name}/delete", action(delete_topic, _topic_path))
    r.add_post("/api/topics/{name}/configs", action(alter_configs, _topic_path))
    r.add_post("/api/topics/{name}/partitions", action(add_partitions, _topic_path))
    r.add_post("/api/topics/{name}/produce", action(produce, lambda rq: _topic_path(rq) + "/messages"))
    r.add_post("/api/groups/{group}/reset", reset_offsets)
    r.add_post("/api/transactions/abort", action(abort_transaction, lambda _r: "/transactions"))
    r.add_post("/api/quotas", action(set_quota, lambda _r: "/security"))
    r.add_post("/api/quotas/remove", action(remove_quota, lambda _r: "/security"))
    r.add_post("/api/acls", action(add_acl, lambda _r: "/security"))
    r.add_post("/api/acls/remove", action(remove_acl, lambda _r: "/security"))
    r.add_get("/api/topics/{name}/tail", tail_events)
    r.add_static("/static/", HERE / "static", append_version=False)
