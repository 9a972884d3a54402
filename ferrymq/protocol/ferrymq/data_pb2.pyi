from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FetchRequest(_message.Message):
    __slots__ = ("group", "topic", "queue_id", "offset", "max_messages", "max_bytes", "tags", "wait_ms", "follow")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    queue_id: int
    offset: int
    max_messages: int
    max_bytes: int
    tags: _containers.RepeatedScalarFieldContainer[str]
    wait_ms: int
    follow: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., max_messages: _Optional[int] = ..., max_bytes: _Optional[int] = ..., tags: _Optional[_Iterable[str]] = ..., wait_ms: _Optional[int] = ..., follow: _Optional[int] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("code", "message", "records", "count", "next_offset", "min_offset", "max_offset", "follows")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FOLLOWS_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    records: bytes
    count: int
    next_offset: int
    min_offset: int
    max_offset: int
    follows: bool
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., records: _Optional[bytes] = ..., count: _Optional[int] = ..., next_offset: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., follows: _Optional[bool] = ...) -> None: ...

class ProduceRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "atomic", "count", "records")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    ATOMIC_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    atomic: bool
    count: int
    records: bytes
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., atomic: _Optional[bool] = ..., count: _Optional[int] = ..., records: _Optional[bytes] = ...) -> None: ...

class ProduceFailure(_message.Message):
    __slots__ = ("index", "code", "message")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    index: int
    code: int
    message: str
    def __init__(self, index: _Optional[int] = ..., code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class ProduceResponse(_message.Message):
    __slots__ = ("code", "message", "offsets", "failures")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    offsets: _containers.RepeatedScalarFieldContainer[int]
    failures: _containers.RepeatedCompositeFieldContainer[ProduceFailure]
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., offsets: _Optional[_Iterable[int]] = ..., failures: _Optional[_Iterable[_Union[ProduceFailure, _Mapping]]] = ...) -> None: ...
