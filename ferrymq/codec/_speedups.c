/* ferrymq.codec._speedups: the wire format's per-record loops, in C.
 *
 * Each function here has a Python twin that stays the specification (named in its
 * docstring); tests/codec/test_speedups.py checks them against each other on generated
 * input.
 * A C function either returns exactly what its twin returns or, where it declines
 * (a record its twin would refuse), says so and lets the twin produce the precise error:
 * refusals never need to be fast, and this way they are written once. The store's loops
 * are store/_speedups.c; the property parser both use is _properties.h.
 *
 * Thread-safety: every function runs with the GIL held and keeps no state between calls.
 */
#include "_properties.h"
#include <string.h>

PyDoc_STRVAR(decode_properties_doc,
"decode_properties(raw: bytes) -> dict[str, str]\n\n"
"ferrymq.codec.properties.decode_properties_in_python, for any bytes-like `raw`: invalid\n"
"UTF-8 raises UnicodeDecodeError as bytes.decode does.");

/* ---- produce records (ferrymq/codec/produce_records.py has the layout) ------------ */

#define PRODUCE_HEAD_SIZE 14 /* body length int32, properties length uint16, born int64 */

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

/* node.convert.tag_is_valid: not blank (str.strip's whitespace) and no '|', 0x01, 0x02. */
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

/* node.convert.KEYS_TEXT: keys of non-whitespace, one space apart (re's \S is
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

/* 1 when `properties` pass node.convert.check_produce_properties, 0 when not, -1 on error. */
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


/* The record at `position` as (end, body, raw properties, born ms, properties), or NULL
 * with no exception when node.convert.read_produce_record would refuse it. */
static PyObject *
scan_one(ProduceScanner *self, const unsigned char *buf, Py_ssize_t end,
         Py_ssize_t body_at, Py_ssize_t body_length, Py_ssize_t properties_length,
         int64_t born_ms, Py_ssize_t body_limit, PyObject *type_text)
{
    if (body_length == 0 || body_length > body_limit)
        return NULL;
    const char *raw_at = (const char *)buf + body_at + body_length;
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
"node.convert.read_produce_record over `count` records at once. Item i is the tuple that\n"
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

static PyMethodDef scanner_methods[] = {
    {"scan", (PyCFunction)scanner_scan, METH_VARARGS, scan_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ProduceScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ferrymq.codec._speedups.ProduceScanner",
    .tp_doc = PyDoc_STR("Reads Data.Produce records with the checks of node.convert, "
                        "given the property names those checks use."),
    .tp_basicsize = sizeof(ProduceScanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)scanner_init,
    .tp_dealloc = (destructor)scanner_dealloc,
    .tp_methods = scanner_methods,
};

static PyMethodDef module_methods[] = {
    {"decode_properties", decode_properties, METH_O, decode_properties_doc},
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
    if (PyType_Ready(&ProduceScannerType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL)
        return NULL;
    if (PyModule_AddIntConstant(module, "PRODUCE_HEAD_SIZE", PRODUCE_HEAD_SIZE) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(&ProduceScannerType);
    if (PyModule_AddObject(module, "ProduceScanner", (PyObject *)&ProduceScannerType) < 0) {
        Py_DECREF(&ProduceScannerType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
