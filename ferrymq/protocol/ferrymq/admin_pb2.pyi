from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MessageType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MESSAGE_TYPE_UNSPECIFIED: _ClassVar[MessageType]
    NORMAL: _ClassVar[MessageType]
    FIFO: _ClassVar[MessageType]
    DELAY: _ClassVar[MessageType]
    TRANSACTION: _ClassVar[MessageType]
    LITE: _ClassVar[MessageType]
    PRIORITY: _ClassVar[MessageType]

class Permission(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PERMISSION_UNSPECIFIED: _ClassVar[Permission]
    READ: _ClassVar[Permission]
    WRITE: _ClassVar[Permission]
    READ_WRITE: _ClassVar[Permission]

class ResetTarget(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESET_TO_TIME: _ClassVar[ResetTarget]
    RESET_TO_EARLIEST: _ClassVar[ResetTarget]
    RESET_TO_LATEST: _ClassVar[ResetTarget]

class AclEffect(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACL_EFFECT_UNSPECIFIED: _ClassVar[AclEffect]
    ACL_ALLOW: _ClassVar[AclEffect]
    ACL_DENY: _ClassVar[AclEffect]

class AclAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACL_ACTION_UNSPECIFIED: _ClassVar[AclAction]
    ACL_PUBLISH: _ClassVar[AclAction]
    ACL_SUBSCRIBE: _ClassVar[AclAction]

class AclResourceKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACL_RESOURCE_KIND_UNSPECIFIED: _ClassVar[AclResourceKind]
    ACL_TOPIC: _ClassVar[AclResourceKind]
    ACL_GROUP: _ClassVar[AclResourceKind]
MESSAGE_TYPE_UNSPECIFIED: MessageType
NORMAL: MessageType
FIFO: MessageType
DELAY: MessageType
TRANSACTION: MessageType
LITE: MessageType
PRIORITY: MessageType
PERMISSION_UNSPECIFIED: Permission
READ: Permission
WRITE: Permission
READ_WRITE: Permission
RESET_TO_TIME: ResetTarget
RESET_TO_EARLIEST: ResetTarget
RESET_TO_LATEST: ResetTarget
ACL_EFFECT_UNSPECIFIED: AclEffect
ACL_ALLOW: AclEffect
ACL_DENY: AclEffect
ACL_ACTION_UNSPECIFIED: AclAction
ACL_PUBLISH: AclAction
ACL_SUBSCRIBE: AclAction
ACL_RESOURCE_KIND_UNSPECIFIED: AclResourceKind
ACL_TOPIC: AclResourceKind
ACL_GROUP: AclResourceKind

class Status(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class Topic(_message.Message):
    __slots__ = ("name", "queue_count", "message_type", "permission", "broker_groups", "lite_expiration_minutes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_COUNT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    BROKER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    LITE_EXPIRATION_MINUTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    queue_count: int
    message_type: MessageType
    permission: Permission
    broker_groups: _containers.RepeatedScalarFieldContainer[str]
    lite_expiration_minutes: int
    def __init__(self, name: _Optional[str] = ..., queue_count: _Optional[int] = ..., message_type: _Optional[_Union[MessageType, str]] = ..., permission: _Optional[_Union[Permission, str]] = ..., broker_groups: _Optional[_Iterable[str]] = ..., lite_expiration_minutes: _Optional[int] = ...) -> None: ...

class TopicQueue(_message.Message):
    __slots__ = ("queue_id", "broker_group", "min_offset", "max_offset")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_GROUP_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    broker_group: str
    min_offset: int
    max_offset: int
    def __init__(self, queue_id: _Optional[int] = ..., broker_group: _Optional[str] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: Topic
    def __init__(self, topic: _Optional[_Union[Topic, _Mapping]] = ...) -> None: ...

class CreateTopicResponse(_message.Message):
    __slots__ = ("status", "topic")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    status: Status
    topic: Topic
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., topic: _Optional[_Union[Topic, _Mapping]] = ...) -> None: ...

class UpdateTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: Topic
    def __init__(self, topic: _Optional[_Union[Topic, _Mapping]] = ...) -> None: ...

class UpdateTopicResponse(_message.Message):
    __slots__ = ("status", "topic")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    status: Status
    topic: Topic
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., topic: _Optional[_Union[Topic, _Mapping]] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("status", "topics")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    topics: _containers.RepeatedCompositeFieldContainer[Topic]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., topics: _Optional[_Iterable[_Union[Topic, _Mapping]]] = ...) -> None: ...

class DescribeTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DescribeTopicResponse(_message.Message):
    __slots__ = ("status", "topic", "queues")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    status: Status
    topic: Topic
    queues: _containers.RepeatedCompositeFieldContainer[TopicQueue]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., topic: _Optional[_Union[Topic, _Mapping]] = ..., queues: _Optional[_Iterable[_Union[TopicQueue, _Mapping]]] = ...) -> None: ...

class Group(_message.Message):
    __slots__ = ("name", "max_delivery_attempts", "fifo", "lite_exclusive")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    FIFO_FIELD_NUMBER: _ClassVar[int]
    LITE_EXCLUSIVE_FIELD_NUMBER: _ClassVar[int]
    name: str
    max_delivery_attempts: int
    fifo: bool
    lite_exclusive: bool
    def __init__(self, name: _Optional[str] = ..., max_delivery_attempts: _Optional[int] = ..., fifo: _Optional[bool] = ..., lite_exclusive: _Optional[bool] = ...) -> None: ...

class CreateGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: Group
    def __init__(self, group: _Optional[_Union[Group, _Mapping]] = ...) -> None: ...

class CreateGroupResponse(_message.Message):
    __slots__ = ("status", "group")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    status: Status
    group: Group
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., group: _Optional[_Union[Group, _Mapping]] = ...) -> None: ...

class UpdateGroupRequest(_message.Message):
    __slots__ = ("name", "max_delivery_attempts", "fifo", "lite_exclusive")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    FIFO_FIELD_NUMBER: _ClassVar[int]
    LITE_EXCLUSIVE_FIELD_NUMBER: _ClassVar[int]
    name: str
    max_delivery_attempts: int
    fifo: bool
    lite_exclusive: bool
    def __init__(self, name: _Optional[str] = ..., max_delivery_attempts: _Optional[int] = ..., fifo: _Optional[bool] = ..., lite_exclusive: _Optional[bool] = ...) -> None: ...

class UpdateGroupResponse(_message.Message):
    __slots__ = ("status", "group")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    status: Status
    group: Group
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., group: _Optional[_Union[Group, _Mapping]] = ...) -> None: ...

class DeleteGroupRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteGroupResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("status", "groups")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    groups: _containers.RepeatedCompositeFieldContainer[Group]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., groups: _Optional[_Iterable[_Union[Group, _Mapping]]] = ...) -> None: ...

class QueueProgress(_message.Message):
    __slots__ = ("topic", "queue_id", "broker_group", "broker_offset", "consumer_offset", "lag", "in_flight")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_GROUP_FIELD_NUMBER: _ClassVar[int]
    BROKER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    broker_group: str
    broker_offset: int
    consumer_offset: int
    lag: int
    in_flight: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., broker_group: _Optional[str] = ..., broker_offset: _Optional[int] = ..., consumer_offset: _Optional[int] = ..., lag: _Optional[int] = ..., in_flight: _Optional[int] = ...) -> None: ...

class GroupProgressRequest(_message.Message):
    __slots__ = ("group", "topic")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class GroupProgressResponse(_message.Message):
    __slots__ = ("status", "queues")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    status: Status
    queues: _containers.RepeatedCompositeFieldContainer[QueueProgress]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., queues: _Optional[_Iterable[_Union[QueueProgress, _Mapping]]] = ...) -> None: ...

class GroupMember(_message.Message):
    __slots__ = ("client_id", "last_heartbeat_ms")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    last_heartbeat_ms: int
    def __init__(self, client_id: _Optional[str] = ..., last_heartbeat_ms: _Optional[int] = ...) -> None: ...

class GroupMembersRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class GroupMembersResponse(_message.Message):
    __slots__ = ("status", "members")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    members: _containers.RepeatedCompositeFieldContainer[GroupMember]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., members: _Optional[_Iterable[_Union[GroupMember, _Mapping]]] = ...) -> None: ...

class StoredMessage(_message.Message):
    __slots__ = ("topic", "queue_id", "queue_offset", "physical_offset", "offset_message_id", "message_id", "tag", "keys", "properties", "body", "born_timestamp_ms", "store_timestamp_ms", "broker_group")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_OFFSET_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    BROKER_GROUP_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    offset_message_id: str
    message_id: str
    tag: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    properties: _containers.ScalarMap[str, str]
    body: bytes
    born_timestamp_ms: int
    store_timestamp_ms: int
    broker_group: str
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., physical_offset: _Optional[int] = ..., offset_message_id: _Optional[str] = ..., message_id: _Optional[str] = ..., tag: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ..., properties: _Optional[_Mapping[str, str]] = ..., body: _Optional[bytes] = ..., born_timestamp_ms: _Optional[int] = ..., store_timestamp_ms: _Optional[int] = ..., broker_group: _Optional[str] = ...) -> None: ...

class QueryMessageByIdRequest(_message.Message):
    __slots__ = ("topic", "message_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    message_id: str
    def __init__(self, topic: _Optional[str] = ..., message_id: _Optional[str] = ...) -> None: ...

class QueryMessageByKeyRequest(_message.Message):
    __slots__ = ("topic", "key", "max_count", "begin_timestamp_ms", "end_timestamp_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_COUNT_FIELD_NUMBER: _ClassVar[int]
    BEGIN_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    END_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    key: str
    max_count: int
    begin_timestamp_ms: int
    end_timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., key: _Optional[str] = ..., max_count: _Optional[int] = ..., begin_timestamp_ms: _Optional[int] = ..., end_timestamp_ms: _Optional[int] = ...) -> None: ...

class QueryMessageByOffsetRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    offset: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class QueryMessagesResponse(_message.Message):
    __slots__ = ("status", "messages")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    status: Status
    messages: _containers.RepeatedCompositeFieldContainer[StoredMessage]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., messages: _Optional[_Iterable[_Union[StoredMessage, _Mapping]]] = ...) -> None: ...

class QueryOffsetByTimeRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "timestamp_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class QueryOffsetByTimeResponse(_message.Message):
    __slots__ = ("status", "offset")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    status: Status
    offset: int
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., offset: _Optional[int] = ...) -> None: ...

class MessageHistoryRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    offset: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class HistoryEvent(_message.Message):
    __slots__ = ("time_ms", "kind", "attempt", "delivery", "visible_at_ms", "detail")
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    VISIBLE_AT_MS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    time_ms: int
    kind: str
    attempt: int
    delivery: str
    visible_at_ms: int
    detail: str
    def __init__(self, time_ms: _Optional[int] = ..., kind: _Optional[str] = ..., attempt: _Optional[int] = ..., delivery: _Optional[str] = ..., visible_at_ms: _Optional[int] = ..., detail: _Optional[str] = ...) -> None: ...

class GroupHistory(_message.Message):
    __slots__ = ("group", "model", "state", "state_text", "committed_offset", "pop_next_offset", "events")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_TEXT_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    POP_NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    group: str
    model: str
    state: str
    state_text: str
    committed_offset: int
    pop_next_offset: int
    events: _containers.RepeatedCompositeFieldContainer[HistoryEvent]
    def __init__(self, group: _Optional[str] = ..., model: _Optional[str] = ..., state: _Optional[str] = ..., state_text: _Optional[str] = ..., committed_offset: _Optional[int] = ..., pop_next_offset: _Optional[int] = ..., events: _Optional[_Iterable[_Union[HistoryEvent, _Mapping]]] = ...) -> None: ...

class MessageHistoryResponse(_message.Message):
    __slots__ = ("status", "topic", "queue_id", "offset", "store_timestamp_ms", "broker_group", "groups", "records_scanned", "records_max", "truncated")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    BROKER_GROUP_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_SCANNED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_MAX_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    status: Status
    topic: str
    queue_id: int
    offset: int
    store_timestamp_ms: int
    broker_group: str
    groups: _containers.RepeatedCompositeFieldContainer[GroupHistory]
    records_scanned: int
    records_max: int
    truncated: bool
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., store_timestamp_ms: _Optional[int] = ..., broker_group: _Optional[str] = ..., groups: _Optional[_Iterable[_Union[GroupHistory, _Mapping]]] = ..., records_scanned: _Optional[int] = ..., records_max: _Optional[int] = ..., truncated: _Optional[bool] = ...) -> None: ...

class NodeStatus(_message.Message):
    __slots__ = ("id", "broker_group", "role", "address", "max_offset", "epoch", "alive", "last_heartbeat_ms", "damaged_log", "remoting_address", "software_version", "routing_format")
    ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_GROUP_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    DAMAGED_LOG_FIELD_NUMBER: _ClassVar[int]
    REMOTING_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    SOFTWARE_VERSION_FIELD_NUMBER: _ClassVar[int]
    ROUTING_FORMAT_FIELD_NUMBER: _ClassVar[int]
    id: str
    broker_group: str
    role: str
    address: str
    max_offset: int
    epoch: int
    alive: bool
    last_heartbeat_ms: int
    damaged_log: bool
    remoting_address: str
    software_version: str
    routing_format: int
    def __init__(self, id: _Optional[str] = ..., broker_group: _Optional[str] = ..., role: _Optional[str] = ..., address: _Optional[str] = ..., max_offset: _Optional[int] = ..., epoch: _Optional[int] = ..., alive: _Optional[bool] = ..., last_heartbeat_ms: _Optional[int] = ..., damaged_log: _Optional[bool] = ..., remoting_address: _Optional[str] = ..., software_version: _Optional[str] = ..., routing_format: _Optional[int] = ...) -> None: ...

class VoterStatus(_message.Message):
    __slots__ = ("address", "reachable", "leader")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    REACHABLE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    address: str
    reachable: bool
    leader: bool
    def __init__(self, address: _Optional[str] = ..., reachable: _Optional[bool] = ..., leader: _Optional[bool] = ...) -> None: ...

class BrokerGroupStatus(_message.Message):
    __slots__ = ("name", "master", "epoch", "in_sync", "in_sync_epoch")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MASTER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_EPOCH_FIELD_NUMBER: _ClassVar[int]
    name: str
    master: str
    epoch: int
    in_sync: _containers.RepeatedScalarFieldContainer[str]
    in_sync_epoch: int
    def __init__(self, name: _Optional[str] = ..., master: _Optional[str] = ..., epoch: _Optional[int] = ..., in_sync: _Optional[_Iterable[str]] = ..., in_sync_epoch: _Optional[int] = ...) -> None: ...

class ClusterStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClusterStatusResponse(_message.Message):
    __slots__ = ("status", "nodes", "raft_leader", "raft_term", "raft_commit_index", "voters", "broker_groups", "answered_by", "routing_format")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    RAFT_LEADER_FIELD_NUMBER: _ClassVar[int]
    RAFT_TERM_FIELD_NUMBER: _ClassVar[int]
    RAFT_COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    BROKER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_BY_FIELD_NUMBER: _ClassVar[int]
    ROUTING_FORMAT_FIELD_NUMBER: _ClassVar[int]
    status: Status
    nodes: _containers.RepeatedCompositeFieldContainer[NodeStatus]
    raft_leader: str
    raft_term: int
    raft_commit_index: int
    voters: _containers.RepeatedCompositeFieldContainer[VoterStatus]
    broker_groups: _containers.RepeatedCompositeFieldContainer[BrokerGroupStatus]
    answered_by: str
    routing_format: int
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., nodes: _Optional[_Iterable[_Union[NodeStatus, _Mapping]]] = ..., raft_leader: _Optional[str] = ..., raft_term: _Optional[int] = ..., raft_commit_index: _Optional[int] = ..., voters: _Optional[_Iterable[_Union[VoterStatus, _Mapping]]] = ..., broker_groups: _Optional[_Iterable[_Union[BrokerGroupStatus, _Mapping]]] = ..., answered_by: _Optional[str] = ..., routing_format: _Optional[int] = ...) -> None: ...

class NodeConfigRequest(_message.Message):
    __slots__ = ("node_id",)
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    def __init__(self, node_id: _Optional[str] = ...) -> None: ...

class NodeSetting(_message.Message):
    __slots__ = ("section", "name", "value", "redacted")
    SECTION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    REDACTED_FIELD_NUMBER: _ClassVar[int]
    section: str
    name: str
    value: str
    redacted: bool
    def __init__(self, section: _Optional[str] = ..., name: _Optional[str] = ..., value: _Optional[str] = ..., redacted: _Optional[bool] = ...) -> None: ...

class BrokerProperty(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class NodeConfigResponse(_message.Message):
    __slots__ = ("status", "node_id", "broker_group", "settings", "broker_properties")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_GROUP_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    BROKER_PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    status: Status
    node_id: str
    broker_group: str
    settings: _containers.RepeatedCompositeFieldContainer[NodeSetting]
    broker_properties: _containers.RepeatedCompositeFieldContainer[BrokerProperty]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., node_id: _Optional[str] = ..., broker_group: _Optional[str] = ..., settings: _Optional[_Iterable[_Union[NodeSetting, _Mapping]]] = ..., broker_properties: _Optional[_Iterable[_Union[BrokerProperty, _Mapping]]] = ...) -> None: ...

class FinalizeUpgradeRequest(_message.Message):
    __slots__ = ("routing_format",)
    ROUTING_FORMAT_FIELD_NUMBER: _ClassVar[int]
    routing_format: int
    def __init__(self, routing_format: _Optional[int] = ...) -> None: ...

class FinalizeUpgradeResponse(_message.Message):
    __slots__ = ("status", "routing_format")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ROUTING_FORMAT_FIELD_NUMBER: _ClassVar[int]
    status: Status
    routing_format: int
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., routing_format: _Optional[int] = ...) -> None: ...

class ResetOffsetsRequest(_message.Message):
    __slots__ = ("group", "topic", "target", "timestamp_ms", "broker_group", "dry_run")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    BROKER_GROUP_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    target: ResetTarget
    timestamp_ms: int
    broker_group: str
    dry_run: bool
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., target: _Optional[_Union[ResetTarget, str]] = ..., timestamp_ms: _Optional[int] = ..., broker_group: _Optional[str] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class QueueReset(_message.Message):
    __slots__ = ("broker_group", "queue_id", "old_offset", "new_offset")
    BROKER_GROUP_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OLD_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEW_OFFSET_FIELD_NUMBER: _ClassVar[int]
    broker_group: str
    queue_id: int
    old_offset: int
    new_offset: int
    def __init__(self, broker_group: _Optional[str] = ..., queue_id: _Optional[int] = ..., old_offset: _Optional[int] = ..., new_offset: _Optional[int] = ...) -> None: ...

class ResetOffsetsResponse(_message.Message):
    __slots__ = ("status", "queues", "consuming")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    CONSUMING_FIELD_NUMBER: _ClassVar[int]
    status: Status
    queues: _containers.RepeatedCompositeFieldContainer[QueueReset]
    consuming: bool
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., queues: _Optional[_Iterable[_Union[QueueReset, _Mapping]]] = ..., consuming: _Optional[bool] = ...) -> None: ...

class ConsumeMessageDirectlyRequest(_message.Message):
    __slots__ = ("group", "topic", "message_id", "physical_offset", "client_id", "timeout_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    message_id: str
    physical_offset: int
    client_id: str
    timeout_ms: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., message_id: _Optional[str] = ..., physical_offset: _Optional[int] = ..., client_id: _Optional[str] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class ConsumeMessageDirectlyResponse(_message.Message):
    __slots__ = ("status", "client_id", "protocol", "outcome", "client_answer", "remark", "spent_ms", "waited_ms", "topic", "message_id", "broker_group")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ANSWER_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    SPENT_MS_FIELD_NUMBER: _ClassVar[int]
    WAITED_MS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_GROUP_FIELD_NUMBER: _ClassVar[int]
    status: Status
    client_id: str
    protocol: str
    outcome: str
    client_answer: str
    remark: str
    spent_ms: int
    waited_ms: int
    topic: str
    message_id: str
    broker_group: str
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., client_id: _Optional[str] = ..., protocol: _Optional[str] = ..., outcome: _Optional[str] = ..., client_answer: _Optional[str] = ..., remark: _Optional[str] = ..., spent_ms: _Optional[int] = ..., waited_ms: _Optional[int] = ..., topic: _Optional[str] = ..., message_id: _Optional[str] = ..., broker_group: _Optional[str] = ...) -> None: ...

class ResendDeadLettersRequest(_message.Message):
    __slots__ = ("group", "broker_group", "offsets", "from_offset", "to_offset", "handed")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    BROKER_GROUP_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TO_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HANDED_FIELD_NUMBER: _ClassVar[int]
    group: str
    broker_group: str
    offsets: _containers.RepeatedScalarFieldContainer[int]
    from_offset: int
    to_offset: int
    handed: bool
    def __init__(self, group: _Optional[str] = ..., broker_group: _Optional[str] = ..., offsets: _Optional[_Iterable[int]] = ..., from_offset: _Optional[int] = ..., to_offset: _Optional[int] = ..., handed: _Optional[bool] = ...) -> None: ...

class ResendDeadLettersResponse(_message.Message):
    __slots__ = ("status", "broker_group", "resent", "already_resent", "not_yet")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    BROKER_GROUP_FIELD_NUMBER: _ClassVar[int]
    RESENT_FIELD_NUMBER: _ClassVar[int]
    ALREADY_RESENT_FIELD_NUMBER: _ClassVar[int]
    NOT_YET_FIELD_NUMBER: _ClassVar[int]
    status: Status
    broker_group: str
    resent: _containers.RepeatedScalarFieldContainer[int]
    already_resent: _containers.RepeatedScalarFieldContainer[int]
    not_yet: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., broker_group: _Optional[str] = ..., resent: _Optional[_Iterable[int]] = ..., already_resent: _Optional[_Iterable[int]] = ..., not_yet: _Optional[_Iterable[int]] = ...) -> None: ...

class ListDeadLettersRequest(_message.Message):
    __slots__ = ("group", "broker_group", "from_offset", "limit")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    BROKER_GROUP_FIELD_NUMBER: _ClassVar[int]
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    group: str
    broker_group: str
    from_offset: int
    limit: int
    def __init__(self, group: _Optional[str] = ..., broker_group: _Optional[str] = ..., from_offset: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class DeadLetterEntry(_message.Message):
    __slots__ = ("offset", "message_id", "origin_topic", "tags", "keys", "attempts", "store_timestamp_ms", "body_bytes", "resent")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_TOPIC_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    BODY_BYTES_FIELD_NUMBER: _ClassVar[int]
    RESENT_FIELD_NUMBER: _ClassVar[int]
    offset: int
    message_id: str
    origin_topic: str
    tags: str
    keys: str
    attempts: int
    store_timestamp_ms: int
    body_bytes: int
    resent: bool
    def __init__(self, offset: _Optional[int] = ..., message_id: _Optional[str] = ..., origin_topic: _Optional[str] = ..., tags: _Optional[str] = ..., keys: _Optional[str] = ..., attempts: _Optional[int] = ..., store_timestamp_ms: _Optional[int] = ..., body_bytes: _Optional[int] = ..., resent: _Optional[bool] = ...) -> None: ...

class ListDeadLettersResponse(_message.Message):
    __slots__ = ("status", "broker_group", "min_offset", "max_offset", "entries")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    BROKER_GROUP_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    status: Status
    broker_group: str
    min_offset: int
    max_offset: int
    entries: _containers.RepeatedCompositeFieldContainer[DeadLetterEntry]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., broker_group: _Optional[str] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[DeadLetterEntry, _Mapping]]] = ...) -> None: ...

class TopicConsumersRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class TopicConsumer(_message.Message):
    __slots__ = ("group", "broker_group", "committed", "popping", "subscribed")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    BROKER_GROUP_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    POPPING_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBED_FIELD_NUMBER: _ClassVar[int]
    group: str
    broker_group: str
    committed: bool
    popping: bool
    subscribed: bool
    def __init__(self, group: _Optional[str] = ..., broker_group: _Optional[str] = ..., committed: _Optional[bool] = ..., popping: _Optional[bool] = ..., subscribed: _Optional[bool] = ...) -> None: ...

class TopicConsumersResponse(_message.Message):
    __slots__ = ("status", "consumers")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    consumers: _containers.RepeatedCompositeFieldContainer[TopicConsumer]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., consumers: _Optional[_Iterable[_Union[TopicConsumer, _Mapping]]] = ...) -> None: ...

class ListProducersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ProducerClient(_message.Message):
    __slots__ = ("client_id", "address", "language", "version")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    address: str
    language: str
    version: int
    def __init__(self, client_id: _Optional[str] = ..., address: _Optional[str] = ..., language: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class ProducerGroup(_message.Message):
    __slots__ = ("group", "clients")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENTS_FIELD_NUMBER: _ClassVar[int]
    group: str
    clients: _containers.RepeatedCompositeFieldContainer[ProducerClient]
    def __init__(self, group: _Optional[str] = ..., clients: _Optional[_Iterable[_Union[ProducerClient, _Mapping]]] = ...) -> None: ...

class ListProducersResponse(_message.Message):
    __slots__ = ("status", "groups")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    groups: _containers.RepeatedCompositeFieldContainer[ProducerGroup]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., groups: _Optional[_Iterable[_Union[ProducerGroup, _Mapping]]] = ...) -> None: ...

class FailoverRequest(_message.Message):
    __slots__ = ("broker_group", "target_node")
    BROKER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TARGET_NODE_FIELD_NUMBER: _ClassVar[int]
    broker_group: str
    target_node: str
    def __init__(self, broker_group: _Optional[str] = ..., target_node: _Optional[str] = ...) -> None: ...

class FailoverResponse(_message.Message):
    __slots__ = ("status", "new_master", "epoch", "writes_unavailable_ms")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    NEW_MASTER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    WRITES_UNAVAILABLE_MS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    new_master: str
    epoch: int
    writes_unavailable_ms: int
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., new_master: _Optional[str] = ..., epoch: _Optional[int] = ..., writes_unavailable_ms: _Optional[int] = ...) -> None: ...

class AclEntry(_message.Message):
    __slots__ = ("effect", "action", "kind", "pattern")
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    effect: AclEffect
    action: AclAction
    kind: AclResourceKind
    pattern: str
    def __init__(self, effect: _Optional[_Union[AclEffect, str]] = ..., action: _Optional[_Union[AclAction, str]] = ..., kind: _Optional[_Union[AclResourceKind, str]] = ..., pattern: _Optional[str] = ...) -> None: ...

class User(_message.Message):
    __slots__ = ("access_key", "admin", "acl")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    ACL_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    admin: bool
    acl: _containers.RepeatedCompositeFieldContainer[AclEntry]
    def __init__(self, access_key: _Optional[str] = ..., admin: _Optional[bool] = ..., acl: _Optional[_Iterable[_Union[AclEntry, _Mapping]]] = ...) -> None: ...

class CreateUserRequest(_message.Message):
    __slots__ = ("access_key", "secret_key", "admin")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    SECRET_KEY_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    secret_key: str
    admin: bool
    def __init__(self, access_key: _Optional[str] = ..., secret_key: _Optional[str] = ..., admin: _Optional[bool] = ...) -> None: ...

class CreateUserResponse(_message.Message):
    __slots__ = ("status", "user")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    status: Status
    user: User
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., user: _Optional[_Union[User, _Mapping]] = ...) -> None: ...

class UpdateUserRequest(_message.Message):
    __slots__ = ("access_key", "secret_key", "admin")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    SECRET_KEY_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    secret_key: str
    admin: bool
    def __init__(self, access_key: _Optional[str] = ..., secret_key: _Optional[str] = ..., admin: _Optional[bool] = ...) -> None: ...

class UpdateUserResponse(_message.Message):
    __slots__ = ("status", "user")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    status: Status
    user: User
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., user: _Optional[_Union[User, _Mapping]] = ...) -> None: ...

class DeleteUserRequest(_message.Message):
    __slots__ = ("access_key",)
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    def __init__(self, access_key: _Optional[str] = ...) -> None: ...

class DeleteUserResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class ListUsersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListUsersResponse(_message.Message):
    __slots__ = ("status", "users")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    USERS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    users: _containers.RepeatedCompositeFieldContainer[User]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., users: _Optional[_Iterable[_Union[User, _Mapping]]] = ...) -> None: ...

class GrantAclRequest(_message.Message):
    __slots__ = ("access_key", "entry")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    entry: AclEntry
    def __init__(self, access_key: _Optional[str] = ..., entry: _Optional[_Union[AclEntry, _Mapping]] = ...) -> None: ...

class GrantAclResponse(_message.Message):
    __slots__ = ("status", "user")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    status: Status
    user: User
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., user: _Optional[_Union[User, _Mapping]] = ...) -> None: ...

class RevokeAclRequest(_message.Message):
    __slots__ = ("access_key", "entry")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    entry: AclEntry
    def __init__(self, access_key: _Optional[str] = ..., entry: _Optional[_Union[AclEntry, _Mapping]] = ...) -> None: ...

class RevokeAclResponse(_message.Message):
    __slots__ = ("status", "user")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    status: Status
    user: User
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., user: _Optional[_Union[User, _Mapping]] = ...) -> None: ...
