/* The property encoding of ferrymq/codec/properties.py (name 0x01 value 0x02 ...), in C:
 * one source, included by both extension modules that parse records
 * (ferrymq/codec/_speedups.c for the wire, store/_speedups.c for the replay), so the rule
 * is written once. Everything here is static: each module gets its own copy.
 */
#ifndef FERRYMQ_CODEC_PROPERTIES_H
#define FERRYMQ_CODEC_PROPERTIES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define NAME_VALUE_SEPARATOR 0x01
#define PROPERTY_SEPARATOR 0x02

/* ---- properties: name 0x01 value 0x02 ... (ferrymq/codec/properties.py) ----------- */

/* The pairs of `text` (a str) as a new dict. strict: every pair is `name 0x01 value`
 * with exactly one 0x01, the text ends with 0x02, names are non-empty and distinct
 * (else NULL with no exception: the caller declines). Lenient: empty pairs are skipped,
 * a pair splits at its first 0x01, a later name replaces an earlier one. */
static PyObject *
pairs_of(PyObject *text, int strict)
{
    Py_ssize_t length = PyUnicode_GET_LENGTH(text);
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    PyObject *result = PyDict_New();
    if (result == NULL)
        return NULL;
    Py_ssize_t start = 0;
    while (start < length) {
        Py_ssize_t first_nv = -1, end = start;
        int name_values = 0;
        for (; end < length; end++) {
            Py_UCS4 c = PyUnicode_READ(kind, data, end);
            if (c == PROPERTY_SEPARATOR)
                break;
            if (c == NAME_VALUE_SEPARATOR) {
                if (first_nv < 0)
                    first_nv = end;
                name_values++;
            }
        }
        if (strict && (end == length || name_values != 1 || first_nv == start))
            goto decline;
        if (end > start) {
            Py_ssize_t name_end = first_nv < 0 ? end : first_nv;
            Py_ssize_t value_start = first_nv < 0 ? end : first_nv + 1;
            PyObject *name = PyUnicode_Substring(text, start, name_end);
            if (name == NULL)
                goto fail;
            PyObject *value = PyUnicode_Substring(text, value_start, end);
            if (value == NULL) {
                Py_DECREF(name);
                goto fail;
            }
            int present = strict ? PyDict_Contains(result, name) : 0;
            int stored = present == 0 ? PyDict_SetItem(result, name, value) : 0;
            Py_DECREF(name);
            Py_DECREF(value);
            if (present < 0 || stored < 0)
                goto fail;
            if (present)
                goto decline;
        }
        start = end + 1;
    }
    return result;
decline:
    Py_DECREF(result);
    return NULL;
fail:
    Py_DECREF(result);
    return NULL;
}

/* ferrymq.codec.properties.decode_properties_in_python, for any bytes-like `raw`. */
static PyObject *
decode_properties(PyObject *Py_UNUSED(module), PyObject *raw)
{
    Py_buffer view;
    if (PyObject_GetBuffer(raw, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = NULL;
    if (view.len == 0) {
        result = PyDict_New();
    } else {
        PyObject *text = PyUnicode_DecodeUTF8(view.buf, view.len, NULL);
        if (text != NULL) {
            result = pairs_of(text, 0);
            Py_DECREF(text);
        }
    }
    PyBuffer_Release(&view);
    return result;
}

#endif
