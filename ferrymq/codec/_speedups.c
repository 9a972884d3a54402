/* ferrymq.codec._speedups: the wire format's per-record loops, in C.
 *
 * Each function here has a Python twin that stays the specification (named in its
 * docstring); tests/codec/test_speedups.py checks them against each other on generated
 * input.
 * A C function either returns exactly what its twin returns or, where it declines
 * (a record its twin would refuse), says so and lets the twin produce the precise error:
 * refusals never need to be fast, and this way they are written once. The store's loops
 * are store/_speedups.c; the property parser both use is _properties.h, the CRC32C
 * _crc32c.h, the record layout _record_layout.h.
 *
 * Thread-safety: every function runs with the GIL held and keeps no state between calls.
 */
#include "_crc32c.h"
#include "_properties.h"
#include "_record_layout.h"
#include <string.h>
#include <structmember.h>

/* Below, with the Fetch columns; the produce and SDK readers use them too. */
static uint32_t read_uint32(const unsigned char *p);
static int utf8_is_valid(const unsigned char *p, Py_ssize_t n);

PyDoc_STRVAR(decode_properties_doc,
"decode_properties(raw: bytes) -> dict[str, str]\n\n"
"ferrymq.codec.properties.decode_properties_in_python, for any bytes-like `raw`: invalid\n"
"UTF-8 raises UnicodeDecodeError as bytes.decode does.");

/* ---- produce records (ferrymq/codec/produce_records.py has the layout) ------------ */

#define PRODUCE_HEAD_SIZE 14 /* body length int32, properties length uint16, born int64 */
#define PRODUCE_SPAN_SIZE 18 /* little-endian body at uint32, body length uint32,
                                properties length uint16, born int64 */

typedef struct {
    PyObject_HEAD
    PyObject *uniq_key;       /* property names, str */
    PyObject *message_type;
    PyObject *tags;
    PyObject *keys;
    PyObject *message_group;
    PyObject *forbidden;      /* tuple of str: names a produce record must not carry */
} ProduceScanner;

static int
scanner_init(ProduceScanner *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"uniq_key", "message_type", "tags", "keys", "message_group",
                            "forbidden", NULL};
    PyObject *uniq_key, *message_type, *tags, *keys, *message_group, *forbidden;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "UUUUUO!:ProduceScanner", names, &uniq_key,
                                     &message_type, &tags, &keys, &message_group,
                                     &PyTuple_Type, &forbidden))
        return -1;
    Py_INCREF(uniq_key);
    Py_XSETREF(self->uniq_key, uniq_key);
    Py_INCREF(message_type);
    Py_XSETREF(self->message_type, message_type);
    Py_INCREF(tags);
    Py_XSETREF(self->tags, tags);
    Py_INCREF(keys);
    Py_XSETREF(self->keys, keys);
    Py_INCREF(message_group);
    Py_XSETREF(self->message_group, message_group);
    Py_INCREF(forbidden);
    Py_XSETREF(self->forbidden, forbidden);
    return 0;
}

static void
scanner_dealloc(ProduceScanner *self)
{
    Py_XDECREF(self->uniq_key);
    Py_XDECREF(self->message_type);
    Py_XDECREF(self->tags);
    Py_XDECREF(self->keys);
    Py_XDECREF(self->message_group);
    Py_XDECREF(self->forbidden);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* node.message_rules.tag_is_valid: not blank (str.strip's whitespace) and no '|', 0x01, 0x02. */
static int
tag_is_valid(PyObject *tag)
{
    Py_ssize_t length = PyUnicode_GET_LENGTH(tag);
    int kind = PyUnicode_KIND(tag);
    const void *data = PyUnicode_DATA(tag);
    int blank = 1;
    for (Py_ssize_t i = 0; i < length; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c == '|' || c == 0x01 || c == 0x02)
            return 0;
        if (!Py_UNICODE_ISSPACE(c))
            blank = 0;
    }
    return !blank;
}

/* node.message_rules.KEYS_TEXT: keys of non-whitespace, one space apart (re's \S is
 * str.isspace's complement, as Py_UNICODE_ISSPACE). */
static int
keys_are_valid(PyObject *keys)
{
    Py_ssize_t length = PyUnicode_GET_LENGTH(keys);
    int kind = PyUnicode_KIND(keys);
    const void *data = PyUnicode_DATA(keys);
    if (length == 0)
        return 0;
    int previous_space = 1; /* no space may lead */
    for (Py_ssize_t i = 0; i < length; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (Py_UNICODE_ISSPACE(c)) {
            if (c != ' ' || previous_space)
                return 0;
            previous_space = 1;
        } else {
            previous_space = 0;
        }
    }
    return !previous_space;
}

/* 1 when `properties` pass node.message_rules.check_produce_properties, 0 when not, -1 on error. */
static int
properties_pass(ProduceScanner *self, PyObject *properties, PyObject *type_text)
{
    PyObject *value = PyDict_GetItemWithError(properties, self->uniq_key);
    if (value == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (PyUnicode_GET_LENGTH(value) == 0)
        return 0;
    value = PyDict_GetItemWithError(properties, self->message_type);
    if (value == NULL)
        return PyErr_Occurred() ? -1 : 0;
    int same = PyUnicode_Compare(value, type_text);
    if (same == -1 && PyErr_Occurred())
        return -1;
    if (same != 0)
        return 0;
    value = PyDict_GetItemWithError(properties, self->tags);
    if (value == NULL && PyErr_Occurred())
        return -1;
    if (value != NULL && !tag_is_valid(value))
        return 0;
    value = PyDict_GetItemWithError(properties, self->keys);
    if (value == NULL && PyErr_Occurred())
        return -1;
    if (value != NULL && !keys_are_valid(value))
        return 0;
    Py_ssize_t forbidden = PyTuple_GET_SIZE(self->forbidden);
    for (Py_ssize_t i = 0; i < forbidden; i++) {
        int present = PyDict_Contains(properties, PyTuple_GET_ITEM(self->forbidden, i));
        if (present != 0)
            return present < 0 ? -1 : 0;
    }
    value = PyDict_GetItemWithError(properties, self->message_group);
    if (value == NULL && PyErr_Occurred())
        return -1;
    if (value != NULL && PyUnicode_GET_LENGTH(value) == 0)
        return 0;
    return 1;
}


/* A record's properties (a new dict) when its body and properties pass
 * node.message_rules.read_produce_record's checks, or NULL: with no exception when they
 * would be refused. */
static PyObject *
checked_properties(ProduceScanner *self, const char *raw_at, Py_ssize_t body_length,
                   Py_ssize_t properties_length, Py_ssize_t body_limit, PyObject *type_text)
{
    if (body_length == 0 || body_length > body_limit)
        return NULL;
    PyObject *text = PyUnicode_DecodeUTF8(raw_at, properties_length, NULL);
    if (text == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
            return NULL;
        PyErr_Clear();
        return NULL;
    }
    /* "".split(0x02) is [""]: no pairs, and nothing to end with a separator. */
    PyObject *properties = properties_length ? pairs_of(text, 1) : PyDict_New();
    Py_DECREF(text);
    if (properties == NULL)
        return NULL;
    int pass = properties_pass(self, properties, type_text);
    if (pass <= 0) {
        Py_DECREF(properties);
        return NULL;
    }
    return properties;
}

/* The record at `position` as (end, body, raw properties, born ms, properties), or NULL
 * with no exception when node.message_rules.read_produce_record would refuse it. */
static PyObject *
scan_one(ProduceScanner *self, const unsigned char *buf, Py_ssize_t end,
         Py_ssize_t body_at, Py_ssize_t body_length, Py_ssize_t properties_length,
         int64_t born_ms, Py_ssize_t body_limit, PyObject *type_text)
{
    const char *raw_at = (const char *)buf + body_at + body_length;
    PyObject *properties = checked_properties(self, raw_at, body_length, properties_length,
                                              body_limit, type_text);
    if (properties == NULL)
        return NULL;
    PyObject *body = PyBytes_FromStringAndSize((const char *)buf + body_at, body_length);
    PyObject *raw = PyBytes_FromStringAndSize(raw_at, properties_length);
    PyObject *born = PyLong_FromLongLong(born_ms);
    PyObject *end_object = PyLong_FromSsize_t(end);
    if (body == NULL || raw == NULL || born == NULL || end_object == NULL) {
        Py_XDECREF(body);
        Py_XDECREF(raw);
        Py_XDECREF(born);
        Py_XDECREF(end_object);
        Py_DECREF(properties);
        return NULL;
    }
    PyObject *item = PyTuple_New(5);
    if (item == NULL) {
        Py_DECREF(body);
        Py_DECREF(raw);
        Py_DECREF(born);
        Py_DECREF(end_object);
        Py_DECREF(properties);
        return NULL;
    }
    PyTuple_SET_ITEM(item, 0, end_object);
    PyTuple_SET_ITEM(item, 1, body);
    PyTuple_SET_ITEM(item, 2, raw);
    PyTuple_SET_ITEM(item, 3, born);
    PyTuple_SET_ITEM(item, 4, properties);
    return item;
}

PyDoc_STRVAR(scan_doc,
"scan(records: bytes, count: int, body_limit: int, type_text: str) -> list\n\n"
"node.message_rules.read_produce_record over `count` records at once. Item i is the tuple that\n"
"read_produce_record returns for record i, or the int position of record i where it\n"
"would raise (the caller reads that record with it to get the precise error). The list\n"
"stops after the first record whose lengths do not fit `records`: nothing after it can\n"
"be found.");

static PyObject *
scanner_scan(ProduceScanner *self, PyObject *args)
{
    PyObject *records, *type_text;
    Py_ssize_t count, body_limit;
    if (!PyArg_ParseTuple(args, "O!nnU:scan", &PyBytes_Type, &records, &count, &body_limit,
                          &type_text))
        return NULL;
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(records);
    Py_ssize_t length = PyBytes_GET_SIZE(records);
    PyObject *items = PyList_New(0);
    if (items == NULL)
        return NULL;
    Py_ssize_t position = 0;
    for (Py_ssize_t index = 0; index < count; index++) {
        PyObject *item = NULL;
        int malformed = 1;
        Py_ssize_t end = position;
        if (length - position >= PRODUCE_HEAD_SIZE) {
            const unsigned char *head = buf + position;
            int32_t body_length = (int32_t)(((uint32_t)head[0] << 24) | ((uint32_t)head[1] << 16) |
                                            ((uint32_t)head[2] << 8) | head[3]);
            Py_ssize_t properties_length = ((Py_ssize_t)head[4] << 8) | head[5];
            int64_t born_ms = read_int64(head + 6);
            Py_ssize_t body_at = position + PRODUCE_HEAD_SIZE;
            if (body_length >= 0 && length - body_at >= (Py_ssize_t)body_length + properties_length) {
                malformed = 0;
                end = body_at + body_length + properties_length;
                item = scan_one(self, buf, end, body_at, body_length, properties_length, born_ms,
                                body_limit, type_text);
                if (item == NULL && PyErr_Occurred()) {
                    Py_DECREF(items);
                    return NULL;
                }
            }
        }
        if (item == NULL)
            item = PyLong_FromSsize_t(position);
        if (item == NULL || PyList_Append(items, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(items);
            return NULL;
        }
        Py_DECREF(item);
        if (malformed)
            break;
        position = end;
    }
    return items;
}

/* ferrymq.codec.properties.check_encoded_properties: `raw` is exactly the encoding of
 * its `pairs` pairs, within `properties_max` bytes. */
static int
encoded_properties_fit(const char *raw, Py_ssize_t length, Py_ssize_t pairs,
                       Py_ssize_t properties_max)
{
    if (length > properties_max)
        return 0;
    Py_ssize_t name_values = 0, separators = 0;
    for (Py_ssize_t i = 0; i < length; i++) {
        name_values += raw[i] == NAME_VALUE_SEPARATOR;
        separators += raw[i] == PROPERTY_SEPARATOR;
    }
    if (name_values != pairs || separators != pairs)
        return 0;
    if (pairs && raw[length - 1] != PROPERTY_SEPARATOR)
        return 0;
    return length == 0 || pairs > 0;
}

/* ---- the same checks on a record's bytes, for spans: no str or dict per record ------- */

#define RAW_PAIRS_MAX 32 /* more pairs: the dict path (names compared pairwise here) */

typedef struct {
    const char *name, *value;
    Py_ssize_t name_length, value_length;
} RawPair;

static int
ascii_space(unsigned char c) /* str.isspace for ASCII */
{
    return c == ' ' || (c >= 9 && c <= 13) || (c >= 28 && c <= 31);
}

static int
has_non_ascii(const char *text, Py_ssize_t length)
{
    for (Py_ssize_t i = 0; i < length; i++)
        if ((unsigned char)text[i] >= 0x80)
            return 1;
    return 0;
}

/* tag_is_valid or keys_are_valid of UTF-8 `text`: 1, 0, or -1 on error. */
static int
raw_text_passes(const char *text, Py_ssize_t length, int (*passes)(PyObject *))
{
    PyObject *decoded = PyUnicode_DecodeUTF8(text, length, NULL);
    if (decoded == NULL)
        return -1; /* valid UTF-8 already: only memory fails here */
    int ok = passes(decoded);
    Py_DECREF(decoded);
    return ok;
}

static int
raw_tag_passes(const char *tag, Py_ssize_t length)
{
    if (has_non_ascii(tag, length))
        return raw_text_passes(tag, length, tag_is_valid);
    int blank = 1;
    for (Py_ssize_t i = 0; i < length; i++) {
        if (tag[i] == '|')
            return 0;
        if (!ascii_space((unsigned char)tag[i]))
            blank = 0;
    }
    return !blank;
}

static int
raw_keys_pass(const char *keys, Py_ssize_t length)
{
    if (has_non_ascii(keys, length))
        return raw_text_passes(keys, length, keys_are_valid);
    int previous_space = 1; /* no space may lead */
    for (Py_ssize_t i = 0; i < length; i++) {
        unsigned char c = (unsigned char)keys[i];
        if (ascii_space(c)) {
            if (c != ' ' || previous_space)
                return 0;
            previous_space = 1;
        } else {
            previous_space = 0;
        }
    }
    return length > 0 && !previous_space;
}

/* The pair named `name` (a str) among `pairs`, or NULL. */
static const RawPair *
raw_find(const RawPair *pairs, Py_ssize_t count, PyObject *name)
{
    Py_ssize_t length;
    const char *utf8 = PyUnicode_AsUTF8AndSize(name, &length);
    if (utf8 == NULL) {
        PyErr_Clear(); /* a name with a lone surrogate: no record carries it */
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++)
        if (pairs[i].name_length == length && memcmp(pairs[i].name, utf8, length) == 0)
            return &pairs[i];
    return NULL;
}

/* checked_properties and check_encoded_properties on the raw bytes: 1 pass, 0 refused,
 * -1 error, -2 too many pairs to check here (the caller takes the dict path). */
static int
raw_properties_pass(ProduceScanner *self, const char *raw, Py_ssize_t length,
                    PyObject *type_text, Py_ssize_t properties_max)
{
    if (length > properties_max || !utf8_is_valid((const unsigned char *)raw, length))
        return 0;
    if (length > 0 && raw[length - 1] != PROPERTY_SEPARATOR)
        return 0;
    RawPair pairs[RAW_PAIRS_MAX];
    Py_ssize_t count = 0;
    for (Py_ssize_t start = 0; start < length; count++) {
        if (count == RAW_PAIRS_MAX)
            return -2;
        Py_ssize_t end = start, separator = -1;
        for (; raw[end] != PROPERTY_SEPARATOR; end++) {
            if (raw[end] == NAME_VALUE_SEPARATOR) {
                if (separator >= 0)
                    return 0; /* two in one pair */
                separator = end;
            }
        }
        if (separator <= start) /* none, or an empty name */
            return 0;
        pairs[count] = (RawPair){raw + start, raw + separator + 1, separator - start,
                                 end - separator - 1};
        for (Py_ssize_t i = 0; i < count; i++)
            if (pairs[i].name_length == pairs[count].name_length &&
                memcmp(pairs[i].name, pairs[count].name, pairs[i].name_length) == 0)
                return 0; /* a repeated name */
        start = end + 1;
    }
    const RawPair *pair = raw_find(pairs, count, self->uniq_key);
    if (pair == NULL || pair->value_length == 0)
        return 0;
    Py_ssize_t type_length;
    const char *type_utf8 = PyUnicode_AsUTF8AndSize(type_text, &type_length);
    if (type_utf8 == NULL) {
        PyErr_Clear();
        return 0;
    }
    pair = raw_find(pairs, count, self->message_type);
    if (pair == NULL || pair->value_length != type_length ||
        memcmp(pair->value, type_utf8, type_length) != 0)
        return 0;
    int ok = 1;
    if ((pair = raw_find(pairs, count, self->tags)) != NULL)
        ok = raw_tag_passes(pair->value, pair->value_length);
    if (ok > 0 && (pair = raw_find(pairs, count, self->keys)) != NULL)
        ok = raw_keys_pass(pair->value, pair->value_length);
    for (Py_ssize_t i = 0; ok > 0 && i < PyTuple_GET_SIZE(self->forbidden); i++)
        if (raw_find(pairs, count, PyTuple_GET_ITEM(self->forbidden, i)) != NULL)
            ok = 0;
    if (ok > 0 && (pair = raw_find(pairs, count, self->message_group)) != NULL &&
        pair->value_length == 0)
        ok = 0;
    return ok;
}

static void
put_le(unsigned char *p, uint64_t value, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (unsigned char)(value >> (8 * i));
}

PyDoc_STRVAR(spans_doc,
"spans(records: bytes, count: int, body_limit: int, type_text: str, properties_max: int)\n"
"-> bytes | None\n\n"
"node.message_rules.produce_spans_in_python: where each of `count` records' body and\n"
"properties lie (PRODUCE_SPAN, ferrymq.codec.produce_records, one per record) when every\n"
"record passes read_produce_record and check_encoded_properties and the records fill\n"
"`records` exactly; None otherwise.");

static PyObject *spans_of(ProduceScanner *self, const unsigned char *buf, Py_ssize_t length,
                          Py_ssize_t count, Py_ssize_t body_limit, PyObject *type_text,
                          Py_ssize_t properties_max);

static PyObject *
scanner_spans(ProduceScanner *self, PyObject *args)
{
    Py_buffer records; /* bytes, or a view of a request's frame */
    PyObject *type_text;
    Py_ssize_t count, body_limit, properties_max;
    if (!PyArg_ParseTuple(args, "y*nnUn:spans", &records, &count, &body_limit, &type_text,
                          &properties_max))
        return NULL;
    PyObject *spans = spans_of(self, (const unsigned char *)records.buf, records.len, count,
                               body_limit, type_text, properties_max);
    PyBuffer_Release(&records);
    return spans;
}

static PyObject *
spans_of(ProduceScanner *self, const unsigned char *buf, Py_ssize_t length, Py_ssize_t count,
         Py_ssize_t body_limit, PyObject *type_text, Py_ssize_t properties_max)
{
    if (count < 0 || length > (Py_ssize_t)UINT32_MAX || count > length / PRODUCE_HEAD_SIZE)
        Py_RETURN_NONE;
    PyObject *spans = PyBytes_FromStringAndSize(NULL, count * PRODUCE_SPAN_SIZE);
    if (spans == NULL)
        return NULL;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(spans);
    Py_ssize_t position = 0;
    for (Py_ssize_t index = 0; index < count; index++) {
        if (length - position < PRODUCE_HEAD_SIZE)
            goto decline;
        const unsigned char *head = buf + position;
        int32_t body_length = (int32_t)(((uint32_t)head[0] << 24) | ((uint32_t)head[1] << 16) |
                                        ((uint32_t)head[2] << 8) | head[3]);
        Py_ssize_t properties_length = ((Py_ssize_t)head[4] << 8) | head[5];
        int64_t born_ms = read_int64(head + 6);
        Py_ssize_t body_at = position + PRODUCE_HEAD_SIZE;
        if (body_length < 0 || length - body_at < (Py_ssize_t)body_length + properties_length)
            goto decline;
        const char *raw_at = (const char *)buf + body_at + body_length;
        if (body_length == 0 || body_length > body_limit)
            goto decline;
        int pass = raw_properties_pass(self, raw_at, properties_length, type_text,
                                       properties_max);
        if (pass == -2) { /* many pairs: the dict and its checks */
            PyObject *properties = checked_properties(self, raw_at, body_length,
                                                      properties_length, body_limit, type_text);
            pass = properties == NULL
                       ? (PyErr_Occurred() ? -1 : 0)
                       : encoded_properties_fit(raw_at, properties_length,
                                                PyDict_GET_SIZE(properties), properties_max);
            Py_XDECREF(properties);
        }
        if (pass < 0) {
            Py_DECREF(spans);
            return NULL;
        }
        if (pass == 0)
            goto decline;
        unsigned char *span = out + index * PRODUCE_SPAN_SIZE;
        put_le(span, (uint64_t)body_at, 4);
        put_le(span + 4, (uint64_t)body_length, 4);
        put_le(span + 8, (uint64_t)properties_length, 2);
        put_le(span + 10, (uint64_t)born_ms, 8);
        position = body_at + body_length + properties_length;
    }
    if (position == length)
        return spans;
decline:
    Py_DECREF(spans);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(produce_run_doc,
"produce_run(body, born_host, topics, body_limit, properties_max, max_records, run_type)\n"
"-> run_type | None\n\n"
"node.remoting.ferry_data.produce_run_in_python: the PreparedRun (`run_type`) of a\n"
"FERRY_PRODUCE body whose topic `topics` holds, whose queue exists and whose records all\n"
"pass; None for anything else (the request is then read the usual way).");

static PyObject *scanner_produce_run(ProduceScanner *self, PyObject *args);

static PyMethodDef scanner_methods[] = {
    {"scan", (PyCFunction)scanner_scan, METH_VARARGS, scan_doc},
    {"spans", (PyCFunction)scanner_spans, METH_VARARGS, spans_doc},
    {"produce_run", (PyCFunction)scanner_produce_run, METH_VARARGS, produce_run_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ProduceScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ferrymq.codec._speedups.ProduceScanner",
    .tp_doc = PyDoc_STR("Reads Data.Produce records with the checks of node.message_rules, "
                        "given the property names those checks use."),
    .tp_basicsize = sizeof(ProduceScanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)scanner_init,
    .tp_dealloc = (destructor)scanner_dealloc,
    .tp_methods = scanner_methods,
};

/* ---- the SDK's messages into produce records (ferrymq/client/produce_records.py) --- */

typedef struct {
    PyObject_HEAD
    PyObject *uniq_key, *message_type, *tags, *keys, *message_group; /* property names */
    PyObject *reserved; /* frozenset: names a user property must not have */
    /* attribute names of the SDK's Message */
    PyObject *a_message_id, *a_tag, *a_keys, *a_message_group, *a_properties, *a_body;
} RecordEncoder;

static int
encoder_init(RecordEncoder *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"uniq_key", "message_type", "tags", "keys", "message_group",
                            "reserved", NULL};
    PyObject *v[6];
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "UUUUUO!:RecordEncoder", names, &v[0], &v[1],
                                     &v[2], &v[3], &v[4], &PyFrozenSet_Type, &v[5]))
        return -1;
    PyObject **slots[6] = {&self->uniq_key, &self->message_type, &self->tags, &self->keys,
                           &self->message_group, &self->reserved};
    for (int i = 0; i < 6; i++) {
        Py_INCREF(v[i]);
        Py_XSETREF(*slots[i], v[i]);
    }
    const char *attributes[6] = {"message_id", "tag", "keys", "message_group", "properties",
                                 "body"};
    PyObject **attribute_slots[6] = {&self->a_message_id, &self->a_tag, &self->a_keys,
                                     &self->a_message_group, &self->a_properties, &self->a_body};
    for (int i = 0; i < 6; i++)
        if (*attribute_slots[i] == NULL &&
            (*attribute_slots[i] = PyUnicode_InternFromString(attributes[i])) == NULL)
            return -1;
    return 0;
}

static void
encoder_dealloc(RecordEncoder *self)
{
    PyObject **slots[12] = {&self->uniq_key, &self->message_type, &self->tags, &self->keys,
                            &self->message_group, &self->reserved, &self->a_message_id,
                            &self->a_tag, &self->a_keys, &self->a_message_group,
                            &self->a_properties, &self->a_body};
    for (int i = 0; i < 12; i++)
        Py_CLEAR(*slots[i]);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The produce records being written: a buffer that grows (PyMem). */
typedef struct {
    char *data;
    Py_ssize_t length, capacity;
} Written;

static int
written_reserve(Written *w, Py_ssize_t more)
{
    if (w->length + more <= w->capacity)
        return 1;
    Py_ssize_t capacity = w->capacity ? w->capacity : 4096;
    while (capacity < w->length + more)
        capacity *= 2;
    char *data = PyMem_Realloc(w->data, capacity);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    w->data = data;
    w->capacity = capacity;
    return 1;
}

static int
write_bytes(Written *w, const char *bytes, Py_ssize_t length)
{
    if (written_reserve(w, length) < 0)
        return -1;
    memcpy(w->data + w->length, bytes, length);
    w->length += length;
    return 1;
}

/* str `text` as UTF-8 into w: 1; 0 when it has none (not a str, or a lone surrogate: the
 * twin refuses); -1 on error. */
static int
write_text(Written *w, PyObject *text)
{
    if (!PyUnicode_Check(text))
        return 0;
    Py_ssize_t length;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &length);
    if (utf8 == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            return -1;
        PyErr_Clear();
        return 0;
    }
    return write_bytes(w, utf8, length);
}

/* name 0x01 value 0x02 into w: 1, 0 where the twin refuses, -1 on error. */
static int
write_pair(Written *w, PyObject *name, PyObject *value)
{
    static const char name_value = NAME_VALUE_SEPARATOR, end = PROPERTY_SEPARATOR;
    int ok = write_text(w, name);
    if (ok > 0)
        ok = write_bytes(w, &name_value, 1);
    if (ok > 0)
        ok = write_text(w, value);
    if (ok > 0)
        ok = write_bytes(w, &end, 1);
    return ok;
}

/* ferrymq.client.produce_records.KEY: one or more characters, none str.isspace. */
static int
key_is_valid(PyObject *key)
{
    if (!PyUnicode_Check(key) || PyUnicode_GET_LENGTH(key) == 0)
        return 0;
    int kind = PyUnicode_KIND(key);
    const void *data = PyUnicode_DATA(key);
    for (Py_ssize_t i = 0; i < PyUnicode_GET_LENGTH(key); i++)
        if (Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, i)))
            return 0;
    return 1;
}

/* *value = getattr(message, name), the old value released: 0, or -1 on error. */
static int
next_attribute(PyObject **value, PyObject *message, PyObject *name)
{
    PyObject *next = PyObject_GetAttr(message, name);
    if (next == NULL)
        return -1;
    Py_SETREF(*value, next);
    return 0;
}

/* encode_record's properties of `message` into w: 1, 0 where the twin raises, -1 on error. */
static int
write_properties(RecordEncoder *self, Written *w, PyObject *message, PyObject *type_text)
{
    static const char name_value = NAME_VALUE_SEPARATOR, end = PROPERTY_SEPARATOR, space = ' ';
    PyObject *value = PyObject_GetAttr(message, self->a_message_id);
    if (value == NULL)
        return -1;
    int ok = write_pair(w, self->uniq_key, value);
    if (ok > 0)
        ok = write_pair(w, self->message_type, type_text);
    if (ok > 0 && next_attribute(&value, message, self->a_tag) < 0)
        ok = -1;
    if (ok > 0 && value != Py_None)
        ok = write_pair(w, self->tags, value);
    if (ok > 0 && next_attribute(&value, message, self->a_keys) < 0)
        ok = -1;
    int truthy = ok > 0 ? PyObject_IsTrue(value) : 0; /* `if message.keys:` */
    if (truthy < 0)
        ok = -1;
    if (ok > 0 && truthy) {
        PyObject *keys = PySequence_Fast(value, "keys");
        if (keys == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_TypeError)) {
                Py_DECREF(value);
                return -1;
            }
            PyErr_Clear(); /* not iterable: the twin raises */
            ok = 0;
        }
        Py_ssize_t count = keys != NULL ? PySequence_Fast_GET_SIZE(keys) : 0;
        PyObject **items = keys != NULL ? PySequence_Fast_ITEMS(keys) : NULL;
        for (Py_ssize_t i = 0; ok > 0 && i < count; i++)
            ok = key_is_valid(items[i]);
        if (ok > 0)
            ok = write_text(w, self->keys);
        if (ok > 0)
            ok = write_bytes(w, &name_value, 1);
        for (Py_ssize_t i = 0; ok > 0 && i < count; i++) {
            if (i > 0)
                ok = write_bytes(w, &space, 1);
            if (ok > 0)
                ok = write_text(w, items[i]);
        }
        if (ok > 0)
            ok = write_bytes(w, &end, 1);
        Py_XDECREF(keys);
    }
    if (ok > 0 && next_attribute(&value, message, self->a_message_group) < 0)
        ok = -1;
    if (ok > 0 && value != Py_None)
        ok = write_pair(w, self->message_group, value);
    if (ok > 0 && next_attribute(&value, message, self->a_properties) < 0)
        ok = -1;
    truthy = ok > 0 ? PyObject_IsTrue(value) : 0; /* `if message.properties:` */
    if (truthy < 0)
        ok = -1;
    if (ok > 0 && truthy) {
        /* .items(), as the twin calls it: a dict's pairs, or any mapping's */
        PyObject *pairs = PyDict_CheckExact(value) ? PyDict_Items(value) : PyMapping_Items(value);
        if (pairs == NULL) {
            Py_DECREF(value);
            return -1;
        }
        for (Py_ssize_t i = 0; ok > 0 && i < PyList_GET_SIZE(pairs); i++) {
            PyObject *pair = PyList_GET_ITEM(pairs, i);
            if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
                ok = 0;
                break;
            }
            PyObject *name = PyTuple_GET_ITEM(pair, 0);
            int reserved = PySet_Contains(self->reserved, name);
            ok = reserved < 0 ? -1 : reserved ? 0 : write_pair(w, name, PyTuple_GET_ITEM(pair, 1));
        }
        Py_DECREF(pairs);
    }
    Py_DECREF(value);
    return ok;
}

PyDoc_STRVAR(encode_doc,
"encode(messages: list, type_text: str, born_ms: int) -> bytes | None\n\n"
"ferrymq.client.produce_records.encode_records_in_python: the produce record of each\n"
"message, back to back; None where that raises, or for a body neither bytes nor bytearray\n"
"(the caller then runs the twin, for its error or its record).");

static PyObject *
encoder_encode(RecordEncoder *self, PyObject *args)
{
    PyObject *messages, *type_text;
    long long born_ms;
    if (!PyArg_ParseTuple(args, "O!UL:encode", &PyList_Type, &messages, &type_text, &born_ms))
        return NULL;
    Written w = {NULL, 0, 0};
    PyObject *result = NULL;
    int ok = 1;
    for (Py_ssize_t i = 0; ok > 0 && i < PyList_GET_SIZE(messages); i++) {
        /* Held: an attribute read may run Python code that changes the list. */
        PyObject *message = Py_NewRef(PyList_GET_ITEM(messages, i));
        PyObject *body = PyObject_GetAttr(message, self->a_body);
        if (body == NULL) {
            Py_DECREF(message);
            ok = -1;
            break;
        }
        Py_ssize_t head_at = w.length;
        Py_buffer view;
        if (PyObject_GetBuffer(body, &view, PyBUF_SIMPLE) < 0) {
            Py_DECREF(body);
            Py_DECREF(message);
            if (!PyErr_ExceptionMatches(PyExc_TypeError)) {
                ok = -1;
                break;
            }
            PyErr_Clear(); /* no bytes: the twin raises */
            ok = 0;
            break;
        }
        /* The twin's head says len(body): the bytes' count for bytes-like bodies. */
        Py_ssize_t body_length = view.len;
        ok = body_length <= INT32_MAX && (PyBytes_CheckExact(body) || PyByteArray_CheckExact(body));
        if (ok > 0)
            ok = written_reserve(&w, PRODUCE_HEAD_SIZE);
        if (ok > 0) {
            w.length += PRODUCE_HEAD_SIZE;
            ok = write_bytes(&w, view.buf, body_length);
        }
        PyBuffer_Release(&view);
        Py_DECREF(body);
        Py_ssize_t properties_at = w.length;
        if (ok > 0)
            ok = write_properties(self, &w, message, type_text);
        Py_ssize_t properties_length = w.length - properties_at;
        if (ok > 0 && properties_length > 0xFFFF)
            ok = 0;
        if (ok > 0) {
            unsigned char *head = (unsigned char *)w.data + head_at;
            uint32_t length32 = (uint32_t)body_length;
            head[0] = length32 >> 24;
            head[1] = length32 >> 16;
            head[2] = length32 >> 8;
            head[3] = length32;
            head[4] = (unsigned char)(properties_length >> 8);
            head[5] = (unsigned char)properties_length;
            for (int b = 0; b < 8; b++)
                head[6 + b] = (unsigned char)((uint64_t)born_ms >> (56 - 8 * b));
        }
        Py_DECREF(message);
    }
    if (ok > 0)
        result = PyBytes_FromStringAndSize(w.data != NULL ? w.data : "", w.length);
    else if (ok == 0)
        result = Py_NewRef(Py_None);
    PyMem_Free(w.data);
    return result;
}

static PyMethodDef encoder_methods[] = {
    {"encode", (PyCFunction)encoder_encode, METH_VARARGS, encode_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RecordEncoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ferrymq.codec._speedups.RecordEncoder",
    .tp_doc = PyDoc_STR("Writes the SDK's messages as produce records, given the property "
                        "names they carry and the names a user property must not have."),
    .tp_basicsize = sizeof(RecordEncoder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)encoder_init,
    .tp_dealloc = (destructor)encoder_dealloc,
    .tp_methods = encoder_methods,
};

/* ---- Fetch answers into the SDK's messages (ferrymq/client/messages.py) ----------- */


/* The system properties a ReceivedMessage shows, by role. */
enum { ROLE_UNIQ_KEY, ROLE_TAGS, ROLE_KEYS, ROLE_GROUP, ROLE_LITE_TOPIC, ROLE_PRIORITY, ROLES };
#define NAMES_CACHED 32

typedef struct {
    PyObject *name; /* str */
    int role;       /* ROLE_*, or -1 for a name the reader does not read */
    int shown;      /* 1 when a pair of this name is a user property */
} CachedName;

typedef struct {
    PyObject_HEAD
    PyObject *received_type;     /* ReceivedMessage */
    PyObject *not_user;          /* frozenset of names not shown as user properties */
    PyObject *uniq_key, *tags, *keys, *message_group, *lite_topic, *priority; /* str */
    PyObject *key_separator;     /* str */
    PyObject *offset_message_id; /* (store_host: bytes, physical_offset: int) -> str */
    PyObject *plain_body;        /* (body: bytes, sys_flag: int) -> bytes */
    PyObject *priority_of;       /* (text: str) -> int | None */
    PyObject *empty;             /* "" */
    /* Where each of ReceivedMessage's 16 fields lies in an instance (it is a slots
     * dataclass): the reader fills a new instance there instead of calling __init__. */
    Py_ssize_t field_offsets[16];
    /* The property names met so far (ASCII ones, up to NAMES_CACHED): a record's names
     * are matched against these bytes, so each message reuses one str (its hash kept)
     * instead of making and hashing its own. */
    CachedName names[NAMES_CACHED];
    int names_cached;
} RecordReader;

/* ReceivedMessage's fields, in the order received_at gathers them. */
static const char *const RECEIVED_FIELDS[16] = {
    "topic", "queue_id", "queue_offset", "message_id", "body", "tag", "keys", "properties",
    "message_group", "born_timestamp_ms", "store_timestamp_ms", "delivery_attempt",
    "receipt_handle", "broker_group", "lite_topic", "priority"};

/* The offset of each field's slot in an instance of type; -1 (TypeError set) when type
 * is not a class whose slots are exactly these 16 fields (a field the reader did not
 * fill would be missing from every message). */
static int
find_field_offsets(PyObject *type, Py_ssize_t *offsets)
{
    if (!PyType_Check(type) || ((PyTypeObject *)type)->tp_dictoffset != 0 ||
        ((PyTypeObject *)type)->tp_basicsize != sizeof(PyObject) + 16 * sizeof(PyObject *)) {
        PyErr_SetString(PyExc_TypeError,
                        "received_type must be a class whose only slots are a "
                        "ReceivedMessage's 16 fields");
        return -1;
    }
    for (int i = 0; i < 16; i++) {
        PyObject *descriptor = PyObject_GetAttrString(type, RECEIVED_FIELDS[i]);
        if (descriptor == NULL)
            return -1;
        int slot = Py_IS_TYPE(descriptor, &PyMemberDescr_Type) &&
                   ((PyMemberDescrObject *)descriptor)->d_member->type == T_OBJECT_EX;
        offsets[i] = slot ? ((PyMemberDescrObject *)descriptor)->d_member->offset : -1;
        Py_DECREF(descriptor);
        if (!slot) {
            PyErr_Format(PyExc_TypeError, "received_type's %s is no object slot",
                         RECEIVED_FIELDS[i]);
            return -1;
        }
    }
    return 0;
}

static int
reader_init(RecordReader *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"received_type", "not_user", "uniq_key", "tags", "keys",
                            "message_group", "lite_topic", "priority", "key_separator",
                            "offset_message_id", "plain_body", "priority_of", NULL};
    PyObject *v[12];
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!UUUUUUUOOO:RecordReader", names, &v[0],
                                     &PyFrozenSet_Type, &v[1], &v[2], &v[3], &v[4], &v[5],
                                     &v[6], &v[7], &v[8], &v[9], &v[10], &v[11]))
        return -1;
    /* The class is checked before anything changes: a reader keeps offsets that match
     * the class it writes. */
    Py_ssize_t offsets[16];
    if (find_field_offsets(v[0], offsets) < 0)
        return -1;
    memcpy(self->field_offsets, offsets, sizeof(offsets));
    PyObject **slots[12] = {&self->received_type, &self->not_user, &self->uniq_key,
                            &self->tags, &self->keys, &self->message_group, &self->lite_topic,
                            &self->priority, &self->key_separator, &self->offset_message_id,
                            &self->plain_body, &self->priority_of};
    for (int i = 0; i < 12; i++) {
        Py_INCREF(v[i]);
        Py_XSETREF(*slots[i], v[i]);
    }
    if (self->empty == NULL && (self->empty = PyUnicode_FromString("")) == NULL)
        return -1;
    for (; self->names_cached > 0; self->names_cached--) /* the roles were the old names' */
        Py_CLEAR(self->names[self->names_cached - 1].name);
    return 0;
}

static void
reader_dealloc(RecordReader *self)
{
    Py_XDECREF(self->received_type);
    Py_XDECREF(self->not_user);
    Py_XDECREF(self->uniq_key);
    Py_XDECREF(self->tags);
    Py_XDECREF(self->keys);
    Py_XDECREF(self->message_group);
    Py_XDECREF(self->lite_topic);
    Py_XDECREF(self->priority);
    Py_XDECREF(self->key_separator);
    Py_XDECREF(self->offset_message_id);
    Py_XDECREF(self->plain_body);
    Py_XDECREF(self->priority_of);
    Py_XDECREF(self->empty);
    for (int i = 0; i < self->names_cached; i++)
        Py_DECREF(self->names[i].name);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The name of n bytes at p (valid UTF-8) as a new reference, with its role and whether
 * its pairs are user properties; NULL on error. */
static PyObject *
property_name(RecordReader *self, const unsigned char *p, Py_ssize_t n, int *role, int *shown)
{
    for (int i = 0; i < self->names_cached; i++) {
        PyObject *cached = self->names[i].name; /* ASCII: one byte a character */
        if (PyUnicode_GET_LENGTH(cached) == n && memcmp(PyUnicode_DATA(cached), p, n) == 0) {
            *role = self->names[i].role;
            *shown = self->names[i].shown;
            return Py_NewRef(cached);
        }
    }
    PyObject *name = PyUnicode_DecodeUTF8((const char *)p, n, NULL);
    if (name == NULL)
        return NULL;
    PyObject *const system[ROLES] = {self->uniq_key,      self->tags,       self->keys,
                                     self->message_group, self->lite_topic, self->priority};
    *role = -1;
    for (int r = 0; r < ROLES && *role < 0; r++)
        if (PyUnicode_Compare(name, system[r]) == 0)
            *role = r;
    int hidden = PySet_Contains(self->not_user, name); /* also keeps the name's hash */
    if (hidden < 0) {
        Py_DECREF(name);
        return NULL;
    }
    *shown = !hidden;
    if (PyUnicode_IS_ASCII(name) && self->names_cached < NAMES_CACHED)
        self->names[self->names_cached++] = (CachedName){Py_NewRef(name), *role, *shown};
    return name;
}

/* The properties of n bytes at p (valid UTF-8), read as decode_properties reads them
 * (pairs split at 0x02, a pair at its first 0x01, empty pairs skipped, a later name
 * replacing an earlier one): the user's pairs as a new dict, and in values (new
 * references, left NULL where absent) the value of each system property by role. NULL
 * on error, with the values the caller still releases. */
static PyObject *
read_properties(RecordReader *self, const unsigned char *p, Py_ssize_t n, PyObject **values)
{
    PyObject *user = PyDict_New();
    for (Py_ssize_t start = 0; user != NULL && start < n;) {
        const unsigned char *separator = memchr(p + start, PROPERTY_SEPARATOR, n - start);
        Py_ssize_t end = separator != NULL ? separator - p : n;
        if (end > start) {
            const unsigned char *name_value = memchr(p + start, NAME_VALUE_SEPARATOR, end - start);
            Py_ssize_t name_end = name_value != NULL ? name_value - p : end;
            Py_ssize_t value_start = name_value != NULL ? name_end + 1 : end;
            int role = -1, shown = 0;
            PyObject *name = property_name(self, p + start, name_end - start, &role, &shown);
            PyObject *value = name != NULL ? PyUnicode_DecodeUTF8((const char *)p + value_start,
                                                                  end - value_start, NULL)
                                           : NULL;
            if (value == NULL || (shown && PyDict_SetItem(user, name, value) < 0))
                Py_CLEAR(user);
            else if (role >= 0)
                Py_XSETREF(values[role], Py_NewRef(value));
            Py_XDECREF(name);
            Py_XDECREF(value);
        }
        start = end + 1;
    }
    return user;
}

/* StoredMessage.keys: KEYS split at the separator, empty keys dropped ([] without KEYS). */
static PyObject *
keys_of(RecordReader *self, PyObject *raw)
{
    if (raw == NULL || PyUnicode_GET_LENGTH(raw) == 0)
        return PyList_New(0);
    PyObject *parts = PyUnicode_Split(raw, self->key_separator, -1);
    if (parts == NULL)
        return NULL;
    PyObject *keys = PyList_New(0);
    for (Py_ssize_t i = 0; keys != NULL && i < PyList_GET_SIZE(parts); i++) {
        PyObject *part = PyList_GET_ITEM(parts, i);
        if (PyUnicode_GET_LENGTH(part) > 0 && PyList_Append(keys, part) < 0)
            Py_CLEAR(keys);
    }
    Py_DECREF(parts);
    return keys;
}

/* A system property's value, or None (new references). */
static PyObject *
value_or_none(PyObject *value)
{
    return Py_NewRef(value != NULL ? value : Py_None);
}

/* ReceivedMessage.from_record(decode(buf, p), broker_group) of the valid record at p,
 * whose user properties and system property values read_properties found. */
static PyObject *
received_at(RecordReader *self, const unsigned char *buf, Py_ssize_t p, PyObject *topic,
            PyObject *user, PyObject **values, PyObject *broker_group)
{
    Py_ssize_t body_length = (Py_ssize_t)read_uint32(buf + p + OFFSET_BODY_LENGTH);
    int32_t queue_id = (int32_t)read_uint32(buf + p + OFFSET_QUEUE_ID);
    int32_t sys_flag = (int32_t)read_uint32(buf + p + 36);
    PyObject *args[16] = {NULL};
    PyObject *result = NULL;
    PyObject *message_id = values[ROLE_UNIQ_KEY];
    if (message_id != NULL && PyUnicode_GET_LENGTH(message_id) > 0) {
        Py_INCREF(message_id);
    } else {
        PyObject *host = PyBytes_FromStringAndSize((const char *)buf + p + 64, 8);
        PyObject *physical = PyLong_FromLongLong(read_int64(buf + p + 28));
        message_id = host != NULL && physical != NULL
                         ? PyObject_CallFunctionObjArgs(self->offset_message_id, host, physical,
                                                        NULL)
                         : NULL;
        Py_XDECREF(host);
        Py_XDECREF(physical);
        if (message_id == NULL)
            return NULL;
    }
    args[3] = message_id;
    PyObject *body =
        PyBytes_FromStringAndSize((const char *)buf + p + RECORD_HEADER_SIZE, body_length);
    if (body != NULL && (sys_flag & 0x1)) { /* compressed: plain_body decides */
        PyObject *flag = PyLong_FromLong(sys_flag);
        PyObject *plain =
            flag != NULL ? PyObject_CallFunctionObjArgs(self->plain_body, body, flag, NULL) : NULL;
        Py_XDECREF(flag);
        Py_SETREF(body, plain);
    }
    args[4] = body;
    if (body == NULL)
        goto done;
    args[0] = Py_NewRef(topic);
    args[1] = PyLong_FromLong(queue_id);
    args[2] = PyLong_FromLongLong(read_int64(buf + p + OFFSET_QUEUE_OFFSET));
    args[5] = value_or_none(values[ROLE_TAGS]);
    args[6] = keys_of(self, values[ROLE_KEYS]);
    args[7] = Py_NewRef(user);
    args[8] = value_or_none(values[ROLE_GROUP]);
    args[9] = PyLong_FromLongLong(read_int64(buf + p + OFFSET_BORN_TIMESTAMP));
    args[10] = PyLong_FromLongLong(read_int64(buf + p + OFFSET_STORE_TIMESTAMP));
    args[11] = PyLong_FromLong(0);
    args[12] = Py_NewRef(self->empty);
    args[13] = Py_NewRef(broker_group);
    args[14] = value_or_none(values[ROLE_LITE_TOPIC]);
    /* priority_of("") is None: no call for a message without a priority (nearly all). */
    args[15] = values[ROLE_PRIORITY] != NULL
                   ? PyObject_CallOneArg(self->priority_of, values[ROLE_PRIORITY])
                   : Py_NewRef(Py_None);
    for (int i = 0; i < 16; i++)
        if (args[i] == NULL)
            goto done;
    /* ReceivedMessage(*args) without its __init__: each field straight into its slot. */
    PyTypeObject *type = (PyTypeObject *)self->received_type;
    result = type->tp_alloc(type, 0);
    if (result == NULL)
        goto done;
    for (int i = 0; i < 16; i++) {
        *(PyObject **)((char *)result + self->field_offsets[i]) = args[i];
        args[i] = NULL;
    }
done:
    for (int i = 0; i < 16; i++)
        Py_XDECREF(args[i]);
    return result;
}

PyDoc_STRVAR(received_doc,
"received(records: bytes-like, broker_group: str) -> list | None\n\n"
"ferrymq.client.messages.received_in_python: the ReceivedMessage of each record of a Fetch\n"
"answer, or None where that raises (the caller then runs it for the precise error).");

/* The record at p: its end, and where its topic and properties lie; 0 when it is not a
 * whole message record with UTF-8 text (what commitlog_record.decode refuses). */
static Py_ssize_t
framed_record(const unsigned char *buf, Py_ssize_t length, Py_ssize_t p, Py_ssize_t *topic_at,
              Py_ssize_t *properties_at)
{
    if (length - p < 4)
        return 0;
    int32_t size = (int32_t)read_uint32(buf + p);
    if (size < RECORD_MIN_SIZE || size > length - p || read_uint32(buf + p + 4) != MESSAGE_MAGIC)
        return 0;
    Py_ssize_t end = p + size;
    int32_t body_length = (int32_t)read_uint32(buf + p + OFFSET_BODY_LENGTH);
    *topic_at = p + RECORD_HEADER_SIZE + body_length;
    if (body_length < 0 || *topic_at + 3 > end)
        return 0;
    *properties_at = *topic_at + 1 + buf[*topic_at];
    if (*properties_at + 2 > end)
        return 0;
    Py_ssize_t properties_length = ((Py_ssize_t)buf[*properties_at] << 8) | buf[*properties_at + 1];
    if (*properties_at + 2 + properties_length != end ||
        !utf8_is_valid(buf + *topic_at + 1, buf[*topic_at]) ||
        !utf8_is_valid(buf + *properties_at + 2, properties_length))
        return 0;
    return end;
}

static PyObject *
reader_received(RecordReader *self, PyObject *args)
{
    Py_buffer records;
    PyObject *broker_group;
    if (self->received_type == NULL) {
        PyErr_SetString(PyExc_TypeError, "RecordReader.__init__ was not called");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*U:received", &records, &broker_group))
        return NULL;
    const unsigned char *buf = (const unsigned char *)records.buf;
    Py_ssize_t length = records.len;
    Py_ssize_t p = 0, topic_at, properties_at;
    /* Every record whole first: the twin decodes them all before it makes a message. */
    while (p < length) {
        Py_ssize_t end = framed_record(buf, length, p, &topic_at, &properties_at);
        if (end == 0) {
            PyBuffer_Release(&records);
            Py_RETURN_NONE;
        }
        p = end;
    }
    PyObject *found = PyList_New(0);
    PyObject *topic = NULL; /* the last record's, kept while the next ones share it */
    Py_ssize_t topic_from = -1;
    for (p = 0; found != NULL && p < length;) {
        Py_ssize_t end = framed_record(buf, length, p, &topic_at, &properties_at);
        Py_ssize_t topic_length = buf[topic_at];
        if (topic == NULL || buf[topic_from] != topic_length ||
            memcmp(buf + topic_from + 1, buf + topic_at + 1, topic_length) != 0) {
            Py_XSETREF(topic, PyUnicode_DecodeUTF8((const char *)buf + topic_at + 1,
                                                   topic_length, NULL));
            topic_from = topic_at;
        }
        PyObject *values[ROLES] = {NULL};
        PyObject *user = topic != NULL ? read_properties(self, buf + properties_at + 2,
                                                         end - properties_at - 2, values)
                                       : NULL;
        PyObject *message =
            user != NULL ? received_at(self, buf, p, topic, user, values, broker_group) : NULL;
        Py_XDECREF(user);
        for (int r = 0; r < ROLES; r++)
            Py_XDECREF(values[r]);
        if (message == NULL || PyList_Append(found, message) < 0)
            Py_CLEAR(found);
        Py_XDECREF(message);
        p = end;
    }
    Py_XDECREF(topic);
    PyBuffer_Release(&records);
    return found;
}

static PyMethodDef reader_methods[] = {
    {"received", (PyCFunction)reader_received, METH_VARARGS, received_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RecordReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ferrymq.codec._speedups.RecordReader",
    .tp_doc = PyDoc_STR("Reads a Fetch answer's records into the SDK's ReceivedMessage, given "
                        "that class, the property names it reads and its Python helpers."),
    .tp_basicsize = sizeof(RecordReader),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)reader_init,
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_methods = reader_methods,
};

/* ---- Fetch answers into Arrow column buffers (ferrymq/spark/fetch_columns.py) ------- */

/* A bytes object being filled: `length` bytes used of its size, doubled when full and cut
 * to `length` at the end (the object is ours alone until then, so resizing is allowed). */
typedef struct {
    PyObject *bytes;
    Py_ssize_t length;
} Growing;

static int
growing_reserve(Growing *g, Py_ssize_t more)
{
    Py_ssize_t capacity = PyBytes_GET_SIZE(g->bytes);
    if (g->length + more <= capacity)
        return 0;
    while (capacity < g->length + more)
        capacity *= 2;
    return _PyBytes_Resize(&g->bytes, capacity); /* NULL in g->bytes on failure */
}

static int
growing_append(Growing *g, const void *data, Py_ssize_t n)
{
    if (growing_reserve(g, n) < 0)
        return -1;
    memcpy(PyBytes_AS_STRING(g->bytes) + g->length, data, n);
    g->length += n;
    return 0;
}

static int
growing_int32(Growing *g, int32_t value)
{
    return growing_append(g, &value, sizeof value);
}

static int
growing_int64(Growing *g, int64_t value)
{
    return growing_append(g, &value, sizeof value);
}

/* Arrow's string layout: the offset after the data just appended. */
static int
growing_end_offset(Growing *offsets, const Growing *data)
{
    return growing_int32(offsets, (int32_t)data->length);
}

/* Row `row`'s validity bit, the byte that holds it added when `row` starts one. */
static int
growing_bit(Growing *bitmap, Py_ssize_t row, int present)
{
    if (row % 8 == 0) {
        unsigned char zero = 0;
        if (growing_append(bitmap, &zero, 1) < 0)
            return -1;
    }
    if (present)
        PyBytes_AS_STRING(bitmap->bytes)[row / 8] |= (char)(1 << (row % 8));
    return 0;
}

static uint32_t
read_uint32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* What bytes.decode() accepts: UTF-8 without overlong forms, surrogates or code points
 * past U+10FFFF. */
static int
utf8_is_valid(const unsigned char *p, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        if (n - i >= 8) {
            uint64_t word;
            memcpy(&word, p + i, 8);
            if (!(word & 0x8080808080808080ull)) {
                i += 8;
                continue;
            }
        }
        unsigned char c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int more;
        unsigned char low = 0x80, high = 0xBF; /* the bounds of the second byte */
        if (c >= 0xC2 && c <= 0xDF)
            more = 1;
        else if (c == 0xE0)
            more = 2, low = 0xA0;
        else if (c == 0xED)
            more = 2, high = 0x9F;
        else if (c >= 0xE1 && c <= 0xEF)
            more = 2;
        else if (c == 0xF0)
            more = 3, low = 0x90;
        else if (c == 0xF4)
            more = 3, high = 0x8F;
        else if (c >= 0xF1 && c <= 0xF3)
            more = 3;
        else
            return 0;
        if (n - i - 1 < more || p[i + 1] < low || p[i + 1] > high)
            return 0;
        for (int k = 2; k <= more; k++)
            if ((p[i + k] & 0xC0) != 0x80)
                return 0;
        i += more + 1;
    }
    return 1;
}

typedef struct {
    const char *data;
    Py_ssize_t length;
} Span;

static int
span_is(Span span, const char *text, Py_ssize_t length)
{
    return span.length == length && memcmp(span.data, text, length) == 0;
}

/* The outputs after count and next offset, in FetchColumns' field order. */
enum {
    QUEUE_OFFSETS, BORN_US, STORE_US, BODY_OFFSETS, BODY_DATA,
    MESSAGE_ID_VALIDITY, MESSAGE_ID_OFFSETS, MESSAGE_ID_DATA,
    TAG_VALIDITY, TAG_OFFSETS, TAG_DATA,
    KEYS_OFFSETS, KEY_OFFSETS, KEY_DATA,
    PROPERTY_OFFSETS, NAME_OFFSETS, NAME_DATA, VALUE_OFFSETS, VALUE_DATA,
    BUFFER_COUNT
};

typedef struct {
    Span message_id_name, tag_name, keys_name;
    char key_separator;
    PyObject *system_names; /* tuple of bytes */
} FetchNames;

static int
is_system_name(const FetchNames *names, Span name)
{
    Py_ssize_t count = PyTuple_GET_SIZE(names->system_names);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *system = PyTuple_GET_ITEM(names->system_names, i);
        if (span_is(name, PyBytes_AS_STRING(system), PyBytes_GET_SIZE(system)))
            return 1;
    }
    return 0;
}

/* One record's properties into the columns: 0 done, -1 error. */
static int
take_properties(Growing *out, const FetchNames *names, Py_ssize_t row, const char *raw,
                Py_ssize_t length)
{
    Span message_id = {NULL, -1}, tag = {NULL, -1}, key_text = {NULL, 0};
    Py_ssize_t start = 0;
    while (start < length) {
        const char *separator = memchr(raw + start, PROPERTY_SEPARATOR, length - start);
        Py_ssize_t end = separator ? separator - raw : length;
        if (end > start) {
            const char *name_value = memchr(raw + start, NAME_VALUE_SEPARATOR, end - start);
            Py_ssize_t name_end = name_value ? name_value - raw : end;
            Py_ssize_t value_start = name_value ? name_end + 1 : end;
            Span name = {raw + start, name_end - start};
            Span value = {raw + value_start, end - value_start};
            if (span_is(name, names->message_id_name.data, names->message_id_name.length))
                message_id = value;
            else if (span_is(name, names->tag_name.data, names->tag_name.length))
                tag = value;
            else if (span_is(name, names->keys_name.data, names->keys_name.length))
                key_text = value;
            if (!is_system_name(names, name)) {
                if (growing_append(&out[NAME_DATA], name.data, name.length) < 0 ||
                    growing_end_offset(&out[NAME_OFFSETS], &out[NAME_DATA]) < 0 ||
                    growing_append(&out[VALUE_DATA], value.data, value.length) < 0 ||
                    growing_end_offset(&out[VALUE_OFFSETS], &out[VALUE_DATA]) < 0)
                    return -1;
            }
        }
        start = end + 1;
    }
    if (growing_int32(&out[PROPERTY_OFFSETS], (int32_t)(out[NAME_OFFSETS].length / 4 - 1)) < 0)
        return -1;
    if (growing_bit(&out[MESSAGE_ID_VALIDITY], row, message_id.length >= 0) < 0 ||
        (message_id.length > 0 &&
         growing_append(&out[MESSAGE_ID_DATA], message_id.data, message_id.length) < 0) ||
        growing_end_offset(&out[MESSAGE_ID_OFFSETS], &out[MESSAGE_ID_DATA]) < 0)
        return -1;
    if (growing_bit(&out[TAG_VALIDITY], row, tag.length >= 0) < 0 ||
        (tag.length > 0 && growing_append(&out[TAG_DATA], tag.data, tag.length) < 0) ||
        growing_end_offset(&out[TAG_OFFSETS], &out[TAG_DATA]) < 0)
        return -1;
    Py_ssize_t key_start = 0;
    while (key_start < key_text.length) {
        const char *separator =
            memchr(key_text.data + key_start, names->key_separator, key_text.length - key_start);
        Py_ssize_t key_end = separator ? separator - key_text.data : key_text.length;
        if (key_end > key_start &&
            (growing_append(&out[KEY_DATA], key_text.data + key_start, key_end - key_start) < 0 ||
             growing_end_offset(&out[KEY_OFFSETS], &out[KEY_DATA]) < 0))
            return -1;
        key_start = key_end + 1;
    }
    return growing_int32(&out[KEYS_OFFSETS], (int32_t)(out[KEY_OFFSETS].length / 4 - 1));
}

/* fetch_columns.TIMESTAMP_MS_MIN..MAX: milliseconds whose microseconds fit an int64. */
static int
timestamp_ms_fits(int64_t ms)
{
    return ms >= -(INT64_MAX / 1000) && ms <= INT64_MAX / 1000;
}

/* The walk of fetch_columns_in_python over `buf`: the row count (and next offset in
 * *next_offset), -1 on error, -2 where the twin would raise. Bodies are copied to
 * `bodies`, which has room for `length` bytes (they are fewer). */
static Py_ssize_t
walk_fetch_answer(Growing *out, const FetchNames *names, const unsigned char *buf,
                  Py_ssize_t length, Span topic, long long queue_id, long long end_offset,
                  long long *next_offset, unsigned char *bodies, Py_ssize_t *bodies_length)
{
    Py_ssize_t position = 0, rows = 0;
    while (position < length) {
        const unsigned char *h = buf + position;
        if (length - position < RECORD_HEADER_SIZE ||
            read_uint32(h + OFFSET_MAGIC) != MESSAGE_MAGIC ||
            (int32_t)read_uint32(h + OFFSET_QUEUE_ID) != queue_id)
            return -2;
        int64_t queue_offset = read_int64(h + OFFSET_QUEUE_OFFSET);
        if (queue_offset >= end_offset)
            break;
        Py_ssize_t size = (int32_t)read_uint32(h);
        int32_t body_length = (int32_t)read_uint32(h + OFFSET_BODY_LENGTH);
        Py_ssize_t record_end = position + size;
        Py_ssize_t body_at = position + RECORD_HEADER_SIZE;
        Py_ssize_t topic_at = body_at + body_length;
        if (size < RECORD_MIN_SIZE || size > length - position || body_length < 0 || topic_at + 3 > record_end)
            return -2;
        Py_ssize_t properties_at = topic_at + 1 + buf[topic_at];
        if (properties_at + 2 > record_end)
            return -2;
        Py_ssize_t properties_length = ((Py_ssize_t)buf[properties_at] << 8) | buf[properties_at + 1];
        const unsigned char *raw = buf + properties_at + 2;
        if (properties_at + 2 + properties_length != record_end ||
            !span_is(topic, (const char *)buf + topic_at + 1, buf[topic_at]) ||
            crc32c_of(0, buf + body_at, body_length) != read_uint32(h + OFFSET_BODY_CRC) ||
            !utf8_is_valid(raw, properties_length))
            return -2;
        int64_t born_ms = read_int64(h + OFFSET_BORN_TIMESTAMP);
        int64_t store_ms = read_int64(h + OFFSET_STORE_TIMESTAMP);
        if (!timestamp_ms_fits(born_ms) || !timestamp_ms_fits(store_ms))
            return -2;
        if (take_properties(out, names, rows, (const char *)raw, properties_length) < 0 ||
            growing_int32(&out[BODY_OFFSETS], (int32_t)(*bodies_length + body_length)) < 0 ||
            growing_int64(&out[QUEUE_OFFSETS], queue_offset) < 0 ||
            growing_int64(&out[BORN_US], born_ms * 1000) < 0 ||
            growing_int64(&out[STORE_US], store_ms * 1000) < 0)
            return -1;
        memcpy(bodies + *bodies_length, buf + body_at, body_length);
        *bodies_length += body_length;
        *next_offset = queue_offset + 1;
        rows++;
        position = record_end;
    }
    return rows;
}

PyDoc_STRVAR(fetch_columns_doc,
"fetch_columns(records, topic: bytes, queue_id: int, end_offset: int, message_id_name: bytes,\n"
"              tag_name: bytes, keys_name: bytes, key_separator: bytes,\n"
"              system_names: tuple[bytes, ...], body_data: writable buffer) -> tuple | None\n\n"
"ferrymq.spark.fetch_columns.fetch_columns_in_python, its FetchColumns as a tuple in field\n"
"order, given the property names it uses; None where the twin raises CorruptRecord.\n"
"The bodies go to the start of `body_data` (len(records) bytes at least, the caller's\n"
"memory: a fresh allocation per answer would cost a page fault every 4 KiB) and the\n"
"tuple's body_data item is how many bytes they take.");

static PyObject *
fetch_columns(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer records, bodies;
    FetchNames names;
    Span topic, separator;
    long long queue_id, end_offset;
    if (!PyArg_ParseTuple(args, "y*y#LLy#y#y#y#O!w*:fetch_columns", &records, &topic.data,
                          &topic.length, &queue_id, &end_offset, &names.message_id_name.data,
                          &names.message_id_name.length, &names.tag_name.data,
                          &names.tag_name.length, &names.keys_name.data, &names.keys_name.length,
                          &separator.data, &separator.length, &PyTuple_Type, &names.system_names, &bodies))
        return NULL;
    PyObject *result = NULL;
    Growing out[BUFFER_COUNT] = {{NULL, 0}};
    if (separator.length != 1) {
        PyErr_SetString(PyExc_ValueError, "key_separator must be one byte");
        goto done;
    }
    if (bodies.len < records.len) {
        PyErr_SetString(PyExc_ValueError, "body_data is shorter than records");
        goto done;
    }
    names.key_separator = separator.data[0];
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names.system_names); i++) {
        if (!PyBytes_Check(PyTuple_GET_ITEM(names.system_names, i))) {
            PyErr_SetString(PyExc_TypeError, "system_names must hold bytes");
            goto done;
        }
    }
    if (records.len > INT32_MAX) { /* the twin refuses what int32 offsets cannot address */
        result = Py_NewRef(Py_None);
        goto done;
    }
    for (int i = 0; i < BUFFER_COUNT; i++) {
        if (i != BODY_DATA && (out[i].bytes = PyBytes_FromStringAndSize(NULL, 1024)) == NULL)
            goto done;
    }
    /* Every offsets column starts at 0. */
    static const int offset_columns[] = {BODY_OFFSETS, MESSAGE_ID_OFFSETS, TAG_OFFSETS,
                                         KEYS_OFFSETS, KEY_OFFSETS, PROPERTY_OFFSETS,
                                         NAME_OFFSETS, VALUE_OFFSETS};
    for (size_t i = 0; i < sizeof offset_columns / sizeof offset_columns[0]; i++)
        if (growing_int32(&out[offset_columns[i]], 0) < 0)
            goto done;
    long long next_offset = -1;
    Py_ssize_t bodies_length = 0;
    Py_ssize_t rows = walk_fetch_answer(out, &names, records.buf, records.len, topic, queue_id,
                                        end_offset, &next_offset, bodies.buf, &bodies_length);
    if (rows == -1)
        goto done;
    if (rows == -2) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *tuple = PyTuple_New(2 + BUFFER_COUNT);
    if (tuple == NULL)
        goto done;
    PyObject *count_object = PyLong_FromSsize_t(rows);
    PyObject *next_object = PyLong_FromLongLong(next_offset);
    PyTuple_SET_ITEM(tuple, 0, count_object);
    PyTuple_SET_ITEM(tuple, 1, next_object);
    if (count_object == NULL || next_object == NULL) {
        Py_DECREF(tuple);
        goto done;
    }
    PyObject *bodies_used = PyLong_FromSsize_t(bodies_length);
    if (bodies_used == NULL) {
        Py_DECREF(tuple);
        goto done;
    }
    PyTuple_SET_ITEM(tuple, 2 + BODY_DATA, bodies_used);
    for (int i = 0; i < BUFFER_COUNT; i++) {
        if (i == BODY_DATA)
            continue;
        if (_PyBytes_Resize(&out[i].bytes, out[i].length) < 0) {
            Py_DECREF(tuple);
            goto done;
        }
        PyTuple_SET_ITEM(tuple, 2 + i, out[i].bytes); /* the tuple takes the reference */
        out[i].bytes = NULL;
    }
    result = tuple;
done:
    for (int i = 0; i < BUFFER_COUNT; i++)
        Py_XDECREF(out[i].bytes);
    PyBuffer_Release(&bodies);
    PyBuffer_Release(&records);
    return result;
}

PyDoc_STRVAR(chunk_is_whole_doc,
"chunk_is_whole(data: bytes-like) -> bool\n\n"
"Whether ferrymq.codec.commitlog_record.chunk_problem_in_python finds nothing wrong with\n"
"`data` (a run of whole records, a blank one only last); where it is False, the twin says\n"
"what is wrong.");

static PyObject *
chunk_is_whole(PyObject *Py_UNUSED(module), PyObject *data)
{
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int whole = records_are_whole(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyBool_FromLong(whole);
}


/* ---- one bytes field of a protobuf message, around protobuf (ferrymq/codec/bytes_field.py) */

/* A varint at *at: its value (saturated: an overflow marks it huge) and the position after
 * it; -1 when it is cut short or longer than ten bytes, as the twin's _read_varint. */
static int
read_varint(const unsigned char *buf, Py_ssize_t size, Py_ssize_t *at, uint64_t *value,
            int *huge)
{
    uint64_t result = 0;
    *huge = 0;
    for (int shift = 0;; shift += 7) {
        if (*at >= size || shift > 63)
            return -1;
        uint64_t byte = buf[(*at)++];
        uint64_t bits = byte & 0x7F;
        if ((bits << shift) >> shift != bits)
            *huge = 1; /* bits past 64: larger than any field number or length can be */
        else
            result |= bits << shift;
        if (byte < 0x80)
            break;
    }
    *value = result;
    return 0;
}

/* The fields of `buf` in order: copies every one but the bytes field numbered `field` to
 * `out` (when given) and counts their bytes in *kept; *start, *end: that field's value (the
 * last given). -1 with the twin's ValueError when `buf` is no sequence of fields. */
static int
walk_fields(const unsigned char *buf, Py_ssize_t size, long long field, unsigned char *out,
            Py_ssize_t *kept, Py_ssize_t *start, Py_ssize_t *end)
{
    Py_ssize_t at = 0;
    *kept = *start = *end = 0;
    while (at < size) {
        Py_ssize_t field_at = at, value_end;
        uint64_t tag, value;
        int tag_huge, huge;
        if (read_varint(buf, size, &at, &tag, &tag_huge) < 0)
            goto truncated;
        long long wire_type = (long long)(tag & 7);
        if (wire_type == 0) {
            if (read_varint(buf, size, &at, &value, &huge) < 0)
                goto truncated;
            value_end = at;
        } else if (wire_type == 1 || wire_type == 5) {
            value_end = at + (wire_type == 1 ? 8 : 4);
        } else if (wire_type == 2) {
            if (read_varint(buf, size, &at, &value, &huge) < 0)
                goto truncated;
            value_end = huge || value > (uint64_t)(size - at) ? size + 1 : at + (Py_ssize_t)value;
        } else {
            PyErr_Format(PyExc_ValueError, "wire type %lld in a protobuf message", wire_type);
            return -1;
        }
        if (value_end > size) {
            PyErr_SetString(PyExc_ValueError, "a field runs past the end of the message");
            return -1;
        }
        if (!tag_huge && wire_type == 2 && field >= 0 && (tag >> 3) == (uint64_t)field) {
            *start = at;
            *end = value_end;
        } else {
            if (out != NULL)
                memcpy(out + *kept, buf + field_at, value_end - field_at);
            *kept += value_end - field_at;
        }
        at = value_end;
    }
    return 0;
truncated:
    PyErr_SetString(PyExc_ValueError, "truncated or overlong varint");
    return -1;
}

PyDoc_STRVAR(split_field_doc,
"split_field(body: bytes-like, field: int) -> (bytes, int, int)\n\n"
"ferrymq.codec.bytes_field.split_in_python: the encoding of every field but the bytes\n"
"field numbered `field`, and where that field's value lies (start, end; the last given;\n"
"0, 0 when none is); ValueError when `body` is not a sequence of protobuf fields.");

static PyObject *
split_field(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    long long field;
    if (!PyArg_ParseTuple(args, "y*L:split_field", &view, &field))
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t kept, start, end;
    PyObject *head = NULL, *result = NULL;
    /* Twice over the few fields: once to check them and size the head, once to copy it. */
    if (walk_fields(buf, view.len, field, NULL, &kept, &start, &end) < 0)
        goto done;
    if ((head = PyBytes_FromStringAndSize(NULL, kept)) == NULL)
        goto done;
    if (kept > 0)
        walk_fields(buf, view.len, field, (unsigned char *)PyBytes_AS_STRING(head), &kept,
                    &start, &end);
    result = Py_BuildValue("(Onn)", head, start, end);
done:
    Py_XDECREF(head);
    PyBuffer_Release(&view);
    return result;
}

/* ---- a FERRY_PRODUCE request's common case, read in one pass (stage 3) ------------------
 *
 * ProduceScanner.produce_run reads a FERRY_PRODUCE body (ferrymq.ProduceRequest: topic 1,
 * queue_id 2, atomic 3, count 4, records 5) and, when its topic is one the produce lane
 * holds an entry for (the snapshot `topics`: name -> (TOPICLENGTH + TOPIC, queue count,
 * message type text), written by node/services/send.py from its own rules), its queue exists
 * there and every record passes (spans_of), gives the request's PreparedRun. Anything else
 * (a field it does not expect, a field given twice, a varint out of an int32's range, a
 * topic that is not UTF-8 or not in `topics`, a count out of 1..max_records, a record that
 * does not pass) is None, and the request is read the usual way. Its twin is
 * node.remoting.ferry_data.produce_run_in_python, which it must equal wherever it answers. */

/* An int32 field's varint at *at (five bytes at most, no more than INT32_MAX): 0, else -1. */
static int
read_small_varint(const unsigned char *buf, Py_ssize_t size, Py_ssize_t *at, long long *value)
{
    uint64_t result = 0;
    for (int i = 0; i < 5; i++) {
        if (*at >= size)
            return -1;
        uint64_t byte = buf[(*at)++];
        result |= (byte & 0x7F) << (7 * i);
        if (byte < 0x80) {
            if (result > 0x7FFFFFFF)
                return -1;
            *value = (long long)result;
            return 0;
        }
    }
    return -1;
}

static PyObject *
scanner_produce_run(ProduceScanner *self, PyObject *args)
{
    PyObject *body, *born_host, *topics, *run_type;
    Py_ssize_t body_limit, properties_max, max_records;
    if (!PyArg_ParseTuple(args, "OO!O!nnnO:produce_run", &body, &PyBytes_Type, &born_host,
                          &PyDict_Type, &topics, &body_limit, &properties_max, &max_records,
                          &run_type))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(body, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t size = view.len, at = 0;
    Py_ssize_t topic_at = 0, topic_length = 0, records_at = 0, records_length = 0;
    long long queue_id = 0, count = 0, flag = 0;
    unsigned seen = 0;
    PyObject *result = NULL, *topic = NULL, *spans = NULL, *records = NULL, *whole = NULL;
    while (at < size) {
        long long tag;
        if (read_small_varint(buf, size, &at, &tag) < 0)
            goto decline;
        long long number = tag >> 3, wire_type = tag & 7;
        if (number < 1 || number > 5 || (seen & (1u << number)))
            goto decline; /* a field this reader does not expect, or one given twice */
        seen |= 1u << number;
        if (number == 1 || number == 5) {
            long long length;
            if (wire_type != 2 || read_small_varint(buf, size, &at, &length) < 0 ||
                length > size - at)
                goto decline;
            if (number == 1)
                topic_at = at, topic_length = (Py_ssize_t)length;
            else
                records_at = at, records_length = (Py_ssize_t)length;
            at += (Py_ssize_t)length;
        } else {
            long long *field = number == 2 ? &queue_id : number == 3 ? &flag : &count;
            if (wire_type != 0 || read_small_varint(buf, size, &at, field) < 0)
                goto decline;
        }
    }
    if (count < 1 || count > max_records || PyBytes_GET_SIZE(born_host) != 8)
        goto decline;
    topic = PyUnicode_DecodeUTF8((const char *)buf + topic_at, topic_length, NULL);
    if (topic == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
            goto done;
        PyErr_Clear();
        goto decline;
    }
    PyObject *entry = PyDict_GetItemWithError(topics, topic); /* borrowed */
    if (entry == NULL) {
        if (PyErr_Occurred())
            goto done;
        goto decline;
    }
    PyObject *prefix, *type_text;
    long long queue_count;
    if (!PyArg_ParseTuple(entry, "O!LU:a lane topic", &PyBytes_Type, &prefix, &queue_count,
                          &type_text))
        goto done;
    if (queue_id >= queue_count)
        goto decline;
    spans = spans_of(self, buf + records_at, records_length, (Py_ssize_t)count, body_limit,
                     type_text, properties_max);
    if (spans == NULL)
        goto done;
    if (spans == Py_None)
        goto decline;
    if ((whole = PyMemoryView_FromObject(body)) == NULL ||
        (records = PySequence_GetSlice(whole, records_at, records_at + records_length)) == NULL)
        goto done;
    Py_ssize_t run_size =
        records_length + (Py_ssize_t)count * (RECORD_HEADER_SIZE + PyBytes_GET_SIZE(prefix) + 2 -
                                              PRODUCE_HEAD_SIZE);
    result = PyObject_CallFunction(run_type, "OOLOOOLn", topic, prefix, queue_id, born_host,
                                   records, spans, count, run_size);
    goto done;
decline:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(topic);
    Py_XDECREF(spans);
    Py_XDECREF(records);
    Py_XDECREF(whole);
    PyBuffer_Release(&view);
    return result;
}

/* ---- the remoting frame's binary header (ferrymq/codec/remoting.py) ---------------- */

#define BINARY_FIXED_SIZE 17 /* code int16, language uint8, version int16, opaque int32,
                                flag int32, remark length int32 */
#define HEADER_LENGTH_MASK 0xFFFFFF
#define SERIALIZE_ROCKETMQ 1

static int32_t
read_int32(const unsigned char *p)
{
    return (int32_t)read_uint32(p);
}

static int16_t
read_int16(const unsigned char *p)
{
    return (int16_t)(((uint16_t)p[0] << 8) | p[1]);
}

static void
put_be(unsigned char *p, uint64_t value, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--) {
        p[i] = (unsigned char)(value & 0xFF);
        value >>= 8;
    }
}

/* The UTF-8 text of buf[at:at + n] as str, as bytes.decode() makes it; NULL with no error
 * set when it is not UTF-8 (the twin says so). */
static PyObject *
utf8_text(const unsigned char *buf, Py_ssize_t at, Py_ssize_t n)
{
    PyObject *text = PyUnicode_DecodeUTF8((const char *)buf + at, n, NULL);
    if (text == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
        PyErr_Clear();
    return text;
}

PyDoc_STRVAR(read_binary_header_doc,
"read_binary_header(header: bytes-like, languages: tuple[str, ...], other: str)\n"
"    -> (code, opaque, flag, remark, ext_fields, language, version) | None\n\n"
"ferrymq.codec.remoting._from_binary_in_python's fields of a binary header; None for any\n"
"header the twin refuses (it then says why).");

static PyObject *
read_binary_header(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    PyObject *languages, *other;
    if (!PyArg_ParseTuple(args, "y*O!U:read_binary_header", &view, &PyTuple_Type, &languages,
                          &other))
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t size = view.len, position = BINARY_FIXED_SIZE;
    PyObject *remark = NULL, *fields = NULL, *result = NULL;
    if (size < BINARY_FIXED_SIZE)
        goto decline;
    int32_t remark_length = read_int32(buf + 13);
    if (remark_length < 0 || remark_length > size - position - 4)
        goto decline;
    if (remark_length == 0) {
        remark = Py_NewRef(Py_None);
    } else if ((remark = utf8_text(buf, position, remark_length)) == NULL) {
        goto failed;
    }
    position += remark_length;
    if (read_int32(buf + position) != size - position - 4)
        goto decline;
    position += 4;
    if ((fields = PyDict_New()) == NULL)
        goto failed;
    while (position < size) {
        if (size - position < 2)
            goto decline;
        Py_ssize_t key_length = read_int16(buf + position);
        position += 2;
        if (key_length <= 0 || key_length + 4 > size - position)
            goto decline;
        PyObject *key = utf8_text(buf, position, key_length);
        if (key == NULL)
            goto failed;
        position += key_length;
        Py_ssize_t value_length = read_int32(buf + position);
        position += 4;
        if (value_length < 0 || value_length > size - position) {
            Py_DECREF(key);
            goto decline;
        }
        PyObject *value = utf8_text(buf, position, value_length);
        if (value == NULL) {
            Py_DECREF(key);
            goto failed;
        }
        position += value_length;
        int set = PyDict_SetItem(fields, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (set < 0)
            goto failed;
    }
    Py_ssize_t ordinal = buf[2];
    PyObject *language = ordinal < PyTuple_GET_SIZE(languages)
                             ? PyTuple_GET_ITEM(languages, ordinal)
                             : other;
    result = Py_BuildValue("(iiiOOOi)", (int)read_int16(buf), (int)read_int32(buf + 5),
                           (int)read_int32(buf + 9), remark, fields, language,
                           (int)read_int16(buf + 3));
    goto done;
failed:
    if (PyErr_Occurred())
        goto done; /* memory: raised as it is */
decline:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(remark);
    Py_XDECREF(fields);
    PyBuffer_Release(&view);
    return result;
}

/* An int object within [low, high] as *out; 0 (nothing raised) for anything else. */
static int
int_within(PyObject *object, long long low, long long high, long long *out)
{
    int overflow;
    if (!PyLong_Check(object))
        return 0;
    long long value = PyLong_AsLongLongAndOverflow(object, &overflow);
    if (overflow || (value == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *out = value;
    return low <= value && value <= high;
}

PyDoc_STRVAR(binary_head_doc,
"binary_head(code, language_ordinal, version, opaque, flag, remark, ext_fields, body_length)\n"
"    -> bytes | None\n\n"
"ferrymq.codec.remoting.encode_head_in_python of a ROCKETMQ command: the frame's total\n"
"length, its mark and its binary header. None for anything the twin treats otherwise\n"
"(a field out of its range, an ext field value that is not a str, text that is not\n"
"UTF-8, a header past 24 bits): the twin then converts it or says what is wrong.");

static PyObject *
binary_head(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *code_object, *version_object, *opaque_object, *flag_object, *remark, *fields;
    int language;
    Py_ssize_t body_length;
    if (!PyArg_ParseTuple(args, "OiOOOOOn:binary_head", &code_object, &language,
                          &version_object, &opaque_object, &flag_object, &remark, &fields,
                          &body_length))
        return NULL;
    long long code, version, opaque, flag;
    if (!int_within(code_object, -32768, 32767, &code) ||
        !int_within(version_object, -32768, 32767, &version) ||
        !int_within(opaque_object, INT32_MIN, INT32_MAX, &opaque) ||
        !int_within(flag_object, INT32_MIN, INT32_MAX, &flag) || language < 0 ||
        language > 255 || body_length < 0 || !PyDict_CheckExact(fields))
        Py_RETURN_NONE;
    const char *remark_text = NULL;
    Py_ssize_t remark_length = 0;
    if (remark != Py_None) {
        if (!PyUnicode_CheckExact(remark))
            Py_RETURN_NONE;
        if ((remark_text = PyUnicode_AsUTF8AndSize(remark, &remark_length)) == NULL)
            goto not_utf8;
    }
    /* First pass: every name and value is a str that encodes, and the header's size. */
    Py_ssize_t fields_length = 0, at = 0;
    PyObject *key, *value;
    while (PyDict_Next(fields, &at, &key, &value)) {
        Py_ssize_t key_length, value_length;
        if (!PyUnicode_CheckExact(key) || !PyUnicode_CheckExact(value))
            Py_RETURN_NONE;
        if (PyUnicode_AsUTF8AndSize(key, &key_length) == NULL ||
            PyUnicode_AsUTF8AndSize(value, &value_length) == NULL)
            goto not_utf8;
        if (key_length > 32767 || value_length > INT32_MAX)
            Py_RETURN_NONE;
        fields_length += 6 + key_length + value_length;
        if (fields_length > HEADER_LENGTH_MASK)
            Py_RETURN_NONE;
    }
    Py_ssize_t length = BINARY_FIXED_SIZE + remark_length + 4 + fields_length;
    if (length > HEADER_LENGTH_MASK || body_length > (Py_ssize_t)INT32_MAX - 4 - length)
        Py_RETURN_NONE;
    PyObject *head = PyBytes_FromStringAndSize(NULL, 8 + length);
    if (head == NULL)
        return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(head);
    put_be(p, (uint64_t)(4 + length + body_length), 4);
    put_be(p + 4, (uint64_t)SERIALIZE_ROCKETMQ << 24 | (uint64_t)length, 4);
    p += 8;
    put_be(p, (uint64_t)code, 2);
    p[2] = (unsigned char)language;
    put_be(p + 3, (uint64_t)version, 2);
    put_be(p + 5, (uint64_t)opaque, 4);
    put_be(p + 9, (uint64_t)flag, 4);
    put_be(p + 13, (uint64_t)remark_length, 4);
    p += BINARY_FIXED_SIZE;
    if (remark_length > 0)
        memcpy(p, remark_text, remark_length);
    p += remark_length;
    put_be(p, (uint64_t)fields_length, 4);
    p += 4;
    at = 0;
    while (PyDict_Next(fields, &at, &key, &value)) { /* nothing ran since the first pass */
        Py_ssize_t key_length, value_length;
        const char *key_text = PyUnicode_AsUTF8AndSize(key, &key_length);
        const char *value_text = PyUnicode_AsUTF8AndSize(value, &value_length);
        put_be(p, (uint64_t)key_length, 2);
        memcpy(p + 2, key_text, key_length);
        p += 2 + key_length;
        put_be(p, (uint64_t)value_length, 4);
        memcpy(p + 4, value_text, value_length);
        p += 4 + value_length;
    }
    return head;
not_utf8:
    if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
        return NULL;
    PyErr_Clear(); /* a lone surrogate: the twin raises its UnicodeEncodeError */
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"fetch_columns", fetch_columns, METH_VARARGS, fetch_columns_doc},
    {"decode_properties", decode_properties, METH_O, decode_properties_doc},
    {"chunk_is_whole", chunk_is_whole, METH_O, chunk_is_whole_doc},
    {"split_field", split_field, METH_VARARGS, split_field_doc},
    {"read_binary_header", read_binary_header, METH_VARARGS, read_binary_header_doc},
    {"binary_head", binary_head, METH_VARARGS, binary_head_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ferrymq.codec._speedups",
    .m_doc = "The wire format's per-record loops in C; each has a Python twin (see the source).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    crc32c_choose();
    if (PyType_Ready(&ProduceScannerType) < 0 || PyType_Ready(&RecordReaderType) < 0 ||
        PyType_Ready(&RecordEncoderType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL)
        return NULL;
    if (PyModule_AddIntConstant(module, "PRODUCE_HEAD_SIZE", PRODUCE_HEAD_SIZE) < 0 ||
        PyModule_AddIntConstant(module, "PRODUCE_SPAN_SIZE", PRODUCE_SPAN_SIZE) < 0 ||
        PyModule_AddIntConstant(module, "RECORD_HEADER_SIZE", RECORD_HEADER_SIZE) < 0 ||
        PyModule_AddIntConstant(module, "RECORD_MIN_SIZE", RECORD_MIN_SIZE) < 0 ||
        PyModule_AddIntConstant(module, "MESSAGE_MAGIC", MESSAGE_MAGIC) < 0 ||
        PyModule_AddIntConstant(module, "BLANK_MAGIC", BLANK_MAGIC) < 0 ||
        PyModule_AddIntConstant(module, "OFFSET_BODY_CRC", OFFSET_BODY_CRC) < 0 ||
        PyModule_AddIntConstant(module, "OFFSET_QUEUE_ID", OFFSET_QUEUE_ID) < 0 ||
        PyModule_AddIntConstant(module, "OFFSET_QUEUE_OFFSET", OFFSET_QUEUE_OFFSET) < 0 ||
        PyModule_AddIntConstant(module, "OFFSET_BORN_TIMESTAMP", OFFSET_BORN_TIMESTAMP) < 0 ||
        PyModule_AddIntConstant(module, "OFFSET_STORE_TIMESTAMP", OFFSET_STORE_TIMESTAMP) < 0 ||
        PyModule_AddIntConstant(module, "OFFSET_BODY_LENGTH", OFFSET_BODY_LENGTH) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(&ProduceScannerType);
    if (PyModule_AddObject(module, "ProduceScanner", (PyObject *)&ProduceScannerType) < 0) {
        Py_DECREF(&ProduceScannerType);
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(&RecordEncoderType);
    if (PyModule_AddObject(module, "RecordEncoder", (PyObject *)&RecordEncoderType) < 0) {
        Py_DECREF(&RecordEncoderType);
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(&RecordReaderType);
    if (PyModule_AddObject(module, "RecordReader", (PyObject *)&RecordReaderType) < 0) {
        Py_DECREF(&RecordReaderType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
