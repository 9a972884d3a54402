/* store._speedups: the store's per-message loops of the put and replay paths, in C.
 *
 * Each function here has a Python twin that stays the specification (named in its
 * docstring); tests/store/test_speedups.py checks them against each other on generated
 * input.
 * A C function either returns exactly what its twin returns or, where it declines
 * (a record its twin would refuse), says so and lets the twin produce the precise error:
 * refusals never need to be fast, and this way they are written once.
 *
 * Thread-safety: every function runs with the GIL held and keeps no state between calls.
 */
#include "../ferrymq/codec/_crc32c.h"
#include "../ferrymq/codec/_properties.h"
#include "../ferrymq/codec/_record_layout.h"
#include <limits.h>
#include <string.h>

PyDoc_STRVAR(crc32c_doc,
"crc32c(data: bytes-like) -> int\n\nThe crc32c package's crc32c(data): BODYCRC's checksum.");

static PyObject *
crc32c_function(PyObject *Py_UNUSED(module), PyObject *data)
{
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t crc = crc32c_of(0, view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

/* ---- CommitLog records (ferrymq/codec/commitlog_record.py has the layout) ---------- */

#define NO_QUEUE_OFFSET_BIT 0x4 /* store.commitlog.NO_QUEUE_OFFSET_BIT */

static PyObject *s_message, *s_tail, *s_size, *s_tag_code, *s_topic, *s_body,
    *s_queue_id, *s_flag, *s_sys_flag, *s_born_timestamp_ms, *s_born_host, *s_reconsume_times,
    *s_prepared_transaction_offset, *s_properties, *s_keys, *s_records, *s_spans,
    *s_topic_prefix, *s_count;

#define PRODUCE_SPAN_SIZE 18 /* ferrymq.codec.produce_records.PRODUCE_SPAN */
#define INDEX_KEY_SIZE 24    /* store.dispatch_request.INDEX_KEY: little-endian physical
                                int64, size int32, store ms int64, key hash uint32 */

/* `bytes` little-endian bytes at p (a produce span's fields). */
static uint64_t
read_le(const unsigned char *p, int bytes)
{
    uint64_t value = 0;
    for (int i = bytes - 1; i >= 0; i--)
        value = (value << 8) | p[i];
    return value;
}

static void
put32(unsigned char *p, uint32_t v)
{
    p[0] = v >> 24;
    p[1] = v >> 16;
    p[2] = v >> 8;
    p[3] = v;
}

static void
put64(unsigned char *p, uint64_t v)
{
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

/* An int attribute of `object` that must fit `bits` signed bits, else OverflowError
 * (struct.pack's refusal in the twin). */
static int
int_attribute(PyObject *object, PyObject *name, int bits, long long *out)
{
    PyObject *value = PyObject_GetAttr(object, name);
    if (value == NULL)
        return -1;
    long long v = PyLong_AsLongLong(value);
    Py_DECREF(value);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (bits == 32 && (v < INT32_MIN || v > INT32_MAX)) {
        PyErr_Format(PyExc_OverflowError, "%U %lld does not fit 32 bits", name, v);
        return -1;
    }
    *out = v;
    return 0;
}

/* A bytes attribute of exactly `length` bytes (length < 0: any), borrowed into *out. */
static PyObject *
bytes_attribute(PyObject *object, PyObject *name, Py_ssize_t length)
{
    PyObject *value = PyObject_GetAttr(object, name);
    if (value == NULL)
        return NULL;
    if (!PyBytes_Check(value) || (length >= 0 && PyBytes_GET_SIZE(value) != length)) {
        PyErr_Format(PyExc_ValueError, "%U must be bytes%s", name,
                     length >= 0 ? " of its field's size" : "");
        Py_DECREF(value);
        return NULL;
    }
    return value;
}

PyDoc_STRVAR(encode_batch_doc,
"encode_batch(batch, position, store_timestamp_ms, store_host, queue_offsets, appended_type,\n"
"run_type) -> (bytes, list)\n\n"
"store.commitlog.encode_batch_in_python: the records of `batch` (PreparedMessage, or\n"
"run_type: PreparedRun) laid out from `position`, each taking its next queue offset from\n"
"`queue_offsets`, and where each went (appended_type(physical offset, queue offset, size,\n"
"store_host)).");

/* The fields of one record's header that vary by record. */
typedef struct {
    long long size, queue_id, flag, queue_offset, physical, sys_flag, born_ms, reconsume,
        prepared_offset;
    const char *born_host; /* 8 bytes */
    Py_ssize_t body_length;
} RecordHeader;

static void
write_header(unsigned char *h, const RecordHeader *r, const unsigned char *body,
             long long store_timestamp_ms, const char *store_host)
{
    put32(h, (uint32_t)r->size);
    put32(h + 4, MESSAGE_MAGIC);
    put32(h + 8, crc32c_of(0, body, r->body_length));
    put32(h + 12, (uint32_t)r->queue_id);
    put32(h + 16, (uint32_t)r->flag);
    put64(h + 20, (uint64_t)r->queue_offset);
    put64(h + 28, (uint64_t)r->physical);
    put32(h + 36, (uint32_t)r->sys_flag);
    put64(h + 40, (uint64_t)r->born_ms);
    memcpy(h + 48, r->born_host, 8);
    put64(h + 56, (uint64_t)store_timestamp_ms);
    memcpy(h + 64, store_host, 8);
    put32(h + 72, (uint32_t)r->reconsume);
    put64(h + 76, (uint64_t)r->prepared_offset);
    put32(h + 84, (uint32_t)r->body_length);
    memcpy(h + RECORD_HEADER_SIZE, body, r->body_length);
}

/* appended_type(physical offset, queue offset, size, store_host) into appended[index]. */
static int
place(PyObject *appended, Py_ssize_t index, PyObject *appended_type, const RecordHeader *r,
      PyObject *store_host)
{
    PyObject *call[4] = {PyLong_FromLongLong(r->physical), PyLong_FromLongLong(r->queue_offset),
                         PyLong_FromLongLong(r->size), store_host};
    PyObject *placed = NULL;
    Py_INCREF(store_host);
    if (call[0] != NULL && call[1] != NULL && call[2] != NULL)
        placed = PyObject_Vectorcall(appended_type, call, 4, NULL);
    for (int a = 0; a < 4; a++)
        Py_XDECREF(call[a]);
    if (placed == NULL)
        return -1;
    PyList_SET_ITEM(appended, index, placed);
    return 0;
}

/* The next queue offset of (topic, queue_id) in `queue_offsets`, which moves `taken` on. */
static int
take_queue_offsets(PyObject *queue_offsets, PyObject *topic, long long queue_id,
                   long long taken, long long *first)
{
    PyObject *key = Py_BuildValue("(OL)", topic, queue_id);
    if (key == NULL)
        return -1;
    *first = 0;
    PyObject *next = PyDict_GetItemWithError(queue_offsets, key);
    if ((next == NULL && PyErr_Occurred()) ||
        (next != NULL && (*first = PyLong_AsLongLong(next)) == -1 && PyErr_Occurred())) {
        Py_DECREF(key);
        return -1;
    }
    PyObject *after = PyLong_FromLongLong(*first + taken);
    int failed = after == NULL || PyDict_SetItem(queue_offsets, key, after) < 0;
    Py_XDECREF(after);
    Py_DECREF(key);
    return failed ? -1 : 0;
}

static int
sizes_disagree(void)
{
    PyErr_SetString(PyExc_AssertionError, "encoded sizes disagree with the layout");
    return -1;
}

/* One PreparedRun's records at out + *written; *index counts records placed. */
static int
encode_run(PyObject *run, unsigned char *out, Py_ssize_t total, Py_ssize_t *written,
           Py_ssize_t *index, long long position, long long store_timestamp_ms,
           PyObject *store_host, PyObject *queue_offsets, PyObject *appended,
           PyObject *appended_type)
{
    PyObject *records = NULL, *spans = NULL, *prefix = NULL, *born_host = NULL, *topic = NULL;
    Py_buffer view = {.obj = NULL}; /* the records: bytes, or a view of a request's frame */
    long long count, queue_id, first;
    int status = -1;
    if ((records = PyObject_GetAttr(run, s_records)) == NULL ||
        PyObject_GetBuffer(records, &view, PyBUF_SIMPLE) < 0 ||
        (spans = bytes_attribute(run, s_spans, -1)) == NULL ||
        (prefix = bytes_attribute(run, s_topic_prefix, -1)) == NULL ||
        (born_host = bytes_attribute(run, s_born_host, 8)) == NULL ||
        (topic = PyObject_GetAttr(run, s_topic)) == NULL ||
        int_attribute(run, s_count, 32, &count) < 0 ||
        int_attribute(run, s_queue_id, 32, &queue_id) < 0)
        goto done;
    if (count < 0 || PyBytes_GET_SIZE(spans) != count * PRODUCE_SPAN_SIZE) {
        PyErr_SetString(PyExc_ValueError, "a run's spans do not match its count");
        goto done;
    }
    if (count == 0) { /* takes no queue offset, as its twin */
        status = 0;
        goto done;
    }
    if (take_queue_offsets(queue_offsets, topic, queue_id, count, &first) < 0)
        goto done;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t length = view.len;
    const unsigned char *span = (const unsigned char *)PyBytes_AS_STRING(spans);
    Py_ssize_t prefix_length = PyBytes_GET_SIZE(prefix);
    RecordHeader r = {.queue_id = queue_id, .born_host = PyBytes_AS_STRING(born_host)};
    for (long long i = 0; i < count; i++, span += PRODUCE_SPAN_SIZE) {
        Py_ssize_t body_at = (Py_ssize_t)read_le(span, 4);
        Py_ssize_t properties_length = (Py_ssize_t)read_le(span + 8, 2);
        r.body_length = (Py_ssize_t)read_le(span + 4, 4);
        r.born_ms = (long long)read_le(span + 10, 8);
        if (body_at > length || length - body_at < r.body_length + properties_length) {
            PyErr_SetString(PyExc_ValueError, "a run's span lies outside its records");
            goto done;
        }
        r.size = RECORD_HEADER_SIZE + r.body_length + prefix_length + 2 + properties_length;
        r.queue_offset = first + i;
        r.physical = position + *written;
        if (*written + r.size > total) {
            sizes_disagree();
            goto done;
        }
        unsigned char *h = out + *written;
        write_header(h, &r, buf + body_at, store_timestamp_ms, PyBytes_AS_STRING(store_host));
        unsigned char *t = h + RECORD_HEADER_SIZE + r.body_length;
        memcpy(t, PyBytes_AS_STRING(prefix), prefix_length);
        t[prefix_length] = (unsigned char)(properties_length >> 8);
        t[prefix_length + 1] = (unsigned char)properties_length;
        memcpy(t + prefix_length + 2, buf + body_at + r.body_length, properties_length);
        *written += r.size;
        if (place(appended, (*index)++, appended_type, &r, store_host) < 0)
            goto done;
    }
    status = 0;
done:
    if (view.obj != NULL)
        PyBuffer_Release(&view);
    Py_XDECREF(records);
    Py_XDECREF(spans);
    Py_XDECREF(prefix);
    Py_XDECREF(born_host);
    Py_XDECREF(topic);
    return status;
}

/* One PreparedMessage's record at out + *written. */
static int
encode_prepared(PyObject *prepared, unsigned char *out, Py_ssize_t total, Py_ssize_t *written,
                Py_ssize_t *index, long long position, long long store_timestamp_ms,
                PyObject *store_host, PyObject *queue_offsets, PyObject *appended,
                PyObject *appended_type)
{
    PyObject *message = NULL, *topic = NULL, *body = NULL, *tail = NULL, *born_host = NULL;
    RecordHeader r = {0};
    int status = -1;
    if ((message = PyObject_GetAttr(prepared, s_message)) == NULL ||
        int_attribute(prepared, s_size, 32, &r.size) < 0 ||
        (tail = bytes_attribute(prepared, s_tail, -1)) == NULL ||
        (body = bytes_attribute(message, s_body, -1)) == NULL ||
        (born_host = bytes_attribute(message, s_born_host, 8)) == NULL ||
        (topic = PyObject_GetAttr(message, s_topic)) == NULL ||
        int_attribute(message, s_queue_id, 32, &r.queue_id) < 0 ||
        int_attribute(message, s_flag, 32, &r.flag) < 0 ||
        int_attribute(message, s_sys_flag, 32, &r.sys_flag) < 0 ||
        int_attribute(message, s_born_timestamp_ms, 64, &r.born_ms) < 0 ||
        int_attribute(message, s_reconsume_times, 32, &r.reconsume) < 0 ||
        int_attribute(message, s_prepared_transaction_offset, 64, &r.prepared_offset) < 0)
        goto done;
    r.body_length = PyBytes_GET_SIZE(body);
    Py_ssize_t tail_length = PyBytes_GET_SIZE(tail);
    if (r.size != RECORD_HEADER_SIZE + r.body_length + tail_length || *written + r.size > total) {
        sizes_disagree();
        goto done;
    }
    if (!(r.sys_flag & NO_QUEUE_OFFSET_BIT) &&
        take_queue_offsets(queue_offsets, topic, r.queue_id, 1, &r.queue_offset) < 0)
        goto done;
    r.physical = position + *written;
    r.born_host = PyBytes_AS_STRING(born_host);
    unsigned char *h = out + *written;
    write_header(h, &r, (const unsigned char *)PyBytes_AS_STRING(body), store_timestamp_ms,
                 PyBytes_AS_STRING(store_host));
    memcpy(h + RECORD_HEADER_SIZE + r.body_length, PyBytes_AS_STRING(tail), tail_length);
    *written += r.size;
    if (place(appended, (*index)++, appended_type, &r, store_host) < 0)
        goto done;
    status = 0;
done:
    Py_XDECREF(message);
    Py_XDECREF(topic);
    Py_XDECREF(body);
    Py_XDECREF(tail);
    Py_XDECREF(born_host);
    return status;
}

static PyObject *
encode_batch(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *batch, *store_host, *queue_offsets, *appended_type, *run_type;
    long long position, store_timestamp_ms;
    if (!PyArg_ParseTuple(args, "O!LLO!O!OO:encode_batch", &PyList_Type, &batch, &position,
                          &store_timestamp_ms, &PyBytes_Type, &store_host, &PyDict_Type,
                          &queue_offsets, &appended_type, &run_type))
        return NULL;
    if (PyBytes_GET_SIZE(store_host) != 8) {
        PyErr_SetString(PyExc_ValueError, "store_host must be 8 bytes");
        return NULL;
    }
    Py_ssize_t items = PyList_GET_SIZE(batch);
    Py_ssize_t total = 0, records = 0;
    for (Py_ssize_t i = 0; i < items; i++) {
        PyObject *item = PyList_GET_ITEM(batch, i);
        long long size, count = 1;
        if (int_attribute(item, s_size, 64, &size) < 0 ||
            ((PyObject *)Py_TYPE(item) == run_type && int_attribute(item, s_count, 32, &count) < 0))
            return NULL;
        if (size < 0 || count < 0 || size > PY_SSIZE_T_MAX - total) {
            PyErr_SetString(PyExc_ValueError, "a batch item's size or count is out of range");
            return NULL;
        }
        total += (Py_ssize_t)size;
        records += (Py_ssize_t)count;
    }
    PyObject *data = PyBytes_FromStringAndSize(NULL, total);
    PyObject *appended = PyList_New(records);
    if (data == NULL || appended == NULL)
        goto fail;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t written = 0, index = 0;
    for (Py_ssize_t i = 0; i < items; i++) {
        PyObject *item = PyList_GET_ITEM(batch, i);
        int (*encode)(PyObject *, unsigned char *, Py_ssize_t, Py_ssize_t *, Py_ssize_t *,
                      long long, long long, PyObject *, PyObject *, PyObject *, PyObject *) =
            (PyObject *)Py_TYPE(item) == run_type ? encode_run : encode_prepared;
        if (encode(item, out, total, &written, &index, position, store_timestamp_ms, store_host,
                   queue_offsets, appended, appended_type) < 0)
            goto fail;
    }
    if (written != total || index != records) {
        sizes_disagree();
        goto fail;
    }
    PyObject *result = PyTuple_Pack(2, data, appended);
    Py_DECREF(data);
    Py_DECREF(appended);
    return result;
fail:
    Py_XDECREF(data);
    Py_XDECREF(appended);
    return NULL;
}


/* ---- reads: a queue's records, as a Fetch takes them (store/commitlog.py) ---------- */

#define QUEUE_ENTRY_SIZE 20         /* store.consume_queue.ENTRY: physical, size, tag code */
#define QUEUE_BLANK_SIZE 0x7FFFFFFF /* store.consume_queue.BLANK_SIZE */

static long long read_be(const unsigned char *p, int bytes);

static PyObject *s_map, *s_base_offset;

PyDoc_STRVAR(gather_records_doc,
"gather_records(entries, first_offset, files, file_size, write_offset, limit, max_count,\n"
"max_bytes, next_offset) -> (list[bytes], next_offset)\n\n"
"store.commitlog.CommitLog.gather_in_python: the records the consume-queue `entries`\n"
"(from queue offset `first_offset`) point at in the log's `files`, as a read takes them.");

static PyObject *
gather_records(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *entries_object, *files;
    long long first_offset, file_size, write_offset, limit, max_count, max_bytes, next_offset;
    if (!PyArg_ParseTuple(args, "OLO!LLLLLL:gather_records", &entries_object, &first_offset,
                          &PyTuple_Type, &files, &file_size, &write_offset, &limit, &max_count,
                          &max_bytes, &next_offset))
        return NULL;
    if (file_size <= 0) {
        PyErr_SetString(PyExc_ValueError, "file_size must be positive");
        return NULL;
    }
    Py_buffer entries;
    if (PyObject_GetBuffer(entries_object, &entries, PyBUF_SIMPLE) < 0)
        return NULL;
    if (entries.len % QUEUE_ENTRY_SIZE != 0) {
        PyBuffer_Release(&entries);
        PyErr_SetString(PyExc_ValueError, "consume-queue entries come whole, 20 bytes each");
        return NULL;
    }
    PyObject *found = PyList_New(0);
    long long first_base = 0;
    Py_ssize_t file_count = PyTuple_GET_SIZE(files);
    if (found != NULL && file_count > 0) {
        PyObject *base = PyObject_GetAttr(PyTuple_GET_ITEM(files, 0), s_base_offset);
        first_base = base != NULL ? PyLong_AsLongLong(base) : -1;
        Py_XDECREF(base);
        if (PyErr_Occurred())
            Py_CLEAR(found);
    }
    PyObject *empty_bytes = PyBytes_FromStringAndSize(NULL, 0);
    if (empty_bytes == NULL)
        Py_CLEAR(found);
    long long used = 0;
    const unsigned char *entry = entries.buf;
    Py_ssize_t entry_count = entries.len / QUEUE_ENTRY_SIZE;
    for (Py_ssize_t i = 0; found != NULL && i < entry_count; i++, entry += QUEUE_ENTRY_SIZE) {
        long long physical = read_be(entry, 8);
        long long size = read_be(entry + 8, 4);
        if (size == QUEUE_BLANK_SIZE)
            continue;
        if (limit >= 0 && physical > limit - size) /* physical + size > limit, no overflow */
            break;
        if (max_bytes >= 0 && PyList_GET_SIZE(found) > 0 && used + size > max_bytes)
            break;
        next_offset = first_offset + i + 1;
        /* CommitLog.read_bytes(physical, size), kept only when it is `size` bytes: none
         * where no segment holds `physical` (retention took it), which a size of 0 takes */
        long long index = physical >= first_base ? (physical - first_base) / file_size : -1;
        if (size < 0)
            continue;
        if (index < 0 || index >= file_count || physical >= write_offset) {
            if (size == 0 && PyList_Append(found, empty_bytes) < 0)
                Py_CLEAR(found);
            else if (size == 0 && PyList_GET_SIZE(found) >= max_count)
                break;
            continue;
        }
        long long segment_base = first_base + index * file_size;
        long long end = physical + size;
        if (end > write_offset || end > segment_base + file_size)
            continue; /* short: not the whole record (retention, or bytes not there) */
        PyObject *map = PyObject_GetAttr(PyTuple_GET_ITEM(files, index), s_map);
        Py_buffer view;
        if (map == NULL || PyObject_GetBuffer(map, &view, PyBUF_SIMPLE) < 0) {
            Py_XDECREF(map);
            Py_CLEAR(found);
            break;
        }
        PyObject *record = NULL;
        if (physical - segment_base + size <= view.len)
            record = PyBytes_FromStringAndSize((const char *)view.buf + (physical - segment_base),
                                               size);
        else
            PyErr_SetString(PyExc_ValueError, "a segment's map is shorter than its file");
        PyBuffer_Release(&view);
        Py_DECREF(map);
        if (record == NULL || PyList_Append(found, record) < 0) {
            Py_XDECREF(record);
            Py_CLEAR(found);
            break;
        }
        Py_DECREF(record);
        used += size;
        if (PyList_GET_SIZE(found) >= max_count)
            break;
    }
    PyBuffer_Release(&entries);
    Py_XDECREF(empty_bytes);
    if (found == NULL)
        return NULL;
    return Py_BuildValue("(NL)", found, next_offset);
}

/* ---- IndexFile (store/index_file.py has the layout) ------------------------------- */

#define INDEX_HEADER_SIZE 40
#define INDEX_SLOT_SIZE 4
#define INDEX_ENTRY_SIZE 20

static int32_t
read_int32(const unsigned char *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

/* `bytes` big-endian bytes at p, as a signed number of that width. */
static long long
read_be(const unsigned char *p, int bytes)
{
    uint64_t value = 0;
    for (int i = 0; i < bytes; i++)
        value = (value << 8) | p[i];
    if (bytes < 8 && (value >> (8 * bytes - 1)) & 1)
        value |= ~0ull << (8 * bytes); /* sign-extend */
    return (long long)value;
}

/* IndexFile._last_counted: follow a chain from `number` down to a counted entry, or 0. */
static long long
last_counted(const unsigned char *map, Py_ssize_t entries_at, long long number,
             long long index_count, long long entry_count)
{
    while (number >= index_count) {
        if (number > entry_count)
            return 0;
        long long previous = read_int32(map + entries_at + number * INDEX_ENTRY_SIZE + 16);
        if (!(0 <= previous && previous < number))
            return 0;
        number = previous;
    }
    return number;
}

PyDoc_STRVAR(index_put_all_doc,
"index_put_all(map, slot_count, entry_count, index_count, used_slot_count, begin_ms, keys)\n"
"-> (index_count, used_slot_count)\n\n"
"The loop of IndexFile.put_all (its Python twin, index_file.put_all_in_python): an entry\n"
"for each of `keys` (bytes-like, store.dispatch_request.INDEX_KEY rows) is written, then\n"
"each slot touched once (its newest entry). The caller checked that the entries fit and\n"
"writes the header.");

static PyObject *
index_put_all(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *map, *keys;
    long long slot_count, entry_count, index_count, used, begin_ms;
    if (!PyArg_ParseTuple(args, "OLLLLLO:index_put_all", &map, &slot_count, &entry_count,
                          &index_count, &used, &begin_ms, &keys))
        return NULL;
    Py_buffer rows;
    if (PyObject_GetBuffer(keys, &rows, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t count = rows.len / INDEX_KEY_SIZE;
    if (rows.len % INDEX_KEY_SIZE != 0) {
        PyBuffer_Release(&rows);
        PyErr_SetString(PyExc_ValueError, "index keys are whole INDEX_KEY rows");
        return NULL;
    }
    if (slot_count <= 0 || index_count < 1 || index_count + count - 1 > entry_count) {
        PyBuffer_Release(&rows);
        PyErr_SetString(PyExc_AssertionError, "index file overflow");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(map, &view, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&rows);
        return NULL;
    }
    Py_ssize_t entries_at = INDEX_HEADER_SIZE + (Py_ssize_t)slot_count * INDEX_SLOT_SIZE;
    if (view.len < entries_at + (Py_ssize_t)(entry_count + 1) * INDEX_ENTRY_SIZE) {
        PyBuffer_Release(&view);
        PyBuffer_Release(&rows);
        PyErr_SetString(PyExc_ValueError, "the map is smaller than its index file");
        return NULL;
    }
    unsigned char *buffer = view.buf;
    /* The slots this batch touched and their newest entry: open addressing, twice the
     * entries in size, so that every lookup ends at an empty cell. */
    Py_ssize_t capacity = 16;
    while (capacity < 2 * count)
        capacity <<= 1;
    long long *cell_slot = PyMem_Malloc(capacity * sizeof(long long));
    long long *cell_number = PyMem_Malloc(capacity * sizeof(long long));
    unsigned char *block = PyMem_Malloc(count ? count * INDEX_ENTRY_SIZE : 1);
    if (cell_slot == NULL || cell_number == NULL || block == NULL) {
        PyMem_Free(cell_slot);
        PyMem_Free(cell_number);
        PyMem_Free(block);
        PyBuffer_Release(&view);
        PyBuffer_Release(&rows);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t c = 0; c < capacity; c++)
        cell_slot[c] = -1;
    long long first = index_count, number = index_count;
    for (Py_ssize_t i = 0; i < count; i++) {
        const unsigned char *row = (const unsigned char *)rows.buf + i * INDEX_KEY_SIZE;
        long long physical = (long long)read_le(row, 8);
        long long stored_ms = (long long)read_le(row + 12, 8);
        unsigned long long key_hash = read_le(row + 20, 4);
        long long slot = (long long)(key_hash % (unsigned long long)slot_count);
        Py_ssize_t cell =
            (Py_ssize_t)(((unsigned long long)slot * 0x9E3779B97F4A7C15ull) >> 32) & (capacity - 1);
        while (cell_slot[cell] != -1 && cell_slot[cell] != slot)
            cell = (cell + 1) & (capacity - 1);
        long long previous;
        if (cell_slot[cell] == slot) {
            previous = cell_number[cell];
        } else {
            previous = read_int32(buffer + INDEX_HEADER_SIZE + slot * INDEX_SLOT_SIZE);
            if (previous >= first) /* past the counted entries: see IndexFile._last_counted */
                previous = last_counted(buffer, entries_at, previous, first, entry_count);
            if (previous <= 0) {
                previous = 0;
                used++;
            }
            cell_slot[cell] = slot;
        }
        cell_number[cell] = number;
        /* Python's floor division, then no negative delta (so a negative difference is
         * 0); a difference past int64 is past 32 bits of seconds, or before zero. */
        long long difference, delta_s;
        if (__builtin_sub_overflow(stored_ms, begin_ms, &difference))
            delta_s = stored_ms > begin_ms ? LLONG_MAX : 0;
        else
            delta_s = difference >= 0 ? difference / 1000 : 0;
        if (delta_s > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "an entry's seconds do not fit 32 bits");
            goto fail;
        }
        unsigned char *e = block + i * INDEX_ENTRY_SIZE;
        put32(e, (uint32_t)key_hash);
        put64(e + 4, (uint64_t)physical);
        put32(e + 12, (uint32_t)delta_s);
        put32(e + 16, (uint32_t)previous);
        number++;
    }
    memcpy(buffer + entries_at + first * INDEX_ENTRY_SIZE, block, count * INDEX_ENTRY_SIZE);
    for (Py_ssize_t c = 0; c < capacity; c++)
        if (cell_slot[c] != -1)
            put32(buffer + INDEX_HEADER_SIZE + cell_slot[c] * INDEX_SLOT_SIZE,
                  (uint32_t)cell_number[c]);
    PyMem_Free(cell_slot);
    PyMem_Free(cell_number);
    PyMem_Free(block);
    PyBuffer_Release(&view);
    PyBuffer_Release(&rows);
    return Py_BuildValue("(LL)", number, used);
fail:
    PyMem_Free(cell_slot);
    PyMem_Free(cell_number);
    PyMem_Free(block);
    PyBuffer_Release(&view);
    PyBuffer_Release(&rows);
    return NULL;
}


/* ---- the per-record work of prepare and replay (store/commitlog.py) ---------------- */

typedef struct {
    PyObject_HEAD
    PyObject *prepared_type;  /* store.commitlog.PreparedMessage */
    PyObject *request_type;   /* store.dispatch_request.DispatchRequest */
    PyObject *tags;           /* property names, str */
    PyObject *keys;
    PyObject *uniq_key;
    PyObject *timer_topic;    /* its records' tag code is a delivery time: left to Python */
    PyObject *timer_tag_code; /* store.commitlog.queue_tag_code, for those */
    PyObject *corrupt_error;  /* store.errors.CorruptRecordError: framing that does not hold */
    Py_ssize_t properties_max;
} RecordCodec;

static int
codec_init(RecordCodec *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"prepared_type", "request_type", "tags", "keys", "uniq_key",
                            "timer_topic", "timer_tag_code", "corrupt_error", "properties_max",
                            NULL};
    PyObject *prepared_type, *request_type, *tags, *keys, *uniq_key, *timer_topic;
    PyObject *timer_tag_code, *corrupt_error;
    Py_ssize_t properties_max;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOUUUUOOn:RecordCodec", names,
                                     &prepared_type, &request_type, &tags, &keys, &uniq_key,
                                     &timer_topic, &timer_tag_code, &corrupt_error,
                                     &properties_max))
        return -1;
    if (!PyExceptionClass_Check(corrupt_error)) {
        PyErr_SetString(PyExc_TypeError, "corrupt_error must be an exception class");
        return -1;
    }
    Py_INCREF(corrupt_error);
    Py_XSETREF(self->corrupt_error, corrupt_error);
    Py_INCREF(prepared_type);
    Py_XSETREF(self->prepared_type, prepared_type);
    Py_INCREF(request_type);
    Py_XSETREF(self->request_type, request_type);
    Py_INCREF(timer_tag_code);
    Py_XSETREF(self->timer_tag_code, timer_tag_code);
    Py_INCREF(tags);
    Py_XSETREF(self->tags, tags);
    Py_INCREF(keys);
    Py_XSETREF(self->keys, keys);
    Py_INCREF(uniq_key);
    Py_XSETREF(self->uniq_key, uniq_key);
    Py_INCREF(timer_topic);
    Py_XSETREF(self->timer_topic, timer_topic);
    self->properties_max = properties_max;
    return 0;
}

static void
codec_dealloc(RecordCodec *self)
{
    Py_XDECREF(self->prepared_type);
    Py_XDECREF(self->request_type);
    Py_XDECREF(self->timer_tag_code);
    Py_XDECREF(self->tags);
    Py_XDECREF(self->keys);
    Py_XDECREF(self->uniq_key);
    Py_XDECREF(self->timer_topic);
    Py_XDECREF(self->corrupt_error);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* An int attribute that fits `bits` signed bits into *out: 1; 0 when it is missing, not an
 * int or out of range (the twin refuses it); -1 on another error. */
static int
fitting_int(PyObject *object, PyObject *name, int bits, long long *out)
{
    PyObject *value = PyObject_GetAttr(object, name);
    if (value == NULL)
        return -1;
    int fits = 0;
    if (PyLong_Check(value)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(value);
            return -1;
        }
        fits = !overflow && (bits == 64 || (v >= INT32_MIN && v <= INT32_MAX));
        *out = v;
    }
    Py_DECREF(value);
    return fits;
}

/* store.hashing.tag_hash_code (Java's String.hashCode over UTF-16 units) into *out: 1, or
 * 0 for a lone surrogate (which UTF-16 cannot encode: the twin raises). */
static int
java_hash(PyObject *text, int32_t *out)
{
    Py_ssize_t length = PyUnicode_GET_LENGTH(text);
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    uint32_t h = 0;
    for (Py_ssize_t i = 0; i < length; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= 0xD800 && c <= 0xDFFF)
            return 0;
        if (c >= 0x10000) {
            h = 31 * h + (0xD800 + ((c - 0x10000) >> 10));
            h = 31 * h + (0xDC00 + ((c - 0x10000) & 0x3FF));
        } else {
            h = 31 * h + c;
        }
    }
    *out = (int32_t)h;
    return 1;
}

/* store.commitlog.index_keys_of: KEYS split at spaces (empty ones dropped), then UNIQ_KEY. */
static PyObject *
index_keys_of(RecordCodec *self, PyObject *properties)
{
    PyObject *keys = PyDict_GetItemWithError(properties, self->keys);
    if (keys == NULL && PyErr_Occurred())
        return NULL;
    PyObject *unique = PyDict_GetItemWithError(properties, self->uniq_key);
    if (unique == NULL && PyErr_Occurred())
        return NULL;
    int has_unique = unique != NULL && PyUnicode_GET_LENGTH(unique) > 0;
    PyObject *parts = PyList_New(0);
    if (parts == NULL)
        return NULL;
    if (keys != NULL && PyUnicode_GET_LENGTH(keys) > 0) {
        Py_ssize_t length = PyUnicode_GET_LENGTH(keys);
        int kind = PyUnicode_KIND(keys);
        const void *data = PyUnicode_DATA(keys);
        Py_ssize_t start = 0;
        for (Py_ssize_t i = 0; i <= length; i++) {
            if (i < length && PyUnicode_READ(kind, data, i) != ' ')
                continue;
            if (i > start) {
                PyObject *part = PyUnicode_Substring(keys, start, i);
                if (part == NULL || PyList_Append(parts, part) < 0) {
                    Py_XDECREF(part);
                    Py_DECREF(parts);
                    return NULL;
                }
                Py_DECREF(part);
            }
            start = i + 1;
        }
    }
    if (has_unique && PyList_Append(parts, unique) < 0) {
        Py_DECREF(parts);
        return NULL;
    }
    PyObject *result = PyList_AsTuple(parts);
    Py_DECREF(parts);
    return result;
}

PyDoc_STRVAR(codec_prepare_doc,
"prepare(message, topic_prefix: bytes, encoded_properties: bytes, body_limit: int)\n"
"-> PreparedMessage | None\n\n"
"MessageStore.prepare_in_python after its topic check, or None where that raises (or for\n"
"a timer record): the caller then runs it for the precise error.");

static PyObject *
codec_prepare(RecordCodec *self, PyObject *args)
{
    PyObject *message, *topic_prefix, *raw;
    Py_ssize_t body_limit;
    if (!PyArg_ParseTuple(args, "OO!O!n:prepare", &message, &PyBytes_Type, &topic_prefix,
                          &PyBytes_Type, &raw, &body_limit))
        return NULL;
    PyObject *body = NULL, *born_host = NULL, *properties = NULL, *topic = NULL;
    PyObject *tail = NULL, *result = NULL;
    long long queue_id, value;
    int fits;
    if ((topic = PyObject_GetAttr(message, s_topic)) == NULL)
        goto done;
    int timer = PyUnicode_Check(topic) ? PyUnicode_Compare(topic, self->timer_topic) : 0;
    if ((timer == -1 && PyErr_Occurred()) || timer == 0 || !PyUnicode_Check(topic))
        goto decline;
    if ((body = PyObject_GetAttr(message, s_body)) == NULL)
        goto done;
    if (!PyBytes_Check(body) || PyBytes_GET_SIZE(body) > body_limit)
        goto decline;
    if ((fits = fitting_int(message, s_queue_id, 64, &queue_id)) <= 0)
        goto decline_or_fail_fits;
    if (queue_id < 0 || queue_id >= (1LL << 31))
        goto decline;
    PyObject *const header_names[] = {s_flag, s_sys_flag, s_born_timestamp_ms, s_reconsume_times,
                                      s_prepared_transaction_offset};
    const int header_bits[] = {32, 32, 64, 32, 64};
    for (int i = 0; i < 5; i++)
        if ((fits = fitting_int(message, header_names[i], header_bits[i], &value)) <= 0)
            goto decline_or_fail_fits;
    if ((born_host = PyObject_GetAttr(message, s_born_host)) == NULL)
        goto done;
    if (PyObject_Length(born_host) != 8) {
        if (PyErr_Occurred())
            goto done;
        goto decline;
    }
    if ((properties = PyObject_GetAttr(message, s_properties)) == NULL)
        goto done;
    if (!PyDict_CheckExact(properties))
        goto decline;
    /* ferrymq.codec.properties.check_encoded_properties */
    Py_ssize_t raw_length = PyBytes_GET_SIZE(raw);
    const char *raw_bytes = PyBytes_AS_STRING(raw);
    Py_ssize_t pairs = PyDict_GET_SIZE(properties), name_values = 0, separators = 0;
    if (raw_length > self->properties_max)
        goto decline;
    for (Py_ssize_t i = 0; i < raw_length; i++) {
        name_values += raw_bytes[i] == NAME_VALUE_SEPARATOR;
        separators += raw_bytes[i] == PROPERTY_SEPARATOR;
    }
    if (name_values != pairs || separators != pairs ||
        (pairs && raw_bytes[raw_length - 1] != PROPERTY_SEPARATOR) || (raw_length && !pairs))
        goto decline;
    /* store.commitlog.prepare */
    int32_t tag_code = 0;
    PyObject *tags = PyDict_GetItemWithError(properties, self->tags);
    if (tags == NULL && PyErr_Occurred())
        goto done;
    if (tags != NULL) {
        if (!PyUnicode_Check(tags))
            goto decline;
        if (PyUnicode_GET_LENGTH(tags) > 0 && !java_hash(tags, &tag_code))
            goto decline;
    }
    Py_ssize_t prefix_length = PyBytes_GET_SIZE(topic_prefix);
    tail = PyBytes_FromStringAndSize(NULL, prefix_length + 2 + raw_length);
    if (tail == NULL)
        goto done;
    char *t = PyBytes_AS_STRING(tail);
    memcpy(t, PyBytes_AS_STRING(topic_prefix), prefix_length);
    t[prefix_length] = (char)(raw_length >> 8);
    t[prefix_length + 1] = (char)raw_length;
    memcpy(t + prefix_length + 2, raw_bytes, raw_length);
    Py_ssize_t size = RECORD_HEADER_SIZE + PyBytes_GET_SIZE(body) + PyBytes_GET_SIZE(tail);
    PyObject *size_object = PyLong_FromSsize_t(size);
    PyObject *tag_object = PyLong_FromLong(tag_code);
    if (size_object != NULL && tag_object != NULL) {
        PyObject *call[4] = {message, tail, size_object, tag_object};
        result = PyObject_Vectorcall(self->prepared_type, call, 4, NULL);
    }
    Py_XDECREF(size_object);
    Py_XDECREF(tag_object);
    goto done;
decline_or_fail_fits:
    if (fits < 0)
        goto done;
decline:
    result = Py_None;
    Py_INCREF(result);
done:
    Py_XDECREF(topic);
    Py_XDECREF(body);
    Py_XDECREF(born_host);
    Py_XDECREF(properties);
    Py_XDECREF(tail);
    return result;
}


/* The dispatch request of the record at `p` (store.commitlog.dispatch_request_at). */
static PyObject *
dispatch_request_at(RecordCodec *self, const unsigned char *buf, Py_ssize_t length, Py_ssize_t p)
{
    if (p < 0 || length - p < RECORD_HEADER_SIZE) {
        PyErr_Format(self->corrupt_error, "no record at %zd", p);
        return NULL;
    }
    const unsigned char *h = buf + p;
    int32_t size = read_int32(h);
    if ((uint32_t)read_int32(h + 4) != MESSAGE_MAGIC) {
        PyErr_Format(self->corrupt_error, "no message record at %zd", p);
        return NULL;
    }
    int32_t body_length = read_int32(h + 84);
    Py_ssize_t end = p + size;
    Py_ssize_t topic_at = p + RECORD_HEADER_SIZE + (Py_ssize_t)body_length;
    if (size <= 0 || body_length < 0 || end > length || topic_at + 1 > end) {
        PyErr_Format(self->corrupt_error, "record lengths disagree at %zd", p);
        return NULL;
    }
    Py_ssize_t properties_at = topic_at + 1 + buf[topic_at];
    if (properties_at + 2 > end ||
        properties_at + 2 + (((Py_ssize_t)buf[properties_at] << 8) | buf[properties_at + 1]) != end) {
        PyErr_Format(self->corrupt_error, "record lengths disagree at %zd", p);
        return NULL;
    }
    PyObject *call[10] = {NULL};
    PyObject *request = NULL, *properties = NULL, *raw = NULL;
    call[0] = PyUnicode_DecodeUTF8((const char *)buf + topic_at + 1, properties_at - topic_at - 1,
                                   NULL);
    if (call[0] == NULL)
        goto done;
    raw = PyBytes_FromStringAndSize((const char *)buf + properties_at + 2, end - properties_at - 2);
    if (raw == NULL || (properties = decode_properties(NULL, raw)) == NULL)
        goto done;
    int timer = PyUnicode_Compare(call[0], self->timer_topic);
    if (timer == -1 && PyErr_Occurred())
        goto done;
    if (timer == 0) {
        call[5] = PyObject_CallFunctionObjArgs(self->timer_tag_code, call[0], properties, NULL);
    } else {
        int32_t tag_code = 0;
        PyObject *tags = PyDict_GetItemWithError(properties, self->tags);
        if (tags == NULL && PyErr_Occurred())
            goto done;
        if (tags != NULL && PyUnicode_GET_LENGTH(tags) > 0 && !java_hash(tags, &tag_code)) {
            PyErr_SetString(PyExc_UnicodeEncodeError, "a tag with a lone surrogate");
            goto done;
        }
        call[5] = PyLong_FromLong(tag_code);
    }
    call[1] = PyLong_FromLong(read_int32(h + 12));
    call[2] = PyLong_FromLongLong(read_int64(h + 20));
    call[3] = PyLong_FromLongLong(read_int64(h + 28));
    call[4] = PyLong_FromLong(size);
    call[6] = PyLong_FromLongLong(read_int64(h + 56));
    call[7] = PyLong_FromLong(read_int32(h + 36));
    call[8] = index_keys_of(self, properties);
    call[9] = properties;
    Py_INCREF(properties);
    int complete = 1;
    for (int a = 0; a < 10; a++)
        complete &= call[a] != NULL;
    if (complete)
        request = PyObject_Vectorcall(self->request_type, call, 10, NULL);
done:
    for (int a = 0; a < 10; a++)
        Py_XDECREF(call[a]);
    Py_XDECREF(raw);
    Py_XDECREF(properties);
    return request;
}

/* ---- the dispatch plan (store/commitlog.py: dispatch_plan_in_python) ------------- */

#define PLAN_MAX_RUNS 64   /* store.commitlog.MAX_RUNS */
#define QUEUE_ENTRY_SIZE 20 /* store.consume_queue.ENTRY_SIZE: physical, size, tag code */
#define PLAN_MAX_WANTED 8  /* store.commitlog.MAX_WANTED: wanted topics, wanted property names */

typedef struct {
    PyObject *topic; /* str; its UTF-8 (cached in the str) is the run's key with queue_id */
    const char *topic_utf8;
    Py_ssize_t topic_length;
    long long queue_id, first_offset, next_offset;
    unsigned char *entries;
    Py_ssize_t used, capacity;
} PlanRun;

typedef struct {
    const char *text[PLAN_MAX_WANTED];
    Py_ssize_t length[PLAN_MAX_WANTED];
    Py_ssize_t count;
} WantedNames;

static int
wanted_names(PyObject *tuple, WantedNames *out, const char *what)
{
    if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) > PLAN_MAX_WANTED) {
        PyErr_Format(PyExc_TypeError, "%s: a tuple of at most %d str", what, PLAN_MAX_WANTED);
        return -1;
    }
    out->count = PyTuple_GET_SIZE(tuple);
    for (Py_ssize_t i = 0; i < out->count; i++) {
        PyObject *name = PyTuple_GET_ITEM(tuple, i);
        if (!PyUnicode_Check(name)) {
            PyErr_Format(PyExc_TypeError, "%s: a tuple of at most %d str", what, PLAN_MAX_WANTED);
            return -1;
        }
        out->text[i] = PyUnicode_AsUTF8AndSize(name, &out->length[i]);
        if (out->text[i] == NULL)
            return -1;
    }
    return 0;
}

static int
is_wanted(const WantedNames *names, const char *text, Py_ssize_t length)
{
    for (Py_ssize_t i = 0; i < names->count; i++)
        if (names->length[i] == length && memcmp(names->text[i], text, length) == 0)
            return 1;
    return 0;
}

static int
all_ascii(const unsigned char *p, Py_ssize_t length)
{
    for (Py_ssize_t i = 0; i < length; i++)
        if (p[i] & 0x80)
            return 0;
    return 1;
}

/* What the fast path reads of a record's properties: the spans of the last TAGS, KEYS and
 * UNIQ_KEY values (decode_properties: a later name replaces an earlier one) and whether a
 * wanted name is there. */
typedef struct {
    const unsigned char *tags, *keys, *unique;
    Py_ssize_t tags_length, keys_length, unique_length;
    int has_wanted;
} PropertySpans;

static void
scan_properties(RecordCodec *self, const unsigned char *p, Py_ssize_t length,
                const WantedNames *wanted, PropertySpans *out)
{
    Py_ssize_t tags_length, keys_length, unique_length;
    const char *tags = PyUnicode_AsUTF8AndSize(self->tags, &tags_length);
    const char *keys = PyUnicode_AsUTF8AndSize(self->keys, &keys_length);
    const char *unique = PyUnicode_AsUTF8AndSize(self->uniq_key, &unique_length);
    memset(out, 0, sizeof(*out));
    Py_ssize_t start = 0;
    for (Py_ssize_t i = 0; i <= length; i++) {
        if (i < length && p[i] != PROPERTY_SEPARATOR)
            continue;
        if (i > start) { /* empty pairs are skipped */
            Py_ssize_t name_end = start;
            while (name_end < i && p[name_end] != NAME_VALUE_SEPARATOR)
                name_end++;
            const char *name = (const char *)p + start;
            Py_ssize_t name_length = name_end - start;
            const unsigned char *value = name_end < i ? p + name_end + 1 : p + i;
            Py_ssize_t value_length = name_end < i ? i - name_end - 1 : 0;
            if (name_length == tags_length && memcmp(name, tags, tags_length) == 0) {
                out->tags = value;
                out->tags_length = value_length;
            } else if (name_length == keys_length && memcmp(name, keys, keys_length) == 0) {
                out->keys = value;
                out->keys_length = value_length;
            } else if (name_length == unique_length && memcmp(name, unique, unique_length) == 0) {
                out->unique = value;
                out->unique_length = value_length;
            }
            if (is_wanted(wanted, name, name_length))
                out->has_wanted = 1;
        }
        start = i + 1;
    }
}

/* A plan's index keys: INDEX_KEY rows, growing (PyMem). */
typedef struct {
    unsigned char *data;
    Py_ssize_t used, capacity;
} KeyRows;

static void
put_le(unsigned char *p, uint64_t value, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (unsigned char)(value >> (8 * i));
}

/* The INDEX_KEY row of topic#key for the record at `physical`: its hash is crc32c without
 * building the key, or `key_hash` called on its UTF-8 bytes (the twin's
 * store.hashing.index_key_hash replaced, as tests do), taken modulo 2**32. */
static int
append_key(KeyRows *rows, PyObject *key_hash, const char *topic, Py_ssize_t topic_length,
           const char *key, Py_ssize_t key_length, long long physical, int32_t size,
           long long store_ms)
{
    uint32_t hash;
    if (key_hash == Py_None) {
        hash = crc32c_of(0, (const unsigned char *)topic, topic_length);
        hash = crc32c_of(hash, (const unsigned char *)"#", 1);
        hash = crc32c_of(hash, (const unsigned char *)key, key_length);
    } else {
        PyObject *joined = PyBytes_FromStringAndSize(NULL, topic_length + 1 + key_length);
        if (joined == NULL)
            return -1;
        char *j = PyBytes_AS_STRING(joined);
        memcpy(j, topic, topic_length);
        j[topic_length] = '#';
        memcpy(j + topic_length + 1, key, key_length);
        PyObject *found = PyObject_CallOneArg(key_hash, joined);
        Py_DECREF(joined);
        if (found == NULL)
            return -1;
        unsigned long value = PyLong_AsUnsignedLongMask(found);
        Py_DECREF(found);
        if (value == (unsigned long)-1 && PyErr_Occurred())
            return -1;
        hash = (uint32_t)value;
    }
    if (rows->used + INDEX_KEY_SIZE > rows->capacity) {
        Py_ssize_t capacity = rows->capacity ? 2 * rows->capacity : 64 * INDEX_KEY_SIZE;
        unsigned char *data = PyMem_Realloc(rows->data, capacity);
        if (data == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        rows->data = data;
        rows->capacity = capacity;
    }
    unsigned char *row = rows->data + rows->used;
    put_le(row, (uint64_t)physical, 8);
    put_le(row + 8, (uint64_t)(uint32_t)size, 4);
    put_le(row + 12, (uint64_t)store_ms, 8);
    put_le(row + 20, hash, 4);
    rows->used += INDEX_KEY_SIZE;
    return 0;
}

/* The run of (topic, queue_id) among `runs`, or NULL. */
static PlanRun *
find_run(PlanRun *runs, Py_ssize_t count, const char *topic, Py_ssize_t topic_length,
         long long queue_id)
{
    for (Py_ssize_t r = 0; r < count; r++)
        if (runs[r].queue_id == queue_id && runs[r].topic_length == topic_length &&
            memcmp(runs[r].topic_utf8, topic, topic_length) == 0)
            return &runs[r];
    return NULL;
}

static int
run_append(PlanRun *run, long long physical, int32_t size, long long tag_code)
{
    if (run->used + QUEUE_ENTRY_SIZE > run->capacity) {
        Py_ssize_t capacity = run->capacity ? 2 * run->capacity : 64 * QUEUE_ENTRY_SIZE;
        unsigned char *grown = PyMem_Realloc(run->entries, capacity);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        run->entries = grown;
        run->capacity = capacity;
    }
    unsigned char *e = run->entries + run->used;
    put64(e, (uint64_t)physical);
    put32(e + 8, (uint32_t)size);
    put64(e + 12, (uint64_t)tag_code);
    run->used += QUEUE_ENTRY_SIZE;
    run->next_offset++;
    return 0;
}

PyDoc_STRVAR(codec_dispatch_plan_doc,
"dispatch_plan(buf, position, limit, max_count, wanted_topics, wanted_properties, key_hash)\n"
"-> (runs, keys, wanted, position, blank, count)\n\n"
"store.dispatch_plan.dispatch_plan_in_python: what dispatching up to `max_count` records\n"
"from `position` of the map `buf` writes (consume-queue runs, index keys) and the full\n"
"dispatch requests of the records the listeners want. Reads the header and properties in\n"
"place; only a wanted record, a timer record or one with non-ASCII text is decoded whole\n"
"(dispatch_request_at, which also raises for framing that does not hold).");

static PyObject *
codec_dispatch_plan(RecordCodec *self, PyObject *args)
{
    PyObject *map, *wanted_topics_tuple, *wanted_properties_tuple, *key_hash;
    Py_ssize_t position, limit, max_count;
    if (!PyArg_ParseTuple(args, "OnnnOOO:dispatch_plan", &map, &position, &limit, &max_count,
                          &wanted_topics_tuple, &wanted_properties_tuple, &key_hash))
        return NULL;
    WantedNames wanted_topics, wanted_properties;
    if (wanted_names(wanted_topics_tuple, &wanted_topics, "wanted_topics") < 0 ||
        wanted_names(wanted_properties_tuple, &wanted_properties, "wanted_properties") < 0)
        return NULL;
    Py_ssize_t timer_length;
    const char *timer = PyUnicode_AsUTF8AndSize(self->timer_topic, &timer_length);
    if (timer == NULL)
        return NULL;
    if (position < 0) {
        PyErr_SetString(PyExc_ValueError, "a negative position");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(map, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *buf = view.buf;
    if (limit > view.len)
        limit = view.len;
    PlanRun runs[PLAN_MAX_RUNS];
    Py_ssize_t run_count = 0, count = 0;
    int blank = 0;
    KeyRows keys = {NULL, 0, 0};
    PyObject *wanted = PyList_New(0), *result = NULL;
    if (wanted == NULL)
        goto done;
    while (position < limit && count < max_count) {
        if (limit - position < 8) {
            PyErr_Format(self->corrupt_error, "no record at %zd", position);
            goto done;
        }
        const unsigned char *h = buf + position;
        int32_t size = read_int32(h);
        uint32_t magic = (uint32_t)read_int32(h + 4);
        if (magic == BLANK_MAGIC) {
            blank = 1;
            break;
        }
        if (magic != MESSAGE_MAGIC || size <= 0) {
            PyErr_Format(self->corrupt_error, "no record at %zd", position);
            goto done;
        }
        /* The framing dispatch_request_at checks; where it fails, that function raises. */
        int framed = view.len - position >= RECORD_HEADER_SIZE && position + size <= view.len;
        Py_ssize_t topic_at = 0, properties_at = 0, end = position + size;
        if (framed) {
            int32_t body_length = read_int32(h + OFFSET_BODY_LENGTH);
            topic_at = position + RECORD_HEADER_SIZE + (Py_ssize_t)body_length;
            framed = body_length >= 0 && topic_at + 1 <= end;
            if (framed) {
                properties_at = topic_at + 1 + buf[topic_at];
                framed = properties_at + 2 <= end &&
                         properties_at + 2 +
                                 (((Py_ssize_t)buf[properties_at] << 8) | buf[properties_at + 1]) ==
                             end;
            }
        }
        const char *topic = framed ? (const char *)buf + topic_at + 1 : NULL;
        Py_ssize_t topic_length = framed ? properties_at - topic_at - 1 : 0;
        const unsigned char *props = framed ? buf + properties_at + 2 : NULL;
        Py_ssize_t props_length = framed ? end - properties_at - 2 : 0;
        PropertySpans spans;
        int fast = framed && all_ascii((const unsigned char *)topic, topic_length) &&
                   all_ascii(props, props_length) &&
                   !(topic_length == timer_length && memcmp(topic, timer, timer_length) == 0) &&
                   !is_wanted(&wanted_topics, topic, topic_length);
        if (fast) {
            scan_properties(self, props, props_length, &wanted_properties, &spans);
            fast = !spans.has_wanted;
        }
        long long tag_code = 0;
        PyObject *request = NULL;
        if (fast) {
            int32_t code = 0;
            for (Py_ssize_t i = 0; i < spans.tags_length; i++)
                code = (int32_t)(31u * (uint32_t)code + spans.tags[i]);
            tag_code = code;
        } else {
            if ((request = dispatch_request_at(self, buf, view.len, position)) == NULL)
                goto done;
            PyObject *text = PyObject_GetAttr(request, s_topic);
            PyObject *code = text ? PyObject_GetAttr(request, s_tag_code) : NULL;
            if (code != NULL)
                tag_code = PyLong_AsLongLong(code);
            Py_XDECREF(code);
            topic = text ? PyUnicode_AsUTF8AndSize(text, &topic_length) : NULL;
            Py_XDECREF(text); /* the request holds it, and so its UTF-8 */
            if (topic == NULL || PyErr_Occurred())
                goto fail_record;
        }
        /* Framed: the whole header is inside the buffer (else dispatch_request_at raised). */
        long long queue_id = read_int32(h + OFFSET_QUEUE_ID);
        long long queue_offset = read_int64(h + OFFSET_QUEUE_OFFSET);
        long long physical = read_int64(h + 28);
        long long sys_flag = read_int32(h + 36);
        long long store_ms = read_int64(h + OFFSET_STORE_TIMESTAMP);
        PlanRun *run = NULL;
        if (!(sys_flag & NO_QUEUE_OFFSET_BIT)) {
            run = find_run(runs, run_count, topic, topic_length, queue_id);
            if (run != NULL ? run->next_offset != queue_offset : run_count == PLAN_MAX_RUNS) {
                Py_XDECREF(request); /* a later pass starts with this record */
                break;
            }
        }
        /* The index keys: KEYS split at spaces (empty ones dropped), then UNIQ_KEY. */
        if (fast) {
            Py_ssize_t start = 0;
            for (Py_ssize_t i = 0; i <= spans.keys_length; i++) {
                if (i < spans.keys_length && spans.keys[i] != ' ')
                    continue;
                if (i > start &&
                    append_key(&keys, key_hash, topic, topic_length,
                               (const char *)spans.keys + start, i - start, physical, size,
                               store_ms) < 0)
                    goto fail_record;
                start = i + 1;
            }
            if (spans.unique_length > 0 &&
                append_key(&keys, key_hash, topic, topic_length, (const char *)spans.unique,
                           spans.unique_length, physical, size, store_ms) < 0)
                goto fail_record;
        } else {
            PyObject *request_keys = PyObject_GetAttr(request, s_keys);
            if (request_keys == NULL)
                goto fail_record;
            if (!PyTuple_Check(request_keys)) {
                Py_DECREF(request_keys);
                PyErr_SetString(PyExc_TypeError, "a dispatch request's keys are a tuple of str");
                goto fail_record;
            }
            for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(request_keys); k++) {
                Py_ssize_t key_length;
                const char *key =
                    PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(request_keys, k), &key_length);
                if (key == NULL || append_key(&keys, key_hash, topic, topic_length, key,
                                              key_length, physical, size, store_ms) < 0) {
                    Py_DECREF(request_keys);
                    goto fail_record;
                }
            }
            Py_DECREF(request_keys);
        }
        if (!(sys_flag & NO_QUEUE_OFFSET_BIT)) {
            if (run == NULL) {
                run = &runs[run_count];
                memset(run, 0, sizeof(*run));
                run->topic = PyUnicode_DecodeUTF8(topic, topic_length, NULL);
                if (run->topic == NULL ||
                    (run->topic_utf8 = PyUnicode_AsUTF8AndSize(run->topic, &run->topic_length)) ==
                        NULL) {
                    Py_CLEAR(run->topic);
                    goto fail_record;
                }
                run->queue_id = queue_id;
                run->first_offset = run->next_offset = queue_offset;
                run_count++;
            }
            if (run_append(run, physical, size, tag_code) < 0)
                goto fail_record;
        }
        if (request != NULL) {
            int want = is_wanted(&wanted_topics, topic, topic_length);
            if (!want && wanted_properties.count > 0) {
                PyObject *properties = PyObject_GetAttr(request, s_properties);
                if (properties == NULL)
                    goto fail_record;
                for (Py_ssize_t i = 0; i < wanted_properties.count && !want; i++) {
                    want = PyDict_Contains(properties,
                                           PyTuple_GET_ITEM(wanted_properties_tuple, i));
                    if (want < 0) {
                        Py_DECREF(properties);
                        goto fail_record;
                    }
                }
                Py_DECREF(properties);
            }
            if (want && PyList_Append(wanted, request) < 0)
                goto fail_record;
            Py_CLEAR(request);
        }
        position += size;
        count++;
        continue;
    fail_record:
        Py_XDECREF(request);
        goto done;
    }
    PyObject *run_list = PyList_New(run_count);
    if (run_list == NULL)
        goto done;
    for (Py_ssize_t r = 0; r < run_count; r++) {
        PyObject *item = Py_BuildValue("(OLLy#)", runs[r].topic, runs[r].queue_id,
                                       runs[r].first_offset, (const char *)runs[r].entries,
                                       runs[r].used);
        if (item == NULL) {
            Py_DECREF(run_list);
            goto done;
        }
        PyList_SET_ITEM(run_list, r, item);
    }
    result = Py_BuildValue("(Ny#OnOn)", run_list, keys.data ? (const char *)keys.data : "",
                           keys.used, wanted,
                           position, blank ? Py_True : Py_False, count);
done:
    for (Py_ssize_t r = 0; r < run_count; r++) {
        Py_XDECREF(runs[r].topic);
        PyMem_Free(runs[r].entries);
    }
    PyMem_Free(keys.data);
    Py_XDECREF(wanted);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef codec_methods[] = {
    {"prepare", (PyCFunction)codec_prepare, METH_VARARGS, codec_prepare_doc},
    {"dispatch_plan", (PyCFunction)codec_dispatch_plan, METH_VARARGS, codec_dispatch_plan_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RecordCodecType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "store._speedups.RecordCodec",
    .tp_doc = PyDoc_STR("The per-record work of the put and replay paths (prepare, dispatch "
                        "plans), given the property names and types they use."),
    .tp_basicsize = sizeof(RecordCodec),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)codec_init,
    .tp_dealloc = (destructor)codec_dealloc,
    .tp_methods = codec_methods,
};

static PyMethodDef module_methods[] = {
    {"crc32c", crc32c_function, METH_O, crc32c_doc},
    {"encode_batch", encode_batch, METH_VARARGS, encode_batch_doc},
    {"index_put_all", index_put_all, METH_VARARGS, index_put_all_doc},
    {"gather_records", gather_records, METH_VARARGS, gather_records_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "store._speedups",
    .m_doc = "The store's per-message loops in C; each has a Python twin (see the source).",
    .m_size = -1,
    .m_methods = module_methods,
};

static int
intern_names(void)
{
    struct {
        PyObject **slot;
        const char *text;
    } names[] = {
        {&s_message, "message"}, {&s_tail, "tail"}, {&s_size, "size"},
        {&s_tag_code, "tag_code"}, {&s_topic, "topic"},
        {&s_body, "body"}, {&s_queue_id, "queue_id"}, {&s_flag, "flag"},
        {&s_sys_flag, "sys_flag"}, {&s_born_timestamp_ms, "born_timestamp_ms"},
        {&s_born_host, "born_host"}, {&s_reconsume_times, "reconsume_times"},
        {&s_prepared_transaction_offset, "prepared_transaction_offset"},
        {&s_properties, "properties"}, {&s_keys, "keys"}, {&s_records, "records"},
        {&s_spans, "spans"}, {&s_topic_prefix, "topic_prefix"}, {&s_count, "count"},
        {&s_map, "map"}, {&s_base_offset, "base_offset"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL)
            return -1;
    return 0;
}

PyMODINIT_FUNC
PyInit__speedups(void)
{
    crc32c_choose();
    if (intern_names() < 0)
        return NULL;
    if (PyType_Ready(&RecordCodecType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL)
        return NULL;
    if (PyModule_AddIntConstant(module, "PLAN_MAX_RUNS", PLAN_MAX_RUNS) < 0 ||
        PyModule_AddIntConstant(module, "PRODUCE_SPAN_SIZE", PRODUCE_SPAN_SIZE) < 0 ||
        PyModule_AddIntConstant(module, "PLAN_MAX_WANTED", PLAN_MAX_WANTED) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(&RecordCodecType);
    if (PyModule_AddObject(module, "RecordCodec", (PyObject *)&RecordCodecType) < 0) {
        Py_DECREF(&RecordCodecType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
