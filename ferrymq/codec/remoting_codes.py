"""The request and response codes of RocketMQ's remoting protocol (4.x ``RemotingCommand``).

The numbers are RocketMQ's, so that its clients understand them; the names are RocketMQ's
too, so that its documentation and logs can be read against ours. Only the codes ferrymq
serves, sends or answers are listed; an unknown request code is answered
``REQUEST_CODE_NOT_SUPPORTED`` by the node.

ferrymq's private codes (``FerryRequestCode``) are 30000..30099: inside the binary
header's 16-bit code, and far from every code RocketMQ defines (its 4.x codes stay below
2000; its 5.x POP codes are 200000 and up). Only ferrymq's SDK sends them; bodies are
ferrymq's own protobuf messages (``proto/ferrymq/data.proto``).
"""

from __future__ import annotations

import enum


class RequestCode(enum.IntEnum):
    # Broker role: what clients ask a broker.
    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_BROKER_CONFIG = 26
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    # Requests a broker sends to a client over the client's own connection.
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    CHECK_CLIENT_CONFIG = 46
    # NameServer role.
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    # What mqadmin asks a broker (and a NameServer: 216) for topics, groups and progress.
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    GET_CONSUME_STATS = 208
    # A broker tells a 4.x consumer its group's offsets were reset (over its connection).
    RESET_CONSUMER_CLIENT_OFFSET = 220
    INVOKE_BROKER_TO_RESET_OFFSET = 222  # mqadmin resetOffsetByTime, to each master
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    # Asked of a broker by an admin tool and relayed to one consumer over its connection.
    GET_CONSUMER_RUNNING_INFO = 307
    CONSUME_MESSAGE_DIRECTLY = 309
    GET_TOPIC_CONFIG = 351
    RECALL_MESSAGE = 370  # RocketMQ 5.3.2: cancel a delayed message (its recall handle)
    SEND_MESSAGE_V2 = 310
    # RocketMQ 5's DefaultLitePullConsumer pulls with this code (pull sysFlag bit 16): the
    # same header and answer as PULL_MESSAGE, on a thread pool of its own in RocketMQ.
    LITE_PULL_MESSAGE = 361
    SEND_BATCH_MESSAGE = 320
    # RocketMQ 5's POP mode (JSON headers only: the binary header's code is 16 bits).
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    BATCH_ACK_MESSAGE = 200151


FERRY_PRIVATE_CODES = range(30000, 30100)


class FerryRequestCode(enum.IntEnum):
    """ferrymq's SDK data path (``node/remoting/ferry_data.py``), answered SUCCESS with the
    answer message in the body; a refusal is the code inside that message."""

    FERRY_ROUTE = 30000  # ext field topic; body: RouteResponse
    FERRY_PRODUCE = 30001  # body: ProduceRequest; answer: ProduceResponse
    FERRY_FETCH = 30002  # body: FetchRequest; answer: FetchResponse


# The ext field in which the SDK's FERRY_PRODUCE names its own timeout (milliseconds): a
# node that forwards the send waits that long for the master, and the master refuses it
# once that long has passed (``node/remoting/forwarding.py``). A 4.x client sends none.
CLIENT_TIMEOUT_FIELD = "ferryTimeoutMs"


class ResponseCode(enum.IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    FLOW_CONTROL = 215
    ILLEGAL_OPERATION = 604


# RocketMQ's LanguageCode, in its ordinal order: the binary header carries the ordinal, the
# JSON header the name.
LANGUAGES = (
    "JAVA",
    "CPP",
    "DOTNET",
    "PYTHON",
    "DELPHI",
    "ERLANG",
    "RUBY",
    "OTHER",
    "HTTP",
    "GO",
    "PHP",
    "OMS",
    "RUST",
)
LANGUAGE_ORDINALS = {name: ordinal for ordinal, name in enumerate(LANGUAGES)}

# The version a broker states in its answers (MQVersion V4_9_7's ordinal): the Java client
# refuses SQL92 pulls from brokers older than 4.1.0 (ordinal 232).
BROKER_VERSION = 407
