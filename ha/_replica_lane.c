/* ha._replica_lane: the slave's end of a replication link in C, for the common frame (stage 1
 * of docs/native-lane.md).
 *
 * `apply_frames` takes the bytes a slave's link has received and, for each whole DATA frame
 * that continues this log where it ends (its MAC right, its epoch the log's last one, its
 * records whole and inside the active segment), appends the records to the segment's file
 * and counts the frame. It declines, at the first frame that is anything else (another kind,
 * a failed MAC, a new epoch, an offset that is not the log's end, records that cross the
 * segment, bytes that are not whole records), and leaves that frame unread: the Python path
 * (ha/slave.py's `_take_frame`) reads it and gives the precise answer. So the lane decides
 * nothing the Python path would decide differently; its twin is
 * ha/replica_lane.py's `apply_frames_in_python`, which tests/ha/test_replica_lane.py and the
 * fuzz target `replica_frames` check it against.
 *
 * `Gmac` is the link's frame MAC (ha/link_auth.py: AES-256-GCM over the payload as associated
 * data, nothing encrypted), computed by OpenSSL's libcrypto: never our own cryptography.
 * libcrypto is opened at import (dlopen of libcrypto.so.3, the library Python's own ssl and
 * hashlib modules run on) and its few EVP functions are declared here, so that the build
 * needs no OpenSSL headers; where it cannot be opened, the import fails and ha/link_auth.py
 * and ha/replica_lane.py fall back to their Python twins.
 *
 * Thread-safety: `apply_frames` releases the GIL while it verifies and writes; a `Gmac` must
 * be used by one thread at a time (a link's MACs belong to its event loop).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "../ferrymq/codec/_record_layout.h"
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

/* ---- libcrypto, opened at import ---------------------------------------------------- */

typedef struct evp_cipher_ctx_st EVP_CIPHER_CTX;
typedef struct evp_cipher_st EVP_CIPHER;
typedef struct engine_st ENGINE;

#define EVP_CTRL_GCM_GET_TAG 0x10 /* openssl/evp.h */

static struct {
    EVP_CIPHER_CTX *(*ctx_new)(void);
    void (*ctx_free)(EVP_CIPHER_CTX *);
    const EVP_CIPHER *(*aes_128_gcm)(void);
    const EVP_CIPHER *(*aes_192_gcm)(void);
    const EVP_CIPHER *(*aes_256_gcm)(void);
    int (*encrypt_init)(EVP_CIPHER_CTX *, const EVP_CIPHER *, ENGINE *, const unsigned char *,
                        const unsigned char *);
    int (*encrypt_update)(EVP_CIPHER_CTX *, unsigned char *, int *, const unsigned char *, int);
    int (*encrypt_final)(EVP_CIPHER_CTX *, unsigned char *, int *);
    int (*ctx_ctrl)(EVP_CIPHER_CTX *, int, int, void *);
} evp;

static int
open_libcrypto(void)
{
    void *library = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        PyErr_Format(PyExc_ImportError, "libcrypto.so.3 cannot be opened: %s", dlerror());
        return -1;
    }
    struct {
        void **slot;
        const char *name;
    } symbols[] = {
        {(void **)&evp.ctx_new, "EVP_CIPHER_CTX_new"},
        {(void **)&evp.ctx_free, "EVP_CIPHER_CTX_free"},
        {(void **)&evp.aes_128_gcm, "EVP_aes_128_gcm"},
        {(void **)&evp.aes_192_gcm, "EVP_aes_192_gcm"},
        {(void **)&evp.aes_256_gcm, "EVP_aes_256_gcm"},
        {(void **)&evp.encrypt_init, "EVP_EncryptInit_ex"},
        {(void **)&evp.encrypt_update, "EVP_EncryptUpdate"},
        {(void **)&evp.encrypt_final, "EVP_EncryptFinal_ex"},
        {(void **)&evp.ctx_ctrl, "EVP_CIPHER_CTX_ctrl"},
    };
    for (size_t i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++) {
        *symbols[i].slot = dlsym(library, symbols[i].name);
        if (*symbols[i].slot == NULL) {
            PyErr_Format(PyExc_ImportError, "libcrypto.so.3 has no %s", symbols[i].name);
            return -1;
        }
    }
    return 0;
}

/* ---- the frame MAC (ha/link_auth.py's FrameMac) -------------------------------------- */

#define MAC_BYTES 16   /* ha.link_auth.MAC_BYTES */
#define NONCE_BYTES 12 /* ha.link_auth._NONCE: direction, kind, 0, 0, count (big-endian) */

typedef struct {
    PyObject_HEAD
    EVP_CIPHER_CTX *context; /* the key's schedule, set once */
    unsigned char direction;
} Gmac;

static void
gmac_dealloc(Gmac *self)
{
    if (self->context != NULL)
        evp.ctx_free(self->context);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
gmac_init(Gmac *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"key", "direction", NULL};
    Py_buffer key;
    int direction;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*i", keywords, &key, &direction))
        return -1;
    /* AES-128, -192 or -256 by the key's length, as cryptography's AESGCM (links use 256) */
    const EVP_CIPHER *cipher = key.len == 16   ? evp.aes_128_gcm()
                               : key.len == 24 ? evp.aes_192_gcm()
                               : key.len == 32 ? evp.aes_256_gcm()
                                               : NULL;
    int ok = cipher != NULL && direction >= 0 && direction <= 255;
    if (ok && self->context == NULL)
        ok = (self->context = evp.ctx_new()) != NULL;
    if (ok)
        ok = evp.encrypt_init(self->context, cipher, NULL, key.buf, NULL) == 1;
    PyBuffer_Release(&key);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError,
                        "a Gmac takes a key of 16, 24 or 32 bytes and a direction byte");
        return -1;
    }
    self->direction = (unsigned char)direction;
    return 0;
}

/* The tag of a frame of `kind`, number `sequence`, over `payload`: 1, or 0 when libcrypto
 * failed (nothing it is given here can make it fail). Runs without the GIL. */
static int
gmac_tag(Gmac *self, int kind, uint64_t sequence, const unsigned char *payload, size_t length,
         unsigned char tag[MAC_BYTES])
{
    unsigned char nonce[NONCE_BYTES] = {self->direction, (unsigned char)kind, 0, 0};
    for (int i = 0; i < 8; i++)
        nonce[4 + i] = (unsigned char)(sequence >> (56 - 8 * i));
    int written;
    if (evp.encrypt_init(self->context, NULL, NULL, NULL, nonce) != 1)
        return 0;
    while (length > 0) { /* the associated data, in parts an int can count */
        int part = length > (1u << 30) ? (1 << 30) : (int)length;
        if (evp.encrypt_update(self->context, NULL, &written, payload, part) != 1)
            return 0;
        payload += part;
        length -= (size_t)part;
    }
    unsigned char nothing[16];
    return evp.encrypt_final(self->context, nothing, &written) == 1 &&
           evp.ctx_ctrl(self->context, EVP_CTRL_GCM_GET_TAG, MAC_BYTES, tag) == 1;
}

static int
tags_equal(const unsigned char *a, const unsigned char *b)
{
    unsigned char difference = 0;
    for (int i = 0; i < MAC_BYTES; i++)
        difference |= a[i] ^ b[i];
    return difference == 0;
}

static int
parse_sequence(PyObject *value, uint64_t *sequence)
{
    unsigned long long parsed = PyLong_AsUnsignedLongLong(value);
    if (parsed == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *sequence = parsed;
    return 0;
}

PyDoc_STRVAR(gmac_seal_doc, "seal(kind, sequence, payload) -> bytes\n\n"
                            "The 16-byte tag of frame number `sequence`, of `kind`, over `payload`: "
                            "what ha.link_auth.FrameMac.seal computes with cryptography's AESGCM.");

static PyObject *
gmac_seal(Gmac *self, PyObject *args)
{
    int kind;
    PyObject *sequence_object;
    Py_buffer payload;
    uint64_t sequence;
    if (!PyArg_ParseTuple(args, "iOy*", &kind, &sequence_object, &payload))
        return NULL;
    unsigned char tag[MAC_BYTES];
    int ok = 0;
    if (parse_sequence(sequence_object, &sequence) == 0)
        ok = gmac_tag(self, kind, sequence, payload.buf, (size_t)payload.len, tag);
    PyBuffer_Release(&payload);
    if (PyErr_Occurred())
        return NULL;
    if (!ok)
        return PyErr_Format(PyExc_RuntimeError, "libcrypto failed to compute a GMAC");
    return PyBytes_FromStringAndSize((const char *)tag, MAC_BYTES);
}

PyDoc_STRVAR(gmac_verify_doc,
             "verify(kind, sequence, payload, tag) -> bool\n\n"
             "Whether `tag` is seal(kind, sequence, payload) (compared in constant time).");

static PyObject *
gmac_verify(Gmac *self, PyObject *args)
{
    int kind;
    PyObject *sequence_object;
    Py_buffer payload, tag;
    uint64_t sequence;
    if (!PyArg_ParseTuple(args, "iOy*y*", &kind, &sequence_object, &payload, &tag))
        return NULL;
    unsigned char expected[MAC_BYTES];
    int ok = 0, equal = 0;
    if (parse_sequence(sequence_object, &sequence) == 0) {
        ok = gmac_tag(self, kind, sequence, payload.buf, (size_t)payload.len, expected);
        equal = ok && tag.len == MAC_BYTES && tags_equal(expected, tag.buf);
    }
    PyBuffer_Release(&payload);
    PyBuffer_Release(&tag);
    if (PyErr_Occurred())
        return NULL;
    if (!ok)
        return PyErr_Format(PyExc_RuntimeError, "libcrypto failed to compute a GMAC");
    return PyBool_FromLong(equal);
}

static PyMethodDef gmac_methods[] = {
    {"seal", (PyCFunction)gmac_seal, METH_VARARGS, gmac_seal_doc},
    {"verify", (PyCFunction)gmac_verify, METH_VARARGS, gmac_verify_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject GmacType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ha._replica_lane.Gmac",
    .tp_basicsize = sizeof(Gmac),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = PyDoc_STR("Gmac(key, direction): one direction's frame MAC of a replication link "
                        "(ha/link_auth.py), its AES key schedule set once; ha.link_auth.AesGcmMac "
                        "is its twin."),
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)gmac_init,
    .tp_dealloc = (destructor)gmac_dealloc,
    .tp_methods = gmac_methods,
};

/* ---- the DATA frames (ha/wire.py) ------------------------------------------------------ */

#define FRAME_HEADER_SIZE 5      /* kind 1, length 4 (big-endian) */
#define DATA_HEADER_SIZE 32      /* offset, epoch, epoch start, confirmed offset: 8 each */
#define KIND_DATA 6              /* ha.wire.Kind.DATA */
#define MAX_FRAME_BYTES (64 << 20) /* ha.wire.MAX_FRAME_BYTES */

/* Why `apply_frames` stopped (ha.replica_lane.Stop). */
enum { STOP_MORE = 0, STOP_DECLINED = 1, STOP_WRITE_FAILED = 2 };

PyDoc_STRVAR(apply_frames_doc,
"apply_frames(gmac, sequence, unread, fd, position, room, write_offset, epoch)\n"
"    -> (stop, used, sequence, write_offset, confirmed, appended, heartbeats, errno)\n\n"
"Append the records of the whole DATA frames at the start of `unread` that continue the log\n"
"(ending at `write_offset`, at `position` of the active segment's file `fd`, with `room`\n"
"bytes left in it, its last epoch `epoch`), checking each frame's MAC (`gmac`, frame number\n"
"`sequence` next). Stops at the first frame not whole yet (stop 0), at one it declines\n"
"(stop 1: left unread for the Python path) or at a write that failed (stop 2, with the\n"
"errno; the part written is zeroed again). `used`: the bytes of the frames taken;\n"
"`confirmed`: the greatest confirmed offset they carried, -1 without any; `appended`,\n"
"`heartbeats`: how many frames of each kind. ha.replica_lane.apply_frames_in_python is\n"
"its twin.");

static PyObject *
apply_frames(PyObject *Py_UNUSED(module), PyObject *args)
{
    Gmac *gmac;
    PyObject *sequence_object;
    Py_buffer unread;
    int fd;
    long long position, room, write_offset, epoch;
    uint64_t sequence;
    if (!PyArg_ParseTuple(args, "O!Oy*iLLLL", &GmacType, &gmac, &sequence_object, &unread, &fd,
                          &position, &room, &write_offset, &epoch))
        return NULL;
    if (parse_sequence(sequence_object, &sequence) < 0 || position < 0 || room < 0) {
        PyBuffer_Release(&unread);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "a negative position or room");
        return NULL;
    }
    const unsigned char *bytes = unread.buf;
    size_t length = (size_t)unread.len, used = 0;
    long long confirmed = -1, appended = 0, heartbeats = 0;
    int stop = STOP_MORE, error_number = 0, mac_failed = 0;

    Py_BEGIN_ALLOW_THREADS
    while (length - used >= FRAME_HEADER_SIZE) {
        const unsigned char *frame = bytes + used;
        uint32_t body = ((uint32_t)frame[1] << 24) | ((uint32_t)frame[2] << 16) |
                        ((uint32_t)frame[3] << 8) | frame[4];
        if (frame[0] != KIND_DATA || body > MAX_FRAME_BYTES ||
            body < DATA_HEADER_SIZE + MAC_BYTES) {
            stop = STOP_DECLINED;
            break;
        }
        if (length - used - FRAME_HEADER_SIZE < body)
            break; /* not whole yet */
        const unsigned char *payload = frame + FRAME_HEADER_SIZE;
        size_t payload_length = body - MAC_BYTES;
        unsigned char tag[MAC_BYTES];
        if (!gmac_tag(gmac, KIND_DATA, sequence, payload, payload_length, tag)) {
            mac_failed = 1;
            break;
        }
        if (!tags_equal(tag, payload + payload_length)) {
            stop = STOP_DECLINED;
            break;
        }
        int64_t offset = read_int64(payload), frame_epoch = read_int64(payload + 8);
        int64_t frame_confirmed = read_int64(payload + 24);
        const unsigned char *records = payload + DATA_HEADER_SIZE;
        size_t records_length = payload_length - DATA_HEADER_SIZE;
        if (records_length > 0) {
            if (frame_epoch != epoch || offset != write_offset ||
                records_length > (unsigned long long)room ||
                !records_are_whole(records, records_length)) {
                stop = STOP_DECLINED;
                break;
            }
            size_t written = 0;
            while (written < records_length) {
                ssize_t n = pwrite(fd, records + written, records_length - written,
                                   (off_t)(position + (long long)written));
                if (n < 0 && errno == EINTR)
                    continue;
                if (n <= 0) {
                    error_number = n < 0 ? errno : EIO;
                    break;
                }
                written += (size_t)n;
            }
            if (error_number != 0) {
                /* Nothing of a refused append may stay past the log's end (MappedFile.append_at) */
                static const unsigned char zeros[4096];
                for (size_t zeroed = 0; zeroed < written;) {
                    size_t part = written - zeroed < sizeof(zeros) ? written - zeroed : sizeof(zeros);
                    ssize_t n = pwrite(fd, zeros, part, (off_t)(position + (long long)zeroed));
                    if (n <= 0 && errno != EINTR)
                        break;
                    if (n > 0)
                        zeroed += (size_t)n;
                }
                stop = STOP_WRITE_FAILED;
                break;
            }
            position += (long long)records_length;
            room -= (long long)records_length;
            write_offset += (long long)records_length;
            appended++;
        } else {
            heartbeats++;
        }
        if (frame_confirmed > confirmed)
            confirmed = frame_confirmed;
        sequence++;
        used += FRAME_HEADER_SIZE + body;
    }
    Py_END_ALLOW_THREADS

    PyBuffer_Release(&unread);
    if (mac_failed)
        return PyErr_Format(PyExc_RuntimeError, "libcrypto failed to compute a GMAC");
    return Py_BuildValue("(inKLLLLi)", stop, (Py_ssize_t)used, (unsigned long long)sequence,
                         write_offset, confirmed, appended, heartbeats, error_number);
}

static PyMethodDef module_methods[] = {
    {"apply_frames", apply_frames, METH_VARARGS, apply_frames_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef lane_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ha._replica_lane",
    .m_doc = "The slave's end of a replication link in C, for the common DATA frame; "
             "ha/replica_lane.py has its twin.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__replica_lane(void)
{
    if (open_libcrypto() < 0 || PyType_Ready(&GmacType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&lane_module);
    if (module == NULL)
        return NULL;
    Py_INCREF(&GmacType);
    if (PyModule_AddObject(module, "Gmac", (PyObject *)&GmacType) < 0 ||
        PyModule_AddIntConstant(module, "STOP_MORE", STOP_MORE) < 0 ||
        PyModule_AddIntConstant(module, "STOP_DECLINED", STOP_DECLINED) < 0 ||
        PyModule_AddIntConstant(module, "STOP_WRITE_FAILED", STOP_WRITE_FAILED) < 0 ||
        PyModule_AddIntConstant(module, "MAX_FRAME_BYTES", MAX_FRAME_BYTES) < 0 ||
        PyModule_AddIntConstant(module, "MAC_BYTES", MAC_BYTES) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
