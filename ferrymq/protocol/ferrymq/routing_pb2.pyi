from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NodeEnd(_message.Message):
    __slots__ = ("node", "offset")
    NODE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    node: str
    offset: int
    def __init__(self, node: _Optional[str] = ..., offset: _Optional[int] = ...) -> None: ...

class QueueCount(_message.Message):
    __slots__ = ("broker_group", "count")
    BROKER_GROUP_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    broker_group: str
    count: int
    def __init__(self, broker_group: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class TopicRoute(_message.Message):
    __slots__ = ("name", "queues", "message_type", "permission", "lite_expiration_minutes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    LITE_EXPIRATION_MINUTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    queues: _containers.RepeatedCompositeFieldContainer[QueueCount]
    message_type: str
    permission: str
    lite_expiration_minutes: int
    def __init__(self, name: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[QueueCount, _Mapping]]] = ..., message_type: _Optional[str] = ..., permission: _Optional[str] = ..., lite_expiration_minutes: _Optional[int] = ...) -> None: ...

class GroupConfig(_message.Message):
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

class Member(_message.Message):
    __slots__ = ("node_id", "broker_group", "grpc_address", "ha_address", "metrics_address", "alive", "heartbeats", "last_heartbeat_ms", "max_offset", "damaged_log", "remoting_address", "raft_address", "software_version", "routing_format")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_GROUP_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    METRICS_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    HEARTBEATS_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DAMAGED_LOG_FIELD_NUMBER: _ClassVar[int]
    REMOTING_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    SOFTWARE_VERSION_FIELD_NUMBER: _ClassVar[int]
    ROUTING_FORMAT_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    broker_group: str
    grpc_address: str
    ha_address: str
    metrics_address: str
    alive: bool
    heartbeats: int
    last_heartbeat_ms: int
    max_offset: int
    damaged_log: bool
    remoting_address: str
    raft_address: str
    software_version: str
    routing_format: int
    def __init__(self, node_id: _Optional[str] = ..., broker_group: _Optional[str] = ..., grpc_address: _Optional[str] = ..., ha_address: _Optional[str] = ..., metrics_address: _Optional[str] = ..., alive: _Optional[bool] = ..., heartbeats: _Optional[int] = ..., last_heartbeat_ms: _Optional[int] = ..., max_offset: _Optional[int] = ..., damaged_log: _Optional[bool] = ..., remoting_address: _Optional[str] = ..., raft_address: _Optional[str] = ..., software_version: _Optional[str] = ..., routing_format: _Optional[int] = ...) -> None: ...

class BrokerGroup(_message.Message):
    __slots__ = ("name", "master", "epoch", "in_sync", "in_sync_epoch", "lost_by", "lost_ends")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MASTER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOST_BY_FIELD_NUMBER: _ClassVar[int]
    LOST_ENDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    master: str
    epoch: int
    in_sync: _containers.RepeatedScalarFieldContainer[str]
    in_sync_epoch: int
    lost_by: _containers.RepeatedScalarFieldContainer[str]
    lost_ends: _containers.RepeatedCompositeFieldContainer[NodeEnd]
    def __init__(self, name: _Optional[str] = ..., master: _Optional[str] = ..., epoch: _Optional[int] = ..., in_sync: _Optional[_Iterable[str]] = ..., in_sync_epoch: _Optional[int] = ..., lost_by: _Optional[_Iterable[str]] = ..., lost_ends: _Optional[_Iterable[_Union[NodeEnd, _Mapping]]] = ...) -> None: ...

class AclEntry(_message.Message):
    __slots__ = ("effect", "action", "kind", "pattern")
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    effect: str
    action: str
    kind: str
    pattern: str
    def __init__(self, effect: _Optional[str] = ..., action: _Optional[str] = ..., kind: _Optional[str] = ..., pattern: _Optional[str] = ...) -> None: ...

class User(_message.Message):
    __slots__ = ("access_key", "sealed_secret", "admin", "acl")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    SEALED_SECRET_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    ACL_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    sealed_secret: bytes
    admin: bool
    acl: _containers.RepeatedCompositeFieldContainer[AclEntry]
    def __init__(self, access_key: _Optional[str] = ..., sealed_secret: _Optional[bytes] = ..., admin: _Optional[bool] = ..., acl: _Optional[_Iterable[_Union[AclEntry, _Mapping]]] = ...) -> None: ...

class RegisterNode(_message.Message):
    __slots__ = ("node_id", "broker_group", "grpc_address", "ha_address", "metrics_address", "max_offset", "wall_ms", "lease_ms", "damaged_log", "remoting_address", "raft_address", "software_version", "routing_format")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_GROUP_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    METRICS_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    WALL_MS_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    DAMAGED_LOG_FIELD_NUMBER: _ClassVar[int]
    REMOTING_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    SOFTWARE_VERSION_FIELD_NUMBER: _ClassVar[int]
    ROUTING_FORMAT_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    broker_group: str
    grpc_address: str
    ha_address: str
    metrics_address: str
    max_offset: int
    wall_ms: int
    lease_ms: int
    damaged_log: bool
    remoting_address: str
    raft_address: str
    software_version: str
    routing_format: int
    def __init__(self, node_id: _Optional[str] = ..., broker_group: _Optional[str] = ..., grpc_address: _Optional[str] = ..., ha_address: _Optional[str] = ..., metrics_address: _Optional[str] = ..., max_offset: _Optional[int] = ..., wall_ms: _Optional[int] = ..., lease_ms: _Optional[int] = ..., damaged_log: _Optional[bool] = ..., remoting_address: _Optional[str] = ..., raft_address: _Optional[str] = ..., software_version: _Optional[str] = ..., routing_format: _Optional[int] = ...) -> None: ...

class NodeHeartbeat(_message.Message):
    __slots__ = ("node_id", "max_offset", "wall_ms", "damaged_log")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    WALL_MS_FIELD_NUMBER: _ClassVar[int]
    DAMAGED_LOG_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    max_offset: int
    wall_ms: int
    damaged_log: bool
    def __init__(self, node_id: _Optional[str] = ..., max_offset: _Optional[int] = ..., wall_ms: _Optional[int] = ..., damaged_log: _Optional[bool] = ...) -> None: ...

class MarkNodeDown(_message.Message):
    __slots__ = ("node_id", "heartbeats_seen")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEATS_SEEN_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    heartbeats_seen: int
    def __init__(self, node_id: _Optional[str] = ..., heartbeats_seen: _Optional[int] = ...) -> None: ...

class ElectMaster(_message.Message):
    __slots__ = ("broker_group", "node_id", "expected_epoch", "reason", "unclean")
    BROKER_GROUP_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    UNCLEAN_FIELD_NUMBER: _ClassVar[int]
    broker_group: str
    node_id: str
    expected_epoch: int
    reason: str
    unclean: bool
    def __init__(self, broker_group: _Optional[str] = ..., node_id: _Optional[str] = ..., expected_epoch: _Optional[int] = ..., reason: _Optional[str] = ..., unclean: _Optional[bool] = ...) -> None: ...

class AlterInSync(_message.Message):
    __slots__ = ("broker_group", "master", "master_epoch", "in_sync", "expected_in_sync_epoch")
    BROKER_GROUP_FIELD_NUMBER: _ClassVar[int]
    MASTER_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_IN_SYNC_EPOCH_FIELD_NUMBER: _ClassVar[int]
    broker_group: str
    master: str
    master_epoch: int
    in_sync: _containers.RepeatedScalarFieldContainer[str]
    expected_in_sync_epoch: int
    def __init__(self, broker_group: _Optional[str] = ..., master: _Optional[str] = ..., master_epoch: _Optional[int] = ..., in_sync: _Optional[_Iterable[str]] = ..., expected_in_sync_epoch: _Optional[int] = ...) -> None: ...

class ReportMasterLost(_message.Message):
    __slots__ = ("broker_group", "reporter", "epoch", "end_offset")
    BROKER_GROUP_FIELD_NUMBER: _ClassVar[int]
    REPORTER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    broker_group: str
    reporter: str
    epoch: int
    end_offset: int
    def __init__(self, broker_group: _Optional[str] = ..., reporter: _Optional[str] = ..., epoch: _Optional[int] = ..., end_offset: _Optional[int] = ...) -> None: ...

class ReportMasterFound(_message.Message):
    __slots__ = ("broker_group", "reporter", "epoch")
    BROKER_GROUP_FIELD_NUMBER: _ClassVar[int]
    REPORTER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    broker_group: str
    reporter: str
    epoch: int
    def __init__(self, broker_group: _Optional[str] = ..., reporter: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class CatchUp(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CreateTopic(_message.Message):
    __slots__ = ("name", "queue_count", "broker_groups", "message_type", "permission", "lite_expiration_minutes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_COUNT_FIELD_NUMBER: _ClassVar[int]
    BROKER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    LITE_EXPIRATION_MINUTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    queue_count: int
    broker_groups: _containers.RepeatedScalarFieldContainer[str]
    message_type: str
    permission: str
    lite_expiration_minutes: int
    def __init__(self, name: _Optional[str] = ..., queue_count: _Optional[int] = ..., broker_groups: _Optional[_Iterable[str]] = ..., message_type: _Optional[str] = ..., permission: _Optional[str] = ..., lite_expiration_minutes: _Optional[int] = ...) -> None: ...

class UpdateTopic(_message.Message):
    __slots__ = ("name", "queue_count", "broker_groups", "permission", "lite_expiration_minutes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_COUNT_FIELD_NUMBER: _ClassVar[int]
    BROKER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    LITE_EXPIRATION_MINUTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    queue_count: int
    broker_groups: _containers.RepeatedScalarFieldContainer[str]
    permission: str
    lite_expiration_minutes: int
    def __init__(self, name: _Optional[str] = ..., queue_count: _Optional[int] = ..., broker_groups: _Optional[_Iterable[str]] = ..., permission: _Optional[str] = ..., lite_expiration_minutes: _Optional[int] = ...) -> None: ...

class DeleteTopic(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class CreateGroup(_message.Message):
    __slots__ = ("name", "max_delivery_attempts", "fifo", "on_first_use", "lite_exclusive")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    FIFO_FIELD_NUMBER: _ClassVar[int]
    ON_FIRST_USE_FIELD_NUMBER: _ClassVar[int]
    LITE_EXCLUSIVE_FIELD_NUMBER: _ClassVar[int]
    name: str
    max_delivery_attempts: int
    fifo: bool
    on_first_use: bool
    lite_exclusive: bool
    def __init__(self, name: _Optional[str] = ..., max_delivery_attempts: _Optional[int] = ..., fifo: _Optional[bool] = ..., on_first_use: _Optional[bool] = ..., lite_exclusive: _Optional[bool] = ...) -> None: ...

class DeleteGroup(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class UpdateGroup(_message.Message):
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

class CreateUser(_message.Message):
    __slots__ = ("access_key", "sealed_secret", "admin")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    SEALED_SECRET_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    sealed_secret: bytes
    admin: bool
    def __init__(self, access_key: _Optional[str] = ..., sealed_secret: _Optional[bytes] = ..., admin: _Optional[bool] = ...) -> None: ...

class UpdateUser(_message.Message):
    __slots__ = ("access_key", "sealed_secret", "admin")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    SEALED_SECRET_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    sealed_secret: bytes
    admin: bool
    def __init__(self, access_key: _Optional[str] = ..., sealed_secret: _Optional[bytes] = ..., admin: _Optional[bool] = ...) -> None: ...

class DeleteUser(_message.Message):
    __slots__ = ("access_key",)
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    def __init__(self, access_key: _Optional[str] = ...) -> None: ...

class GrantAcl(_message.Message):
    __slots__ = ("access_key", "entry")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    entry: AclEntry
    def __init__(self, access_key: _Optional[str] = ..., entry: _Optional[_Union[AclEntry, _Mapping]] = ...) -> None: ...

class RevokeAcl(_message.Message):
    __slots__ = ("access_key", "entry")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    entry: AclEntry
    def __init__(self, access_key: _Optional[str] = ..., entry: _Optional[_Union[AclEntry, _Mapping]] = ...) -> None: ...

class SetRoutingFormat(_message.Message):
    __slots__ = ("routing_format",)
    ROUTING_FORMAT_FIELD_NUMBER: _ClassVar[int]
    routing_format: int
    def __init__(self, routing_format: _Optional[int] = ...) -> None: ...

class Command(_message.Message):
    __slots__ = ("register_node", "node_heartbeat", "mark_node_down", "elect_master", "alter_in_sync", "report_master_lost", "report_master_found", "catch_up", "create_topic", "update_topic", "delete_topic", "create_group", "delete_group", "create_user", "update_user", "delete_user", "grant_acl", "revoke_acl", "set_routing_format", "update_group")
    REGISTER_NODE_FIELD_NUMBER: _ClassVar[int]
    NODE_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    MARK_NODE_DOWN_FIELD_NUMBER: _ClassVar[int]
    ELECT_MASTER_FIELD_NUMBER: _ClassVar[int]
    ALTER_IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    REPORT_MASTER_LOST_FIELD_NUMBER: _ClassVar[int]
    REPORT_MASTER_FOUND_FIELD_NUMBER: _ClassVar[int]
    CATCH_UP_FIELD_NUMBER: _ClassVar[int]
    CREATE_TOPIC_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TOPIC_FIELD_NUMBER: _ClassVar[int]
    DELETE_TOPIC_FIELD_NUMBER: _ClassVar[int]
    CREATE_GROUP_FIELD_NUMBER: _ClassVar[int]
    DELETE_GROUP_FIELD_NUMBER: _ClassVar[int]
    CREATE_USER_FIELD_NUMBER: _ClassVar[int]
    UPDATE_USER_FIELD_NUMBER: _ClassVar[int]
    DELETE_USER_FIELD_NUMBER: _ClassVar[int]
    GRANT_ACL_FIELD_NUMBER: _ClassVar[int]
    REVOKE_ACL_FIELD_NUMBER: _ClassVar[int]
    SET_ROUTING_FORMAT_FIELD_NUMBER: _ClassVar[int]
    UPDATE_GROUP_FIELD_NUMBER: _ClassVar[int]
    register_node: RegisterNode
    node_heartbeat: NodeHeartbeat
    mark_node_down: MarkNodeDown
    elect_master: ElectMaster
    alter_in_sync: AlterInSync
    report_master_lost: ReportMasterLost
    report_master_found: ReportMasterFound
    catch_up: CatchUp
    create_topic: CreateTopic
    update_topic: UpdateTopic
    delete_topic: DeleteTopic
    create_group: CreateGroup
    delete_group: DeleteGroup
    create_user: CreateUser
    update_user: UpdateUser
    delete_user: DeleteUser
    grant_acl: GrantAcl
    revoke_acl: RevokeAcl
    set_routing_format: SetRoutingFormat
    update_group: UpdateGroup
    def __init__(self, register_node: _Optional[_Union[RegisterNode, _Mapping]] = ..., node_heartbeat: _Optional[_Union[NodeHeartbeat, _Mapping]] = ..., mark_node_down: _Optional[_Union[MarkNodeDown, _Mapping]] = ..., elect_master: _Optional[_Union[ElectMaster, _Mapping]] = ..., alter_in_sync: _Optional[_Union[AlterInSync, _Mapping]] = ..., report_master_lost: _Optional[_Union[ReportMasterLost, _Mapping]] = ..., report_master_found: _Optional[_Union[ReportMasterFound, _Mapping]] = ..., catch_up: _Optional[_Union[CatchUp, _Mapping]] = ..., create_topic: _Optional[_Union[CreateTopic, _Mapping]] = ..., update_topic: _Optional[_Union[UpdateTopic, _Mapping]] = ..., delete_topic: _Optional[_Union[DeleteTopic, _Mapping]] = ..., create_group: _Optional[_Union[CreateGroup, _Mapping]] = ..., delete_group: _Optional[_Union[DeleteGroup, _Mapping]] = ..., create_user: _Optional[_Union[CreateUser, _Mapping]] = ..., update_user: _Optional[_Union[UpdateUser, _Mapping]] = ..., delete_user: _Optional[_Union[DeleteUser, _Mapping]] = ..., grant_acl: _Optional[_Union[GrantAcl, _Mapping]] = ..., revoke_acl: _Optional[_Union[RevokeAcl, _Mapping]] = ..., set_routing_format: _Optional[_Union[SetRoutingFormat, _Mapping]] = ..., update_group: _Optional[_Union[UpdateGroup, _Mapping]] = ...) -> None: ...

class Entry(_message.Message):
    __slots__ = ("routing_format", "request_id", "command")
    ROUTING_FORMAT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    routing_format: int
    request_id: bytes
    command: Command
    def __init__(self, routing_format: _Optional[int] = ..., request_id: _Optional[bytes] = ..., command: _Optional[_Union[Command, _Mapping]] = ...) -> None: ...

class Record(_message.Message):
    __slots__ = ("topic_route", "group_config", "member", "broker_group", "user")
    TOPIC_ROUTE_FIELD_NUMBER: _ClassVar[int]
    GROUP_CONFIG_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    BROKER_GROUP_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    topic_route: TopicRoute
    group_config: GroupConfig
    member: Member
    broker_group: BrokerGroup
    user: User
    def __init__(self, topic_route: _Optional[_Union[TopicRoute, _Mapping]] = ..., group_config: _Optional[_Union[GroupConfig, _Mapping]] = ..., member: _Optional[_Union[Member, _Mapping]] = ..., broker_group: _Optional[_Union[BrokerGroup, _Mapping]] = ..., user: _Optional[_Union[User, _Mapping]] = ...) -> None: ...

class CommandResult(_message.Message):
    __slots__ = ("ok", "reason", "detail", "value")
    OK_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    reason: str
    detail: str
    value: Record
    def __init__(self, ok: _Optional[bool] = ..., reason: _Optional[str] = ..., detail: _Optional[str] = ..., value: _Optional[_Union[Record, _Mapping]] = ...) -> None: ...

class Outcome(_message.Message):
    __slots__ = ("request_id", "result")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    request_id: bytes
    result: CommandResult
    def __init__(self, request_id: _Optional[bytes] = ..., result: _Optional[_Union[CommandResult, _Mapping]] = ...) -> None: ...

class State(_message.Message):
    __slots__ = ("routing_format", "topics", "groups", "broker_groups", "members", "users", "applied", "outcomes", "awaits_finalize")
    ROUTING_FORMAT_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    BROKER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    USERS_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    AWAITS_FINALIZE_FIELD_NUMBER: _ClassVar[int]
    routing_format: int
    topics: _containers.RepeatedCompositeFieldContainer[TopicRoute]
    groups: _containers.RepeatedCompositeFieldContainer[GroupConfig]
    broker_groups: _containers.RepeatedCompositeFieldContainer[BrokerGroup]
    members: _containers.RepeatedCompositeFieldContainer[Member]
    users: _containers.RepeatedCompositeFieldContainer[User]
    applied: int
    outcomes: _containers.RepeatedCompositeFieldContainer[Outcome]
    awaits_finalize: bool
    def __init__(self, routing_format: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[TopicRoute, _Mapping]]] = ..., groups: _Optional[_Iterable[_Union[GroupConfig, _Mapping]]] = ..., broker_groups: _Optional[_Iterable[_Union[BrokerGroup, _Mapping]]] = ..., members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., users: _Optional[_Iterable[_Union[User, _Mapping]]] = ..., applied: _Optional[int] = ..., outcomes: _Optional[_Iterable[_Union[Outcome, _Mapping]]] = ..., awaits_finalize: _Optional[bool] = ...) -> None: ...
