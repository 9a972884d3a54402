"""The requests ``mqadmin`` (rocketmq-tools) sends to brokers for topics, groups, broker
status and consumer progress, answered by the admin service (``node/services/admin.py``),
the one the gRPC Admin door uses: a topic or group change is the same Raft command with
the same checks and the same ACL decision (admin rights), whichever tool asked.

- UPDATE_AND_CREATE_TOPIC (17, to each master mqadmin picks): the topic on the receiving
  node's broker group, ``max(readQueueNums, writeQueueNums)`` queues, ``perm`` 6 / 4 / 2
  as READ_WRITE / READ / WRITE (its inherit and priority bits ignored), ``attributes``'
  ``message.type`` and ``lite.topic.expiration`` (``topic_attributes.py``). A new topic is
  created (typed as an untyped Admin topic unless ``+message.type`` says); an existing one
  is grown and spread to this group (Admin UpdateTopic: queues are never removed), its
  lite expiration changed when the attributes name it.
- DELETE_TOPIC_IN_BROKER / DELETE_TOPIC_IN_NAMESRV (215 / 216, to every master then every
  NameServer): the topic is deleted once; a topic already gone is success, as each later
  request of the same command finds it.
- UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200, updateSubGroup, to each master): the group,
  with ``retryMaxTimes`` + 1 delivery attempts, ``consumeMessageOrderly`` as FIFO and the
  ``lite.sub.model`` attribute (Shared or Exclusive, RocketMQ 5.5), is created, or an
  existing group is updated in place to them (Admin UpdateGroup), as RocketMQ's broker
  replaces a group's config: the attempts and FIFO as the body says, the lite model when
  the attributes name it (``-lite.sub.model``: back to Shared). The later masters of one
  updateSubGroup find nothing to change, which costs no routing change.
- GET_BROKER_RUNTIME_INFO (28): the table clusterList and brokerStatus print, every key
  RocketMQ's 4.9 and 5.x tools read, with this node's own figures (``runtime_table``).
- GET_TOPIC_STATS_INFO (202, topicStatus, to each broker group of the topic): each of the
  topic's queues here, its min and max offset and the store time of its newest message
  (0 when empty), read from the store's facade, and the topic's put rate here over the
  last minute; TOPIC_NOT_EXIST when the group hosts none of it.
- QUERY_TOPIC_CONSUME_BY_WHO (300, queryMsgById's message track): the groups that
  committed offsets of the topic on this node.
- GET_TOPIC_CONFIG (351, consumerProgress asks it of each topic first): the topic's
  TopicConfig on this broker group, from the routing state (queues here, perm, no
  queue mapping; a LITE topic's ``message.type`` and ``lite.topic.expiration`` attributes);
  TOPIC_NOT_EXIST when the group hosts none of it.
- GET_CONSUME_STATS (208): Admin GroupProgress of each topic the group committed offsets
  of on this node (or the one named), in RocketMQ's ConsumeStats: the MessageQueue keys
  are JSON objects, as fastjson writes them; ``consumeTps`` is what this node delivered to
  the group over the last minute.

- INVOKE_BROKER_TO_RESET_OFFSET (222, resetOffsetByTime, to each master of the topic):
  the group's offsets of this broker group's queues of the topic, reset by the offset
  reset service (``node/services/offset_reset.py``) to the header's ``timestamp`` (-1: each
  queue's max offset); answered SUCCESS with a ResetOffsetBody of the new offsets, whether
  a consumer is online or not, as RocketMQ 5's broker does (``useServerSideResetOffset``,
  its default); the group's 4.x clients connected here are told
  (``consumer_notices.py``). ``isForce`` changes nothing (RocketMQ 5 ignores it too); a
  request naming one queue (``queueId`` >= 0: mqadmin's ``-b``/``-q``, sent after it
  committed that queue itself) resets that queue only, to its ``offset`` when one is given
  (-1: none), as RocketMQ 5's broker does.

Refusals map the Admin status to RocketMQ's codes (not found: TOPIC_NOT_EXIST or
SUBSCRIPTION_GROUP_NOT_EXIST; routing unavailable: SERVICE_NOT_AVAILABLE; else
SYSTEM_ERROR), with the Admin message as the remark.

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

import json
import time

from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import BROKER_VERSION, RequestCode, ResponseCode
from node.broker_stats import tps_text
from node.remoting.authentication import DoorHandler
from node.remoting.consumer_notices import reset_offset_body
from node.remoting.name_server import CLUSTER_NAME, PERMISSION_BITS
from node.remoting.topic_attributes import (
    LITE_EXPIRATION,
    MESSAGE_TYPE,
    BadAttributes,
    parse_topic_attributes,
)
from node.services.admin import (
    ALREADY_EXISTS,
    NOT_FOUND,
    UNAVAILABLE,
    AdminRefused,
    QueueProgress,
    RuntimeFigures,
    TopicSpec,
)
from node.services.caller import Caller
from node.services.offset_reset import ResetRequest, ResetTarget
from node.services.registry import Services
from node.topics import MessageType, Permission
from store.results import LogFigures

PERMISSIONS = {6: Permission.READ_WRITE, 4: Permission.READ, 2: Permission.WRITE}
PERM_READ_WRITE = 6
VERSION_DESC = "V4_9_7"  # the version BROKER_VERSION numbers
BOOTED_MS = int(time.time() * 1000)


def refusal(refused: AdminRefused, not_found: ResponseCode) -> tuple[ResponseCode, str]:
    if refused.code == NOT_FOUND:
        return not_found, refused.message
    if refused.code == UNAVAILABLE:
        return ResponseCode.SERVICE_NOT_AVAILABLE, refused.message
    return ResponseCode.SYSTEM_ERROR, refused.message


def consume_stats_body(
    queues: list[QueueProgress], last_ms: dict[tuple, int], consume_tps: float
) -> bytes:
    """ConsumeStats as fastjson writes it: ``offsetTable`` keyed by MessageQueue objects."""
    entries = []
    for queue in queues:
        key = {"brokerName": queue.broker_group, "queueId": queue.queue_id, "topic": queue.topic}
        value = {
            "brokerOffset": queue.broker_offset,
            "consumerOffset": queue.consumer_offset,
            # mqadmin prints pullOffset - consumerOffset as "in flight": the node does not
            # track pulls in flight, so it reports none rather than a negative count.
            "pullOffset": queue.consumer_offset,
            "lastTimestamp": last_ms.get((queue.topic, queue.queue_id), 0),
        }
        entries.append(f"{compact(key)}:{compact(value)}")
    tps = compact(round(consume_tps, 2))
    return ('{"consumeTps":' + tps + ',"offsetTable":{' + ",".join(entries) + "}}").encode()


def runtime_table(
    figures: RuntimeFigures, broker_group: str, node_id: str, now_s: float
) -> dict[str, str]:
    """RocketMQ's runtime KVTable of this node (every value a string, as the tools parse
    them). The thread-pool keys describe the requests held open: sends taken and not yet
    answered (their flush and replicas awaited) against the node's limit; reads and acks
    have none queued (a long poll is parked, not queued), and no lock is held over a put between
    two requests on the event loop (``pageCacheLockTimeMills`` 0)."""
    put_tps, got_tps = tps_text(figures.put_rates), tps_text(figures.got_rates)
    daily = figures.daily
    put_average = figures.put_bytes / figures.put_total if figures.put_total else 0.0
    return {
        "brokerVersionDesc": VERSION_DESC,
        "brokerVersion": str(BROKER_VERSION),
        "brokerActive": "true",
        "brokerRole": "SYNC_MASTER" if figures.is_master else "SLAVE",
        "brokerName": broker_group,
        "clusterName": CLUSTER_NAME,
        "nodeId": node_id,
        "bootTimestamp": str(BOOTED_MS),
        "runtime": f"[ {int(now_s * 1000 - BOOTED_MS) // 1000} seconds ]",
        "putTps": put_tps,
        "getTransferedTps": got_tps,  # RocketMQ 4.x spells it so
        "getTransferredTps": got_tps,
        "putMessageTimesTotal": str(figures.put_total),
        "putMessageSizeTotal": str(figures.put_bytes),
        "putMessageAverageSize": f"{put_average:.2f}",
        "msgPutTotalYesterdayMorning": str(daily.put_yesterday_morning),
        "msgPutTotalTodayMorning": str(daily.put_today_morning),
        "msgPutTotalTodayNow": str(figures.put_total),
        "msgGetTotalYesterdayMorning": str(daily.got_yesterday_morning),
        "msgGetTotalTodayMorning": str(daily.got_today_morning),
        "msgGetTotalTodayNow": str(figures.got_total),
        "sendThreadPoolQueueSize": str(figures.sends_open),
        "sendThreadPoolQueueCapacity": str(figures.max_open_sends),
        "sendThreadPoolQueueHeadWaitTimeMills": str(figures.oldest_send_wait_ms),
        "pullThreadPoolQueueSize": "0",
        "pullThreadPoolQueueCapacity": str(figures.max_open_sends),
        "pullThreadPoolQueueHeadWaitTimeMills": "0",
        "queryThreadPoolQueueSize": "0",
        "queryThreadPoolQueueCapacity": str(figures.max_open_sends),
        "queryThreadPoolQueueHeadWaitTimeMills": "0",
        "litePullThreadPoolQueueSize": "0",
        "litePullThreadPoolQueueCapacity": str(figures.max_open_sends),
        "litePullThreadPoolQueueHeadWaitTimeMills": "0",
        "ackThreadPoolQueueSize": "0",
        "ackThreadPoolQueueCapacity": str(figures.max_open_sends),
        "ackThreadPoolQueueHeadWaitTimeMills": "0",
        "pageCacheLockTimeMills": "0",
        **log_table(figures.log),
    }


def log_table(log: LogFigures) -> dict[str, str]:
    """The runtime table's keys of the CommitLog and the disk under it."""
    used = log.disk_total_bytes - log.disk_free_bytes
    disk_ratio = used / log.disk_total_bytes if log.disk_total_bytes else 0.0
    return {
        "earliestMessageTimeStamp": str(log.earliest_store_ms),
        "commitLogMinOffset": str(log.min_offset),
        "commitLogMaxOffset": str(log.write_offset),
        "dispatchBehindBytes": str(max(0, log.write_offset - log.dispatched_offset)),
        "remainHowManyDataToFlush": str(max(0, log.write_offset - log.flushed_offset)),
        "commitLogDiskRatio": f"{disk_ratio:.4f}",
        "consumeQueueDiskRatio": f"{disk_ratio:.4f}",  # one data directory holds both
        "commitLogDirCapacity": (
            f"Total : {human_bytes(log.disk_total_bytes)}, "
            f"Free : {human_bytes(log.disk_free_bytes)}."
        ),
    }


def human_bytes(count: int) -> str:
    """RocketMQ's size text (``UtilAll.humanReadableByteCount``, binary units)."""
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
    value, power = float(count), 0
    while value >= 1024 and power < len(units) - 1:
        value, power = value / 1024, power + 1
    return f"{count} B" if power == 0 else f"{value:.1f} {units[power]}"


LITE_SUB_MODEL = "lite.sub.model"


def lite_sub_model_exclusive(attributes: dict) -> bool:
    """Whether a SubscriptionGroupConfig's attributes ask for RocketMQ 5.5's Exclusive lite
    subscription model (mqadmin ``updateSubGroup --attributes +lite.sub.model=Exclusive``
    sends the key with its ``+``); Shared, the default, when absent. Any other value is a
    ValueError that names it."""
    if not isinstance(attributes, dict):
        raise TypeError("attributes: not an object")
    model = attributes.get("+" + LITE_SUB_MODEL, attributes.get(LITE_SUB_MODEL, "Shared"))
    if model not in ("Shared", "Exclusive"):
        raise ValueError(f"{LITE_SUB_MODEL} {model!r}: Shared or Exclusive")
    return model == "Exclusive"


def lite_sub_model_named(attributes: dict) -> bool | None:
    """An update's lite subscription model: True for Exclusive, False for Shared (also
    ``-lite.sub.model``, the attribute removed), None when the attributes do not name it
    (the group keeps its model, as RocketMQ keeps attributes an update does not name)."""
    if not isinstance(attributes, dict):
        raise TypeError("attributes: not an object")
    if "-" + LITE_SUB_MODEL in attributes:
        return False
    if "+" + LITE_SUB_MODEL not in attributes and LITE_SUB_MODEL not in attributes:
        return None
    return lite_sub_model_exclusive(attributes)


def compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


class AdminCodeHandlers:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.admin = services.admin

    def handlers(self) -> list[tuple[int, DoorHandler]]:
        return [
            (RequestCode.UPDATE_AND_CREATE_TOPIC, self.update_topic),
            (RequestCode.DELETE_TOPIC_IN_BROKER, self.delete_topic),
            (RequestCode.DELETE_TOPIC_IN_NAMESRV, self.delete_topic),
            (RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, self.update_group),
            (RequestCode.GET_BROKER_RUNTIME_INFO, self.runtime_info),
            (RequestCode.GET_CONSUME_STATS, self.consume_stats),
            (RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, self.consumed_by),
            (RequestCode.GET_TOPIC_CONFIG, self.topic_config),
            (RequestCode.GET_TOPIC_STATS_INFO, self.topic_stats),
            (RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, self.reset_offsets),
        ]

    async def update_topic(self, request: RemotingCommand, connection, caller: Caller):
        name = request.text("topic")
        queues = max(request.int32("readQueueNums", 8), request.int32("writeQueueNums", 8))
        perm = request.int32("perm", 6)
        permission = PERMISSIONS.get(perm & PERM_READ_WRITE)  # the inherit and priority bits
        if permission is None:  # mean nothing here
            return request.reply(
                ResponseCode.SYSTEM_ERROR,
                f"perm {perm} allows neither reads nor writes: 6 (both), 4 (read) or 2 (write)",
            )
        try:
            attributes = parse_topic_attributes(request.text("attributes", ""))
        except BadAttributes as error:
            return request.reply(ResponseCode.SYSTEM_ERROR, str(error))
        group = self.admin.broker_group
        existing = self.admin.route(name)
        expiration = attributes.lite_expiration_minutes
        try:
            if existing is None:
                spec = TopicSpec(
                    name,
                    queues,
                    (group,),
                    attributes.message_type,
                    permission,
                    expiration,
                )
                await self.admin.create_topic(caller, spec)
            else:
                kind = attributes.message_type
                if kind is not None and kind is not existing.message_type:
                    return request.reply(
                        ResponseCode.SYSTEM_ERROR,
                        f"topic {name} is a {existing.message_type.value} topic: its "
                        f"message.type cannot be changed to {kind.value}",
                    )
                groups = sorted({g for g, _ in existing.queues} | {group})
                count = max([queues, *(count for _, count in existing.queues)])
                spec = TopicSpec(
                    name,
                    count,
                    tuple(groups),
                    permission=permission,
                    lite_expiration_minutes=expiration,
                )
                await self.admin.update_topic(caller, spec)
        except AdminRefused as refused:
            return request.reply(*refusal(refused, ResponseCode.TOPIC_NOT_EXIST))
        return request.reply(ResponseCode.SUCCESS)

    async def topic_config(self, request: RemotingCommand, connection, caller: Caller):
        name = request.text("topic")
        local = self.admin.local_topic(caller, name)
        if local is None:
            return request.reply(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic in this broker. topic: {name}",
            )
        queues, permission = local
        route = self.admin.route(name)
        attributes = {}
        if route is not None and route.message_type is MessageType.LITE:  # bare keys, as stored
            attributes = {
                MESSAGE_TYPE: route.message_type.value,
                LITE_EXPIRATION: str(route.lite_expiration_minutes),
            }
        config = {
            "topicName": name,
            "readQueueNums": queues,
            "writeQueueNums": queues,
            "perm": PERMISSION_BITS[permission],
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": False,
            "attributes": attributes,
        }
        return request.reply(ResponseCode.SUCCESS, body=json.dumps(config).encode())

    async def topic_stats(self, request: RemotingCommand, connection, caller: Caller):
        name = request.text("topic")
        stats = self.admin.topic_stats(caller, name)
        if not stats:
            return request.reply(ResponseCode.TOPIC_NOT_EXIST, f"topic[{name}] not exist")
        entries = []
        for queue_id, low, high, last_ms in stats:
            key = {"brokerName": self.admin.broker_group, "queueId": queue_id, "topic": name}
            value = {"lastUpdateTimestamp": last_ms, "maxOffset": high, "minOffset": low}
            entries.append(f"{compact(key)}:{compact(value)}")
        tps = compact(round(self.admin.put_rate(caller, name), 2))
        body = '{"offsetTable":{' + ",".join(entries) + '},"topicPutTps":' + tps + "}"
        return request.reply(ResponseCode.SUCCESS, body=body.encode())

    async def delete_topic(self, request: RemotingCommand, connection, caller: Caller):
        try:
            await self.admin.delete_topic(caller, request.text("topic"))
        except AdminRefused as refused:
            if refused.code != NOT_FOUND:  # each later request of one deleteTopic finds it so
                return request.reply(*refusal(refused, ResponseCode.TOPIC_NOT_EXIST))
        return request.reply(ResponseCode.SUCCESS)

    async def update_group(self, request: RemotingCommand, connection, caller: Caller):
        try:
            config = json.loads(request.body)
            name = config["groupName"]
            retries = config.get("retryMaxTimes", 16)
            orderly = config.get("consumeMessageOrderly", False)
            attributes = config.get("attributes") or {}
            if type(name) is not str or type(retries) is not int or type(orderly) is not bool:
                raise TypeError("groupName, retryMaxTimes, consumeMessageOrderly: wrong types")
            exclusive = lite_sub_model_named(attributes)
        except (ValueError, KeyError, TypeError) as error:
            return request.reply(
                ResponseCode.SYSTEM_ERROR, f"body is not a SubscriptionGroupConfig: {error}"
            )
        attempts = max(retries, 0) + 1
        try:
            await self.admin.create_group(caller, name, attempts, orderly, bool(exclusive))
        except AdminRefused as refused:
            if refused.code != ALREADY_EXISTS:
                return request.reply(*refusal(refused, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST))
            try:  # it exists: updated in place, as RocketMQ's broker does
                await self.admin.update_group(caller, name, attempts, orderly, exclusive)
            except AdminRefused as refused:
                return request.reply(*refusal(refused, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST))
        return request.reply(ResponseCode.SUCCESS)

    async def runtime_info(self, request: RemotingCommand, connection, caller: Caller):
        admin = self.admin
        figures = admin.runtime(caller)
        table = runtime_table(figures, admin.broker_group, admin.node_id, time.time())
        return request.reply(ResponseCode.SUCCESS, body=compact({"table": table}).encode())

    async def consume_stats(self, request: RemotingCommand, connection, caller: Caller):
        group = request.text("consumerGroup")
        named = request.text("topic", "")
        topics = [named] if named else self.admin.topics_consumed_by(caller, group)
        queues: list[QueueProgress] = []
        last_ms: dict[tuple, int] = {}
        for topic in topics:
            try:
                progress = self.admin.group_progress(caller, group, topic)
            except AdminRefused as refused:
                code, remark = refusal(refused, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST)
                if named or "group" in remark.lower():
                    return request.reply(code, remark)
                continue  # a topic deleted since: nothing to show of it
            for queue in progress:
                queues.append(queue)
                before = self.services.queries.at_queue_offset(
                    caller, topic, queue.queue_id, queue.consumer_offset - 1
                )
                if before is not None:
                    last_ms[(topic, queue.queue_id)] = before.store_timestamp_ms
        tps = self.admin.consume_rate(caller, group)
        return request.reply(ResponseCode.SUCCESS, body=consume_stats_body(queues, last_ms, tps))

    async def reset_offsets(self, request: RemotingCommand, connection, caller: Caller):
        topic, group = request.text("topic"), request.text("group")
        timestamp = request.integer("timestamp")
        queue_id = max(request.int32("queueId", -1), -1)
        offset = request.integer("offset", -1)
        if queue_id >= 0 and offset != -1:  # mqadmin's -b/-q: one queue, to an offset
            reset = ResetRequest(group, topic, ResetTarget.OFFSET, queue_id=queue_id, offset=offset)
        else:
            target = ResetTarget.LATEST if timestamp == -1 else ResetTarget.TIME
            reset = ResetRequest(group, topic, target, timestamp, queue_id=queue_id)
        try:
            queues = await self.services.offset_reset.reset_broker_group(caller, reset)
        except AdminRefused as refused:
            not_found = (
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
                if refused.message.startswith("CONSUMER_GROUP_NOT_FOUND")
                else ResponseCode.TOPIC_NOT_EXIST
            )
            return request.reply(*refusal(refused, not_found))
        table = [(q.broker_group, q.queue_id, q.new_offset) for q in queues]
        return request.reply(ResponseCode.SUCCESS, body=reset_offset_body(topic, table))

    async def consumed_by(self, request: RemotingCommand, connection, caller: Caller):
        groups = self.admin.groups_consuming(caller, request.text("topic"))
        return request.reply(ResponseCode.SUCCESS, body=compact({"groupList": groups}).encode())
